"""Files written whole or not at all.

A run killed while it writes a record (configs, the choice of best checkpoints, an export's record,
translations) must leave the previous file or the new one, never half of one: the text goes to a
temporary file beside the target, which then replaces it (os.replace, atomic within one file system).
"""
import os
import pathlib
from typing import Iterable, Union

PathLike = Union[str, os.PathLike]


def write_text_atomically(path: PathLike, text: str, encoding: str = "utf-8") -> pathlib.Path:
    """Writes text to path through a temporary file named for this process (several processes may
    write the same record), which then replaces path. Returns path."""
    path = pathlib.Path(path)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding=encoding)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def write_lines(path: PathLike, lines: Iterable[str]) -> pathlib.Path:
    """Writes one line per item, UTF-8, each ended by a newline (translations, trees): line i of
    the file is item i, as scorers read it against line i of the references. An item that holds a
    line break would shift every line after it, so it is refused, naming its 1-based line."""
    lines = list(lines)
    for number, line in enumerate(lines, start=1):
        if "\n" in line or "\r" in line:
            raise ValueError(f"{path}: line {number} would hold a line break: {line!r}")
    return write_text_atomically(path, "".join(line + "\n" for line in lines))
