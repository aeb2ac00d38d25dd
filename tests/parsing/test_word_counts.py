"""parsing.word_counts: the train split's word counts, written and read, and looked up in-graph
from a word's pieces however BPE-dropout splits it."""
import collections

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer, TokenizerSettings, train_sentencepiece
from keras_transformer.parsing.corpus import TreebankCorpus
from keras_transformer.parsing.span_model import source_word_positions, word_piece_ids
from keras_transformer.parsing.parser import word_start_pieces
from keras_transformer.parsing.toy_treebank import write_toy_treebank
from keras_transformer.parsing.trees import parse_tree
from keras_transformer.parsing.word_counts import (FILENAME, WordCountTable, read_word_counts, word_key_counts,
                                                   write_word_counts)

TREES = ["(S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (DT the) (NN cat))) (. .))",
         "(S (NP (NNP Zoë)) (VP (VBD slept)) (. .))"]


def test_the_counts_are_written_whole_and_read_back(tmp_path):
    write_word_counts(tmp_path, [parse_tree(text) for text in TREES])
    assert read_word_counts(tmp_path) == {"the": 2, ".": 2, "dog": 1, "saw": 1, "cat": 1, "Zoë": 1, "slept": 1}
    assert read_word_counts(tmp_path / "elsewhere") is None
    for bad in ("[1, 2]", '{"the": 0}', '{"the": "2"}', "{"):
        (tmp_path / FILENAME).write_text(bad)
        with pytest.raises(ValueError, match=f"{tmp_path / FILENAME}: not word counts"):
            read_word_counts(tmp_path)


@pytest.fixture(scope="module")
def toy_vocabulary(tmp_path_factory):
    paths = write_toy_treebank(tmp_path_factory.mktemp("toy-counts"), seed=3, sizes={"train": 300})
    corpus = TreebankCorpus({"train": paths["train"]}, linearization="depth", parser="span")
    pairs = list(corpus.pairs("train"))
    settings = TokenizerSettings(vocab_size=500, user_defined_symbols=corpus.user_defined_symbols())
    tokenizer = SubwordTokenizer(train_sentencepiece((text for pair in pairs for text in pair), settings))
    return list(corpus.trees("train")), tokenizer


def test_every_training_word_finds_its_count_however_bpe_dropout_splits_it(toy_vocabulary, tmp_path):
    """Each word of the train sentences, its pieces drawn with BPE-dropout as the training stream
    draws them, looks up its own count; a word with another text than any train word gets 0."""
    trees, tokenizer = toy_vocabulary
    write_word_counts(tmp_path, trees)
    counts = read_word_counts(tmp_path)
    assert counts == dict(collections.Counter(word for tree in trees for word in tree.words()))
    # The toy words are plain ASCII, so each is its own key.
    assert word_key_counts(tokenizer.model_proto, counts) == counts
    table = WordCountTable(tokenizer.model_proto, tokenizer.vocab_size, counts)
    starts_table = tf.constant(word_start_pieces(tokenizer.model_proto, tokenizer.vocab_size))
    sentences = [" ".join(tree.words()) for tree in trees[:100]]
    expected = [counts[word] for sentence in sentences for word in sentence.split()]
    splits = set()
    for dropout in (0.0, 0.5):
        source_ids = tokenizer.tokenize(tf.constant(sentences), dropout=dropout).to_tensor()
        pieces, is_word = word_piece_ids(*source_word_positions(source_ids, starts_table))
        assert int(tf.reduce_sum(tf.cast(is_word, tf.int32))) == len(expected)
        np.testing.assert_array_equal(table.lookup(pieces).numpy(), expected)
        splits.add(tuple(pieces.row_lengths().numpy()))
    assert len(splits) == 2  # BPE-dropout split some words into more pieces
    unseen = tokenizer.tokenize(tf.constant(["dogcat", "the"]))
    assert table.lookup(unseen).numpy().tolist() == [0, counts["the"]]


def test_words_that_normalize_alike_share_a_key():
    """A vocabulary that folds case (and NFKC, its normalization "nmt_nfkc_cf") reads "Fine",
    "fine" and "\ufb01ne" (the ligature) as one word, so their counts add up."""
    settings = TokenizerSettings(vocab_size=300, lowercase=True)
    proto = train_sentencepiece(["fine first fit find " * 20, "the file of fish " * 20], settings)
    assert word_key_counts(proto, {"Fine": 2, "fine": 3, "\ufb01ne": 4, "fit": 1}) == {"fine": 9, "fit": 1}
