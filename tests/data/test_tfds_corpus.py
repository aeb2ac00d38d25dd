"""WMT14 through TFDS, run for real on TFDS's own mock data (no download is possible here)."""
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_transformer.data.data_config import DataConfig
from keras_transformer.data.factory import get_corpus
from keras_transformer.data.pipeline import make_corpus_dataset
from keras_transformer.data.tfds_corpus import wmt14_corpus
from keras_transformer.data.tokenizer import TokenizerSettings, load_or_train_tokenizer


@pytest.fixture
def mocked_tfds(tmp_path):
    with tfds.testing.mock_data(num_examples=40, policy=tfds.testing.MockPolicy.USE_CODE,
                                data_dir=str(tmp_path)):
        yield str(tmp_path)


def _raw_examples(data_dir, split):
    return list(tfds.load("wmt14_translate/de-en", split=split, data_dir=data_dir).as_numpy_iterator())


def test_wmt14_reads_every_split_in_both_directions(mocked_tfds):
    raw = _raw_examples(mocked_tfds, "validation")
    expected = [(ex["en"].decode().strip(), ex["de"].decode().strip()) for ex in raw]
    expected = [(en, de) for en, de in expected if en and de]
    assert expected, "the mock produced no usable pairs"
    forward = get_corpus("wmt14", tfds_data_dir=mocked_tfds)
    assert list(forward.pairs("validation")) == expected
    backward = get_corpus("wmt14", tfds_data_dir=mocked_tfds, reverse=True)
    assert list(backward.pairs("validation")) == [(de, en) for en, de in expected]
    for split in ("train", "test"):
        source, target = next(iter(forward.dataset(split)))
        assert source.dtype == tf.string and target.dtype == tf.string


def test_wmt14_round_trip_and_pipeline(mocked_tfds, tmp_path):
    corpus = get_corpus("wmt14", tfds_data_dir=mocked_tfds)
    tokenizer = load_or_train_tokenizer(tmp_path / "vocab", corpus.training_sentences(),
                                        TokenizerSettings(vocab_size=300, corpus="wmt14"))
    sentences = [side for pair in corpus.pairs("test") for side in pair]
    restored = tokenizer.detokenize(tokenizer.tokenize(tf.constant(sentences))).numpy()
    assert [text.decode("utf-8") for text in restored] == sentences
    config = DataConfig(tokens_per_batch=512, max_length=64)
    batches = list(make_corpus_dataset(corpus, "train", tokenizer, config))
    assert sum(int(target.shape[0]) for _, target in batches) == len(list(corpus.pairs("train")))


def test_prepare_downloads_and_prepares_only_when_allowed(mocked_tfds, monkeypatch):
    prepared = []

    class Builder:
        def download_and_prepare(self):
            prepared.append(True)

    def builder(name, data_dir):
        assert (name, data_dir) == ("wmt14_translate/de-en", mocked_tfds)
        return Builder()

    monkeypatch.setattr(tfds, "builder", builder)
    get_corpus("wmt14", tfds_data_dir=mocked_tfds).prepare()
    assert prepared == [True]
    wmt14_corpus(data_dir=mocked_tfds, download=False).prepare()
    assert prepared == [True]
    monkeypatch.undo()
    corpus = get_corpus("wmt14", tfds_data_dir=mocked_tfds)
    assert corpus.prepare_on_chief_first
    corpus.prepare()  # TFDS's mock: prepared without a download, then read
    assert list(corpus.pairs("validation"))
