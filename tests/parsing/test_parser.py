"""The Parser's constrained decoding and in-graph tree building, without a trained model: beam search
on a fake step function whose logits are random, so that only the constraint makes trees."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID
from keras_transformer.decoding import beam_search
from keras_transformer.parsing import rebuild
from keras_transformer.parsing.linearization import split_words
from keras_transformer.parsing.parser import (CLOSE, END, NEG_LOGIT, OPEN, TAG, TreeConstraint, answer_ids,
                                              constrained_step_fn, sequences_to_trees)

# A vocabulary: 4 special ids, tree tokens (one of them, "▁.", also a word), then word pieces.
TOKENS = ["<pad>", "<unk>", "<s>", "</s>", "▁(S", "▁(NP", "▁(VP", "▁)", "▁NN", "▁VBD", "▁.", "▁dog", "▁the", "s"]
OUTPUT_IDS = np.array([0, BOS_ID, EOS_ID, 4, 5, 6, 7, 8, 9, 10], np.int32)  # what the search chooses among
CLASSES = np.array([0, 0, END, OPEN, OPEN, OPEN, CLOSE, TAG, TAG, TAG], np.int32)  # of each output index
WORD_STARTS = np.array([token.startswith("▁") for token in TOKENS])
COPY = len(OUTPUT_IDS)


def fake_step_fn(seed):
    """Random logits (N, V') of the output ids, a function of the step and the fed vocabulary id."""
    def step_fn(ids, step, cache):
        noise = tf.random.stateless_normal([tf.shape(ids)[0], len(OUTPUT_IDS)], seed=[seed, step]) * 5.0
        return noise + tf.cast(ids[:, None] % 3, tf.float32), cache + 1
    return step_fn


def sentence_pieces(sentences):
    """(pieces (N, S) int32, piece counts, word counts) of sentences given as piece lists."""
    width = max(1, max(len(pieces) for pieces in sentences))
    pieces = np.zeros([len(sentences), width], np.int32)
    for row, sentence in enumerate(sentences):
        pieces[row, :len(sentence)] = [TOKENS.index(piece) for piece in sentence]
    counts = np.array([len(sentence) for sentence in sentences], np.int32)
    words = np.array([sum(piece.startswith("▁") for piece in sentence) for sentence in sentences], np.int32)
    return pieces, counts, words


def constraint_of(sentences, max_lengths, beam_size=1):
    pieces, counts, words = sentence_pieces(sentences)
    repeat = lambda x: tf.repeat(tf.constant(x), beam_size, axis=0)  # noqa: E731
    constraint = TreeConstraint(CLASSES, repeat(words), repeat(np.array(max_lengths, np.int32)),
                                tf.gather(WORD_STARTS, repeat(pieces)), repeat(counts))
    return constraint, repeat(pieces)


def decode(sentences, max_lengths, beam_size, seed):
    rows = len(sentences)
    constraint, pieces = constraint_of(sentences, max_lengths, beam_size)
    step_fn, cache = constrained_step_fn(fake_step_fn(seed), tf.zeros([rows * beam_size], tf.int32), constraint,
                                         OUTPUT_IDS, pieces)
    result = beam_search(step_fn, cache, rows, beam_size, tf.constant(max_lengths, tf.int32), 1, 2,
                         alpha=0.3, num_return=1)  # BOS and EOS are output indices 1 and 2
    return answer_ids(result["ids"][:, 0], constraint_of(sentences, max_lengths)[1], tf.constant(OUTPUT_IDS))


SENTENCES = [["▁dog"], ["▁the", "▁dog", "s"], ["▁the", "▁dog", "▁.", "▁dog", "s", "s", "▁."],
             ["▁dog", "s"] * 4 + ["▁."], ["▁the", "s", "▁.", "▁the", "▁dog"]]
MAX_LENGTHS = [5, 9, 40, 25, 13]  # rows 1, 2 and 5: barely room for a flat tree (words + pieces + 3)


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_every_output_is_a_tree_over_exactly_the_words_it_copies(beam_size, seed):
    ids, tree_ids = (x.numpy() for x in decode(SENTENCES, MAX_LENGTHS, beam_size, seed))
    for sentence, row, tree_row in zip(SENTENCES, ids, tree_ids):
        assert list(row).count(EOS_ID) == 1 and row[len(sentence)] != 0
        text = "".join(TOKENS[i] for i in row if i not in (0, EOS_ID)).replace("▁", " ").strip()
        words = "".join(sentence).replace("▁", " ").split()
        tree = rebuild(text, words)  # raises unless the tree's words are the copied ones, in order
        assert tree.words() == words
        skeleton = "".join(TOKENS[i] for i in tree_row if i not in (0, EOS_ID)).replace("▁", " ").split()
        assert skeleton == split_words(text.split())[0]


def test_a_tag_is_followed_by_its_word_copied_and_nothing_else():
    constraint, pieces = constraint_of([["▁the", "▁dog", "s"]], [20])
    allowed = lambda s, step: [i for i, ok in enumerate(constraint.allowed(s, step).numpy()[0]) if ok]  # noqa
    feed = lambda s, choice: constraint.vocabulary_ids(s, tf.constant([choice]), OUTPUT_IDS, pieces).numpy()[0]  # noqa
    s = constraint.initial_state()
    assert allowed(s, 0) == [3, 4, 5]  # an opening bracket first
    for step, choice in enumerate([3, 7]):  # (S NN
        assert feed(s, choice) == OUTPUT_IDS[choice]
        s = constraint.update(s, tf.constant([choice]))
    assert allowed(s, 2) == [COPY] and feed(s, COPY) == TOKENS.index("▁the")
    s = constraint.update(s, tf.constant([COPY]))
    assert COPY not in allowed(s, 3) and 6 not in allowed(s, 3)  # "the" is whole; the root cannot close yet
    s = constraint.update(s, tf.constant([7]))  # NN
    assert allowed(s, 4) == [COPY] and feed(s, COPY) == TOKENS.index("▁dog")
    s = constraint.update(s, tf.constant([COPY]))
    assert allowed(s, 5) == [COPY] and feed(s, COPY) == TOKENS.index("s")  # "dogs" goes on
    s = constraint.update(s, tf.constant([COPY]))
    assert allowed(s, 6) == [6]  # every word has its tag: close the root
    s = constraint.update(s, tf.constant([6]))
    assert allowed(s, 7) == [2]  # EOS


def test_no_empty_constituent_and_room_left_for_the_words():
    constraint, _ = constraint_of([["▁dog", "▁dog"]], [7])  # words + pieces + 3: only a flat tree fits
    allowed = lambda s, step: [CLASSES[i] if i < COPY else "copy" for i, ok in  # noqa: E731
                               enumerate(constraint.allowed(s, step).numpy()[0]) if ok]
    s = constraint.update(constraint.initial_state(), tf.constant([3]))  # (S
    assert allowed(s, 1) == [TAG, TAG, TAG]  # no ")" right after "(", no room for another bracket
    constraint, _ = constraint_of([["▁dog", "▁dog"]], [20])
    s = constraint.update(constraint.initial_state(), tf.constant([3]))
    assert set(allowed(s, 1)) == {OPEN, TAG}


def dictionary_constraint():
    """A constraint on "the dogs" whose tag dictionary lets "the" be NN only (output index 7), and
    "dog" VBD or "." (8, 9)."""
    row_masks = np.ones([2, COPY + 1], bool)
    row_masks[0, [8, 9]] = False
    row_masks[1, 7] = False
    pieces, counts, words = sentence_pieces([["▁the", "▁dog", "s"]])
    constraint = TreeConstraint(CLASSES, tf.constant(words), tf.constant([20]), tf.gather(WORD_STARTS, pieces),
                                tf.constant(counts), word_rows=tf.constant([[0, 1]]), row_masks=tf.constant(row_masks))
    return constraint, tf.constant(pieces)


def test_a_tag_dictionary_allows_each_word_only_its_tags():
    constraint, _ = dictionary_constraint()

    def allowed(s, step):
        mask = constraint.allowed(s, step) & constraint.dictionary_allowed(s)
        return [i for i, ok in enumerate(mask.numpy()[0]) if ok]

    s = constraint.update(constraint.initial_state(), tf.constant([3]))  # (S
    assert allowed(s, 1) == [3, 4, 5, 7]  # brackets, and the tag of "the"
    for choice in [7, COPY]:  # NN the
        s = constraint.update(s, tf.constant([choice]))
    assert allowed(s, 3) == [3, 4, 5, 8, 9]  # brackets, and the tags of "dog" (the root cannot close yet)
    for choice in [9, COPY, COPY]:  # . dog s
        s = constraint.update(s, tf.constant([choice]))
    assert allowed(s, 6) == [6]  # every word has its tag: the row of the last word no longer matters


def test_the_tags_a_dictionary_keeps_share_the_probability_of_all_the_tags():
    """After "(S", "the" may be NN only: NN gets the probability of NN, VBD and . together, and the
    brackets keep theirs (masking alone would give the brackets a share of VBD's and .'s)."""
    constraint, pieces = dictionary_constraint()
    logits = tf.constant([[0.0, 0.0, 0.0, 1.0, 0.5, -1.0, 2.0, -0.5, 1.5, 0.7]])  # of the output indices

    def fixed(ids, step, cache):
        return tf.tile(logits, [tf.shape(ids)[0], 1]), cache

    step, cache = constrained_step_fn(fixed, tf.zeros([1]), constraint, OUTPUT_IDS, pieces)
    _, cache = step(tf.constant([1]), 0, cache)  # BOS
    constrained, _ = step(tf.constant([3]), 1, cache)  # (S
    got = tf.nn.softmax(constrained).numpy()[0]
    # without the dictionary: the brackets (3, 4, 5) and the three tags (7, 8, 9), COPY forbidden
    plain = tf.nn.softmax(tf.where([[i in (3, 4, 5, 7, 8, 9) for i in range(COPY + 1)]],
                                   tf.concat([logits, [[0.0]]], axis=1), NEG_LOGIT)).numpy()[0]
    np.testing.assert_allclose(got[[3, 4, 5]], plain[[3, 4, 5]], rtol=1e-5)
    np.testing.assert_allclose(got[7], plain[[7, 8, 9]].sum(), rtol=1e-5)
    assert got[[0, 1, 2, 6, 8, 9, 10]].sum() < 1e-6


def test_sequences_to_trees_gives_each_tag_its_word():
    """It reads skeletons: the tree tokens without the copied words."""
    sequences = tf.constant(["(S (NP DT NN ) (VP VBD ) . )", "NN", "", "(NP -LRB- NN -RRB- )"])
    words = tf.ragged.constant([["the", "dog", "barked", "."], ["Hi"], [], ["(", "a:)", ")"]])
    assert [tree.decode() for tree in sequences_to_trees(sequences, words).numpy()] == [
        "(S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))", "(NN Hi)", "",
        "(NP (-LRB- -LRB-) (NN a:-RRB-) (-RRB- -RRB-))"]


def make_untrained_parser(directory, linearization="brackets"):
    """A Parser over an untrained tiny model (64 positions) and a vocabulary of the toy treebank
    written in `directory`, linearized as `linearization`."""
    import sentencepiece

    from keras_transformer.config import DecodeConfig, TransformerConfig
    from keras_transformer.data.tokenizer import TokenizerSettings, train_sentencepiece
    from keras_transformer.model import Transformer
    from keras_transformer.parsing.corpus import TreebankCorpus
    from keras_transformer.parsing.parser import Parser
    from keras_transformer.parsing.toy_treebank import write_toy_treebank

    paths = write_toy_treebank(directory, sizes={"train": 200})
    corpus = TreebankCorpus({"train": paths["train"]}, linearization=linearization)
    proto = train_sentencepiece(corpus.training_sentences(), TokenizerSettings(
        vocab_size=400, user_defined_symbols=corpus.user_defined_symbols()))
    vocab_size = sentencepiece.SentencePieceProcessor(model_proto=proto).get_piece_size()
    model = Transformer(TransformerConfig(vocab_size=vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                                          max_length=64))
    model.build()
    return Parser(model, proto, DecodeConfig(beam_size=3, alpha=0.3, extra_length=40),
                  word_first=linearization == "depth_word_first")


@pytest.fixture(scope="module")
def untrained_parser(tmp_path_factory):
    return make_untrained_parser(tmp_path_factory.mktemp("toy"))


def test_an_untrained_parser_answers_trees_over_the_words(untrained_parser):
    # Unicode whitespace (a no-break space, an ideographic space, \x1c) separates words as str.split() has it.
    sentences = ["the dog saw a cat .", "", "Anna ( laughed ) today", "hello", "  spaced   out  words ",
                 "I\u00a0saw\u3000it\x1cthen", "\u00a0"]
    outputs = untrained_parser.parse(tf.constant(sentences))
    trees = [tree.decode() for tree in outputs["trees"].numpy()]
    assert trees[1] == trees[6] == "" and outputs["scores"].numpy()[1] == 0.0
    from keras_transformer.parsing import parse_tree
    for sentence, tree in zip(sentences, trees):
        if sentence.strip():
            expected = sentence.replace("(", "-LRB-").replace(")", "-RRB-").split()
            assert parse_tree(tree).words() == expected, tree


def test_scoring_only_the_tree_tokens_finds_what_the_whole_vocabulary_finds(untrained_parser):
    """The parser decodes over its output_ids (PAD, BOS, EOS and the tree tokens); with the whole
    vocabulary and the other tokens forbidden by the constraint, the answers and scores are the same."""
    from keras_transformer.parsing.parser import FORBIDDEN, Parser, piece_classes

    parser = untrained_parser
    ids = parser.output_ids
    assert ids[0] == 0 and len(ids) < parser.model.config.vocab_size / 2
    assert set(parser.piece_classes[3:]) == {OPEN, CLOSE, TAG} and END in parser.piece_classes

    class WholeVocabularyParser(Parser):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.piece_classes = piece_classes(self.sentencepiece_proto, self.model.config.vocab_size)
            self.output_ids = None

    whole = WholeVocabularyParser(parser.model, parser.sentencepiece_proto, parser.decode_config)
    assert (whole.piece_classes == FORBIDDEN).sum() > len(whole.piece_classes) / 2
    sentences = tf.constant(["the dog saw a cat .", "Anna laughed", "hello", "a b c d e f g"])
    expected, got = whole.parse(sentences), parser.parse(sentences)
    assert got["trees"].numpy().tolist() == expected["trees"].numpy().tolist()
    np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-5)


def test_a_sentence_over_the_word_limit_is_a_clear_error(untrained_parser):
    assert untrained_parser.max_words_and_pieces == 61
    with pytest.raises(tf.errors.InvalidArgumentError, match="pieces add up to more than 61"):
        untrained_parser.parse(tf.constant([" ".join(["dog"] * 40)]))  # 40 words + 23 pieces (the source's cut)


def test_words_past_the_source_cut_are_tagged_though_not_copied(untrained_parser):
    assert untrained_parser.max_source_length == 24  # 23 pieces and EOS
    from keras_transformer.parsing import parse_tree
    tree = untrained_parser.parse(tf.constant([" ".join(["dog"] * 30)]))["trees"].numpy()[0].decode()
    assert parse_tree(tree).words() == ["dog"] * 30


def test_a_parser_with_a_tag_dictionary_tags_every_word_as_it_allows(untrained_parser):
    """Untrained, the parser's tags are the random model's; with a dictionary they obey it: listed
    words get their tags, the other words the other words' tags."""
    from keras_transformer.parsing import parse_tree
    from keras_transformer.parsing.parser import Parser
    from keras_transformer.parsing.tag_dictionary import TagDictionary

    dictionary = TagDictionary(words={"the": ("DT",), "saw": ("NN", "VBD"), ".": (".",), "-LRB-": ("JJ",)},
                               other={"alphanumeric": ("NNP", "PRP"), "symbols": ("RB",)})
    parser = Parser(untrained_parser.model, untrained_parser.sentencepiece_proto, untrained_parser.decode_config,
                    tag_dictionary=dictionary)
    assert parser.settings()["tag_dictionary"] == {
        "min_count": 5, "words": 4, "tags_of_other_words": {"alphanumeric": ["NNP", "PRP"], "symbols": ["RB"]}}
    sentences = ["the dog saw the cat .", "Anna ( laughed ) today", "hello , ½ ?", "saw saw saw saw"]
    trees = [parse_tree(tree.decode()) for tree in parser.parse(tf.constant(sentences))["trees"].numpy()]
    tags = [tag for tree in trees for tag in tree.tags()]
    for sentence, tree in zip(sentences, trees):
        words = sentence.replace("(", "-LRB-").replace(")", "-RRB-").split()
        assert tree.words() == words
        for word, tag in zip(words, tree.tags()):
            assert tag in dictionary.allowed(word), (word, tag, str(tree))
    unconstrained = [tag for tree in untrained_parser.parse(tf.constant(sentences))["trees"].numpy()
                     for tag in parse_tree(tree.decode()).tags()]
    assert unconstrained != tags  # the random model alone tags otherwise: the dictionary did it


def test_score_reads_a_sentence_as_parse_does(untrained_parser):
    """Brackets in words as the treebank writes them and words split at any whitespace, as parse
    reads them; scoring the raw text as a translator does would score another source."""
    from keras_transformer.export import Translator

    raw = tf.constant(["Anna ( laughed )\u00a0today", "the dog saw a cat ."])
    read = tf.constant(["Anna -LRB- laughed -RRB- today", "the dog saw a cat ."])
    trees = untrained_parser.translate(raw)["sequences"]
    got = untrained_parser.score(raw, trees)
    expected = Translator.score.python_function(untrained_parser, read, trees)
    np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-5)
    np.testing.assert_array_equal(got["lengths"], expected["lengths"])
    as_translator = Translator.score.python_function(untrained_parser, raw, trees)
    assert got["scores"].numpy()[0] != as_translator["scores"].numpy()[0]
    assert got["scores"].numpy()[1] == pytest.approx(as_translator["scores"].numpy()[1], rel=1e-5)
