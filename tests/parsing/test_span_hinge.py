"""TransformerConfig.span_loss="hinge": the tree-level margin loss of Kitaev and Klein (2018) against
a numpy computation through spans.best_spans' CKY, its gradient, and a training step with it."""
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tokenizer import BOS_ID
from keras_transformer.model import Transformer
from keras_transformer.parsing.span_model import (SpanParserLoss, TrainingSpanParser, span_hinge_loss_sum,
                                                  span_positions, tag_loss_sum)
from keras_transformer.parsing.spans import best_spans
from tests.parsing.test_span_model import depth_run, gold_arrays, stream_batch  # noqa: F401  (depth_run: a fixture)

LABELS = 5


def _random_trees(lengths, seed):
    """(logits (B, N + 1, N + 1, L), gold labels (B, N + 1, N + 1), -1 off the spans): random
    logits, and as gold the best tree of other random scores (a tree best_spans can reach)."""
    generator = np.random.default_rng(seed)
    size = max(lengths) + 1
    logits = generator.normal(0.0, 2.0, (len(lengths), size, size, LABELS))
    gold = np.full((len(lengths), size, size), -1)
    for row, length in enumerate(lengths):
        if length:
            spans = best_spans(generator.normal(0.0, 2.0, (size, size, LABELS)), length)
            for i in range(length):
                for j in range(i + 1, length + 1):
                    gold[row, i, j] = spans.get((i, j), 0)
    return logits, gold


def _expected_hinge(logits, gold, lengths):
    """Per sentence, max(0, max_T [s(T) + Hamming(T, gold)] - s(gold)), T by best_spans on the
    logits plus 1 at every wrong label; s sums the label logits of every span."""
    losses = []
    for row, length in enumerate(lengths):
        if not length:
            losses.append(0.0)
            continue
        augmented = logits[row] + 1.0 - np.eye(LABELS)[np.maximum(gold[row], 0)]
        predicted = best_spans(augmented, length)
        margin = sum(augmented[i, j, predicted.get((i, j), 0)] - logits[row, i, j, gold[row, i, j]]
                     for i in range(length) for j in range(i + 1, length + 1))
        losses.append(max(margin, 0.0))
    return losses


def _hinge(logits, gold, lengths):
    """span_hinge_loss_sum on the charts' spans, as SpanParserLoss gives them."""
    positions = span_positions(tf.constant(lengths), logits.shape[1])
    span_logits = tf.gather_nd(tf.constant(logits, tf.float32), positions)
    return span_hinge_loss_sum(span_logits, positions, tf.gather_nd(gold, positions), tf.constant(lengths),
                               len(lengths), logits.shape[1])


def test_the_hinge_loss_is_the_margin_of_the_best_tree_with_the_hamming_loss_added():
    lengths = [6, 1, 0, 3, 2]  # the third left out, as a sentence whose gold tree could not be read
    logits, gold = _random_trees(lengths, seed=0)
    expected = _expected_hinge(logits, gold, lengths)
    assert sum(loss > 0 for loss in expected) >= 3  # random scores: most sentences have a margin to pay
    np.testing.assert_allclose(float(_hinge(logits, gold, lengths)), sum(expected), rtol=1e-5)
    # Each sentence alone gives its own share: sentences do not reach into each other's charts.
    for row, length in enumerate(lengths):
        alone = [length if other == row else 0 for other in range(len(lengths))]
        np.testing.assert_allclose(float(_hinge(logits, gold, alone)), expected[row], rtol=1e-5, atol=1e-6)


def test_a_sentence_left_out_with_its_spans_in_the_chart_adds_nothing_and_gets_no_gradient():
    """A sentence whose target could not be read keeps its spans in the model's chart (their positions
    come from its source's words, 4 here) but has length 0 and gold label -1 (SpanParserLoss): the
    loss is the other sentences' and its spans' logits get no gradient."""
    lengths = [6, 1, 0, 3]
    logits, gold = _random_trees(lengths, seed=4)  # the third sentence's gold: -1 everywhere
    positions = span_positions(tf.constant([6, 1, 4, 3]), logits.shape[1])
    span_logits = tf.Variable(tf.gather_nd(tf.constant(logits, tf.float32), positions))
    gold_spans = tf.gather_nd(gold, positions)
    left_out = positions.numpy()[:, 0] == 2
    assert left_out.sum() == 4 * 5 // 2 and (gold_spans.numpy()[left_out] == -1).all()
    with tf.GradientTape() as tape:
        loss = span_hinge_loss_sum(span_logits, positions, gold_spans, tf.constant(lengths), 4, logits.shape[1])
    expected = _expected_hinge(logits, gold, lengths)
    assert sum(share > 0 for share in expected) >= 2
    np.testing.assert_allclose(float(loss), sum(expected), rtol=1e-5)
    gradient = tape.gradient(loss, span_logits).numpy()
    assert not gradient[left_out].any() and gradient[~left_out].any()


def test_gold_ahead_by_the_margin_costs_nothing_and_the_gradient_moves_wrong_labels_down():
    lengths = [5, 4]
    _, gold = _random_trees(lengths, seed=1)
    ahead = 1.5 * np.eye(LABELS)[np.maximum(gold, 0)]  # every gold label 1.5 above the others
    assert float(_hinge(ahead, gold, lengths)) == 0.0
    barely = 0.5 * np.eye(LABELS)[np.maximum(gold, 0)]  # ahead, but by less than the margin of 1
    assert float(_hinge(barely, gold, lengths)) > 0.0

    logits, gold = _random_trees(lengths, seed=2)
    positions = span_positions(tf.constant(lengths), logits.shape[1])
    span_logits = tf.Variable(tf.gather_nd(tf.constant(logits, tf.float32), positions))
    gold_spans = tf.gather_nd(gold, positions)
    with tf.GradientTape() as tape:
        loss = span_hinge_loss_sum(span_logits, positions, gold_spans, tf.constant(lengths), 2, logits.shape[1])
    gradient = tape.gradient(loss, span_logits).numpy()
    assert float(loss) > 0
    # +1 at the label the augmented tree gives a span, -1 at its gold label: 0 where they agree.
    expected = np.zeros_like(gradient)
    for row, length in enumerate(lengths):
        augmented = logits[row] + 1.0 - np.eye(LABELS)[np.maximum(gold[row], 0)]
        predicted = best_spans(augmented, length)
        for k, (b, i, j) in enumerate(positions.numpy()):
            if b == row:
                expected[k, predicted.get((i, j), 0)] += 1.0
                expected[k, gold[row, i, j]] -= 1.0
    assert np.abs(expected).sum() > 0
    np.testing.assert_array_equal(gradient, expected)


def test_a_training_step_with_the_hinge_loss(depth_run):  # noqa: F811
    """span_loss="hinge" reaches the training step's loss (compiled, not XLA): the tags'
    cross-entropy plus the hinge, per word, unlike the local loss of the same weights."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    source_ids, target_ids = stream_batch(tokenizer, pairs[:6])
    target_input = tf.pad(target_ids[:, :-1], [[0, 0], [1, 0]], constant_values=BOS_ID)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=128, dropout_rate=0.0, span_loss="hinge")
    keras.utils.set_random_seed(3)
    model = TrainingSpanParser(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    model.prepare_for_training()
    assert model.default_loss().span_loss == "hinge"
    outputs = model((source_ids, target_input))
    hinge_total, words, _ = SpanParserLoss(targets, span_loss="hinge").sum_and_count(target_ids, outputs)
    local_total, _, _ = SpanParserLoss(targets).sum_and_count(target_ids, outputs)
    tags_total, tag_words = tag_loss_sum(outputs[2], tf.constant(gold_arrays(trees[:6], span_labels)[1]))
    assert float(words) == float(tag_words) == sum(len(tree.words()) for tree in trees[:6])
    assert float(hinge_total) > float(tags_total) and float(hinge_total) != pytest.approx(float(local_total))
    logs = model.train_on_batch((source_ids, target_input), target_ids, return_dict=True)
    assert logs["loss"] == pytest.approx(float(hinge_total) / float(words), rel=1e-5)
    after = model((source_ids, target_input))
    assert float(SpanParserLoss(targets, span_loss="hinge").sum_and_count(target_ids, after)[0]) < float(hinge_total)


def test_the_span_loss_is_checked_and_the_transformer_refuses_the_hinge():
    config = TransformerConfig(vocab_size=100, num_layers=1, d_model=32, d_ff=64, num_heads=2, max_length=64)
    with pytest.raises(ValueError, match=r"span_loss must be one of \('local', 'hinge'\); got 'margin'"):
        dataclasses.replace(config, span_loss="margin")
    with pytest.raises(ValueError, match="span_loss='hinge' is a span parser's loss on its spans"):
        Transformer(dataclasses.replace(config, span_loss="hinge"))
    with pytest.raises(ValueError, match="span_loss must be one of"):
        SpanParserLoss(None, span_loss="margin")
