"""Shared fixtures of the data tests: tiny corpora written to tmp dirs, tokenizers trained once.

Real corpora are read from the shared data folder (never copied into the repository) through
`require_shared_data`, which skips when it is absent and fails when CI=true.
"""
import pathlib

import pytest

from keras_transformer.data.corpora import LocalParallelCorpus
from keras_transformer.data.factory import get_corpus, require_shared_data
from keras_transformer.data.numbers_corpus import NumbersCorpus
from keras_transformer.data.tokenizer import SubwordTokenizer, TokenizerSettings, load_or_train_tokenizer

MULTI30K_FILES = ("multi30k/train.en", "multi30k/train.de", "multi30k/val.en", "multi30k/val.de",
                  "multi30k/test_2016_flickr.en", "multi30k/test_2016_flickr.de")

# Hand-written pairs with umlauts, punctuation, digits and characters outside any small vocabulary.
HANDWRITTEN_PAIRS = [
    ("The cat sleeps.", "Die Katze schläft."),
    ("Two men, one dog (brown) and 3 bikes!", "Zwei Männer, ein Hund (braun) und 3 Fahrräder!"),
    ("Where is the station?", "Wo ist der Bahnhof?"),
    ("Good morning,  Mr. Müller.", "Guten Morgen,  Herr Müller."),
    ("I paid €20 for that.", "Ich habe 20 € dafür bezahlt."),
    ("A snowman ☃ and a rocket 🚀.", "Ein Schneemann ☃ und eine Rakete 🚀."),
    ("Straße means street.", "„Straße“ heißt street."),
]


def write_text(path: pathlib.Path, lines, newline="\n") -> pathlib.Path:
    """Writes str lines (UTF-8) or a bytes blob; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(lines, bytes):
        path.write_bytes(lines)
    else:
        path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))
    return path


@pytest.fixture
def handwritten_tsv_corpus(tmp_path) -> LocalParallelCorpus:
    """Train, validation and test TSV files made of HANDWRITTEN_PAIRS."""
    lines = [f"{source}\t{target}" for source, target in HANDWRITTEN_PAIRS]
    files = {split: write_text(tmp_path / f"{split}.tsv", lines)
             for split in ("train", "validation", "test")}
    return LocalParallelCorpus(files, name="handwritten")


@pytest.fixture(scope="session")
def numbers_corpus() -> NumbersCorpus:
    return NumbersCorpus(num_train=3_000, num_validation=300, num_test=300, seed=7)


@pytest.fixture(scope="session")
def numbers_tokenizer(numbers_corpus, tmp_path_factory) -> SubwordTokenizer:
    settings = TokenizerSettings(vocab_size=400, corpus="numbers")
    return load_or_train_tokenizer(tmp_path_factory.mktemp("numbers_vocab"),
                                   numbers_corpus.training_sentences(), settings)


@pytest.fixture(scope="session")
def shared_data():
    return require_shared_data(*MULTI30K_FILES)


@pytest.fixture(scope="session")
def multi30k(shared_data) -> LocalParallelCorpus:
    return get_corpus("multi30k", data_root=shared_data)


@pytest.fixture(scope="session")
def multi30k_tokenizer(multi30k, tmp_path_factory) -> SubwordTokenizer:
    """An 8,000-piece shared vocabulary learned on Multi30k train, once per session."""
    settings = TokenizerSettings(vocab_size=8_000, corpus="multi30k")
    return load_or_train_tokenizer(tmp_path_factory.mktemp("multi30k_vocab"),
                                   multi30k.training_sentences(), settings)
