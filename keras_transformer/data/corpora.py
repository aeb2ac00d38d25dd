"""Parallel corpora behind one interface: (source sentence, target sentence) string pairs per split.

Every source (TFDS WMT14, local files, the generated `numbers` corpus) is a `Corpus`:
`corpus.pairs(split)` yields Python str pairs, `corpus.dataset(split)` gives the same pairs as a
tf.data.Dataset of scalar tf.string pairs, which is what the input pipeline reads.

Local files are streamed (text_files.py): never held whole in memory nor in a graph, so a corpus
may be larger than RAM. Each split's files are checked once, streaming, the first time the split is
used (and remembered across processes while the files are unchanged, see text_files.py): a bad
file is reported with its path, the 1-based line number and the offending value, before any
training starts. Lines where either side is empty (after stripping surrounding
whitespace) are skipped and counted, never fatal; the count is logged with the first such line
(its number and file), and kept in `LocalParallelCorpus.skipped_empty[split]`.
"""
import abc
import logging
import pathlib
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from keras_transformer.data.text_files import (LINES_PER_BATCH, CorpusFormatError, aligned_pairs,
                                               check_aligned_files, check_tsv, holdout_indices, iterate_pairs,
                                               line_index, remembered_check, sampled_digest, tsv_pairs)
from keras_transformer.tracing import plain

SPLITS = ("train", "validation", "test")

logger = logging.getLogger(__name__)

PathLike = Union[str, pathlib.Path]

__all__ = ["SPLITS", "Corpus", "CorpusFormatError", "LocalParallelCorpus", "check_split", "read_aligned_files"]


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
    # Whether pairs_from reaches a pair without making every pair before it in Python: the training
    # stream reads a split from several regions at once (training/data_stream.py) only then.
    regions_readable: bool = False

    @abc.abstractmethod
    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        """Yields (source, target) str pairs of `split`, in the corpus's own order."""

    def dataset(self, split: str) -> tf.data.Dataset:
        """The pairs of `split` as a tf.data.Dataset of (source, target) scalar tf.string tensors.

        This default holds the split in memory (as a constant); corpora larger than memory override it.
        """
        sources, targets = [], []
        for source, target in self.pairs(split):
            sources.append(source)
            targets.append(target)
        if not sources:
            raise ValueError(f"{self.name}: split {split!r} has no sentence pairs")
        return tf.data.Dataset.from_tensor_slices((sources, targets))

    def num_pairs(self, split: str) -> Optional[int]:
        """How many pairs `split` holds, or None where that is not known without reading it."""
        return None

    def prepare(self) -> None:
        """Does what must read or fetch the whole corpus once before it is used (TFDS's download
        and preparation, the check of local files), so that a cluster's workers can wait for it at a
        barrier of its own (training/run.py) and not inside a collective that gives up after minutes."""

    def file_records(self) -> Optional[dict[str, list[list]]]:
        """{split: [[file path, size in bytes, text_files.sampled_digest], ...]} of a corpus read from
        local files, else None: what a resumed run compares with what its start recorded
        (training/run.py)."""
        return None

    # Whether the chief prepares before the other workers start to (a TFDS data_dir they may share is
    # written once), or all prepare side by side (each reads its own files).
    prepare_on_chief_first: bool = False

    def pairs_from(self, split: str) -> Callable[[tf.Tensor], tf.data.Dataset]:
        """A function of an int64 scalar tensor `start` that gives the pairs of `split` from pair
        `start` on, as `dataset(split).skip(start)`; called while tf.data traces its functions.
        Corpora that can reach a pair faster than by making every pair before it override it."""
        pairs = self.dataset(split)
        return lambda start: pairs.skip(start)

    def user_defined_symbols(self) -> tuple[str, ...]:
        """Strings the shared vocabulary keeps as one piece each: none for text (a treebank's tree
        tokens for parsing)."""
        return ()

    def scored_target_symbols(self) -> Optional[tuple[str, ...]]:
        """The only target pieces (among user_defined_symbols, besides EOS) that the loss scores, or
        None: every piece (translation, the paper). A parser whose decoding copies the sentence's
        words may leave their pieces out of the loss (see parsing.corpus)."""
        return None

    def training_sentences(self) -> Iterator[str]:
        """Source and target sentences of the train split: what the shared vocabulary is learned on."""
        for source, target in self.pairs("train"):
            yield source
            yield target

    def __repr__(self):
        return f"{type(self).__name__}({self.name}, {self.source_language}->{self.target_language})"


def read_aligned_files(source_path: PathLike, target_path: PathLike
                       ) -> tuple[list[tuple[str, str]], int]:
    """Pairs from two line-aligned files, as a list (for small files such as test sets); returns
    (pairs, number of skipped empty lines). Raises CorpusFormatError."""
    counts = check_aligned_files(source_path, target_path)
    return list(iterate_pairs(aligned_pairs(source_path, target_path))), counts.num_skipped_empty


# A split's files: (source path, target path) for aligned plain-text files, or one TSV path, or a
# list of those, read one after the other (e.g. several newstest years as one training set).
FileEntry = Union[PathLike, tuple[PathLike, PathLike]]
SplitFiles = Union[FileEntry, list[FileEntry]]


def _entry_paths(entry: FileEntry) -> tuple:
    """The files of an entry: a TSV file, or the source and target files."""
    return entry if isinstance(entry, tuple) else (entry,)


class LocalParallelCorpus(Corpus):
    """Parallel text on disk: per split, two aligned plain-text files or one TSV file.

    Args:
      files: split name -> (source path, target path), a TSV path, or a list of those (read in
        order). Training needs "train"; scoring a test set alone needs only "test".
      name: used in logs.
      source_language, target_language: language codes of the (source, target) sides as given.
      tsv_columns: None for strict two-field TSV lines; else the (source, target) columns to keep.
      reverse: swap source and target (e.g. de->en from en/de files).
      holdout: (validation size, test size) pairs carved out of "train", chosen by a permutation
        seeded with `seed`, for corpora that come as one file (Tatoeba). Splits given in `files`
        cannot also be held out.
      seed: the holdout permutation's seed.
    """

    regions_readable = True

    def __init__(self, files: Mapping[str, SplitFiles], *, name: str = "local",
                 source_language: str = "en", target_language: str = "de",
                 tsv_columns: Optional[Sequence[int]] = None, reverse: bool = False,
                 holdout: Optional[tuple[int, int]] = None, seed: int = 0):
        unknown = sorted(set(files) - set(SPLITS))
        if unknown:
            raise ValueError(f"{name}: unknown split(s) {unknown}; expected some of {SPLITS}")
        if not files:
            raise ValueError(f"{name}: no split given; expected some of {SPLITS}")
        if holdout is not None and "train" not in files:
            raise ValueError(f"{name}: holdout carves validation and test out of a 'train' split, and there is "
                             f"none (splits {sorted(files)})")
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
        self._num_pairs: dict[str, int] = {}
        self._holdout: Optional[dict[str, np.ndarray]] = None  # sorted int64 pair indices
        self._held_out_cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._entry_counts: dict[str, list] = {}  # split -> FileCounts of each file entry

    def _entries(self, split: str) -> list[FileEntry]:
        split_files = self.files[split]
        entries = split_files if isinstance(split_files, list) else [split_files]
        for entry in entries:
            if isinstance(entry, tuple) and len(entry) != 2:
                raise ValueError(f"{self.name}: expected (source path, target path), got {entry}")
        return entries

    def _check(self, split: str) -> None:
        """Checks the files of `split` once (streaming) and counts its pairs; raises CorpusFormatError."""
        if split in self._num_pairs:
            return
        if self.holdout is not None and split != "train":
            self._check("train")
            return
        if split not in self.files:
            raise ValueError(f"{self.name}: no files for split {split!r}; it has {sorted(self.files)}")
        num_pairs = skipped = 0
        entry_counts, first_skipped = [], None
        for entry in self._entries(split):
            if isinstance(entry, tuple):
                counts = remembered_check(entry, "aligned", lambda: check_aligned_files(*entry))
            else:
                counts = remembered_check([entry], {"tsv_columns": self.tsv_columns},
                                          lambda: check_tsv(entry, self.tsv_columns))
            num_pairs, skipped = num_pairs + counts.num_pairs, skipped + counts.num_skipped_empty
            entry_counts.append(counts)
            if first_skipped is None and counts.first_skipped_line is not None:
                files = " and ".join(str(path) for path in _entry_paths(entry))
                first_skipped = f"line {counts.first_skipped_line} of {files}"
        self._entry_counts[split] = entry_counts
        self.skipped_empty[split] = skipped
        if skipped:
            logger.warning("%s/%s: skipped %d line(s) with an empty side (the first: %s)", self.name, split,
                           skipped, first_skipped)
        if self.holdout is None:
            self._num_pairs[split] = num_pairs
        else:
            self._split_holdout(num_pairs)

    def _split_holdout(self, num_pairs: int):
        num_validation, num_test = self.holdout
        if num_validation + num_test >= num_pairs:
            raise ValueError(f"{self.name}: holdout {self.holdout} leaves no training pairs out of "
                             f"{num_pairs}")
        validation, test = holdout_indices(num_pairs, num_validation, num_test, self.seed)
        self._holdout = {"validation": validation, "test": test,
                         "held_out": np.sort(np.concatenate([validation, test]))}
        self._num_pairs.update(train=num_pairs - num_validation - num_test, validation=num_validation,
                               test=num_test)
        self.skipped_empty.setdefault("validation", 0)
        self.skipped_empty.setdefault("test", 0)

    def file_records(self) -> dict[str, list[list]]:
        return {split: [[str(path), pathlib.Path(path).stat().st_size, sampled_digest(path)]
                        for entry in self._entries(split) for path in _entry_paths(entry)]
                for split in self.files}

    def prepare(self) -> None:
        """Checks the files of every split (or train, with a holdout), and makes the line index of
        each train file (pairs_from reads from it)."""
        for split in self.files:
            self._check(split)
        if self.holdout is None and "train" in self.files:
            for entry in self._entries("train"):
                for path in _entry_paths(entry):
                    line_index(path)

    def _entry_pairs(self, entry: FileEntry, skip_lines=0) -> tf.data.Dataset:
        if isinstance(entry, tuple):
            return aligned_pairs(*entry, skip_lines=skip_lines)
        return tsv_pairs(entry, self.tsv_columns, skip_lines=skip_lines)

    def _file_pairs(self, split: str) -> tf.data.Dataset:
        """The kept pairs of the files of `split`, in file order, as given (before reverse)."""
        datasets = [self._entry_pairs(entry) for entry in self._entries(split)]
        pairs = datasets[0]
        for dataset in datasets[1:]:
            pairs = pairs.concatenate(dataset)
        return pairs

    def pairs_from(self, split: str) -> Callable[[tf.Tensor], tf.data.Dataset]:
        """As Corpus.pairs_from, faster: in a file with no skipped line, pair i is line i, so the
        file is read from the chunk of its line index that holds the line (text_files.line_index),
        and one wholly before `start` is not read. In a file with skipped lines, the check counted
        them by blocks of lines (FileCounts.pairs_block): the file is read from the block that
        holds the pair, and skips the pairs before it in that block. Splits held out of train skip
        pair by pair."""
        check_split(split)
        self._check(split)
        if self.holdout is not None:
            return super().pairs_from(split)
        entries, entry_counts = self._entries(split), self._entry_counts[split]

        def pairs_from(start):
            datasets, before = [], 0
            for entry, counts in zip(entries, entry_counts):
                skip = tf.clip_by_value(tf.cast(start, tf.int64) - before, 0, counts.num_pairs)
                first_line, pairs_in_block = counts.pairs_block(skip)
                datasets.append(self._entry_pairs(entry, skip_lines=first_line).skip(pairs_in_block))
                before += counts.num_pairs
            pairs = datasets[0]
            for dataset in datasets[1:]:
                pairs = pairs.concatenate(dataset)
            return pairs.map(plain(lambda source, target: (target, source))) if self.reverse else pairs

        return pairs_from

    def dataset(self, split: str) -> tf.data.Dataset:
        """The pairs of `split`, streamed from the files (never held whole in memory or in the graph)."""
        check_split(split)
        self._check(split)
        if self._num_pairs[split] == 0:
            raise ValueError(f"{self.name}: split {split!r} has no sentence pairs")
        if self.holdout is None:
            pairs = self._file_pairs(split)
        elif split == "train":
            held_out = self._holdout["held_out"]
            pairs = (self._file_pairs("train").enumerate()
                     .filter(plain(lambda index, pair: tf.logical_not(_is_in(index, held_out))))
                     .map(plain(lambda index, pair: pair)))
        else:
            pairs = tf.data.Dataset.from_tensor_slices(self._held_out_pairs(split))
        if self.reverse:
            pairs = pairs.map(plain(lambda source, target: (target, source)))
        return pairs

    def _held_out_pairs(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """The (sources, targets) held out of train for `split`, read from the files once and then
        kept in memory (there are holdout[0] or holdout[1] of them): every evaluation reads them."""
        if split not in self._held_out_cache:
            chosen = self._holdout[split]
            pairs = (self._file_pairs("train").enumerate()
                     .filter(plain(lambda index, pair: _is_in(index, chosen)))
                     .map(plain(lambda index, pair: pair)))
            sources, targets = [], []
            for source, target in pairs.batch(LINES_PER_BATCH).as_numpy_iterator():
                sources.append(source)
                targets.append(target)
            self._held_out_cache[split] = (np.concatenate(sources), np.concatenate(targets))
        return self._held_out_cache[split]

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        check_split(split)
        self._check(split)
        if self._num_pairs[split] == 0:
            return iter(())
        return iterate_pairs(self.dataset(split))

    def num_pairs(self, split: str) -> int:
        check_split(split)
        self._check(split)
        return self._num_pairs[split]


def _is_in(index: tf.Tensor, sorted_indices: np.ndarray) -> tf.Tensor:
    """Whether the int64 scalar `index` is one of `sorted_indices` (ascending int64)."""
    if sorted_indices.size == 0:
        return tf.constant(False)
    sorted_indices = tf.constant(sorted_indices, tf.int64)
    position = tf.searchsorted(sorted_indices, tf.reshape(index, [1]))[0]
    found = tf.gather(sorted_indices, tf.minimum(position, tf.size(sorted_indices, tf.int32) - 1))
    return tf.logical_and(position < tf.size(sorted_indices, tf.int32), tf.equal(found, index))
