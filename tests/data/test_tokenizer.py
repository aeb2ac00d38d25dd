"""The shared SentencePiece vocabulary: fixed ids, lossless round trips, reuse beside the run."""
import dataclasses
import json

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer import config
from keras_transformer.data import tokenizer as tokenizer_module
from keras_transformer.data.factory import get_corpus, require_shared_data
from keras_transformer.data import DataConfig
from keras_transformer.data.tokenizer import (BOS_ID, EOS_ID, MODEL_FILENAME, PAD_ID, SETTINGS_FILENAME, UNK_ID,
                                              SubwordTokenizer, TokenizerSettings,
                                              load_or_train_tokenizer, sample_sentences)


def _round_trip(tokenizer, sentences):
    ids = tokenizer.tokenize(tf.constant(sentences))
    return [text.decode("utf-8") for text in tokenizer.detokenize(ids).numpy()]


def test_fixed_special_ids(numbers_tokenizer):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    processor = sentencepiece.SentencePieceProcessor(model_proto=numbers_tokenizer.model_proto)
    assert [processor.id_to_piece(i) for i in range(4)] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert processor.get_piece_size() == numbers_tokenizer.vocab_size


def test_ids_agree_with_the_model_config():
    for name in ("PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID"):
        assert getattr(config, name) == getattr(tokenizer_module, name), name


def test_numbers_round_trip(numbers_corpus, numbers_tokenizer):
    sentences = [side for pair in numbers_corpus.pairs("test") for side in pair]
    assert _round_trip(numbers_tokenizer, sentences) == sentences


def test_multi30k_and_other_shared_test_sets_round_trip(shared_data, multi30k, multi30k_tokenizer):
    sentences = [side for pair in multi30k.pairs("test") for side in pair]
    assert _round_trip(multi30k_tokenizer, sentences) == sentences
    # Other corpora's test sentences too: characters Multi30k never saw fall back to bytes.
    require_shared_data("newstest/newstest2014.en", "newstest/newstest2014.de")
    newstest = [side for pair in get_corpus("newstest", data_root=shared_data).pairs("test")
                for side in pair]
    assert _round_trip(multi30k_tokenizer, newstest) == newstest


def test_tsv_round_trip_including_unseen_characters(handwritten_tsv_corpus, tmp_path):
    tokenizer = load_or_train_tokenizer(tmp_path, handwritten_tsv_corpus.training_sentences(),
                                        TokenizerSettings(vocab_size=400, corpus="handwritten"))
    sentences = [side for pair in handwritten_tsv_corpus.pairs("test") for side in pair]
    assert _round_trip(tokenizer, sentences) == sentences
    unseen = ["Ωμέγα 漢字 ∮ dx", "tab\tinside  and  double spaces"]
    assert _round_trip(tokenizer, unseen) == unseen
    assert UNK_ID not in tokenizer.tokenize(tf.constant(unseen)).flat_values.numpy()


def test_lowercase_folds_case_inside_the_model(handwritten_tsv_corpus, tmp_path):
    """The case folding is the model's normalizer, so TF Text's in-graph op (training, export) folds."""
    settings = DataConfig(vocab_size=400, lowercase=True).tokenizer_settings("handwritten")
    tokenizer = load_or_train_tokenizer(tmp_path, handwritten_tsv_corpus.training_sentences(), settings)
    cased = ["Ein Mann läuft über die Straße.", "ZWEI GROSSE HUNDE", "Ωμέγα"]
    assert (tokenizer.tokenize(tf.constant(cased)).to_list()
            == tokenizer.tokenize(tf.constant([text.lower() for text in cased])).to_list())
    assert _round_trip(tokenizer, cased) == ["ein mann läuft über die straße.", "zwei grosse hunde", "ωμέγα"]
    assert json.loads((tmp_path / SETTINGS_FILENAME).read_text())["lowercase"] is True
    with pytest.raises(ValueError, match="was trained with"):
        load_or_train_tokenizer(tmp_path, None, dataclasses.replace(settings, lowercase=False))
    # Vocabularies of runs without the option keep their settings file as it was before it existed.
    assert "lowercase" not in TokenizerSettings().to_dict()


def test_control_ids_detokenize_to_nothing(numbers_tokenizer):
    ids = numbers_tokenizer.tokenize(tf.constant(["twenty-one"])).to_tensor()
    padded = tf.concat([[[BOS_ID]], ids, [[EOS_ID, PAD_ID, PAD_ID]]], axis=1)
    assert numbers_tokenizer.detokenize(padded).numpy().tolist() == [b"twenty-one"]


def test_model_is_saved_beside_the_run_and_reused(numbers_corpus, tmp_path):
    settings = TokenizerSettings(vocab_size=300, corpus="numbers")
    first = load_or_train_tokenizer(tmp_path, numbers_corpus.training_sentences(), settings)
    assert (tmp_path / MODEL_FILENAME).read_bytes() == first.model_proto
    reused = load_or_train_tokenizer(tmp_path, None, settings)  # no sentences: must not retrain
    assert reused.model_proto == first.model_proto
    with pytest.raises(ValueError, match="was trained with"):
        load_or_train_tokenizer(tmp_path, None, dataclasses.replace(settings, vocab_size=500))
    with pytest.raises(FileNotFoundError, match="no SentencePiece model"):
        load_or_train_tokenizer(tmp_path / "empty", None, settings)


def test_training_is_reproducible(numbers_corpus):
    settings = TokenizerSettings(vocab_size=300, sample_size=2_000)
    first = tokenizer_module.train_sentencepiece(numbers_corpus.training_sentences(), settings)
    again = tokenizer_module.train_sentencepiece(numbers_corpus.training_sentences(), settings)
    assert first == again
    assert SubwordTokenizer(first).vocab_size <= 300


def test_sample_sentences_is_a_seeded_sample_without_repeats():
    population = [f"s{i}" for i in range(1_000)]
    sample = sample_sentences(population, 100, seed=1)
    assert len(sample) == len(set(sample)) == 100 and set(sample) <= set(population)
    assert sample == sample_sentences(population, 100, seed=1)
    assert sample != sample_sentences(population, 100, seed=2)
    assert sample_sentences(population[:10], 100, seed=1) == population[:10]


def test_tokenize_shapes(numbers_tokenizer):
    ids = numbers_tokenizer.tokenize(tf.constant(["one", "two hundred and three"]))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32 and ids.shape[0] == 2
    assert np.all(ids.flat_values.numpy() > EOS_ID)


def test_survives_tensorflow_clearing_its_caches(numbers_tokenizer):
    text = tf.constant(["seven hundred"])
    before = numbers_tokenizer.tokenize(text).to_list()
    tf.random.set_seed(1)  # clears TensorFlow's eager kernel cache
    assert numbers_tokenizer.tokenize(text).to_list() == before
    restored = numbers_tokenizer.detokenize(numbers_tokenizer.tokenize(text))
    assert restored.numpy().tolist() == [b"seven hundred"]
