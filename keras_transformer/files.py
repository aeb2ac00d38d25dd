"""Files written whole or not at all, and lines of text read and written as the corpora have them.

A run killed while it writes a record (configs, the choice of best checkpoints, an export's record,
translations) must leave the previous file or the new one, never half of one: the text goes to a
temporary file beside the target, which then replaces it (os.replace, atomic within one file system).
"""
import logging
import os
import pathlib
from typing import Iterable, Union

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]


def write_bytes_atomically(path: PathLike, data: bytes) -> pathlib.Path:
    """Writes data to path through a temporary file named for this process (several processes may
    write the same record), which then replaces path. Returns path. A path that exists and is no
    regular file of its own (a symlink, /dev/stdout, a pipe such as bash's >(...)) is written
    through as it is: replacing it would replace the link or the device."""
    path = pathlib.Path(path)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        path.write_bytes(data)
        return path
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(data)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_text_atomically(path: PathLike, text: str, encoding: str = "utf-8") -> pathlib.Path:
    """Writes text to path as write_bytes_atomically writes bytes."""
    return write_bytes_atomically(path, text.encode(encoding))


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a text file's bytes as tf.data.TextLineDataset, the training corpora's reader,
    reads them: split at "\n" only, every "\r" dropped ("\r\n" files, and a "\r" inside a line,
    where bytes.splitlines() would split and make more lines than the file has), the newline after
    the last line optional. Unlike it, a UTF-8 byte-order mark at the start (files saved on Windows)
    is dropped."""
    lines = data.removeprefix(b"\xef\xbb\xbf").replace(b"\r", b"").split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines


def one_line(text: str) -> str:
    """text with each of its line breaks ("\r\n", "\r", "\n") made a space."""
    return text.replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def lines_text(lines: Iterable[str], path: PathLike = "output") -> str:
    """One line per item, each ended by a newline (translations, trees): line i is item i, as
    scorers read it against line i of the references. A line break inside an item (a model can
    write one) would shift every line after it: it becomes a space, and a warning says how many
    items had one and the first one's 1-based line."""
    kept, changed = [], []
    for number, line in enumerate(lines, start=1):
        kept.append(one_line(line))
        if kept[-1] != line:
            changed.append(number)
    if changed:
        logger.warning("%s: %d line(s) held a line break, written as a space to keep the lines aligned (the "
                       "first: line %d)", path, len(changed), changed[0])
    return "".join(line + "\n" for line in kept)


def write_lines(path: PathLike, lines: Iterable[str]) -> pathlib.Path:
    """Writes lines_text(lines) to path, UTF-8, whole or not at all."""
    return write_text_atomically(path, lines_text(lines, path))
