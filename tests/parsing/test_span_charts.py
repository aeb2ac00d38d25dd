"""The span parser's charts in TensorFlow ops: the best trees of a batch and their log-probabilities
against spans.best_spans (Python's CKY) on random scores, and the gold span labels from depth labels
and the spans of bracketed trees read in TensorFlow ops against tree_spans, on hand-made and toy
trees and every tree of GUM's dev and test sets; bad trees refused, quoted."""
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data.factory import require_shared_data
from keras_transformer.parsing import parse_tree, read_treebank
from keras_transformer.parsing.depth_labels import common_ancestor_counts, encode
from keras_transformer.parsing.span_charts import (by_width, from_width, gold_span_labels, read_bracketed_trees,
                                                  trees_from_span_scores)
from keras_transformer.parsing.spans import SpanLabels, best_spans, tree_from_spans, tree_spans
from keras_transformer.parsing.toy_treebank import write_toy_treebank
from keras_transformer.parsing.treebank import read_raw_trees
from keras_transformer.parsing.trees import escape_word, preprocess

LABELS = ("", "S", "NP", "VP", "S+VP")
TAGS = ("DT", "NN", "VBD")


def test_charts_by_width_and_back():
    dense = tf.reshape(tf.range(2 * 4 * 4), [2, 4, 4])
    chart = by_width(dense)
    assert chart.shape == (4, 2, 4)
    assert int(chart[2, 1, 1]) == int(dense[1, 1, 3])  # span (1, 3) of sentence 1
    assert int(chart[3, 0, 2]) == int(dense[0, 2, 3])  # past the end: cut at N
    back = from_width(chart).numpy()
    upper = np.triu(np.ones([4, 4], bool))
    np.testing.assert_array_equal(back[:, upper], dense.numpy()[:, upper])


@pytest.mark.parametrize("bias", [0.0, 1.0])
def test_best_trees_of_a_batch_are_those_of_python_cky_with_their_log_probabilities(bias):
    rng = np.random.default_rng(7)
    lengths = [5, 1, 8, 2, 0, 3, 8]
    size = max(lengths) + 1
    logits = rng.normal(size=(len(lengths), size, size, len(LABELS))) * 2
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    tag_ids = rng.integers(0, len(TAGS), size=(len(lengths), size - 1))
    words = [[f"w{i}" for i in range(length)] for length in lengths]
    padded = [row + [""] * (size - 1 - len(row)) for row in words]
    trees, tree_log_probs = trees_from_span_scores(tf.constant(padded), tf.constant(log_probs, tf.float32),
                                                   tf.constant(tag_ids), tf.constant(lengths), LABELS, TAGS, bias)
    trees, tree_log_probs = trees.numpy(), tree_log_probs.numpy()
    span_labels = SpanLabels(LABELS, TAGS)
    for row, length in enumerate(lengths):
        if length == 0:
            assert trees[row] == b"" and tree_log_probs[row] == 0.0
            continue
        found = best_spans(log_probs[row], length, bias)
        expected = tree_from_spans(words[row], [TAGS[t] for t in tag_ids[row, :length]],
                                   {span: span_labels.labels[label] for span, label in found.items()})
        assert parse_tree(trees[row].decode()) == expected, (row, trees[row])
        # Its log-probability: every span of the sentence with its label in the tree, 0 (none) if not in it.
        every_span = [(start, end) for end in range(1, length + 1) for start in range(end)]
        assert tree_log_probs[row] == pytest.approx(
            sum(log_probs[row, start, end, found.get((start, end), 0)] for start, end in every_span), rel=1e-5)


def depth_label_rows(trees, span_labels):
    """(counts, lca ids, unary ids, lengths) of trees, padded, as gold_span_labels reads them."""
    width = max(len(tree.words()) for tree in trees)
    counts, lcas, unaries = (np.full([len(trees), width], 7, np.int32) for _ in range(3))  # 7: padding, not read
    for row, tree in enumerate(trees):
        labels = encode(tree)
        pairs = common_ancestor_counts(labels)
        counts[row, :len(pairs)] = pairs
        lcas[row, :len(pairs)] = [span_labels.label_id(label.lca) for label in labels[:-1]]
        unaries[row, :len(labels)] = [span_labels.label_id(label.unary) for label in labels]
    return counts, lcas, unaries, np.array([len(tree.words()) for tree in trees], np.int32)


def check_gold_spans(trees, span_labels, labeller=gold_span_labels):
    gold = labeller(*(tf.constant(rows) for rows in depth_label_rows(trees, span_labels))).numpy()
    for row, tree in enumerate(trees):
        length = len(tree.words())
        expected = np.full(gold.shape[1:], -1)
        expected[np.triu_indices(length + 1, 1)] = 0
        for (start, end), label in tree_spans(tree).items():
            expected[start, end] = span_labels.label_id(label)
        np.testing.assert_array_equal(gold[row], expected, err_msg=tree.to_string())


def check_read_trees(trees, span_labels, reader=read_bracketed_trees, texts=None):
    """read_bracketed_trees of the trees' text (or of texts, the trees as a treebank writes them)
    against their words, tags and tree_spans."""
    texts = [tree.to_string() for tree in trees] if texts is None else texts
    words, tags, spans, labels = reader(tf.constant(texts), tf.constant(span_labels.labels),
                                        tf.constant(span_labels.tags))
    found = [{} for _ in trees]
    for (row, start, end), label in zip(spans.numpy().tolist(), labels.numpy().tolist()):
        assert (start, end) not in found[row]
        found[row][(start, end)] = span_labels.labels[label]
    for row, tree in enumerate(trees):
        assert [word.decode() for word in words[row].numpy()] == [escape_word(word) for word in tree.words()]
        assert [span_labels.tags[tag] for tag in tags[row].numpy()] == tree.tags()
        assert found[row] == tree_spans(tree), tree.to_string()


def test_gold_span_labels_of_hand_made_and_toy_trees(tmp_path):
    trees = [parse_tree("(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"),
             parse_tree("(S (VP (VB Go) (ADVP (RB away))))"), parse_tree("(S (NP (UH Yes)))"),
             parse_tree("(UH Yes)")]
    write_toy_treebank(tmp_path, seed=3, sizes={"train": 60, "dev": 1, "test": 1})
    trees += list(read_treebank(tmp_path / "train.mrg"))
    check_gold_spans(trees, SpanLabels.from_trees(trees))
    check_read_trees(trees, SpanLabels.from_trees(trees))


@pytest.mark.parametrize("tree, what", [
    ("(S (NP (PRP I))", "not a bracketed tree"),  # never closed
    ("(S (NP (PRP I)))) (", "not a bracketed tree"),  # closed too often
    ("(S (NP (PRP I))) (NP (PRP I))", "not a bracketed tree"),  # two at the top
    ("I", "not a bracketed tree"),  # a word under no tag
    ("(S (NP (PRP I) me))", "not a bracketed tree"),  # a word beside a tag
    ("(S (NP) (PRP I))", "not a bracketed tree"),  # a constituent without words
    ("(S ())", "not a bracketed tree"),  # no label
    ("(S (NP (XYZ I)))", "a tag this parser does not know"),
    ("(S (NP (-NONE- *)) (NP) (PRP I))", "not a bracketed tree"),  # emptied by preprocessing, and not
    ("(ROOT (S (NP (PRP I))) (NP (PRP I)))", "a constituent label this parser does not know"),  # a wrapper over 2
])
def test_reading_a_bad_tree_names_what_is_wrong_and_quotes_it(tree, what):
    span_labels = SpanLabels(["", "S", "NP", "S+NP"], ["PRP"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"score: {what}(.|\n)*{re.escape(tree)}"):
        read_bracketed_trees(tf.constant(["(S (NP (PRP I)))", tree]), span_labels.labels, span_labels.tags)
    for labels in (span_labels.labels, [""]):  # also a parser that has no constituent labels
        words, tags, spans, _ = read_bracketed_trees(tf.constant(["", "(PRP I)"]), labels, span_labels.tags)
        assert words.to_list() == [[], [b"I"]] and tags.to_list() == [[], [0]] and spans.shape == (0, 3)


def test_trees_as_treebanks_write_them_read_as_their_preprocessed_trees(tmp_path):
    texts = ["( (S (NP-SBJ-1 (PRP I)) (VP (VBD saw) (NP (-NONE- *T*-1)))))",  # a WSJ .mrg tree
             "(TOP ( (S-TPC-1 (NP-SBJ=2 (NP-X (PRP I))) (VP (VBD saw) (NP (-NONE- *)) "
             "(SBAR (-NONE- 0) (S (-NONE- *T*-1)))) (. .))))",  # a chain of function tags; nested empties
             "(ROOT\n  (S (NP (-LRB- -LRB-) (NN x)\n    (-RRB- -RRB-))))",  # over several lines
             "( (NN word))", "( (-NONE- *))"]
    write_toy_treebank(tmp_path, seed=5, sizes={"train": 60, "dev": 1, "test": 1})
    texts += [tree.to_string() for _, tree in read_raw_trees(tmp_path / "train.mrg")]  # ROOT, NP-SBJ, -NONE-
    trees = [preprocess(parse_tree(text)) for text in texts]
    assert trees[-61] is None and {text[:6] for text in texts[-60:]} == {"(ROOT "}
    assert sum("-NONE-" in text for text in texts[-60:]) > 0
    kept = [(tree, text) for tree, text in zip(trees, texts) if tree is not None]
    check_read_trees([tree for tree, _ in kept], SpanLabels.from_trees([tree for tree, _ in kept]),
                     texts=[text for _, text in kept])
    words, tags, spans, _ = read_bracketed_trees(tf.constant(texts[-61:-60]), ["", "S"], ["NN"])
    assert words.to_list() == [[]] and tags.to_list() == [[]] and spans.shape == (0, 3)


def test_gold_span_labels_of_every_gum_dev_and_test_tree():
    # (Not train too: reading its 10,224 trees takes half a minute, and they are trees of the same kind.)
    root = require_shared_data("gum/dev.ptb", "gum/test.ptb") / "gum"
    trees = sorted((tree for split in ("dev", "test") for tree in read_treebank(root / f"{split}.ptb")),
                   key=lambda tree: len(tree.words()))
    span_labels = SpanLabels.from_trees(trees)
    labeller = tf.function(gold_span_labels, reduce_retracing=True)  # as in a training step
    reader = tf.function(read_bracketed_trees, reduce_retracing=True)  # as in a SavedModel's `score`
    for start in range(0, len(trees), 256):  # batches of similar lengths
        check_gold_spans(trees[start:start + 256], span_labels, labeller)
        check_read_trees(trees[start:start + 256], span_labels, reader)
    raw = sorted((tree for split in ("dev", "test") for tree in read_treebank(root / f"{split}.ptb", raw=True)),
                 key=lambda tree: len(tree.words()))  # GUM's trees as written: a ROOT wrapper each
    assert [preprocess(tree) for tree in raw] == trees
    for start in range(0, len(trees), 256):
        check_read_trees(trees[start:start + 256], span_labels, reader,
                         texts=[tree.to_string() for tree in raw[start:start + 256]])
