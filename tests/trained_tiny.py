"""A tiny model trained on the offline `numbers` corpus, laid out as a run's workdir, once per session.

The workdir follows the run-directory contract that `keras_transformer.export.load_model_from_workdir`
reads: model_config.json, decode_config.json, sentencepiece.model and `checkpoints/` written by a
tf.train.CheckpointManager of tf.train.Checkpoint(model=..., optimizer=...).

Test modules import the fixtures from here. pytest makes one fixture definition per importing
module, so a session fixture imported twice would run twice; the work is therefore cached on disk
under the session's base temporary directory (the one pytest-xdist's workers share) and done only
by the first caller, under a file lock.
"""
import fcntl
import os
import pathlib

import keras
import pytest
import tensorflow as tf

from keras_transformer import DecodeConfig, Transformer, TransformerConfig
from keras_transformer.data import DataConfig, NumbersCorpus, load_or_train_tokenizer, make_corpus_dataset
from keras_transformer.export import Translator, export_translator, load_model_from_workdir

TRAIN_STEPS = 250
# English number words (the corpus's source side) that the tests translate.
SENTENCES = ["twenty-one", "three hundred and forty-five", "seven thousand, two hundred",
             "ninety-nine", "one hundred and six"]
DECODE_CONFIG = DecodeConfig(beam_size=4, alpha=0.6, extra_length=10)
REFERENCE_WEIGHTS = "tiny_reference.weights.h5"


def train_tiny_workdir(workdir: pathlib.Path) -> pathlib.Path:
    """Trains the tiny preset for TRAIN_STEPS steps and writes the run's files into workdir."""
    workdir.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(0)
    corpus = NumbersCorpus(num_train=4_000, num_validation=100, num_test=100, seed=3)
    # One bucket of 32 positions: every batch has the same shape, so fit traces its step once.
    data_config = DataConfig(dataset="numbers", vocab_size=400, tokens_per_batch=1_600, max_length=32,
                             min_bucket_length=32, shuffle_buffer_size=4_000)
    tokenizer = load_or_train_tokenizer(workdir, corpus.training_sentences(),
                                        data_config.tokenizer_settings(corpus.name))
    config = TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size, max_length=128,
                                           dropout_rate=0.0, label_smoothing=0.0)
    model = Transformer(config)
    model.build()
    model.compile(optimizer=keras.optimizers.Adam(1e-3, beta_2=0.98))
    dataset = make_corpus_dataset(corpus, "train", tokenizer, data_config).repeat()
    model.fit(dataset, steps_per_epoch=TRAIN_STEPS, epochs=1, verbose=0, shuffle=False)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    tf.train.CheckpointManager(checkpoint, workdir / "checkpoints", max_to_keep=2).save()
    # The trained weights as Keras saves them, to check what is restored from the checkpoint.
    model.save_weights(str(workdir.parent / REFERENCE_WEIGHTS))
    (workdir / "model_config.json").write_text(config.to_json())
    (workdir / "decode_config.json").write_text(DECODE_CONFIG.to_json())
    return workdir


def session_directory(tmp_path_factory) -> pathlib.Path:
    """The test session's base temporary directory; under pytest-xdist, the one its workers share
    (each worker's own is a folder in it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once_per_session(tmp_path_factory, name, make):
    """make(path) -> anything, run by the first caller of the session only (a `done` marker, written
    last; the others wait on a lock until it is there); returns session_directory/name."""
    path = session_directory(tmp_path_factory) / name
    marker = path.with_name(name + ".done")
    with open(path.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            make(path)
            marker.touch()
    return path


def export_tiny(workdir: pathlib.Path, export_dir: pathlib.Path) -> pathlib.Path:
    model, sentencepiece_proto, decode_config = load_model_from_workdir(workdir)
    return export_translator(Translator(model, sentencepiece_proto, decode_config), export_dir, version=1)


@pytest.fixture(scope="session")
def tiny_workdir(tmp_path_factory) -> pathlib.Path:
    """The trained run directory (model_config.json, decode_config.json, sentencepiece.model,
    checkpoints/); the same weights as Keras saves them are at ../REFERENCE_WEIGHTS."""
    return once_per_session(tmp_path_factory, "tiny_workdir", train_tiny_workdir)


@pytest.fixture(scope="session")
def tiny_saved_model(tiny_workdir, tmp_path_factory) -> pathlib.Path:
    """exported/tiny/1: the trained model exported with the default Translator settings."""
    return once_per_session(tmp_path_factory, "exported", lambda path: export_tiny(tiny_workdir, path / "tiny")
                            ) / "tiny" / "1"
