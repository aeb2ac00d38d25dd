"""One label per word: the labels of a hand-made tree, the round trip of every GUM tree, the
TensorFlow decoding, which must build the same tree as the Python one from any labels, and the
Parser's constrained decoding by word (a fake step function, an untrained model)."""
import json
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data.factory import require_shared_data
from keras_transformer.decoding import beam_search
from keras_transformer.parsing import parse_tree, read_treebank
from keras_transformer.parsing.depth_labels import (WordLabel, collapse_unaries, decode, encode, linearize_by_word,
                                                    rebuild_by_word, trees_from_labels)
from keras_transformer.parsing.parser import (DEPTH, END, TAG, DepthConstraint, Parser, WordFirstDepthConstraint,
                                              answer_ids, constrained_step_fn, labels_to_trees)
from keras_transformer.parsing.trees import TreeFormatError, escape_word
from tests.op_lists import PYTHON_OPS, SENTENCEPIECE_OPS, core_op_names, list_ops  # noqa: F401
from tests.parsing.test_parser import make_untrained_parser

TREE = "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"


def test_labels_of_a_tree():
    labels = encode(parse_tree(TREE))
    assert labels == [WordLabel("PRP", "NP", 1, "S"), WordLabel("VBD", "", 1, "VP"), WordLabel("DT", "", 1, "NP"),
                      WordLabel("NN", "", -2, "S"), WordLabel(".", "", 0, "")]
    assert decode("I saw a dog .".split(), labels) == parse_tree(TREE)
    sequence = linearize_by_word(parse_tree(TREE))
    assert sequence == "NP>PRP I +1S VBD saw +1VP DT a +1NP NN dog -2S . ."
    assert rebuild_by_word(sequence, "I saw a dog .".split()) == parse_tree(TREE)
    with pytest.raises(TreeFormatError, match="not a sequence of tag, word and depth tokens"):
        rebuild_by_word(sequence, "I saw a cat .".split())
    with pytest.raises(TreeFormatError, match="'XX' .after the word 'I'. is not a depth token"):
        rebuild_by_word("NP>PRP I XX VBD saw +1VP DT a +1NP NN dog -2S . .", "I saw a dog .".split())


def test_unary_chains_collapse_and_come_back():
    tree = parse_tree("(S (VP (VB Go) (ADVP (RB now))) (. !))")
    assert collapse_unaries(parse_tree("(S (VP (VB Go) (NP (NN home))))")).to_string() == (
        "(S+VP (VB Go) (NP (NN home)))")
    labels = encode(tree)
    assert labels[1] == WordLabel("RB", "ADVP", -1, "S")
    assert decode(["Go", "now", "!"], labels) == tree
    one_word = parse_tree("(S (NP (NN Hello)))")
    assert encode(one_word) == [WordLabel("NN", "S+NP")] and decode(["Hello"], encode(one_word)) == one_word


def test_any_labels_give_a_tree_over_the_words():
    words = "a b c d".split()
    tree = decode(words, [WordLabel("DT", "", -3, ""), WordLabel("NN", "", 5, "NP"), WordLabel("VB", "", -9, "VP"),
                          WordLabel("NN")])
    assert tree.words() == words
    assert tree.to_string() == "(S (DT a) (NP (NN b) (VB c)) (NN d))"
    with pytest.raises(ValueError, match="one label per word"):
        decode(words, [WordLabel("DT")])


def _tf_trees(items):
    width = max(len(words) for words, _ in items)

    def rows(values, fill):
        return [row + [fill] * (width - len(row)) for row in values]

    trees = trees_from_labels(rows([[escape_word(word) for word in words] for words, _ in items], ""),
                              *(rows([[getattr(label, field) for label in labels] for _, labels in items], fill)
                                for field, fill in (("tag", ""), ("unary", ""), ("depth_change", 0), ("lca", ""))),
                              [len(words) for words, _ in items])
    return [tree.decode() for tree in trees.numpy()]


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_every_gum_tree_comes_back_from_its_labels(split):
    trees = list(read_treebank(require_shared_data(f"gum/{split}.ptb") / "gum" / f"{split}.ptb"))
    for tree in trees:
        for word_first in (False, True):
            assert rebuild_by_word(linearize_by_word(tree, word_first), tree.words()) == tree, tree.to_string()


def test_word_first_writes_each_word_before_its_tag():
    tree = parse_tree(TREE)
    assert linearize_by_word(tree, word_first=True) == "I NP>PRP +1S saw VBD +1VP a DT +1NP dog NN -2S . ."
    assert rebuild_by_word("I NP>PRP +1S saw VBD +1VP a DT +1NP dog NN -2S . .", tree.words()) == tree
    with pytest.raises(TreeFormatError):
        rebuild_by_word("I NP>PRP +1S VBD saw +1VP a DT +1NP dog NN -2S . .", tree.words())  # orders mixed


def test_tensorflow_builds_the_python_tree_from_gold_and_spoiled_labels():
    """GUM dev's labels, as they are and with depth changes and labels changed at random."""
    rng = random.Random(0)
    items = [(tree.words(), encode(tree)) for tree in read_treebank(require_shared_data("gum/dev.ptb") / "gum" / "dev.ptb")][:400]
    names = sorted({label.lca for _, labels in items for label in labels} | {""})
    spoiled = [(words, [WordLabel(label.tag, label.unary,
                                  rng.randint(-4, 4) if rng.random() < 0.3 else label.depth_change,
                                  rng.choice(names) if rng.random() < 0.2 else label.lca) for label in labels])
               for words, labels in items]
    for group in (items, spoiled):
        for start in range(0, len(group), 50):
            chunk = group[start:start + 50]
            expected = [decode([escape_word(word) for word in words], labels).to_string() for words, labels in chunk]
            assert _tf_trees(chunk) == expected


# Constrained decoding by word, on a fake step function (tests/parsing/test_parser.py's): the
# vocabulary's tree tokens are tag tokens and depth tokens.
TOKENS = ["<pad>", "<unk>", "<s>", "</s>", "▁NN", "▁NP>NN", "▁.", "▁+1S", "▁-1NP", "▁+0S", "▁dog", "▁the", "s"]
OUTPUT_IDS = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], np.int32)
CLASSES = np.array([0, 0, 0, END, TAG, TAG, TAG, DEPTH, DEPTH, DEPTH], np.int32)
WORD_STARTS = np.array([token.startswith("▁") for token in TOKENS])
COPY = len(OUTPUT_IDS)
SENTENCES = [["▁dog"], ["▁the", "▁dog", "s"], ["▁the", "▁dog", "▁.", "▁dog", "s", "s", "▁."], ["▁dog", "s"] * 4]


def fake_step_fn(seed):
    def step_fn(ids, step, cache):
        noise = tf.random.stateless_normal([tf.shape(ids)[0], len(OUTPUT_IDS)], seed=[seed, step]) * 5.0
        return noise + tf.cast(ids[:, None] % 3, tf.float32), cache + 1
    return step_fn


def depth_constraint(sentences, beam_size=1, max_length=40, constraint_class=DepthConstraint):
    width = max(len(pieces) for pieces in sentences)
    pieces = np.zeros([len(sentences), width], np.int32)
    for row, sentence in enumerate(sentences):
        pieces[row, :len(sentence)] = [TOKENS.index(piece) for piece in sentence]
    words = [sum(piece.startswith("▁") for piece in sentence) for sentence in sentences]
    repeat = lambda x: tf.repeat(tf.constant(np.asarray(x, np.int32)), beam_size, axis=0)  # noqa: E731
    constraint = constraint_class(CLASSES, repeat(words), repeat([max_length] * len(sentences)),
                                  tf.gather(WORD_STARTS, repeat(pieces)), repeat([len(s) for s in sentences]))
    return constraint, repeat(pieces)


@pytest.mark.parametrize("word_first", [False, True])
@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("seed", range(3))
def test_decoding_by_word_gives_a_tag_the_word_and_a_depth_token_for_every_word(beam_size, seed, word_first):
    constraint_class = WordFirstDepthConstraint if word_first else DepthConstraint
    constraint, pieces = depth_constraint(SENTENCES, beam_size, constraint_class=constraint_class)
    step_fn, cache = constrained_step_fn(fake_step_fn(seed), tf.zeros([len(SENTENCES) * beam_size], tf.int32),
                                         constraint, OUTPUT_IDS, pieces)
    result = beam_search(step_fn, cache, len(SENTENCES), beam_size, tf.constant([40] * len(SENTENCES)), 2, 3,
                         alpha=0.3, num_return=1)
    ids, _ = answer_ids(result["ids"][:, 0], depth_constraint(SENTENCES)[1], tf.constant(OUTPUT_IDS))
    for sentence, row in zip(SENTENCES, ids.numpy()):
        words = "".join(sentence).replace("▁", " ").split()
        assert list(row).count(3) == 1 and list(row).index(3) == 2 * len(words) - 1 + len(sentence)  # EOS
        text = "".join(TOKENS[i] for i in row if i not in (0, 3)).replace("▁", " ").strip()
        assert rebuild_by_word(text, words).words() == words
        assert text.split()[0 if word_first else 1] == words[0]  # the order of word and tag


def test_labels_to_trees_reads_tag_and_depth_tokens():
    sequences = tf.constant(["NP>PRP +1S VBD +1VP DT +1NP NN -2S .", "S+NP>NN", "", "-LRB- +1NP NN +0NP -RRB-"])
    words = tf.ragged.constant([["I", "saw", "a", "dog", "."], ["Hi"], [], ["(", "a:)", ")"]])
    assert [tree.decode() for tree in labels_to_trees(sequences, words).numpy()] == [
        TREE, "(S (NP (NN Hi)))", "", "(NP (-LRB- -LRB-) (NN a:-RRB-) (-RRB- -RRB-))"]


def test_word_first_tags_a_word_whose_pieces_were_cut_without_them():
    """A source of 2 words cut after the first one's pieces: the word past the cut gets its tag
    without copies, as with the tag first. Each step allows one kind of choice here."""
    constraint = WordFirstDepthConstraint(CLASSES, tf.constant([2]), tf.constant([40]),
                                          tf.gather(WORD_STARTS, tf.constant([[TOKENS.index("▁the")]])),
                                          tf.constant([1]))
    names = {COPY: "COPY", TAG: "TAG", DEPTH: "DEPTH", END: "END"}
    state, choice, kinds = constraint.initial_state(), 2, []  # BOS first, as constrained_step_fn feeds it
    while not kinds or kinds[-1] != "END":
        state = constraint.update(state, tf.constant([choice]))
        allowed = np.flatnonzero(constraint.allowed(state, len(kinds)).numpy()[0])
        allowed_kinds = {names[COPY if index == COPY else CLASSES[index]] for index in allowed}
        assert len(allowed_kinds) == 1 and len(kinds) < 6, (kinds, allowed_kinds)
        choice = int(allowed[0])
        kinds.append(allowed_kinds.pop())
    assert kinds == ["COPY", "TAG", "DEPTH", "TAG", "END"]


@pytest.fixture(scope="module", params=["depth", "depth_word_first"])
def untrained_depth_parser(tmp_path_factory, request):
    return make_untrained_parser(tmp_path_factory.mktemp("toy"), linearization=request.param)


def test_an_untrained_depth_parser_answers_trees_over_the_words(untrained_depth_parser):
    parser = untrained_depth_parser
    assert parser.by_word and parser.settings()["linearization"] == ("depth_word_first" if parser.word_first
                                                                     else "depth")
    sentences = ["the dog saw a cat .", "", "Anna ( laughed ) today", "hello", " ".join(["dog"] * 20)]
    outputs = parser.parse(tf.constant(sentences))
    trees = [tree.decode() for tree in outputs["trees"].numpy()]
    assert trees[1] == "" and outputs["scores"].numpy()[1] == 0.0
    for sentence, tree in zip(sentences, trees):
        if sentence:
            assert parse_tree(tree).words() == sentence.replace("(", "-LRB-").replace(")", "-RRB-").split(), tree
    assert parser.max_words_and_pieces == 64
    with pytest.raises(tf.errors.InvalidArgumentError, match="twice its words and its SentencePiece pieces add up "
                                                             "to more than 64"):
        parser.parse(tf.constant([" ".join(["dog"] * 22)]))  # 2 x 22 words + 22 pieces


def test_a_depth_parser_with_a_tag_dictionary_obeys_it_under_unary_chains(untrained_depth_parser):
    from keras_transformer.parsing.tag_dictionary import TagDictionary

    dictionary = TagDictionary(words={"the": ("DT",), "saw": ("VBD",), ".": (".",)},
                               other={"alphanumeric": ("NN", "PRP"), "symbols": ("RB",)})
    parser = Parser(untrained_depth_parser.model, untrained_depth_parser.sentencepiece_proto,
                    untrained_depth_parser.decode_config, tag_dictionary=dictionary,
                    word_first=untrained_depth_parser.word_first)
    sentences = ["the dog saw the cat .", "I saw it"]
    for sentence, tree in zip(sentences, parser.parse(tf.constant(sentences))["trees"].numpy()):
        tree = parse_tree(tree.decode())
        assert tree.words() == sentence.split()
        for word, tag in zip(tree.words(), tree.tags()):
            assert tag in dictionary.words.get(word, ("NN", "PRP")), (word, tag)


@pytest.mark.slow
def test_train_parser_by_word_then_parse_its_saved_model(tmp_path, core_op_names, capsys):  # noqa: F811
    """pipelines.train_parser --linearization depth on the toy treebank: it scores, exports a
    SavedModel of core and SentencePiece ops only, and pipelines.parse answers trees with it."""
    from keras_transformer.parsing.toy_treebank import write_toy_treebank
    from tests.pipelines.test_train_parser import SENTENCES, parse_here, run_module, train_command

    # 4 dev and test trees: an untrained parser's answers run to the length limit, and each costs.
    paths = write_toy_treebank(tmp_path / "toy", sizes={"train": 300, "dev": 4, "test": 4})
    stdout, _ = run_module("pipelines.train_parser", *train_command(paths, tmp_path / "run", tmp_path / "exported", 20),
                           "--linearization", "depth")
    assert re.search(r"^test \(20 steps.* 4 sentences, \d+ errors, 0 skipped; 0 answers needed repair$", stdout,
                     flags=re.M), stdout
    assert "linearization=depth" in json.loads((tmp_path / "run" / "data_config.json").read_text())["dataset"]
    listed = list_ops(tmp_path / "exported" / "1", core_op_names)
    registered = listed["registered"]
    assert {op for op, in_core in registered.items() if not in_core} == SENTENCEPIECE_OPS
    assert not set(registered) & PYTHON_OPS and listed["without_cpu_kernel"] == []
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(line + "\n" for line in SENTENCES))
    stderr = parse_here(capsys, "--model", tmp_path / "exported" / "1", "--input", sentences,
                        "--output", tmp_path / "trees.txt")
    assert "0 of 4 answers needed repair" in stderr, stderr[-2000:]
    for sentence, line in zip(SENTENCES, (tmp_path / "trees.txt").read_text().splitlines(), strict=True):
        assert (parse_tree(line).words() if sentence else line.split()) == (
            sentence.replace("(", "-LRB-").replace(")", "-RRB-").split())
