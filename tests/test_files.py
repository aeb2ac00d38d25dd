"""Records written whole or not at all, and line files that stay aligned with their references."""
import pytest

from keras_transformer.files import write_lines, write_text_atomically


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


def test_lines_are_one_per_item_and_a_line_break_inside_one_is_refused_by_its_line(tmp_path):
    path = tmp_path / "hypotheses.de"
    write_lines(path, (line for line in ["Ein Hund.", "", "Zwei Katzen ."]))
    assert path.read_bytes() == "Ein Hund.\n\nZwei Katzen .\n".encode("utf-8")
    write_lines(path, [])
    assert path.read_bytes() == b""
    write_lines(path, ["alt"])
    for bad in ("zwei\nZeilen", "Wagen\rRücklauf"):
        with pytest.raises(ValueError, match=r"hypotheses.de: line 2 would hold a line break: "):
            write_lines(path, ["eins", bad, "drei"])
        assert path.read_bytes() == b"alt\n"  # the previous file, untouched
