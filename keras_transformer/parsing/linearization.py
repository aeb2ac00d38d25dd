"""Trees as token sequences (after Vinyals, Kaiser et al., 2015, "Grammar as a Foreign Language", with
the words kept), and back, with a repair that always gives a tree over exactly the input words.

A tree is written depth first: "(LABEL" opens a constituent, ")" closes it, and each word is
written after its part-of-speech tag, so the model predicts tags too (EVALB deletes punctuation by
its tag, so an answer needs real tags):

    (S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))
    ->  (S (NP PRP I ) (VP VBD saw (NP DT a NN dog ) ) . . )

Closing brackets carry no label (the opening one says it). The words are the sentence's own: the
parser copies them from its input (parsing.parser), so that the decoder sees the words it has
tagged so far; without them, a decoder that writes only tags loses count of the words (README,
"Parsing": on GUM, most answers of such a parser put tags under the wrong words). The tree tokens
alone (the sequence without its words) are the "skeleton" that `repair` reads. Rebuilding puts the
sentence's words, in order, under the tags; `rebuild` insists on a well-formed sequence over
those words, `repair` makes a tree out of any skeleton (see its docstring for what it fixes).
"""
import dataclasses
from typing import Sequence

from keras_transformer.parsing.trees import Tree, TreeFormatError

CLOSE = ")"
REPAIR_ROOT_LABEL = "S"
# Tags for words the model left out, by the PTB's conventions for punctuation; other words get NN.
PUNCTUATION_TAGS = {".": ".", "?": ".", "!": ".", ",": ",", ":": ":", ";": ":", "--": ":", "-": ":",
                    "...": ":", "``": "``", "''": "''", "\"": "''", "-LRB-": "-LRB-", "-RRB-": "-RRB-",
                    "(": "-LRB-", ")": "-RRB-", "$": "$", "#": "#"}
DEFAULT_TAG = "NN"


def is_open(token: str) -> bool:
    return token.startswith("(")


def is_tag(token: str) -> bool:
    return token != CLOSE and not is_open(token)


def _check_label(label: str, what: str):
    if not label or any(c.isspace() or c in "()" for c in label):
        raise ValueError(f"cannot linearize the {what} {label!r}: labels need at least one character and no "
                         f"spaces or brackets")


def linearize_tokens(tree: Tree, words: bool = True) -> list[str]:
    """The tokens of the module docstring's sequence (words=False: its skeleton, without the words)."""
    if tree.is_preterminal:
        _check_label(tree.label, "part-of-speech tag")
        return [tree.label, tree.word] if words else [tree.label]
    _check_label(tree.label, "constituent label")
    tokens = ["(" + tree.label]
    for child in tree.children:
        tokens.extend(linearize_tokens(child, words))
    tokens.append(CLOSE)
    return tokens


def linearize(tree: Tree) -> str:
    return " ".join(linearize_tokens(tree))


def split_words(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """(skeleton, words) of a linearized sequence's tokens: the token after each tag is its word."""
    skeleton, words, tag_before = [], [], False
    for token in tokens:
        if tag_before:
            words.append(token)
            tag_before = False
        else:
            skeleton.append(token)
            tag_before = is_tag(token)
    if tag_before:
        raise TreeFormatError(f"the last tag, {skeleton[-1]!r}, has no word after it")
    return skeleton, words


def rebuild(sequence: str, words: Sequence[str]) -> Tree:
    """The tree of a well-formed sequence over `words`; TreeFormatError when it is not one."""
    skeleton, sequence_words = split_words(sequence.split())
    if sequence_words != list(words):
        raise TreeFormatError(f"the sequence's words are not the sentence's: {' '.join(sequence_words)!r} "
                              f"against {' '.join(words)!r}")
    tree, repairs = repair(" ".join(skeleton), words)
    if repairs:
        raise TreeFormatError(f"not a tree over the {len(words)} words: {', '.join(repairs.describe())}")
    return tree


@dataclasses.dataclass
class Repairs:
    """What `repair` had to fix in one sequence (all zero / False: it was a tree already)."""

    extra_tags: int = 0  # more tags than words: dropped
    missing_words: int = 0  # fewer tags than words: the rest added under the root
    unmatched_closes: int = 0  # a ")" with nothing open: dropped
    unclosed: int = 0  # "(" never closed: closed at the end
    empty_constituents: int = 0  # "(X )" with no words: dropped
    extra_roots: int = 0  # several top-level constituents: put under one root
    other_words: bool = False  # a tree, but over other words than the sentence's (parsing.task)
    empty: bool = False  # nothing usable at all

    def __bool__(self):
        return any(dataclasses.astuple(self))

    def describe(self) -> list[str]:
        return [f"{name} {value}" for name, value in dataclasses.asdict(self).items() if value]


def guess_tag(word: str) -> str:
    return PUNCTUATION_TAGS.get(word, DEFAULT_TAG)


def repair(sequence: str, words: Sequence[str], root_label: str = REPAIR_ROOT_LABEL) -> tuple[Tree, Repairs]:
    """(a tree over exactly `words`, in order, what had to be fixed) for any skeleton (a sequence of
    tree tokens without words, `linearize_tokens(tree, words=False)`).

    Tags beyond the last word are dropped; words left without a tag are added at the end of the
    root with a guessed tag (`guess_tag`); a ")" that closes nothing is dropped, brackets still open
    at the end are closed, constituents without words are dropped; several top-level trees (or
    words) are put under one `root_label` constituent. An empty or unusable sequence gives
    (root_label words...). `words` must not be empty.
    """
    if not words:
        raise ValueError("repair needs at least one word")
    repairs = Repairs()
    top, stack, next_word = [], [], 0

    def attach(node):
        (stack[-1].children if stack else top).append(node)

    def close():
        node = stack.pop()
        if node.children:
            attach(node)
        else:
            repairs.empty_constituents += 1

    for token in sequence.split():
        if is_open(token):
            label = token[1:]
            if label:
                stack.append(Tree(label))
            else:
                repairs.empty_constituents += 1  # "(" alone: no label to give it
        elif token == CLOSE:
            if stack:
                close()
            else:
                repairs.unmatched_closes += 1
        elif next_word < len(words):
            attach(Tree(token, word=words[next_word]))
            next_word += 1
        else:
            repairs.extra_tags += 1
    repairs.unclosed = len(stack)
    while stack:
        close()
    if next_word < len(words):
        repairs.missing_words = len(words) - next_word
        if len(top) == 1 and not top[0].is_preterminal:
            container = top[0].children
        else:
            container = top
        container.extend(Tree(guess_tag(word), word=word) for word in words[next_word:])
    if not sequence.split() or next_word == 0:
        repairs.empty = True
    if len(top) == 1 and not (repairs.empty and top[0].is_preterminal):
        return top[0], repairs
    repairs.extra_roots = len(top) - 1  # 0 for the one guessed word of an empty sequence
    return Tree(root_label, top), repairs
