"""A treebank as the training job's corpus: (sentence, linearized tree) pairs per split.

    corpus = TreebankCorpus({"train": ["wsj/02", ..., "wsj/21"], "validation": "wsj/22", "test": "wsj/23"})
    next(corpus.pairs("train"))    # ("Pierre Vinken , 61 ...", "(S (NP (NP NNP Pierre NNP Vinken ) , , ...")

Sentences are the trees' words joined by single spaces; targets are the trees linearized as
brackets (`linearize`, the default) or word by word with one label each ("depth": parsing.depth_labels,
`linearize_by_word`; "depth_word_first": each word before its tag). The trees
are read again from the files each time a split is iterated (streamed, never held whole), and every
file is checked once, before training starts, so that a bad tree stops the job with its file and
line. The vocabulary keeps every tree token (label, tag, ")"; or tag and depth tokens) of the train
split as one piece (`user_defined_symbols`).
"""
import pathlib
from typing import Iterator, Mapping, Optional, Sequence, Union

import tensorflow as tf

from keras_transformer.data.corpora import SPLITS, Corpus, check_split
from keras_transformer.parsing.depth_labels import label_tokens, linearize_by_word, rebuild_by_word
from keras_transformer.parsing.linearization import linearize, linearize_tokens, rebuild
from keras_transformer.parsing.parser import tree_symbols
from keras_transformer.parsing.treebank import read_treebank, treebank_files
from keras_transformer.parsing.trees import Tree

SPEC_PREFIX = "treebank:"
LINEARIZATIONS = ("brackets", "depth", "depth_word_first")
# What the loss scores: every target piece ("all", as in translation) or the tree tokens and EOS
# only ("labels"): the parser's decoding copies the words, so their pieces need not be learned.
LOSSES = ("all", "labels")
# The model: "seq2seq" (the paper's Transformer, decoding a linearized tree) or "span" (its encoder
# scoring every span, parsing.span_model; trained on the depth linearization).
PARSERS = ("seq2seq", "span")


def _check_choice(what: str, value: str, choices: tuple) -> str:
    if value not in choices:
        raise ValueError(f"unknown {what} {value!r}; expected one of {choices}")
    return value


def check_linearization(linearization: str) -> str:
    return _check_choice("linearization", linearization, LINEARIZATIONS)


def check_loss(loss: str) -> str:
    return _check_choice("parsing loss", loss, LOSSES)


def check_parser(parser: str, linearization: str) -> str:
    _check_choice("parser", parser, PARSERS)
    if parser == "span" and linearization != "depth":
        raise ValueError(f"the span parser reads its gold trees from the depth linearization, not {linearization!r}")
    return parser


class TreebankCorpus(Corpus):
    """Treebank files per split (a path, a directory, or a list of them); "train" is required.
    linearization: "brackets" (the paper's, after Vinyals et al.), "depth" (one label per word) or
    "depth_word_first" (the same with each word before its tag). loss: "all" (every target piece)
    or "labels" (the tree tokens and EOS only, see LOSSES). parser: the model the corpus is for
    (PARSERS); "span" needs the "depth" linearization."""

    source_language = "en"
    target_language = "trees"

    def __init__(self, files: Mapping[str, Union[str, pathlib.Path, Sequence]], name: str = "treebank",
                 linearization: str = "brackets", loss: str = "all", parser: str = "seq2seq"):
        self.linearization = check_linearization(linearization)
        self.loss = check_loss(loss)
        self.parser = check_parser(parser, linearization)
        unknown = sorted(set(files) - set(SPLITS))
        if unknown or "train" not in files:
            raise ValueError(f"{name}: expected splits among {SPLITS} with 'train'; got {sorted(files)}")
        self.name = name
        self.files = {split: treebank_files(paths) for split, paths in files.items()}
        self._symbols = None
        # Reads and linearizes every tree: a bad one stops here, naming its file and line.
        self._sizes = {split: sum(1 for _ in self.trees(split, check=self._sequence)) for split in self.files}

    def trees(self, split: str, check=None) -> Iterator[Tree]:
        """The split's trees; check as for read_treebank."""
        check_split(split)
        if split not in self.files:
            raise ValueError(f"{self.name}: no files for split {split!r}; it has {sorted(self.files)}")
        return read_treebank(self.files[split], check=check)

    def num_pairs(self, split: str) -> int:
        check_split(split)
        return self._sizes[split]

    def _sequence(self, tree: Tree) -> str:
        if self.linearization == "brackets":
            return linearize(tree)
        return linearize_by_word(tree, word_first=self.linearization == "depth_word_first")

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        for tree in self.trees(split):
            yield " ".join(tree.words()), self._sequence(tree)

    def dataset(self, split: str) -> tf.data.Dataset:
        """The pairs, streamed from the files."""
        if not self.num_pairs(split):
            raise ValueError(f"{self.name}: split {split!r} has no trees")
        spec = tf.TensorSpec([], tf.string)
        return tf.data.Dataset.from_generator(lambda: self.pairs(split), output_signature=(spec, spec))

    def user_defined_symbols(self) -> tuple[str, ...]:
        if self._symbols is None:
            tokens = set()
            for tree in self.trees("train"):
                tokens.update(linearize_tokens(tree, words=False) if self.linearization == "brackets"
                              else label_tokens(tree))
            self._symbols = tuple(tree_symbols(tokens))
        return self._symbols

    def scored_target_symbols(self) -> Optional[tuple[str, ...]]:
        return self.user_defined_symbols() if self.loss == "labels" else None


def treebank_spec(train, validation, test, linearization: str = "brackets", loss: str = "all",
                  parser: str = "seq2seq") -> str:
    """The DataConfig.dataset naming a treebank corpus: "treebank:train=A;validation=B;test=C"
    (several paths of one split joined by '+'), ";linearization=NAME" for any but brackets,
    ";loss=labels" for that loss and ";parser=span" for that parser."""
    def paths(value):
        values = [value] if isinstance(value, (str, pathlib.Path)) else list(value)
        return "+".join(str(pathlib.Path(v).resolve()) for v in values)
    check_linearization(linearization)
    check_loss(loss)
    check_parser(parser, linearization)
    return (SPEC_PREFIX + ";".join(f"{split}={paths(value)}" for split, value in
                                   (("train", train), ("validation", validation), ("test", test)))
            + ("" if linearization == "brackets" else f";linearization={linearization}")
            + ("" if loss == "all" else f";loss={loss}") + ("" if parser == "seq2seq" else f";parser={parser}"))


def parse_spec_options(spec: str) -> tuple[dict, dict]:
    """A treebank spec's files by split and its options (linearization, loss, parser), without reading any tree."""
    if not spec.startswith(SPEC_PREFIX):
        raise ValueError(f"not a treebank spec (expected '{SPEC_PREFIX}train=...;validation=...;test=...'): {spec!r}")
    files, options = {}, {"linearization": "brackets", "loss": "all", "parser": "seq2seq"}
    for item in filter(None, spec[len(SPEC_PREFIX):].split(";")):
        key, _, value = item.partition("=")
        if key in options:
            options[key] = value
        else:
            files[key] = value.split("+")
    return files, options


def parse_spec(spec: str) -> tuple[dict, str]:
    """A treebank spec's files by split and its linearization, without reading any tree."""
    files, options = parse_spec_options(spec)
    return files, options["linearization"]


def corpus_from_spec(spec: str) -> TreebankCorpus:
    files, options = parse_spec_options(spec)
    return TreebankCorpus(files, **options)


def gold_tree(sentence: str, sequence: str) -> Tree:
    """The tree of a corpus pair, of either linearization (a bracketed one starts with a bracket,
    but for a single tag over a single word, which reads the same either way)."""
    rebuild_sequence = rebuild if sequence.startswith("(") else rebuild_by_word
    return rebuild_sequence(sequence, sentence.split())
