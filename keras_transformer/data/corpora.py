"""Parallel corpora behind one interface: (source sentence, target sentence) string pairs per split.

Every source (TFDS WMT14, local files, the generated `numbers` corpus) is a `Corpus`:
`corpus.pairs(split)` yields Python str pairs, `corpus.dataset(split)` gives the same pairs as a
tf.data.Dataset of scalar tf.string pairs, which is what the input pipeline reads.

Local files are read and checked eagerly: a bad file is reported with its path, the 1-based line
number and the offending value, before any training starts. Lines where either side is empty (after
stripping surrounding whitespace) are skipped and counted, never fatal; the count is logged and kept
in `LocalParallelCorpus.skipped_empty[split]`.
"""
import abc
import logging
import pathlib
import random
from typing import Iterator, Mapping, Optional, Sequence, Union

import tensorflow as tf

SPLITS = ("train", "validation", "test")

logger = logging.getLogger(__name__)

PathLike = Union[str, pathlib.Path]


class CorpusFormatError(ValueError):
    """A corpus file is malformed; the message names the file, the 1-based line and the value."""


def check_split(split):
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


class Corpus(abc.ABC):
    """A parallel corpus: (source, target) sentence pairs for the splits train/validation/test.

    Sentences come with surrounding whitespace stripped, and no side is empty.

    Attributes:
      name: a short name used in logs and run directories.
      source_language, target_language: language codes, e.g. "en" and "de".
    """

    name: str = "corpus"
    source_language: str = "en"
    target_language: str = "de"

    @abc.abstractmethod
    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        """Yields (source, target) str pairs of `split`, in the corpus's own order."""

    def dataset(self, split: str) -> tf.data.Dataset:
        """The pairs of `split` as a tf.data.Dataset of (source, target) scalar tf.string tensors."""
        sources, targets = [], []
        for source, target in self.pairs(split):
            sources.append(source)
            targets.append(target)
        if not sources:
            raise ValueError(f"{self.name}: split {split!r} has no sentence pairs")
        return tf.data.Dataset.from_tensor_slices((sources, targets))

    def user_defined_symbols(self) -> tuple[str, ...]:
        """Strings the shared vocabulary keeps as one piece each: none for text (a treebank's tree
        tokens for parsing)."""
        return ()

    def training_sentences(self) -> Iterator[str]:
        """Source and target sentences of the train split: what the shared vocabulary is learned on."""
        for source, target in self.pairs("train"):
            yield source
            yield target

    def __repr__(self):
        return f"{type(self).__name__}({self.name}, {self.source_language}->{self.target_language})"


def _decode_line(raw: bytes, path: PathLike, line_number: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[max(0, error.start - 10):error.end + 10]
        raise CorpusFormatError(
            f"{path}:{line_number}: invalid UTF-8 at byte {error.start} of the line "
            f"(bytes around it: {bad!r})") from None


def read_lines(path: PathLike) -> list[str]:
    """The lines of a UTF-8 text file, without line terminators; raises CorpusFormatError."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    with open(path, "rb") as handle:
        return [_decode_line(raw, path, number).rstrip("\r\n")
                for number, raw in enumerate(handle, start=1)]


def read_aligned_files(source_path: PathLike, target_path: PathLike
                       ) -> tuple[list[tuple[str, str]], int]:
    """Pairs from two line-aligned files; returns (pairs, number of skipped empty lines)."""
    sources, targets = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(targets):
        shorter, longer = sorted([(len(sources), source_path), (len(targets), target_path)],
                                 key=lambda item: item[0])
        raise CorpusFormatError(
            f"{source_path} has {len(sources)} lines but {target_path} has {len(targets)}: "
            f"aligned files must have the same number of lines; line {shorter[0] + 1} of "
            f"{longer[1]} has no counterpart in {shorter[1]}")
    return _drop_empty(zip(sources, targets))


def read_tsv(path: PathLike, columns: Optional[Sequence[int]] = None
             ) -> tuple[list[tuple[str, str]], int]:
    """Pairs from a TSV file; returns (pairs, number of skipped empty lines).

    Args:
      path: the TSV file, one pair per line.
      columns: None (strict) means every line has exactly two fields separated by exactly one tab.
        Otherwise the 0-based (source, target) columns to keep; the line may have more fields (for
        example the attribution column of newer Tatoeba exports), but must have these two.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            pairs.append(("", ""))
            continue
        fields = line.split("\t")
        if columns is None:
            if len(fields) != 2:
                raise CorpusFormatError(
                    f"{path}:{number}: expected exactly one tab (source TAB target), found "
                    f"{len(fields) - 1}: {line!r}. Pass columns=(i, j) to pick two columns of a "
                    f"file with more fields.")
            pairs.append((fields[0], fields[1]))
        else:
            if len(fields) <= max(columns):
                raise CorpusFormatError(
                    f"{path}:{number}: expected at least {max(columns) + 1} tab-separated fields "
                    f"(columns {tuple(columns)}), found {len(fields)}: {line!r}")
            pairs.append((fields[columns[0]], fields[columns[1]]))
    return _drop_empty(pairs)


def _drop_empty(pairs) -> tuple[list[tuple[str, str]], int]:
    kept, skipped = [], 0
    for source, target in pairs:
        source, target = source.strip(), target.strip()
        if source and target:
            kept.append((source, target))
        else:
            skipped += 1
    return kept, skipped


# A split's files: (source path, target path) for aligned plain-text files, or one TSV path, or a
# list of those, read one after the other (e.g. several newstest years as one training set).
FileEntry = Union[PathLike, tuple[PathLike, PathLike]]
SplitFiles = Union[FileEntry, list[FileEntry]]


class LocalParallelCorpus(Corpus):
    """Parallel text on disk: per split, two aligned plain-text files or one TSV file.

    Args:
      files: split name -> (source path, target path), a TSV path, or a list of those (read in
        order). "train" is required.
      name: used in logs.
      source_language, target_language: language codes of the (source, target) sides as given.
      tsv_columns: None for strict two-field TSV lines; else the (source, target) columns to keep.
      reverse: swap source and target (e.g. de->en from en/de files).
      holdout: (validation size, test size) pairs carved out of "train", chosen by a permutation
        seeded with `seed`, for corpora that come as one file (Tatoeba). Splits given in `files`
        cannot also be held out.
      seed: the holdout permutation's seed.
    """

    def __init__(self, files: Mapping[str, SplitFiles], *, name: str = "local",
                 source_language: str = "en", target_language: str = "de",
                 tsv_columns: Optional[Sequence[int]] = None, reverse: bool = False,
                 holdout: Optional[tuple[int, int]] = None, seed: int = 0):
        unknown = sorted(set(files) - set(SPLITS))
        if unknown:
            raise ValueError(f"{name}: unknown split(s) {unknown}; expected some of {SPLITS}")
        if "train" not in files:
            raise ValueError(f"{name}: a 'train' split is required, got splits {sorted(files)}")
        if holdout is not None and ({"validation", "test"} & set(files)):
            raise ValueError(f"{name}: holdout carves validation and test out of train; do not "
                             f"also give them as files ({sorted(files)})")
        if tsv_columns is not None and (len(tsv_columns) != 2 or min(tsv_columns) < 0):
            raise ValueError(f"tsv_columns must be two non-negative column indices, got {tsv_columns}")
        self.files = dict(files)
        self.name = name
        self.tsv_columns = tuple(tsv_columns) if tsv_columns is not None else None
        self.reverse = reverse
        self.holdout = holdout
        self.seed = seed
        self.source_language, self.target_language = (
            (target_language, source_language) if reverse else (source_language, target_language))
        self.skipped_empty: dict[str, int] = {}
        self._pairs: dict[str, list[tuple[str, str]]] = {}

    def _read(self, split_files: SplitFiles) -> tuple[list[tuple[str, str]], int]:
        entries = split_files if isinstance(split_files, list) else [split_files]
        pairs, skipped = [], 0
        for entry in entries:
            if isinstance(entry, tuple):
                if len(entry) != 2:
                    raise ValueError(f"{self.name}: expected (source path, target path), got {entry}")
                entry_pairs, entry_skipped = read_aligned_files(*entry)
            else:
                entry_pairs, entry_skipped = read_tsv(entry, self.tsv_columns)
            pairs.extend(entry_pairs)
            skipped += entry_skipped
        return pairs, skipped

    def _load(self, split: str) -> list[tuple[str, str]]:
        if split in self._pairs:
            return self._pairs[split]
        if self.holdout is not None and split != "train":
            self._load("train")
        elif split not in self.files:
            raise ValueError(f"{self.name}: no files for split {split!r}; it has {sorted(self.files)}")
        else:
            pairs, skipped = self._read(self.files[split])
            if self.reverse:
                pairs = [(target, source) for source, target in pairs]
            self.skipped_empty[split] = skipped
            if skipped:
                logger.warning("%s/%s: skipped %d line(s) with an empty side", self.name, split, skipped)
            if self.holdout is None:
                self._pairs[split] = pairs
            else:
                self._split_holdout(pairs)
        return self._pairs[split]

    def _split_holdout(self, pairs):
        num_validation, num_test = self.holdout
        if num_validation + num_test >= len(pairs):
            raise ValueError(f"{self.name}: holdout {self.holdout} leaves no training pairs out of "
                             f"{len(pairs)}")
        order = list(range(len(pairs)))
        random.Random(self.seed).shuffle(order)
        validation = set(order[:num_validation])
        test = set(order[num_validation:num_validation + num_test])
        self._pairs["validation"] = [pairs[i] for i in sorted(validation)]
        self._pairs["test"] = [pairs[i] for i in sorted(test)]
        self._pairs["train"] = [pair for i, pair in enumerate(pairs)
                                if i not in validation and i not in test]
        self.skipped_empty.setdefault("validation", 0)
        self.skipped_empty.setdefault("test", 0)

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        check_split(split)
        return iter(self._load(split))

    def num_pairs(self, split: str) -> int:
        check_split(split)
        return len(self._load(split))
