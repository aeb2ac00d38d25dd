"""Trees as one label per word, after Gómez-Rodríguez and Vilares (2018, "Constituent Parsing as
Sequence Labeling"), and back: a linearization whose length is fixed by the sentence.

Unary chains are collapsed first: a constituent whose only child is a constituent takes its child's
place, their labels joined by "+" ((S (VP ...)) -> (S+VP ...)). Then every constituent over two or
more words is the lowest common ancestor of some pair of neighbouring words, and the constituents
over one word (a chain over its tag, (NP (PRP I))) belong to that word. Word i gets:

    tag           its part-of-speech tag
    unary         the constituents over it alone ("NP", "S+NP"; "" when none)
    depth_change  a(i) - a(i - 1), where a(i) is the number of constituents over both word i and
                  word i + 1 (a(0) = 0); 0 for the last word
    lca           the label of the lowest of those constituents; "" for the last word

    (S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))
    ->  I: PRP, NP, +1, S    saw: VBD, -, +1, VP    a: DT, -, +1, NP    dog: NN, -, -2, S    .: ., -, 0, -

`decode` builds a tree over the words from any labels, well-formed or not: a(i) is the running sum
of the depth changes, kept at least 1; a span of words is split into its children where a(i) is
lowest within it, and that constituent takes the first of those pairs' labels (a well-formed
sequence gives the same label at each). So every answer is a tree over exactly the input words.
"""
import dataclasses
import re
from typing import Optional, Sequence

import tensorflow as tf

from keras_transformer.parsing.trees import Tree, TreeFormatError

CHAIN = "+"
UNARY_MARK = ">"  # "NP>PRP": a tag under the unary chain of its word
DEPTH_TOKEN = re.compile(r"^([+-]\d+)(\S+)$")  # "+1S": a depth change and a label
FALLBACK_LABEL = "S"  # a constituent whose pairs were given no label


@dataclasses.dataclass(frozen=True)
class WordLabel:
    tag: str
    unary: str = ""
    depth_change: int = 0
    lca: str = ""


def collapse_unaries(tree: Tree) -> Tree:
    """The tree with each chain of constituents that have a single constituent child made one
    constituent, its labels joined by "+" (outermost first)."""
    if tree.is_preterminal:
        return tree
    label, node = tree.label, tree
    while len(node.children) == 1 and not node.children[0].is_preterminal:
        node = node.children[0]
        label += CHAIN + node.label
    return Tree(label, [collapse_unaries(child) for child in node.children])


def _check(label: str, what: str):
    if not label or any(c.isspace() or c in "()" + CHAIN + UNARY_MARK for c in label):
        raise TreeFormatError(f"cannot label words with the {what} {label!r}: labels need at least one character "
                              f"and no spaces, brackets, {CHAIN!r} or {UNARY_MARK!r}")


def encode(tree: Tree) -> list[WordLabel]:
    """The labels of `tree`'s words, left to right (see the module docstring)."""
    paths, unaries, tags = [], [], []

    def check(node):  # before collapse_unaries joins labels with CHAIN
        _check(node.label, "part-of-speech tag" if node.is_preterminal else "constituent label")
        for child in node.children:
            check(child)

    def visit(node, path):
        if node.is_preterminal:
            paths.append(path)
            unaries.append("")
            tags.append(node.label)
            return
        if len(node.children) == 1:  # over one word only (collapsed: its child is a preterminal)
            visit(node.children[0], path)
            unaries[-1] = node.label
            return
        for child in node.children:
            visit(child, path + [node])

    check(tree)
    visit(collapse_unaries(tree), [])
    labels, previous = [], 0
    for i, tag in enumerate(tags):
        if i + 1 == len(tags):
            labels.append(WordLabel(tag, unaries[i]))
            break
        common = 0
        for mine, theirs in zip(paths[i], paths[i + 1]):
            if mine is not theirs:
                break
            common += 1
        labels.append(WordLabel(tag, unaries[i], common - previous, paths[i][common - 1].label))
        previous = common
    return labels


def chain_tree(labels: str, children: list) -> Tree:
    """Nested constituents for a "+"-joined chain of labels over `children`."""
    node = None
    for label in reversed(labels.split(CHAIN)):
        node = Tree(label, children if node is None else [node])
    return node


def _leaf(word: str, label: WordLabel) -> Tree:
    leaf = Tree(label.tag, word=word)
    return chain_tree(label.unary, [leaf]) if label.unary else leaf


def common_ancestor_counts(labels: Sequence[WordLabel]) -> list[int]:
    """a(1) ... a(n - 1): the running sum of the depth changes, kept at least 1."""
    counts, running = [], 0
    for label in labels[:-1]:
        running = max(1, running + label.depth_change)
        counts.append(running)
    return counts


def decode(words: Sequence[str], labels: Sequence[WordLabel]) -> Tree:
    """A tree over exactly `words` from one label per word (any labels; see the module docstring)."""
    if not words or len(words) != len(labels):
        raise ValueError(f"decode needs one label per word and at least one word: {len(words)} words, "
                         f"{len(labels)} labels")
    counts = common_ancestor_counts(labels)

    def span(first: int, last: int, label: Optional[str] = None) -> Tree:
        """The constituent over words first..last (first < last)."""
        lowest = min(counts[first:last])
        splits = [k for k in range(first, last) if counts[k] == lowest]
        children, start = [], first
        for k in splits + [last]:
            children.append(_leaf(words[start], labels[start]) if start == k else span(start, k))
            start = k + 1
        return chain_tree(labels[splits[0]].lca or FALLBACK_LABEL, children)

    return _leaf(words[0], labels[0]) if len(words) == 1 else span(0, len(words) - 1)


def tag_token(label: WordLabel) -> str:
    """The tag with the word's unary chain: "NP>PRP", or "PRP" without one."""
    return f"{label.unary}{UNARY_MARK}{label.tag}" if label.unary else label.tag


def depth_token(label: WordLabel) -> str:
    """The depth change with the common ancestor's label: "+1S", "-2NP"."""
    return f"{label.depth_change:+d}{label.lca}"


def linearize_by_word(tree: Tree, word_first: bool = False) -> str:
    """The sequence the parser is trained on: word by word, its tag token, the word, and (but for
    the last word) its depth token:

        (S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))
        ->  NP>PRP I +1S VBD saw +1VP DT a +1NP NN dog -2S . .

    word_first: each word before its tag token (`I NP>PRP +1S saw VBD +1VP ...`), so that the
    decoder has just read the word it tags.
    """
    tokens = []
    for word, label in zip(tree.words(), encode(tree)):
        if tokens:
            tokens.append(depth_token(previous))
        tokens += [word, tag_token(label)] if word_first else [tag_token(label), word]
        previous = label
    return " ".join(tokens)


def label_tokens(tree: Tree) -> set[str]:
    """The tag and depth tokens of `tree`'s sequence (its tree tokens, without the words)."""
    labels = encode(tree)
    return {tag_token(label) for label in labels} | {depth_token(label) for label in labels[:-1]}


def rebuild_by_word(sequence: str, words: Sequence[str]) -> Tree:
    """The tree of a well-formed `linearize_by_word` sequence over `words` (either order of tag and
    word); TreeFormatError when it is not one."""
    tokens = sequence.split()
    whole = len(tokens) == 3 * len(words) - 1
    if whole and tokens[1::3] == list(words):
        tag_at = 0
    elif whole and tokens[0::3] == list(words):
        tag_at = 1  # word_first
    else:
        raise TreeFormatError(f"not a sequence of tag, word and depth tokens over the {len(words)} words "
                              f"{' '.join(words)!r}: {sequence!r}")
    labels = []
    for i in range(len(words)):
        unary, _, tag = tokens[3 * i + tag_at].rpartition(UNARY_MARK)
        change, lca = 0, ""
        if i + 1 < len(words):
            match = DEPTH_TOKEN.match(tokens[3 * i + 2])
            if not match:
                raise TreeFormatError(f"{tokens[3 * i + 2]!r} (after the word {words[i]!r}) is not a depth token")
            change, lca = int(match.group(1)), match.group(2)
        labels.append(WordLabel(tag, unary, change, lca))
    return decode(words, labels)


def _chain_parts(labels):
    """The number of constituents in each "+"-joined chain of labels (0 for "")."""
    stripped = tf.strings.regex_replace(labels, r"\+", "")
    return tf.where(tf.equal(labels, ""), 0, tf.strings.length(labels) - tf.strings.length(stripped) + 1)


def _opening(labels):
    """"A+B" -> "(A (B " ("" -> "")."""
    return tf.where(tf.equal(labels, ""), "", "(" + tf.strings.regex_replace(labels, r"\+", " (") + " ")


def _closing(counts, longest=64):
    counts = tf.minimum(counts, longest)
    return tf.strings.substr(tf.fill(tf.shape(counts), ")" * longest), tf.zeros_like(counts), counts)


def trees_from_labels(words, tags, unaries, depth_changes, lcas, lengths):
    """`decode` in TensorFlow ops, for a batch: one bracketed tree (B,) string per sentence.

    Args (all (B, W), padded past each row's length): words (already escaped, as in the PTB),
    tags, unaries, lcas string; depth_changes int32; lengths (B,) int32, the words of each row
    (at least 1). The depth change and lca of each row's last word are not read.
    """
    words, tags, unaries, lcas = (tf.convert_to_tensor(t, tf.string) for t in (words, tags, unaries, lcas))
    depth_changes = tf.convert_to_tensor(depth_changes, tf.int32)
    lengths = tf.convert_to_tensor(lengths, tf.int32)
    width = tf.shape(words)[1]
    pairs = tf.sequence_mask(lengths - 1, width)  # (B, W): pair k joins words k and k + 1
    # a(k): the running sum of the depth changes kept at least 1 (a reflected walk: the sum, lifted
    # by how far the sum less 1 has fallen below 0 so far).
    sums = tf.cumsum(tf.where(pairs, depth_changes, 0), axis=1)
    lowest = tf.scan(tf.minimum, tf.transpose(sums - 1), initializer=tf.zeros_like(lengths))  # (W, B)
    counts = tf.where(pairs, sums - tf.transpose(lowest), 0)  # (B, W), 0 off the pairs
    # Pair k's constituent spans the words after the last pair before k with a lower count, to the
    # first pair after k with a lower count; the first pair of its span with its count stands for it.
    index = tf.range(width)
    before = index[None, :, None] < index[None, None, :]  # [., j, k]: j < k
    valid_j = pairs[:, :, None]
    lower = valid_j & (counts[:, :, None] < counts[:, None, :])  # (B, j, k): pair j has a lower count than k
    not_higher = valid_j & (counts[:, :, None] <= counts[:, None, :])
    last_lower_before = tf.reduce_max(tf.where(lower & before, index[None, :, None], -1), axis=1)  # (B, k)
    last_not_higher_before = tf.reduce_max(tf.where(not_higher & before, index[None, :, None], -1), axis=1)
    first_lower_after = tf.reduce_min(tf.where(lower & ~before & (index[None, :, None] != index[None, None, :]),
                                               index[None, :, None], width), axis=1)
    first_word = last_lower_before + 1
    last_word = tf.minimum(first_lower_after, lengths[:, None] - 1)
    stands = pairs & (last_not_higher_before == last_lower_before)
    labels = tf.where(tf.equal(lcas, ""), FALLBACK_LABEL, lcas)
    openings = tf.where(stands, _opening(labels), "")
    closes = tf.where(stands, _chain_parts(labels), 0)
    # Word i opens the constituents whose span starts at i, outermost first: the outer one stands at
    # a later pair than those inside it, so pairs are read from the last.
    starts = stands[:, None, :] & tf.equal(first_word[:, None, :], index[None, :, None])  # (B, i, k)
    opens = tf.strings.reduce_join(tf.reverse(tf.where(starts, openings[:, None, :], ""), axis=[2]), axis=2)
    ends = stands[:, None, :] & tf.equal(last_word[:, None, :], index[None, :, None])
    closed = tf.reduce_sum(tf.where(ends, closes[:, None, :], 0), axis=2)  # (B, i)
    leaves = (_opening(unaries) + "(" + tags + " " + words + ")" + _closing(_chain_parts(unaries)))
    segments = opens + leaves + _closing(closed, longest=1024)
    return tf.strings.reduce_join(tf.RaggedTensor.from_tensor(segments, lengths=lengths), axis=1, separator=" ")
