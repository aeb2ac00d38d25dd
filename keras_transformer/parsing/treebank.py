"""Reading treebanks in PTB bracket format, streamed tree by tree.

    for tree in read_treebank(["wsj/02", "wsj/03"]):        # directories, files, or a mix
        ...

Any layout reads: one tree per line (GUM, most parser outputs), trees over several lines (the WSJ's
.mrg files, with their unlabeled outer bracket), several trees on one line. A directory reads every
file under it (recursively, in sorted order) except hidden ones and README / LICENSE / checksum
files. Trees come preprocessed (see trees.preprocess) unless asked otherwise.

A malformed file raises TreebankFormatError naming the file, the 1-based line where the tree
starts and what is wrong, at the first bad tree.
"""
import os
import pathlib
from typing import Callable, Iterable, Iterator, Optional, Union

from keras_transformer.parsing.trees import Tree, TreeFormatError, preprocess, tokenize_brackets, tree_from_tokens

PathLike = Union[str, os.PathLike]
_SKIPPED_NAMES = ("readme", "license", "sha256sums", "md5sums", "copying")


class TreebankFormatError(ValueError):
    """A treebank file is malformed: "<file>:<line>: <what is wrong>"."""


def treebank_files(paths: Union[PathLike, Iterable[PathLike]]) -> list[pathlib.Path]:
    """The files of `paths` (files, or directories read recursively), in the given order."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = []
    for path in map(pathlib.Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and not _skipped(p, path))
            if not found:
                raise FileNotFoundError(f"no treebank files in directory {path}")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"treebank file or directory not found: {path}")
    return files


def _skipped(path: pathlib.Path, root: pathlib.Path) -> bool:
    parts = path.relative_to(root).parts
    return any(part.startswith(".") for part in parts) or path.stem.lower() in _SKIPPED_NAMES


def _lines(path: pathlib.Path) -> Iterator[tuple[int, str]]:
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                # A byte-order mark (files saved on Windows) is no text outside a tree.
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise TreebankFormatError(f"{path}:{number}: invalid UTF-8 at byte {error.start} of the line") from None


def read_raw_trees(path: PathLike) -> Iterator[tuple[int, Tree]]:
    """(1-based line where the tree starts, tree as written) for each tree of one file."""
    path = pathlib.Path(path)
    tokens, depth, start_line = [], 0, None
    for number, line in _lines(path):
        for token in tokenize_brackets(line):
            if depth == 0 and token != "(":
                raise TreebankFormatError(f"{path}:{number}: text outside any tree: {token!r} (expected '(')")
            if not tokens:
                start_line = number
            tokens.append(token)
            depth += {"(": 1, ")": -1}.get(token, 0)
            if depth == 0:
                yield start_line, _tree(tokens, path, start_line)
                tokens = []
    if tokens:
        raise TreebankFormatError(f"{path}:{start_line}: unbalanced brackets: the tree starting here has "
                                  f"{depth} '(' never closed at the end of the file")


def _tree(tokens, path, line) -> Tree:
    try:
        return tree_from_tokens(tokens)
    except TreeFormatError as error:
        raise TreebankFormatError(f"{path}:{line}: {error}") from None


def read_treebank(paths: Union[PathLike, Iterable[PathLike]], raw: bool = False,
                  check: Optional[Callable[[Tree], object]] = None) -> Iterator[Tree]:
    """The trees of `paths` (files or directories), preprocessed unless raw=True.

    A tree with no words left after preprocessing (only empty elements) is an error too. check, if
    given, is called with each tree; the ValueError it raises is raised again naming the file and line.
    """
    for path in treebank_files(paths):
        for line, tree in read_raw_trees(path):
            if not raw:
                tree = preprocess(tree)
                if tree is None:
                    raise TreebankFormatError(f"{path}:{line}: the tree has no words (only empty elements)")
            if check is not None:
                try:
                    check(tree)
                except ValueError as error:
                    raise TreebankFormatError(f"{path}:{line}: {error}") from None
            yield tree
