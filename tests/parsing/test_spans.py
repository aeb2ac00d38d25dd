"""Trees as labelled spans: the spans of a hand-made tree, the round trip of every GUM tree, crossing
spans refused, and CKY: the gold tree from its own scores, the best of every bracketing of short
sentences found by brute force, the whole sentence always labelled, the constituent bias."""
import numpy as np
import pytest

from keras_transformer.data.factory import require_shared_data
from keras_transformer.parsing import parse_tree, read_treebank
from keras_transformer.parsing.spans import (NO_CONSTITUENT, SpanLabels, best_spans, parse_from_scores,
                                             tree_from_spans, tree_spans)

TREE = "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"


def test_spans_of_a_tree():
    tree = parse_tree(TREE)
    assert tree_spans(tree) == {(0, 1): "NP", (2, 4): "NP", (1, 4): "VP", (0, 5): "S"}
    chain = parse_tree("(S (VP (VB Go) (ADVP (RB away))))")
    assert tree_spans(chain) == {(1, 2): "ADVP", (0, 2): "S+VP"}
    assert tree_from_spans(chain.words(), chain.tags(), tree_spans(chain)) == chain


def test_tree_from_spans_rebuilds_the_tree():
    tree = parse_tree(TREE)
    assert tree_from_spans(tree.words(), tree.tags(), tree_spans(tree)) == tree
    flat = tree_from_spans(tree.words(), tree.tags(), {(0, 5): "S"})
    assert flat.to_string() == "(S (PRP I) (VBD saw) (DT a) (NN dog) (. .))"
    one = tree_from_spans(["Yes"], ["UH"], {(0, 1): "S+INTJ"})
    assert one.to_string() == "(S (INTJ (UH Yes)))"
    bare = parse_tree("(ROOT (UH Yes))").children[0]
    assert tree_spans(bare) == {}
    assert tree_from_spans(["Yes"], ["UH"], {}) == bare


@pytest.mark.parametrize("spans, message", [
    ({(0, 2): "NP", (1, 3): "VP", (0, 3): "S"}, "crosses"),
    ({(0, 2): "NP"}, "whole sentence"),
    ({(0, 3): "S", (2, 4): "NP"}, "not within"),
])
def test_spans_that_are_no_tree_are_refused(spans, message):
    with pytest.raises(ValueError, match=message):
        tree_from_spans(["a", "b", "c"], ["X", "X", "X"], spans)


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_every_gum_tree_comes_back_from_its_spans(split):
    trees = list(read_treebank(require_shared_data(f"gum/{split}.ptb") / "gum" / f"{split}.ptb"))
    for tree in trees:
        assert tree_from_spans(tree.words(), tree.tags(), tree_spans(tree)) == tree, tree.to_string()


def one_hot_log_probs(tree, span_labels, confidence=0.9):
    """log p of a model sure, with `confidence`, of the tree's spans and of no constituent elsewhere."""
    length = len(tree.words())
    probs = np.full((length + 1, length + 1, len(span_labels.labels)), (1 - confidence) / len(span_labels.labels))
    probs[:, :, 0] = confidence
    for (start, end), label in tree_spans(tree).items():
        probs[start, end, :] = (1 - confidence) / len(span_labels.labels)
        probs[start, end, span_labels.label_id(label)] = confidence
    return np.log(probs)


def test_cky_finds_the_tree_of_its_own_scores():
    trees = [parse_tree(TREE), parse_tree("(S (VP (VB Go) (ADVP (RB away))))"),
             parse_tree("(NP (NP (DT the) (NN cat)) (PP (IN on) (NP (DT the) (NN mat))) (, ,) (ADJP (JJ black)))")]
    span_labels = SpanLabels.from_trees(trees)
    assert span_labels.labels[0] == NO_CONSTITUENT and "S+VP" in span_labels.labels
    for tree in trees:
        log_probs = one_hot_log_probs(tree, span_labels)
        tag_ids = [span_labels.tag_id(tag) for tag in tree.tags()]
        assert parse_from_scores(tree.words(), log_probs, tag_ids, span_labels) == tree


def binary_bracketings(start, end):
    """Every set of spans of a binary bracketing of words start .. end - 1."""
    if end - start == 1:
        yield [(start, end)]
        return
    for middle in range(start + 1, end):
        for left in binary_bracketings(start, middle):
            for right in binary_bracketings(middle, end):
                yield [(start, end)] + left + right


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("bias", [0.0, 1.5])
def test_cky_scores_the_best_of_every_bracketing(length, bias):
    rng = np.random.default_rng(length)
    for _ in range(5):
        logits = rng.normal(size=(length + 1, length + 1, 4)) * 2
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        label_scores = log_probs[:, :, 1:].max(-1) - log_probs[:, :, 0] + bias

        def score(span):
            if span == (0, length) and length > 1:
                return label_scores[span]
            return max(label_scores[span], 0.0)

        best = max(sum(score(span) for span in spans) for spans in binary_bracketings(0, length))
        found = best_spans(log_probs, length, bias)
        assert (0, length) in found or length == 1
        for span, label in found.items():
            assert label == int(log_probs[span][1:].argmax()) + 1
            assert (span == (0, length) and length > 1) or label_scores[span] > 0
        # The found spans complete to a bracketing of the best score: the others chose no constituent.
        completions = [spans for spans in binary_bracketings(0, length) if set(found) <= set(spans)]
        assert max(sum(score(span) for span in spans) for spans in completions) == pytest.approx(best)


def test_the_whole_sentence_has_a_label_unless_it_is_one_word():
    log_probs = np.log(np.tile([0.97, 0.01, 0.01, 0.01], (4, 4, 1)))
    assert best_spans(log_probs, 3) == {(0, 3): 1}
    assert best_spans(log_probs, 1) == {}


def test_the_constituent_bias_opens_spans_the_model_is_shy_of():
    tree = parse_tree(TREE)
    span_labels = SpanLabels.from_trees([tree])
    log_probs = one_hot_log_probs(tree, span_labels, confidence=0.6)
    length = len(tree.words())
    for (start, end) in tree_spans(tree):  # a gold span: 0.4 none, 0.6 split between two labels
        log_probs[start, end, :] = np.log(0.6 / (len(span_labels.labels) - 1))
        log_probs[start, end, 0] = np.log(0.4)
        log_probs[start, end, span_labels.label_id(tree_spans(tree)[(start, end)])] += np.log(2)
    assert set(best_spans(log_probs, length)) == {(0, length)}
    assert set(best_spans(log_probs, length, constituent_bias=1.0)) == set(tree_spans(tree))


def test_span_labels_read_what_they_wrote(tmp_path):
    trees = [parse_tree(TREE), parse_tree("(S (VP (VB Go) (ADVP (RB away))))")]
    span_labels = SpanLabels.from_trees(trees)
    assert SpanLabels.read(tmp_path) is None
    span_labels.write(tmp_path)
    again = SpanLabels.read(tmp_path)
    assert again.labels == span_labels.labels and again.tags == span_labels.tags
    spans, tags = again.gold(trees[1])
    assert sorted((again.labels[label], start, end) for start, end, label in spans) == [("ADVP", 1, 2), ("S+VP", 0, 2)]
    assert [again.tags[tag] for tag in tags] == ["VB", "RB"]
    assert again.label_id("never seen") == 0
    (tmp_path / "span_labels.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="span_labels.json: not span labels"):
        SpanLabels.read(tmp_path)
