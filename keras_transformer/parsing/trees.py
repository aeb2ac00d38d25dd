"""Constituency trees in PTB bracket format: reading one tree, writing it, and the preprocessing of
the parsing literature.

    tree = parse_tree("( (S (NP-SBJ-1 (PRP I)) (VP (VBD saw) (NP (-NONE- *T*-1)))))")
    preprocess(tree).to_string()   # "(S (NP (PRP I)) (VP (VBD saw)))"

A `Tree` is a preterminal (a part-of-speech tag over one word: `word` is set, no children) or a
constituent (a label over one or more children). The unlabeled outer bracket of WSJ .mrg files reads
as a constituent with the label "".
"""
import dataclasses
import re
from typing import Iterator, Optional

ROOT_LABELS = ("", "ROOT", "TOP")
EMPTY_ELEMENT_TAG = "-NONE-"

_TOKEN = re.compile(r"\(|\)|[^\s()]+")


class TreeFormatError(ValueError):
    """A bracketed tree cannot be read; the message says what is wrong."""


@dataclasses.dataclass
class Tree:
    """A constituent `label` over `children`, or a preterminal: the tag `label` over `word`."""

    label: str
    children: list = dataclasses.field(default_factory=list)
    word: Optional[str] = None

    @property
    def is_preterminal(self) -> bool:
        return self.word is not None

    def preterminals(self) -> Iterator["Tree"]:
        """The preterminals, left to right."""
        if self.is_preterminal:
            yield self
            return
        for child in self.children:
            yield from child.preterminals()

    def words(self) -> list[str]:
        return [leaf.word for leaf in self.preterminals()]

    def tags(self) -> list[str]:
        return [leaf.label for leaf in self.preterminals()]

    def to_string(self) -> str:
        """One line of PTB brackets: "(S (NP (PRP I)) (VP (VBD saw)))"."""
        if self.is_preterminal:
            return f"({self.label} {escape_word(self.word)})"
        inner = " ".join(child.to_string() for child in self.children)
        return f"({self.label} {inner})" if self.label else f"( {inner})"

    def __str__(self):
        return self.to_string()


def escape_word(word: str) -> str:
    """Brackets in a word as the PTB writes them (they would break the bracket format)."""
    return word.replace("(", "-LRB-").replace(")", "-RRB-")


def tokenize_brackets(text: str) -> list[str]:
    return _TOKEN.findall(text)


def tree_from_tokens(tokens: list[str]) -> Tree:
    """The tree of bracket tokens ("(", ")", labels and words) holding exactly one tree.

    Raises TreeFormatError saying what is wrong: unbalanced brackets, a word outside brackets, a
    bracket with no words, several trees.
    """
    if not tokens:
        raise TreeFormatError("no tree (empty text)")
    if tokens[0] != "(":
        raise TreeFormatError(f"a tree starts with '(', not {tokens[0]!r}")
    stack, root, position = [], None, 0
    while position < len(tokens):
        token = tokens[position]
        if root is not None:
            raise TreeFormatError(f"text after the end of the tree: {' '.join(tokens[position:position + 5])!r}")
        if token == "(":
            label = ""
            if position + 1 < len(tokens) and tokens[position + 1] not in "()":
                label = tokens[position + 1]
                position += 1
            if (position + 2 < len(tokens) and tokens[position + 1] not in "()"
                    and tokens[position + 2] == ")"):  # a preterminal: (TAG word)
                node = Tree(label, word=tokens[position + 1])
                position += 3
                _attach(stack, node)
                if not stack:
                    root = node
                continue
            if position + 1 < len(tokens) and tokens[position + 1] not in "()":
                raise TreeFormatError(f"the bracket of {label!r} holds several words or words beside brackets: "
                                      f"{' '.join(tokens[position + 1:position + 4])!r}")
            stack.append(Tree(label))
        elif token == ")":
            if not stack:
                raise TreeFormatError("unbalanced brackets: a ')' closes no bracket")
            node = stack.pop()
            if not node.children:
                raise TreeFormatError(f"the bracket of {node.label!r} holds no words")
            _attach(stack, node)
            if not stack:
                root = node
        else:
            raise TreeFormatError(f"the word {token!r} is outside any (TAG word) bracket")
        position += 1
    if stack:
        raise TreeFormatError(f"unbalanced brackets: {len(stack)} '(' never closed")
    return root


def _attach(stack, node):
    if stack:
        stack[-1].children.append(node)


def parse_tree(text: str) -> Tree:
    """The tree written in `text` (PTB brackets, one tree, possibly over several lines)."""
    return tree_from_tokens(tokenize_brackets(text))


def strip_function_tags(label: str) -> str:
    """NP-SBJ-1 -> NP, NP=2 -> NP; labels that start with '-' (-NONE-, -LRB-) stay whole."""
    if label.startswith("-"):
        return label
    return re.split(r"[-=]", label, maxsplit=1)[0] or label


def _without_empty_elements(tree: Tree) -> Optional[Tree]:
    if tree.is_preterminal:
        return None if tree.label == EMPTY_ELEMENT_TAG else tree
    children = [kept for kept in map(_without_empty_elements, tree.children) if kept is not None]
    return Tree(strip_function_tags(tree.label), children) if children else None


def preprocess(tree: Tree) -> Optional[Tree]:
    """The tree as the parsing literature trains and scores on it (None if nothing is left).

    Empty elements (-NONE-) and the constituents they leave empty are dropped, function tags and
    indices are stripped from constituent labels (NP-SBJ-1 -> NP), and the root wrapper (the
    unlabeled bracket of WSJ .mrg files, ROOT, TOP) over a single constituent is removed.
    Part-of-speech tags are kept as they are.
    """
    tree = _without_empty_elements(tree)
    while tree is not None and not tree.is_preterminal and tree.label in ROOT_LABELS and len(tree.children) == 1:
        tree = tree.children[0]
    return tree
