import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import LabelSmoothedCrossEntropy, MaskedTokenAccuracy, Perplexity


def _log_softmax(row):
    row = np.asarray(row, np.float64)
    return row - math.log(np.exp(row).sum())


LOGITS = np.array([[[2.0, 0.5, -1.0, 0.0], [0.1, 0.2, 3.0, -0.5], [9.0, 9.0, 9.0, 9.0]]], np.float32)
LABELS = np.array([[1, 2, 0]])  # the last position is padding


def test_loss_equals_a_hand_computation_with_smoothing_and_padding():
    eps, vocab = 0.1, 4
    expected = []
    for position in range(2):
        log_p = _log_softmax(LOGITS[0, position])
        target = np.full(vocab, eps / vocab)
        target[LABELS[0, position]] += 1 - eps
        expected.append(-(target * log_p).sum())
    loss = LabelSmoothedCrossEntropy(label_smoothing=eps)(tf.constant(LABELS), tf.constant(LOGITS))
    assert float(loss) == pytest.approx(np.mean(expected), rel=1e-6)


def test_without_smoothing_it_is_the_mean_nll_of_real_tokens():
    nll = [-_log_softmax(LOGITS[0, 0])[1], -_log_softmax(LOGITS[0, 1])[2]]
    loss = LabelSmoothedCrossEntropy(label_smoothing=0.0)(LABELS, LOGITS)
    assert float(loss) == pytest.approx(np.mean(nll), rel=1e-6)


def test_sum_and_count_count_real_tokens_only():
    total, count, nll = LabelSmoothedCrossEntropy(0.0).sum_and_count(LABELS, LOGITS)
    assert float(count) == 2
    assert float(total) == pytest.approx(float(nll))


def test_metrics_ignore_padding():
    accuracy, perplexity = MaskedTokenAccuracy(), Perplexity()
    accuracy.update_state(LABELS, LOGITS)
    perplexity.update_state(LABELS, LOGITS)
    assert float(accuracy.result()) == pytest.approx(0.5)  # position 0 predicts 0, position 1 predicts 2
    nll = [-_log_softmax(LOGITS[0, 0])[1], -_log_softmax(LOGITS[0, 1])[2]]
    assert float(perplexity.result()) == pytest.approx(math.exp(np.mean(nll)), rel=1e-5)
