"""Local parallel text files, streamed by tf.data line by line: memory stays flat whatever their size.

Two layouts: two line-aligned plain-text files (source, target), or one TSV file (source TAB target,
or chosen columns of a wider file). Before a file is used, `check_aligned_files` or `check_tsv`
reads it once, in batches of lines, and raises CorpusFormatError naming the file, the 1-based line
and the value for the first problem found: invalid UTF-8 (anywhere in a file first, the source
file before the target file), a TSV line without the expected columns, aligned files of different
lengths (both counts, once). They return how many pairs are kept and how many were skipped for an
empty side.

A check's result is remembered (`remembered_check`) under KT_CORPUS_CHECK_CACHE (default
~/.cache/keras_transformer/corpus_checks; "none" turns it off), keyed by each file's absolute path,
size and modification time: a restarted run, or a second run on the same files, does not read them
again to check them. A file rewritten in place with the same size and modification time (as
`cp -p` or `rsync -t` can do) would keep its old result: delete the folder then.

A file's line index (`line_index`: the byte offset of the first line at or after every megabyte)
is made by one pass of numpy over it, and remembered the same way; `aligned_pairs` and `tsv_pairs`
use it to start at a line without reading the lines before it.

`aligned_pairs` and `tsv_pairs` give the kept pairs as a tf.data.Dataset of scalar tf.string pairs,
with surrounding whitespace stripped as Python's str.strip() strips it.
"""
import dataclasses
import hashlib
import json
import logging
import os
import pathlib
from typing import Callable, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from keras_transformer.files import write_text_atomically
from keras_transformer.tracing import plain

PathLike = Union[str, pathlib.Path]

CHECK_CACHE_ENV = "KT_CORPUS_CHECK_CACHE"

# sampled_digest reads this many blocks of this many bytes (1 MiB) of a larger file.
DIGEST_BLOCKS, DIGEST_BLOCK_BYTES = 16, 1 << 16


def sampled_digest(path: PathLike) -> str:
    """sha256 (hex) of a file's size and of DIGEST_BLOCKS blocks of DIGEST_BLOCK_BYTES spread evenly
    over it, its first and last bytes among them (a file of 1 MiB or less: all of it). It reads 1 MiB
    whatever the file's size: a file rewritten with other lines or in another order changes it; an
    edit that keeps the size and falls between the blocks does not."""
    size = os.path.getsize(path)
    digest = hashlib.sha256(f"{size}\n".encode())
    with open(path, "rb") as file:
        if size <= DIGEST_BLOCKS * DIGEST_BLOCK_BYTES:
            digest.update(file.read())
        else:
            for index in range(DIGEST_BLOCKS):
                file.seek(index * (size - DIGEST_BLOCK_BYTES) // (DIGEST_BLOCKS - 1))
                digest.update(file.read(DIGEST_BLOCK_BYTES))
    return digest.hexdigest()

logger = logging.getLogger(__name__)

# Lines are checked and stripped this many at a time: one op per batch instead of one per line.
LINES_PER_BATCH = 8192

# The characters Python's str.strip() removes (str.isspace()): ASCII \t-\r, \x1c-\x20, \x85 and the
# Unicode separators Zs, Zl, Zp. RE2's \s alone is ASCII only.
WHITESPACE = r"[\t-\r\x{1c}-\x{20}\x{85}\p{Z}]"
_SURROUNDING_WHITESPACE = f"^{WHITESPACE}+|{WHITESPACE}+$"


class CorpusFormatError(ValueError):
    """A corpus file is malformed; the message names the file, the 1-based line and the value."""


@dataclasses.dataclass(frozen=True)
class FileCounts:
    """What checking a file entry found: pairs kept, lines skipped because a side is empty, the
    1-based number of the first of those (None when none was skipped), and where a file with
    skipped lines has its pairs: skipped_before_blocks[b] lines were skipped before (0-based) line
    b * block_lines (empty when none was skipped), so kept pair i is in the last block b with
    b * block_lines - skipped_before_blocks[b] <= i (`pairs_block`)."""

    num_pairs: int
    num_skipped_empty: int
    first_skipped_line: Optional[int] = None
    block_lines: int = 0
    skipped_before_blocks: list = dataclasses.field(default_factory=list)

    def pairs_block(self, pair) -> tuple[tf.Tensor, tf.Tensor]:
        """(the first line of the block that holds kept pair `pair` (an int64 scalar), the kept pairs
        of that block before it): read from that line, skip those pairs."""
        pair = tf.cast(pair, tf.int64)
        if not self.num_skipped_empty:
            return pair, tf.constant(0, tf.int64)
        if not self.skipped_before_blocks:  # not counted by blocks: pair by pair from the start
            return tf.constant(0, tf.int64), pair
        blocks = np.arange(len(self.skipped_before_blocks), dtype=np.int64)
        kept_before = tf.constant(blocks * self.block_lines - np.array(self.skipped_before_blocks, np.int64))
        block = tf.maximum(tf.searchsorted(kept_before, pair[None], side="right")[0] - 1, 0)
        return block * self.block_lines, pair - kept_before[block]


def strip_whitespace(texts: tf.Tensor) -> tf.Tensor:
    """tf.string texts with surrounding whitespace removed, as Python's str.strip() removes it."""
    return tf.strings.regex_replace(texts, _SURROUNDING_WHITESPACE, "")


def _lines(path: PathLike, skip_lines=0) -> tf.data.Dataset:
    """The lines of a file split at "\\n", as tf.string scalars; TensorFlow drops every "\\r" (of
    "\\r\\n" ends, and inside a line too), and a byte-order mark that starts the file is dropped:
    keras_transformer.files.split_lines reads as this does. From line `skip_lines` on (an int or an
    int64 scalar tensor): other than 0, the file is read from the chunk of its line index
    (`line_index`) that holds that line, not from its start."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file not found: {path}")
    if isinstance(skip_lines, int) and skip_lines == 0:
        lines = tf.data.TextLineDataset(str(path))
        first = lines.take(1).map(plain(lambda line: tf.strings.regex_replace(line, "^\ufeff", "")))
        return first.concatenate(lines.skip(1))
    return _indexed_lines(path, skip_lines)


# A line index marks the first line at or after every INDEX_CHUNK_BYTES bytes of a file.
INDEX_CHUNK_BYTES = 1 << 20


def _index_file(path: pathlib.Path) -> dict:
    """{"lines": [...], "offsets": [...]}: the chunks' first lines (0-based) and their byte offsets,
    then the file's line count and size. Each chunk starts at a line's start, and is the first line
    start at least INDEX_CHUNK_BYTES after the previous chunk's start (a longer line is a chunk)."""
    lines, offsets = [0], [0]
    newlines_before = position = last_start = 0
    size = path.stat().st_size
    with open(path, "rb") as file:
        while True:
            block = file.read(16 * INDEX_CHUNK_BYTES)
            if not block:
                break
            # The offsets of the lines that start in this block (after its newlines), and their numbers.
            starts = np.flatnonzero(np.frombuffer(block, np.uint8) == 10) + (position + 1)
            while True:
                following = int(np.searchsorted(starts, offsets[-1] + INDEX_CHUNK_BYTES))
                if following == len(starts) or starts[following] >= size:
                    break
                lines.append(newlines_before + following + 1)
                offsets.append(int(starts[following]))
            if len(starts):
                last_start = int(starts[-1])
            newlines_before += len(starts)
            position += len(block)
        # TextLineDataset: after the last "\n", one more line if anything but "\r" is left.
        file.seek(last_start)
        tail = file.read()
    lines.append(newlines_before + (1 if tail.replace(b"\r", b"") else 0))
    offsets.append(size)
    return {"lines": lines, "offsets": offsets}


_line_indexes: dict = {}


def line_index(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(first lines (C + 1,), byte offsets (C + 1,)) of the C chunks of a file (see _index_file), the
    last entries the file's line count and size. Made in one pass of numpy over the file, then
    remembered as checks are (remembered_check) and in this process."""
    key = _file_key([path], {"line_index": INDEX_CHUNK_BYTES})
    digest = _digest(key)
    if digest not in _line_indexes:
        index = _remembered(key, lambda: _index_file(pathlib.Path(path)), "line index", [path])
        _line_indexes[digest] = (np.array(index["lines"], np.int64), np.array(index["offsets"], np.int64))
    return _line_indexes[digest]


def _indexed_lines(path: pathlib.Path, skip_lines) -> tf.data.Dataset:
    """_lines of `path` from line `skip_lines` on, read chunk by chunk from the chunk that holds it."""
    first_lines, offsets = line_index(path)
    if first_lines[-1] == 0:
        return tf.data.Dataset.from_tensor_slices(tf.constant([], tf.string))
    size = offsets[-1]
    first_lines, offsets = tf.constant(first_lines), tf.constant(offsets)
    skip_lines = tf.cast(skip_lines, tf.int64)
    # The last chunk that starts at or before the line (a line past the end: the last chunk).
    chunk = tf.maximum(tf.searchsorted(first_lines[:-1], skip_lines[None], side="right")[0] - 1, 0)

    def chunk_lines(start, end):
        record = tf.data.FixedLengthRecordDataset(str(path), end - start, header_bytes=start,
                                                 footer_bytes=size - end)
        return record.map(plain(lambda text: _split_chunk(text, start)))

    bounds = tf.data.Dataset.from_tensor_slices((offsets[chunk:-1], offsets[chunk + 1:]))
    return bounds.flat_map(plain(chunk_lines)).unbatch().skip(skip_lines - first_lines[chunk])


def _split_chunk(text: tf.Tensor, start: tf.Tensor) -> tf.Tensor:
    """The lines of a chunk of whole lines, as TextLineDataset makes them: every "\\r" dropped, no
    line after a last "\\n", no line of a chunk of "\\r" alone; the file's byte-order mark dropped."""
    text = tf.strings.regex_replace(text, "\r", "")
    text = tf.where(tf.equal(start, 0), tf.strings.regex_replace(text, "^\ufeff", ""), text)
    lines = tf.strings.split(tf.strings.regex_replace(text, "\n$", ""), "\n")
    return lines[:tf.where(tf.equal(text, ""), 0, tf.size(lines))]


def _first(condition: tf.Tensor) -> tf.Tensor:
    """The index of the first True of a (N,) bool tensor, or -1."""
    indices = tf.where(condition)[:, 0]
    return tf.cond(tf.size(indices) > 0, lambda: indices[0], lambda: tf.constant(-1, tf.int64))


def _invalid_utf8(lines: tf.Tensor) -> tf.Tensor:
    """(N,) bool: the lines that are not valid UTF-8 (transcoding changes exactly those)."""
    return tf.not_equal(tf.strings.unicode_transcode(lines, "UTF-8", "UTF-8", errors="replace",
                                                     replacement_char=0xFFFD), lines)


def _line(path: PathLike, index: int) -> bytes:
    return next(iter(_lines(path).skip(index).take(1))).numpy()


def _raise_invalid_utf8(path: PathLike, index: int):
    raw = _line(path, index)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[max(0, error.start - 10):error.end + 10]
        raise CorpusFormatError(
            f"{path}:{index + 1}: invalid UTF-8 at byte {error.start} of the line "
            f"(bytes around it: {bad!r})") from None
    raise AssertionError(f"{path}:{index + 1} was found invalid by TensorFlow but decodes in Python")


def _batches_then_empty(lines: tf.data.Dataset) -> tf.data.Dataset:
    """Batches of lines, then empty batches forever: zipped, two of these read both files to the end."""
    return lines.batch(LINES_PER_BATCH).concatenate(
        tf.data.Dataset.from_tensors(tf.constant([], tf.string)).repeat())


def check_aligned_files(source_path: PathLike, target_path: PathLike) -> FileCounts:
    """Reads two aligned files once; raises CorpusFormatError on invalid UTF-8 or unequal lengths."""
    def batch_counts(source, target):
        common = tf.minimum(tf.size(source), tf.size(target))
        source_kept, target_kept = strip_whitespace(source[:common]), strip_whitespace(target[:common])
        empty = tf.logical_or(tf.equal(source_kept, ""), tf.equal(target_kept, ""))
        return (tf.size(source, tf.int64), tf.size(target, tf.int64), _first(_invalid_utf8(source)),
                _first(_invalid_utf8(target)), tf.math.count_nonzero(empty, dtype=tf.int64), _first(empty))

    batches = (tf.data.Dataset.zip(_batches_then_empty(_lines(source_path)),
                                   _batches_then_empty(_lines(target_path)))
               .take_while(plain(lambda source, target: tf.size(source) + tf.size(target) > 0)))
    num_sources = num_targets = num_common = skipped = 0
    first_bad_target = first_skipped = None
    skipped_before_blocks = []
    for source_size, target_size, bad_source, bad_target, empty, first_empty in (
            batches.map(plain(batch_counts), num_parallel_calls=tf.data.AUTOTUNE).prefetch(2).as_numpy_iterator()):
        if bad_source >= 0:  # the source file's errors come first, as if it were read first
            _raise_invalid_utf8(source_path, num_sources + int(bad_source))
        if bad_target >= 0 and first_bad_target is None:
            first_bad_target = num_targets + int(bad_target)
        if first_empty >= 0 and first_skipped is None:
            first_skipped = num_common + int(first_empty) + 1
        skipped_before_blocks.append(skipped)
        num_common += int(min(source_size, target_size))
        num_sources, num_targets = num_sources + int(source_size), num_targets + int(target_size)
        skipped += int(empty)
    if first_bad_target is not None:
        _raise_invalid_utf8(target_path, first_bad_target)
    if num_sources != num_targets:
        (shorter_count, shorter), (_, longer) = sorted([(num_sources, source_path), (num_targets, target_path)],
                                                      key=lambda item: item[0])
        raise CorpusFormatError(
            f"{source_path} has {num_sources} lines but {target_path} has {num_targets}: "
            f"aligned files must have the same number of lines; line {shorter_count + 1} of "
            f"{longer} has no counterpart in {shorter}")
    return _counts(num_common, skipped, first_skipped, skipped_before_blocks)


def _counts(num_lines, skipped, first_skipped, skipped_before_blocks) -> FileCounts:
    if not skipped:
        return FileCounts(num_pairs=num_lines, num_skipped_empty=0)
    return FileCounts(num_pairs=num_lines - skipped, num_skipped_empty=skipped, first_skipped_line=first_skipped,
                      block_lines=LINES_PER_BATCH, skipped_before_blocks=skipped_before_blocks)


def _tsv_fields(lines: tf.Tensor, columns: Optional[Sequence[int]]):
    """(N,) lines -> (N,) source, (N,) target (both "" on a blank line), and (N,) bool: has the
    expected fields (blank lines do)."""
    blank = tf.equal(strip_whitespace(lines), "")
    fields = tf.strings.split(lines, "\t")  # (N, None)
    num_fields = fields.row_lengths()
    width = 2 if columns is None else max(columns) + 1
    well_formed = tf.equal(num_fields, 2) if columns is None else num_fields >= width
    table = fields.to_tensor(default_value="", shape=[None, width])  # (N, width)
    source_column, target_column = (0, 1) if columns is None else columns
    source = tf.where(blank, "", table[:, source_column])
    target = tf.where(blank, "", table[:, target_column])
    return source, target, tf.logical_or(blank, well_formed)


def _raise_bad_tsv_line(path: PathLike, index: int, columns: Optional[Sequence[int]]):
    line = _line(path, index).decode("utf-8")
    fields = line.split("\t")
    if columns is None:
        raise CorpusFormatError(
            f"{path}:{index + 1}: expected exactly one tab (source TAB target), found "
            f"{len(fields) - 1}: {line!r}. Pass columns=(i, j) to pick two columns of a "
            f"file with more fields.")
    raise CorpusFormatError(
        f"{path}:{index + 1}: expected at least {max(columns) + 1} tab-separated fields "
        f"(columns {tuple(columns)}), found {len(fields)}: {line!r}")


def check_tsv(path: PathLike, columns: Optional[Sequence[int]] = None) -> FileCounts:
    """Reads a TSV file once; raises CorpusFormatError on invalid UTF-8 (first) or a line without the
    expected fields: exactly two (columns None), or at least max(columns) + 1."""
    def batch_counts(lines):
        source, target, well_formed = _tsv_fields(lines, columns)
        empty = tf.logical_or(tf.equal(strip_whitespace(source), ""), tf.equal(strip_whitespace(target), ""))
        return (tf.size(lines, tf.int64), _first(_invalid_utf8(lines)), _first(tf.logical_not(well_formed)),
                tf.math.count_nonzero(empty, dtype=tf.int64), _first(empty))

    num_lines = skipped = 0
    first_malformed = first_skipped = None
    skipped_before_blocks = []
    for size, bad, malformed, empty, first_empty in (_lines(path).batch(LINES_PER_BATCH)
                                        .map(plain(batch_counts), num_parallel_calls=tf.data.AUTOTUNE)
                                        .prefetch(2).as_numpy_iterator()):
        if bad >= 0:
            _raise_invalid_utf8(path, num_lines + int(bad))
        if malformed >= 0 and first_malformed is None:
            first_malformed = num_lines + int(malformed)
        if first_empty >= 0 and first_skipped is None:
            first_skipped = num_lines + int(first_empty) + 1
        skipped_before_blocks.append(skipped)
        num_lines, skipped = num_lines + int(size), skipped + int(empty)
    if first_malformed is not None:
        _raise_bad_tsv_line(path, first_malformed, columns)
    return _counts(num_lines, skipped, first_skipped, skipped_before_blocks)


def _kept(source: tf.Tensor, target: tf.Tensor):
    """(N,) source and target lines -> (M,) stripped sources and targets: the pairs with no empty side."""
    source, target = strip_whitespace(source), strip_whitespace(target)
    keep = tf.logical_and(tf.not_equal(source, ""), tf.not_equal(target, ""))
    return tf.boolean_mask(source, keep), tf.boolean_mask(target, keep)


def aligned_pairs(source_path: PathLike, target_path: PathLike, skip_lines=0) -> tf.data.Dataset:
    """The kept (source, target) pairs of two aligned files, after their first `skip_lines` lines
    (not read: the files are read from their line index's chunk that holds that line); check them
    first (check_aligned_files)."""
    lines = tf.data.Dataset.zip(_lines(source_path, skip_lines), _lines(target_path, skip_lines))
    return (lines.batch(LINES_PER_BATCH).map(plain(_kept), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .unbatch())


def tsv_pairs(path: PathLike, columns: Optional[Sequence[int]] = None, skip_lines=0) -> tf.data.Dataset:
    """The kept (source, target) pairs of a TSV file, after its first `skip_lines` lines (read
    from its line index's chunk that holds that line); check it first (check_tsv)."""
    def kept(lines):
        source, target, _ = _tsv_fields(lines, columns)
        return _kept(source, target)

    return (_lines(path, skip_lines).batch(LINES_PER_BATCH)
            .map(plain(kept), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch())


def iterate_pairs(pairs: tf.data.Dataset):
    """Yields the (source, target) Python str pairs of a dataset of scalar tf.string pairs."""
    for sources, targets in pairs.batch(LINES_PER_BATCH).prefetch(1).as_numpy_iterator():
        for source, target in zip(sources, targets):
            yield source.decode("utf-8"), target.decode("utf-8")


def holdout_indices(num_pairs: int, num_validation: int, num_test: int, seed: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The sorted indices of the held-out validation and test pairs among num_pairs.

    The permutation is random.Random(seed).shuffle of range(num_pairs), held in an int64 array
    (8 bytes a pair), so the same seed holds out the same pairs as before streaming.
    """
    import random

    order = np.arange(num_pairs, dtype=np.int64)
    random.Random(seed).shuffle(order)
    return (np.sort(order[:num_validation]),
            np.sort(order[num_validation:num_validation + num_test]))


def _check_cache_directory() -> Optional[pathlib.Path]:
    configured = os.environ.get(CHECK_CACHE_ENV, "")
    if configured.lower() == "none":
        return None
    if configured:
        return pathlib.Path(configured).expanduser()
    return pathlib.Path.home() / ".cache" / "keras_transformer" / "corpus_checks"


def _file_key(paths: Sequence[PathLike], options) -> dict:
    """What a remembered result is for: each file's absolute path, size and modification time, and options."""
    files = []
    for path in paths:
        path = pathlib.Path(path).resolve()
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path}")
        status = path.stat()
        files.append([str(path), status.st_size, status.st_mtime_ns])
    return json.loads(json.dumps({"files": files, "options": options}))  # as it reads back (lists, not tuples)


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def _remembered(key: dict, compute: Callable[[], dict], what: str, paths: Sequence[PathLike]) -> dict:
    """compute()'s JSON-able result for `key`, read from the check cache if it holds one, else computed
    and remembered there. A computation that raises is never remembered."""
    directory = _check_cache_directory()
    record_path = None
    if directory is not None:
        record_path = directory / f"{_digest(key)}.json"
        try:
            record = json.loads(record_path.read_text())
            if record["key"] == key:
                logger.info("%s: %s made before (%s)", ", ".join(str(path) for path in paths), what, record_path)
                return record["value"]
        except (OSError, ValueError, KeyError, TypeError):
            pass
    value = compute()
    if record_path is not None:
        try:
            record_path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomically(record_path, json.dumps({"key": key, "value": value}))
        except OSError as error:  # a read-only home only costs the next run the work again
            logger.warning("could not remember the %s of %s: %s", what, paths, error)
    return value


# Part of a remembered check's key: raised when FileCounts changes, so that older results are made again.
CHECK_FORMAT = 3


def remembered_check(paths: Sequence[PathLike], options, check: Callable[[], FileCounts]) -> FileCounts:
    """`check()`'s result for these files, read from the check cache if it holds one for the files as
    they are now (same absolute paths, sizes and modification times, same options); else checks and
    remembers the result. A check that raises is never remembered."""
    key = _file_key(paths, {"options": options, "format": CHECK_FORMAT})
    counts = _remembered(key, lambda: dataclasses.asdict(check()), "check", paths)
    return FileCounts(**counts)
