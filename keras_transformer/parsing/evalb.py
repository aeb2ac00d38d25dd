"""Labeled bracket precision, recall and F1 as EVALB (Sekine and Collins, 1997) computes them with
its COLLINS.prm parameters, the scores every constituency parsing paper reports.

    result = evalb(gold_trees, test_trees)
    print(result.f1, result.report())

The rules, those of evalb.c with COLLINS.prm:
- Terminals whose tag is in DELETE_LABEL (-NONE- and the punctuation tags , : `` '' .) are deleted
  with their word, each tree by its own tags; word positions count the remaining words.
- A sentence is an error, and scores nothing, when the test tree keeps a different number of words
  than the gold tree ("Length unmatch"), or a different word at some position ("Words unmatch").
  EVALB itself exits, printing no totals, at its 12th error (MAX_ERROR 10); here they are counted
  (`error_sentences`).
  A test tree without words is skipped (`skipped_sentences`).
- Every other bracket is a (label, start, end) triple; brackets that cover no remaining word are
  dropped, labels are cut at their first '-' or '=' (function tags and indices are ignored), and
  brackets labeled TOP are dropped (as are -NONE- and the punctuation labels).
- Labels ADVP and PRT are equal (EQ_LABEL). Matching counts each gold bracket once.
- Recall = matched / gold brackets, precision = matched / test brackets, over valid sentences;
  F1 = 2PR / (P + R); all in percent, as EVALB prints them. The same figures over sentences whose
  gold tree has at most CUTOFF_LEN (40) words (counting punctuation) are `len40`.
"""
import collections
import copy
import dataclasses
from typing import Callable, Hashable, Iterable, Optional

from keras_transformer.parsing.trees import Tree

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
DELETE_LABELS_FOR_LENGTH = frozenset({"-NONE-"})
EQUIVALENT_LABELS = (("ADVP", "PRT"),)
CUTOFF_LENGTH = 40


@dataclasses.dataclass
class BracketCounts:
    """Sums over sentences; the percentages are EVALB's."""

    sentences: int = 0
    error_sentences: int = 0
    skipped_sentences: int = 0
    gold_brackets: int = 0
    test_brackets: int = 0
    matched_brackets: int = 0
    complete_matches: int = 0
    words: int = 0
    correct_tags: int = 0

    @property
    def valid_sentences(self) -> int:
        return self.sentences - self.error_sentences - self.skipped_sentences

    @property
    def recall(self) -> float:
        return 100.0 * self.matched_brackets / self.gold_brackets if self.gold_brackets else 0.0

    @property
    def precision(self) -> float:
        return 100.0 * self.matched_brackets / self.test_brackets if self.test_brackets else 0.0

    @property
    def f1(self) -> float:
        """F1 in percent; 0 where no bracket matched at all (EVALB divides 0 by 0 there and prints
        nan, the one place these figures differ: 0 keeps such a checkpoint comparable, and last)."""
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def complete_match(self) -> float:
        return 100.0 * self.complete_matches / self.valid_sentences if self.valid_sentences else 0.0

    @property
    def tagging_accuracy(self) -> float:
        return 100.0 * self.correct_tags / self.words if self.words else 0.0

    def add(self, other: "BracketCounts"):
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def summary(self) -> dict:
        """The figures EVALB's summary prints."""
        return {"sentences": self.sentences, "error_sentences": self.error_sentences,
                "skipped_sentences": self.skipped_sentences, "valid_sentences": self.valid_sentences,
                "recall": self.recall, "precision": self.precision, "f1": self.f1,
                "complete_match": self.complete_match, "tagging_accuracy": self.tagging_accuracy}


@dataclasses.dataclass
class EvalbResult:
    """All sentences, and those whose gold tree has at most CUTOFF_LENGTH words."""

    all: BracketCounts
    len40: BracketCounts
    errors: list  # (1-based sentence number, what)

    @property
    def f1(self) -> float:
        return self.all.f1

    def report(self) -> str:
        lines = []
        for name, counts in (("All", self.all), (f"len<={CUTOFF_LENGTH}", self.len40)):
            values = counts.summary()
            lines.append(f"-- {name} -- " + ", ".join(f"{key} {value:.2f}" if isinstance(value, float)
                                                      else f"{key} {value}" for key, value in values.items()))
        return "\n".join(lines)


def _canonical_label(label: str) -> str:
    """The label as EVALB compares it: cut at the first '-' or '=', then ADVP = PRT."""
    for position, character in enumerate(label):
        if character in "-=":
            label = label[:position]
            break
    for first, second in EQUIVALENT_LABELS:
        if label == second:
            return first
    return label


def _is_deleted_bracket(label: str) -> bool:
    """EVALB compares the cut label with the DELETE_LABELs as written (so "-NONE-", cut to "", is not
    one of them: an unlabeled outer bracket counts)."""
    return label in DELETE_LABELS


def sentence_items(tree: Tree):
    """(terminals [(word, tag)], brackets Counter of (label, start, end), length for the cutoff)."""
    terminals, brackets, length = [], [], 0

    def visit(node):
        nonlocal length
        if node.is_preterminal:
            if node.label not in DELETE_LABELS_FOR_LENGTH:
                length += 1
            if node.label not in DELETE_LABELS:
                terminals.append((node.word, node.label))
            return
        start = len(terminals)
        for child in node.children:
            visit(child)
        brackets.append((node.label, start, len(terminals)))

    visit(tree)
    kept = collections.Counter((_canonical_label(label), start, end) for label, start, end in brackets
                               if start != end)
    for bracket in list(kept):
        if _is_deleted_bracket(bracket[0]):
            del kept[bracket]
    return terminals, kept, length


def score_sentence(gold: Tree, test: Optional[Tree]) -> tuple[BracketCounts, Optional[str], int]:
    """(counts of one sentence, the error if it is one, the gold length for the cutoff)."""
    return score_items(sentence_items(gold), _test_items(test))


def _test_items(test: Optional[Tree]):
    """sentence_items of a test tree; those of no words for no answer (None)."""
    return sentence_items(test) if test is not None else ([], collections.Counter(), 0)


def score_items(gold_items, test_items) -> tuple[BracketCounts, Optional[str], int]:
    """score_sentence of the gold and the test tree's sentence_items."""
    (gold_terminals, gold_brackets, length), (test_terminals, test_brackets, _) = gold_items, test_items
    counts = BracketCounts(sentences=1)
    if not test_terminals:
        counts.skipped_sentences = 1
        return counts, None, length
    if len(gold_terminals) != len(test_terminals):
        counts.error_sentences = 1
        return counts, f"Length unmatch ({len(gold_terminals)}|{len(test_terminals)})", length
    for (gold_word, _), (test_word, _) in zip(gold_terminals, test_terminals):
        if gold_word != test_word:
            counts.error_sentences = 1
            return counts, f"Words unmatch ({gold_word}|{test_word})", length
    counts.gold_brackets = sum(gold_brackets.values())
    counts.test_brackets = sum(test_brackets.values())
    counts.matched_brackets = sum((gold_brackets & test_brackets).values())
    counts.complete_matches = int(counts.gold_brackets == counts.test_brackets == counts.matched_brackets)
    counts.words = len(gold_terminals)
    counts.correct_tags = sum(_canonical_tag(g) == _canonical_tag(t)
                              for (_, g), (_, t) in zip(gold_terminals, test_terminals))
    return counts, None, length


def _canonical_tag(tag: str) -> str:
    """Tags are compared whole (not cut at '-'), with the label equivalences."""
    for first, second in EQUIVALENT_LABELS:
        if tag == second:
            return first
    return tag


def evalb(gold_trees: Iterable[Tree], test_trees: Iterable[Optional[Tree]]) -> EvalbResult:
    """EVALB's scores of test_trees against gold_trees, sentence by sentence (None: no answer)."""
    result = EvalbResult(BracketCounts(), BracketCounts(), [])
    gold_trees, test_trees = list(gold_trees), list(test_trees)
    if len(gold_trees) != len(test_trees):
        raise ValueError(f"{len(gold_trees)} gold trees but {len(test_trees)} test trees")
    for number, (gold, test) in enumerate(zip(gold_trees, test_trees), start=1):
        counts, error, length = score_sentence(gold, test)
        result.all.add(counts)
        if length <= CUTOFF_LENGTH:
            result.len40.add(counts)
        if error:
            result.errors.append((number, error))
    return result


def label_counts(gold_trees: Iterable[Tree], test_trees: Iterable[Optional[Tree]]) -> dict[str, BracketCounts]:
    """{label: BracketCounts of its gold, test and matched brackets only}, EVALB's brackets (labels cut, ADVP = PRT, the
    deleted ones left out) of the sentences `evalb` scores; their sums are its totals."""
    return bracket_counts_by(gold_trees, test_trees, lambda label, start, end, words: label)


def bracket_counts_by(gold_trees: Iterable[Tree], test_trees: Iterable[Optional[Tree]],
                      key: Callable[[str, int, int, int], Hashable]) -> dict[Hashable, BracketCounts]:
    """{group: BracketCounts of its gold, test and matched brackets only} over the sentences `evalb`
    scores, each of EVALB's brackets (label, start, end) in the group key(label, start, end, words),
    words the number of the sentence's words EVALB keeps."""
    groups = collections.defaultdict(BracketCounts)
    for gold, test in zip(gold_trees, test_trees):
        gold_items, test_items = sentence_items(gold), _test_items(test)
        counts, error, _ = score_items(gold_items, test_items)
        if error or counts.skipped_sentences:
            continue
        (terminals, gold_brackets, _), test_brackets = gold_items, test_items[1]
        for brackets, field in ((gold_brackets, "gold_brackets"), (test_brackets, "test_brackets"),
                                (gold_brackets & test_brackets, "matched_brackets")):
            for (label, start, end), count in brackets.items():
                group = groups[key(label, start, end, len(terminals))]
                setattr(group, field, getattr(group, field) + count)
    return dict(groups)


def with_tags_of(test: Tree, gold: Tree) -> Tree:
    """A copy of `test` whose preterminals carry the tags of `gold`'s, word by word (the brackets kept):
    what the test tree would score with every tag right. A tree of another number of words is
    returned as it is."""
    tree = copy.deepcopy(test)
    preterminals, tags = list(tree.preterminals()), gold.tags()
    if len(preterminals) == len(tags):
        for preterminal, tag in zip(preterminals, tags):
            preterminal.label = tag
    return tree
