"""The Parser's constrained decoding and in-graph tree building, without a trained model: beam search
on a fake step function whose logits are random, so that only the constraint makes trees."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID
from keras_transformer.decoding import beam_search
from keras_transformer.parsing import rebuild
from keras_transformer.parsing.parser import (CLOSE, END, OPEN, TAG, TreeConstraint, constrained_step_fn,
                                              sequences_to_trees)

# A vocabulary: 4 special ids, then tree tokens and two ordinary pieces the parser must never output.
TOKENS = ["<pad>", "<unk>", "<s>", "</s>", "(S", "(NP", "(VP", ")", "NN", "VBD", ".", "dog", "▁the"]
CLASSES = np.array([0, 0, 0, END, OPEN, OPEN, OPEN, CLOSE, TAG, TAG, TAG, 0, 0], np.int32)


def fake_step_fn(seed):
    """Random logits (N, V), a function of the step only; the cache counts the calls."""
    def step_fn(ids, step, cache):
        logits = tf.random.stateless_normal([tf.shape(ids)[0], len(TOKENS)], seed=[seed, step]) * 5.0
        return logits, cache + 1
    return step_fn


def decode(word_counts, max_lengths, beam_size, seed):
    rows = len(word_counts)
    constraint = TreeConstraint(CLASSES, tf.repeat(tf.constant(word_counts, tf.int32), beam_size),
                                tf.repeat(tf.constant(max_lengths, tf.int32), beam_size))
    step_fn, cache = constrained_step_fn(fake_step_fn(seed), tf.zeros([rows * beam_size], tf.int32), constraint)
    result = beam_search(step_fn, cache, rows, beam_size, tf.constant(max_lengths, tf.int32), BOS_ID, EOS_ID,
                         alpha=0.3, num_return=1)
    return result["ids"].numpy()[:, 0]


@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("seed", range(4))
def test_every_output_is_a_tree_over_exactly_the_words(beam_size, seed):
    word_counts = [1, 2, 5, 9, 4]
    max_lengths = [4, 6, 30, 12, 7]  # rows 4 and 5: barely room for a flat tree (words + 3)
    for count, ids in zip(word_counts, decode(word_counts, max_lengths, beam_size, seed)):
        tokens = [TOKENS[i] for i in ids if i not in (0, EOS_ID)]
        assert all(CLASSES[TOKENS.index(t)] in (OPEN, CLOSE, TAG) for t in tokens)
        assert list(ids).count(EOS_ID) == 1
        words = [f"w{i}" for i in range(count)]
        tree = rebuild(" ".join(tokens), words)  # raises unless it is a tree over exactly these words
        assert tree.words() == words


def test_no_empty_constituent_and_eos_only_at_the_end():
    state = TreeConstraint(CLASSES, tf.constant([2]), tf.constant([20]))
    allowed = lambda s, step: dict(zip(TOKENS, state.allowed(s, step).numpy()[0]))  # noqa: E731
    s = state.initial_state()
    first = allowed(s, 0)
    assert first["(S"] and not first["NN"] and not first[")"] and not first["</s>"] and not first["dog"]
    s = state.update(s, tf.constant([TOKENS.index("(S")]))
    after_open = allowed(s, 1)
    assert not after_open[")"] and after_open["NN"] and not after_open["</s>"]
    for token in ("NN", "VBD"):
        s = state.update(s, tf.constant([TOKENS.index(token)]))
    done_words = allowed(s, 3)
    assert done_words[")"] and not done_words["NN"] and not done_words["(NP"] and not done_words["</s>"]
    s = state.update(s, tf.constant([TOKENS.index(")")]))
    assert [token for token, ok in allowed(s, 4).items() if ok] == ["</s>"]


def test_sequences_to_trees_gives_each_tag_its_word():
    sequences = tf.constant(["(S (NP DT NN ) (VP VBD ) . )", "NN", "", "(NP -LRB- NN -RRB- )"])
    words = tf.ragged.constant([["the", "dog", "barked", "."], ["Hi"], [], ["(", "a:)", ")"]])
    assert [tree.decode() for tree in sequences_to_trees(sequences, words).numpy()] == [
        "(S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))", "(NN Hi)", "",
        "(NP (-LRB- -LRB-) (NN a:-RRB-) (-RRB- -RRB-))"]


@pytest.fixture(scope="module")
def untrained_parser(tmp_path_factory):
    """A Parser over an untrained tiny model (64 positions) and a vocabulary of the toy treebank."""
    from keras_transformer.config import DecodeConfig, TransformerConfig
    from keras_transformer.data.tokenizer import TokenizerSettings, train_sentencepiece
    from keras_transformer.model import Transformer
    from keras_transformer.parsing.corpus import TreebankCorpus
    from keras_transformer.parsing.parser import Parser
    from keras_transformer.parsing.toy_treebank import write_toy_treebank

    paths = write_toy_treebank(tmp_path_factory.mktemp("toy"), sizes={"train": 200})
    corpus = TreebankCorpus({"train": paths["train"]})
    proto = train_sentencepiece(corpus.training_sentences(), TokenizerSettings(
        vocab_size=400, user_defined_symbols=corpus.user_defined_symbols()))
    import sentencepiece
    vocab_size = sentencepiece.SentencePieceProcessor(model_proto=proto).get_piece_size()
    model = Transformer(TransformerConfig(vocab_size=vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                                          max_length=64))
    model.build()
    return Parser(model, proto, DecodeConfig(beam_size=3, alpha=0.3, extra_length=40))


def test_an_untrained_parser_answers_trees_over_the_words(untrained_parser):
    sentences = ["the dog saw a cat .", "", "Anna ( laughed ) today", "hello", "  spaced   out  words "]
    outputs = untrained_parser.parse(tf.constant(sentences))
    trees = [tree.decode() for tree in outputs["trees"].numpy()]
    assert trees[1] == "" and outputs["scores"].numpy()[1] == 0.0
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
    assert untrained_parser.max_words == 61
    with pytest.raises(tf.errors.InvalidArgumentError, match="more words than this parser takes: at most 61"):
        untrained_parser.parse(tf.constant([" ".join(["dog"] * 62)]))
