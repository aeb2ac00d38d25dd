"""Streamed local files: checks past the first batch of lines, Python's whitespace, flat graphs."""
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import text_files
from keras_transformer.data.corpora import CorpusFormatError, LocalParallelCorpus
from tests.data.conftest import write_text

LINES = text_files.LINES_PER_BATCH


def test_strip_whitespace_strips_what_python_strips():
    spaces = "\t\n\x0b\x0c\r\x1c\x1f \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
    texts = [f"{spaces}a b{spaces}", "\u200bzero width is not a space\u200b", "\ufeffbom", "", spaces, "x"]
    stripped = text_files.strip_whitespace(tf.constant(texts)).numpy()
    assert [text.decode("utf-8") for text in stripped] == [text.strip() for text in texts]


def test_lengths_differing_after_a_batch_boundary_are_reported_once_with_both_counts(tmp_path):
    source = write_text(tmp_path / "train.en", [f"s{i}" for i in range(LINES + 1)])
    target = write_text(tmp_path / "train.de", [f"t{i}" for i in range(LINES)])
    with pytest.raises(CorpusFormatError) as error:
        LocalParallelCorpus({"train": (source, target)}).num_pairs("train")
    message = str(error.value)
    assert message == (f"{source} has {LINES + 1} lines but {target} has {LINES}: aligned files must have "
                       f"the same number of lines; line {LINES + 1} of {source} has no counterpart in {target}")
    with pytest.raises(CorpusFormatError, match=f"{target} has {LINES} lines but {source} has {LINES + 1}"):
        LocalParallelCorpus({"train": (target, source)}).num_pairs("train")


def test_errors_past_the_first_batch_name_the_right_line(tmp_path):
    good = [f"line {i}" for i in range(LINES + 10)]
    source = write_text(tmp_path / "a.en", "".join(line + "\n" for line in good).encode() + b"caf\xe9\n")
    target = write_text(tmp_path / "a.de", good + ["ok"])
    with pytest.raises(CorpusFormatError, match=rf"{source}:{LINES + 11}: invalid UTF-8 at byte 3 .*caf\\xe9"):
        LocalParallelCorpus({"train": (source, target)}).num_pairs("train")
    # Both files bad: the source file's error is reported, although the target's comes earlier.
    bad_target = write_text(tmp_path / "b.de", b"\xff\n" + "".join(line + "\n" for line in good).encode())
    with pytest.raises(CorpusFormatError, match=rf"{source}:{LINES + 11}:"):
        LocalParallelCorpus({"train": (source, bad_target)}).num_pairs("train")
    tsv = write_text(tmp_path / "c.tsv", [f"{line}\t{line}" for line in good] + ["one\ttwo\tthree"])
    with pytest.raises(CorpusFormatError, match=rf"{tsv}:{LINES + 11}: expected exactly one tab .*found 2: "
                                                r"'one\\ttwo\\tthree'"):
        LocalParallelCorpus({"train": tsv}).num_pairs("train")


def test_streamed_pairs_match_python_reading_and_the_graph_holds_no_corpus(tmp_path):
    lines = [f" source {i} \u3000" if i % 7 else "" for i in range(3 * LINES)]
    source = write_text(tmp_path / "big.en", lines)
    target = write_text(tmp_path / "big.de", [f"Ziel {i}" for i in range(3 * LINES)])
    corpus = LocalParallelCorpus({"train": (source, target)}, reverse=True)
    expected = [(f"Ziel {i}", f"source {i}") for i in range(3 * LINES) if i % 7]
    assert corpus.num_pairs("train") == len(expected)
    assert corpus.skipped_empty == {"train": 3 * LINES - len(expected)}
    assert list(corpus.pairs("train")) == expected
    streamed = [(s.decode(), t.decode()) for s, t in corpus.dataset("train").as_numpy_iterator()]
    assert streamed == expected
    # The dataset's graph names the files; it holds none of their text (the files are 400 kB).
    graph = corpus.dataset("train")._as_serialized_graph().numpy()
    assert str(source).encode() in graph and b"source 1" not in graph and len(graph) < 50_000


def test_holdout_reads_the_same_pairs_streamed_and_in_python(tmp_path):
    tsv = write_text(tmp_path / "all.tsv", [f"s{i}\tt{i}" for i in range(LINES + 500)])
    corpus = LocalParallelCorpus({"train": tsv}, holdout=(300, 200), seed=1)
    for split, size in (("train", LINES), ("validation", 300), ("test", 200)):
        streamed = [(s.decode(), t.decode()) for s, t in corpus.dataset(split).as_numpy_iterator()]
        assert streamed == list(corpus.pairs(split)) and len(streamed) == corpus.num_pairs(split) == size
    assert max(int(s[1:]) for s, _ in corpus.pairs("test")) > LINES  # beyond the first batch of lines


def test_a_check_is_remembered_while_the_files_are_unchanged(tmp_path, monkeypatch):
    from keras_transformer.data import corpora

    source = write_text(tmp_path / "train.en", ["one", "", "three"])
    target = write_text(tmp_path / "train.de", ["eins", "zwei", "drei"])
    tsv = write_text(tmp_path / "test.tsv", ["a\tb\tc", "d\te\tf"])
    files = {"train": (source, target), "test": tsv}
    first = LocalParallelCorpus(files, tsv_columns=(0, 2))
    assert (first.num_pairs("train"), first.num_pairs("test"), first.skipped_empty) == (2, 2, {"train": 1, "test": 0})

    def no_check(*args):
        raise AssertionError("the files were read again")

    monkeypatch.setattr(corpora, "check_aligned_files", no_check)
    monkeypatch.setattr(corpora, "check_tsv", no_check)
    again = LocalParallelCorpus(files, tsv_columns=(0, 2))
    assert (again.num_pairs("train"), again.num_pairs("test"), again.skipped_empty) == (2, 2, {"train": 1, "test": 0})
    with pytest.raises(AssertionError, match="read again"):  # other columns: another check
        LocalParallelCorpus(files, tsv_columns=(0, 1)).num_pairs("test")
    monkeypatch.undo()
    before = target.stat()
    write_text(target, b"eins\nzwei\ndr\xe9i\n")  # changed: checked again, and found bad
    # The same size: only the modification time tells, so make sure it moved on any file system.
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    with pytest.raises(CorpusFormatError, match=rf"{target}:3: invalid UTF-8"):
        LocalParallelCorpus(files).num_pairs("train")


def test_a_byte_order_mark_that_starts_a_file_is_not_text(tmp_path):
    """As files.split_lines reads the test sets; before, the first training source kept U+FEFF."""
    source = write_text(tmp_path / "bom.en", "\ufeffhello\n\ufeffsecond\n".encode())
    target = write_text(tmp_path / "bom.de", "\ufeffhallo\nzweite\n".encode())
    tsv = write_text(tmp_path / "bom.tsv", "\ufeffhello\thallo\n".encode())
    only_bom = write_text(tmp_path / "only.en", "\ufeff\nthird\n".encode())
    third = write_text(tmp_path / "only.de", "dritte\ndritte\n".encode())
    corpus = LocalParallelCorpus({"train": [(source, target), tsv, (only_bom, third)]})
    # Only the file's first character goes: a U+FEFF that starts a later line is kept.
    assert list(corpus.pairs("train")) == [("hello", "hallo"), ("\ufeffsecond", "zweite"), ("hello", "hallo"),
                                           ("third", "dritte")]
    assert corpus.skipped_empty["train"] == 1
    # An invalid first line is still reported as it is.
    bad = write_text(tmp_path / "bad.en", b"\xef\xbb\xbfcaf\xe9\n")
    with pytest.raises(CorpusFormatError, match=rf"{bad}:1: invalid UTF-8"):
        LocalParallelCorpus({"train": (bad, third)}).num_pairs("train")


@pytest.mark.parametrize("chunk_bytes", [1, 9, 1 << 20])
def test_lines_from_any_line_are_the_files_tail_as_tensorflow_reads_it(tmp_path, monkeypatch, chunk_bytes):
    """Lines from line i on come from the line index's chunk that holds line i, not from a read of
    the lines before it; they are TextLineDataset's lines, with its "\\r" and last-line rules."""
    monkeypatch.setattr(text_files, "INDEX_CHUNK_BYTES", chunk_bytes)
    contents = {
        "plain": "".join(f"line {i} {'x' * (i % 13)}\n" for i in range(12)).encode(),
        "crlf_and_no_end": b"a\r\nb\rc\r\n\r\n\nlong " + b"y" * 100 + b"\nlast",
        "cr_after_the_end": b"one\ntwo\n\r\r",
        "bom": "\ufeffhello\n\ufeffkept\n".encode(),
        "empty_lines": b"\n\n\n",
        "only_cr": b"\r",
        "empty": b"",
        "unicode": "é\u2028x\nü\x85y\n".encode(),
    }
    for name, content in contents.items():
        path = tmp_path / f"{name}-{chunk_bytes}.txt"
        path.write_bytes(content)
        whole = list(text_files._lines(path).as_numpy_iterator())
        lines, offsets = text_files.line_index(path)
        assert lines[-1] == len(whole) and offsets[-1] == len(content), name
        assert (np.diff(offsets) > 0).all() or not content, name  # chunks of one line or more
        if chunk_bytes == 1:  # a chunk a line (and one of a last "\r" alone)
            assert len(offsets) - 1 >= len(whole), name
        for skip in range(len(whole) + 2):
            got = list(text_files._lines(path, tf.constant(skip, tf.int64)).as_numpy_iterator())
            assert got == whole[skip:], (name, skip)


def test_a_line_index_is_remembered_while_the_file_is_unchanged(tmp_path, monkeypatch):
    path = write_text(tmp_path / "train.en", [f"line {i}" for i in range(100)])
    monkeypatch.setattr(text_files, "INDEX_CHUNK_BYTES", 64)
    first = text_files.line_index(path)
    monkeypatch.setattr(text_files, "_line_indexes", {})  # another process: only the check cache has it

    def no_index(*args):
        raise AssertionError("the file was read again")

    monkeypatch.setattr(text_files, "_index_file", no_index)
    again = text_files.line_index(path)
    assert all((a == b).all() for a, b in zip(first, again)) and len(first[0]) > 10
    before = path.stat()
    write_text(path, [f"line {i}" for i in range(99)] + ["line x0"])  # the same size, another file
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))
    with pytest.raises(AssertionError, match="read again"):
        text_files.line_index(path)
