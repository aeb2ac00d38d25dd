import math

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import LabelSmoothedCrossEntropy, MaskedTokenAccuracy, Perplexity
from keras_transformer.losses import symmetric_kl_sum


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


def test_sum_and_count_sum_the_smoothed_loss_and_the_nll_of_real_tokens_only():
    eps, vocab = 0.1, 4
    smoothed, nll = 0.0, 0.0
    for position in range(2):
        log_p = _log_softmax(LOGITS[0, position])
        target = np.full(vocab, eps / vocab)
        target[LABELS[0, position]] += 1 - eps
        smoothed -= (target * log_p).sum()
        nll -= log_p[LABELS[0, position]]
    total, count, nll_total = LabelSmoothedCrossEntropy(eps).sum_and_count(LABELS, LOGITS)
    assert float(count) == 2
    assert float(total) == pytest.approx(smoothed, rel=1e-6)
    assert float(nll_total) == pytest.approx(nll, rel=1e-6) and nll < smoothed


def test_metrics_ignore_padding():
    accuracy, perplexity = MaskedTokenAccuracy(), Perplexity()
    accuracy.update_state(LABELS, LOGITS)
    perplexity.update_state(LABELS, LOGITS)
    assert float(accuracy.result()) == pytest.approx(0.5)  # position 0 predicts 0, position 1 predicts 2
    nll = [-_log_softmax(LOGITS[0, 0])[1], -_log_softmax(LOGITS[0, 1])[2]]
    assert float(perplexity.result()) == pytest.approx(math.exp(np.mean(nll)), rel=1e-5)


def _naive_token_loss(labels, logits, eps):
    """The smoothed loss spelled out with a dense smoothed target, differentiated by TensorFlow."""
    vocab = logits.shape[-1]
    target = tf.one_hot(labels, vocab) * (1 - eps) + eps / vocab
    return -tf.reduce_sum(target * tf.nn.log_softmax(logits), axis=-1)


@pytest.mark.parametrize("eps", [0.1, 0.0])
def test_loss_gradient_is_the_softmax_minus_the_smoothed_target(eps):
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(size=(3, 5, 7)) * 3, tf.float32)
    labels = tf.constant(rng.integers(1, 7, size=(3, 5)))
    labels = tf.tensor_scatter_nd_update(labels, [[0, 4], [2, 3]], [0, 0])  # two padding positions
    loss = LabelSmoothedCrossEntropy(label_smoothing=eps)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        total, count, _ = loss.sum_and_count(labels, logits)
        real = tf.cast(labels != 0, tf.float32)
        naive_total = tf.reduce_sum(_naive_token_loss(labels, logits, eps) * real)
    gradient = tape.gradient(total, logits).numpy()
    assert float(count) == 13
    assert float(total) == pytest.approx(float(naive_total), rel=1e-6)
    np.testing.assert_allclose(gradient, tape.gradient(naive_total, logits), atol=1e-6)
    smoothed_target = tf.one_hot(labels, 7) * (1 - eps) + eps / 7
    np.testing.assert_allclose(gradient, (tf.nn.softmax(logits) - smoothed_target) * real[..., None], atol=1e-6)


def test_nll_gradient_and_mixed_precision_logits():
    rng = np.random.default_rng(1)
    logits = tf.constant(rng.normal(size=(2, 3, 5)), tf.bfloat16)
    labels = tf.constant(rng.integers(1, 5, size=(2, 3)))
    with tf.GradientTape() as tape:
        tape.watch(logits)
        _, _, nll_sum = LabelSmoothedCrossEntropy(label_smoothing=0.1).sum_and_count(labels, logits)
    gradient = tape.gradient(nll_sum, logits)
    assert gradient.dtype == tf.bfloat16
    expected = tf.nn.softmax(tf.cast(logits, tf.float32)) - tf.one_hot(labels, 5)
    np.testing.assert_allclose(tf.cast(gradient, tf.float32), expected, atol=1e-2)


def test_the_symmetric_kl_is_the_mean_of_both_directions_over_real_tokens():
    """R-Drop's term against KL divergences summed by hand in float64; padding adds nothing and
    gets no gradient."""
    rng = np.random.default_rng(0)
    logits_p = rng.normal(size=(2, 3, 7)) * 2
    logits_q = rng.normal(size=(2, 3, 7)) * 2
    real = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    want = 0.0
    for b, t in zip(*np.nonzero(real)):
        log_p, log_q = _log_softmax(logits_p[b, t]), _log_softmax(logits_q[b, t])
        kl_pq = (np.exp(log_p) * (log_p - log_q)).sum()
        kl_qp = (np.exp(log_q) * (log_q - log_p)).sum()
        want += (kl_pq + kl_qp) / 2
    source = tf.constant(logits_p, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(source)
        got = symmetric_kl_sum(source, tf.constant(logits_q, tf.float32), tf.constant(real))
    assert float(got) == pytest.approx(want, rel=1e-5)
    gradient = tape.gradient(got, source).numpy()
    assert np.all(gradient[real == 0] == 0) and np.any(gradient[real == 1] != 0)
