"""Records written whole or not at all, and line files that stay aligned with their references."""
import pathlib

import pytest

from keras_transformer.files import lines_text, split_lines, write_lines, write_text_atomically


def test_text_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "record.json"
    assert write_text_atomically(path, "old\n") == path
    write_text_atomically(str(path), "new, über\n")
    assert path.read_text(encoding="utf-8") == "new, über\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_write_that_fails_half_way_keeps_the_previous_file(tmp_path):
    path = tmp_path / "record.json"
    write_text_atomically(path, "previous\n")
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate fails in the middle of encoding
        write_text_atomically(path, "a" * 100_000 + "\ud800")
    assert path.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_lines_are_one_per_item(tmp_path):
    path = tmp_path / "hypotheses.de"
    write_lines(path, (line for line in ["Ein Hund.", "", "Zwei Katzen ."]))
    assert path.read_bytes() == "Ein Hund.\n\nZwei Katzen .\n".encode("utf-8")
    write_lines(path, [])
    assert path.read_bytes() == b""


def test_lines_are_split_as_the_training_corpora_read_them():
    """At "\n" only, every "\r" dropped, as tf.data.TextLineDataset reads a file (bytes.splitlines()
    would also split at the lone "\r", one line more than the file has)."""
    data = b"eins\r\nzw\rei\n\ndrei"
    assert split_lines(data) == [b"eins", b"zwei", b"", b"drei"]
    assert split_lines(data + b"\n") == split_lines(data)
    assert split_lines(b"") == [] and split_lines(b"\n") == [b""]
    assert split_lines("\ufeffeins\nzwei".encode()) == [b"eins", b"zwei"]  # a byte-order mark
    assert len(data.splitlines()) == 5  # what the pipelines read before


def test_a_line_break_inside_an_item_becomes_a_space_and_is_reported(tmp_path, caplog):
    path = tmp_path / "hypotheses.de"
    with caplog.at_level("WARNING"):
        write_lines(path, ["eins", "zwei\nZeilen", "Wagen\r\nRücklauf\r", "vier"])
    assert path.read_text(encoding="utf-8") == "eins\nzwei Zeilen\nWagen Rücklauf \nvier\n"
    assert "hypotheses.de: 2 line(s) held a line break" in caplog.text and "(the first: line 2)" in caplog.text
    assert lines_text(["a", "b"]) == "a\nb\n"


def test_a_symlink_or_a_device_is_written_through(tmp_path):
    """--output /dev/stdout, a pipe or a link: replacing it would replace the link or the device."""
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    write_lines(link, ["neu"])
    assert link.is_symlink() and target.read_text() == "neu\n"
    write_lines("/dev/null", ["nichts"])
    assert pathlib.Path("/dev/null").is_char_device()
