"""Trees as labelled spans, and the best tree from span scores (CKY): the pieces of a span-based
parser (Stern, Andreas and Klein, 2017; Kitaev and Klein, 2018), which scores every span of words
(i, j) with a label or "no constituent" and keeps the best-scoring tree.

Unary chains are collapsed first, as for one label per word (`depth_labels.collapse_unaries`:
(S (VP ...)) is one span labelled "S+VP"), so that each span has at most one label. Spans are
fenceposts: (i, j) covers words i .. j - 1, 0 <= i < j <= n; (i, i + 1) is one word, and its label
is the chain of constituents over that word alone ((NP (PRP I)) gives (0, 1) the label "NP").
Part-of-speech tags are not spans: a tree is rebuilt from its spans and its tags.

    tree = parse_tree("(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))")
    tree_spans(tree)  # {(0, 1): "NP", (2, 4): "NP", (1, 4): "VP", (0, 5): "S"}
    tree_from_spans(tree.words(), tree.tags(), tree_spans(tree))  # == tree

`best_spans` finds the most probable tree when every span is labelled independently: the one whose
spans have the highest sum of log p(label) - log p(no constituent). Its `constituent_bias` is added
to each of those: a model trained span by span with a softmax, where most spans are no constituent,
may be too shy to open one (a named option, chosen on dev data).
"""
import json
import pathlib
from typing import Iterable, Mapping, Optional, Sequence

import numpy as np

from keras_transformer.parsing.depth_labels import chain_tree, collapse_unaries
from keras_transformer.parsing.trees import Tree, TreeFormatError

NO_CONSTITUENT = ""  # label 0 of every SpanLabels
SPAN_LABELS_FILENAME = "span_labels.json"


def tree_spans(tree: Tree) -> dict[tuple[int, int], str]:
    """{(start, end): label} of the tree's constituents, unary chains collapsed ("S+VP")."""
    spans = {}

    def visit(node, start):
        if node.is_preterminal:
            return start + 1
        end = start
        for child in node.children:
            end = visit(child, end)
        spans[(start, end)] = node.label
        return end

    visit(collapse_unaries(tree), 0)
    return spans


def tree_from_spans(words: Sequence[str], tags: Sequence[str], spans: Mapping[tuple[int, int], str]) -> Tree:
    """The tree over words (each under its tag) whose constituents are `spans`.

    The spans must nest and include the whole sentence, (0, len(words)); a ValueError says which
    do not. A single word without spans is the bare preterminal (TAG word), as treebanks have
    one-word trees (GUM's "(ROOT (UH Yes))", its root removed).
    """
    length = len(words)
    if len(tags) != length:
        raise ValueError(f"{length} words but {len(tags)} tags")
    if length == 1 and not spans:
        return Tree(tags[0], word=words[0])
    if (0, length) not in spans:
        raise ValueError(f"the spans of a tree include the whole sentence (0, {length}); got {sorted(spans)}")
    # Outer spans first: by start, then longest first. A stack of open spans, each inside the one
    # below it (checked as it opens); each word and each closed span is a child of the innermost.
    ordered = sorted(spans, key=lambda span: (span[0], -span[1]))
    stack = []  # [(end, label, children)]
    position = 0

    def close_until(point):
        while stack and stack[-1][0] <= point:
            _, label, children = stack.pop()
            node = chain_tree(label, children)
            if not stack:
                return node
            stack[-1][2].append(node)
        return None

    def words_until(point):
        """The words before `point` not placed yet, each under the span open where it is."""
        nonlocal position
        while position < point:
            close_until(position)
            stack[-1][2].append(Tree(tags[position], word=words[position]))
            position += 1
        return close_until(point)

    for start, end in ordered:
        if not 0 <= start < end <= length:
            raise ValueError(f"span ({start}, {end}) is not within a sentence of {length} words")
        words_until(start)
        if stack and end > stack[-1][0]:
            raise ValueError(f"span ({start}, {end}) crosses the span ending at {stack[-1][0]}")
        stack.append((end, spans[(start, end)], []))
    return words_until(length)


class SpanLabels:
    """The span labels (unary chains included) and part-of-speech tags a span parser predicts.

    labels[0] is NO_CONSTITUENT; the others and the tags are in the order first seen in the train
    trees. A label or tag never seen in training reads as index 0 (no constituent, the first tag).
    """

    def __init__(self, labels: Sequence[str], tags: Sequence[str]):
        if not labels or labels[0] != NO_CONSTITUENT:
            raise ValueError(f"labels[0] must be {NO_CONSTITUENT!r} (no constituent); got {list(labels)[:3]}")
        if not tags:
            raise ValueError("a span parser needs at least one part-of-speech tag")
        self.labels, self.tags = tuple(labels), tuple(tags)
        self._label_ids = {label: index for index, label in enumerate(self.labels)}
        self._tag_ids = {tag: index for index, tag in enumerate(self.tags)}

    @classmethod
    def from_trees(cls, trees: Iterable[Tree]) -> "SpanLabels":
        labels, tags = {NO_CONSTITUENT: None}, {}
        for tree in trees:
            labels.update(dict.fromkeys(tree_spans(tree).values()))
            tags.update(dict.fromkeys(tree.tags()))
        return cls(list(labels), list(tags))

    def label_id(self, label: str) -> int:
        return self._label_ids.get(label, 0)

    def tag_id(self, tag: str) -> int:
        return self._tag_ids.get(tag, 0)

    def gold(self, tree: Tree) -> tuple[list[tuple[int, int, int]], list[int]]:
        """([(start, end, label id)] of the tree's spans, [tag id] of its words)."""
        return ([(start, end, self.label_id(label)) for (start, end), label in tree_spans(tree).items()],
                [self.tag_id(tag) for tag in tree.tags()])

    def write(self, directory) -> pathlib.Path:
        path = pathlib.Path(directory) / SPAN_LABELS_FILENAME
        path.write_text(json.dumps({"labels": self.labels, "tags": self.tags}, indent=1) + "\n")
        return path

    @classmethod
    def read(cls, directory) -> Optional["SpanLabels"]:
        path = pathlib.Path(directory) / SPAN_LABELS_FILENAME
        if not path.is_file():
            return None
        try:
            values = json.loads(path.read_text())
            return cls(values["labels"], values["tags"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not span labels ({error})") from None


def best_spans(log_probs: np.ndarray, length: int, constituent_bias: float = 0.0) -> dict[tuple[int, int], int]:
    """{(start, end): label id} of the most probable tree over `length` words (CKY, O(n^3)).

    log_probs (n + 1, n + 1, L): log p(label | span (i, j)) for i < j <= n, label 0 being no
    constituent; entries with i >= j are not read. The spans are independent given the sentence,
    so a tree's log-probability is that of every span of the sentence: its own spans with their
    labels, all others no constituent. Up to a constant that is the sum, over the tree's spans, of
    log p(label) - log p(no constituent), each span taking its best label. CKY maximizes it over
    binary bracketings, where a span may also take no constituent at 0 (and is then left out, so
    any n-ary tree is reachable); constituent_bias is added to every labelled span. The whole
    sentence of two or more words always takes a label (one word may be a bare preterminal).
    """
    if length < 1:
        raise ValueError(f"a tree needs at least one word; got length {length}")
    scores = np.asarray(log_probs, dtype=np.float64)[:length + 1, :length + 1]
    label_scores = scores[:, :, 1:].max(axis=-1) - scores[:, :, 0] + constituent_bias
    best_label = scores[:, :, 1:].argmax(axis=-1) + 1
    labelled = label_scores > 0
    span_score = np.maximum(label_scores, 0.0)
    if length > 1:
        span_score[0, length] = label_scores[0, length]
        labelled[0, length] = True
    chart = np.zeros((length + 1, length + 1))
    split = np.zeros((length + 1, length + 1), dtype=np.int64)
    starts = np.arange(length)
    chart[starts, starts + 1] = span_score[starts, starts + 1]
    for width in range(2, length + 1):
        for start in range(length - width + 1):
            end = start + width
            splits = chart[start, start + 1:end] + chart[start + 1:end, end]
            best = int(splits.argmax())
            split[start, end] = start + 1 + best
            chart[start, end] = span_score[start, end] + splits[best]
    spans, pending = {}, [(0, length)]
    while pending:
        start, end = pending.pop()
        if labelled[start, end]:
            spans[(start, end)] = int(best_label[start, end])
        if end - start > 1:
            middle = int(split[start, end])
            pending += [(start, middle), (middle, end)]
    return spans


def parse_from_scores(words: Sequence[str], span_log_probs: np.ndarray, tag_ids: Sequence[int],
                      span_labels: SpanLabels, constituent_bias: float = 0.0) -> Tree:
    """The best tree over words from a span parser's outputs for one sentence: span_log_probs
    (n + 1, n + 1, L) as for `best_spans`, tag_ids (n,) one tag per word."""
    if not words:
        raise TreeFormatError("cannot parse an empty sentence")
    spans = best_spans(span_log_probs, len(words), constituent_bias)
    return tree_from_spans(words, [span_labels.tags[index] for index in tag_ids[:len(words)]],
                           {span: span_labels.labels[label] for span, label in spans.items()})
