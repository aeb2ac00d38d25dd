"""R-Drop (TransformerConfig.rdrop_alpha): the loss, its gradient and a training run."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.config import TrainConfig
from keras_transformer.training.training_model import rng_state_variables


def _batch(rng, rows=6, vocab=30):
    source = rng.integers(4, vocab, size=(rows, 7)).astype(np.int32)
    target = rng.integers(4, vocab, size=(rows, 8)).astype(np.int32)
    for i in range(rows):
        source[i, 2 + i % 5:] = 0
        target[i, 2 + (i * 3) % 6:] = 0
    return (tf.constant(source), tf.constant(target[:, :-1])), tf.constant(target[:, 1:])


def _reference_total(y, both, alpha, eps):
    """The R-Drop token-loss sum spelled out with dense smoothed targets, from the logits of the
    batch stacked twice."""
    first, second = tf.split(tf.cast(both, tf.float32), 2, axis=0)
    vocab = both.shape[-1]
    real = tf.cast(tf.not_equal(y, 0), tf.float32)
    target = tf.one_hot(y, vocab) * (1 - eps) + eps / vocab
    log_p, log_q = tf.nn.log_softmax(first), tf.nn.log_softmax(second)
    cross_entropy = (-tf.reduce_sum(target * log_p, -1) - tf.reduce_sum(target * log_q, -1)) / 2
    kl_pq = tf.reduce_sum(tf.exp(log_p) * (log_p - log_q), -1)
    kl_qp = tf.reduce_sum(tf.exp(log_q) * (log_q - log_p), -1)
    return tf.reduce_sum(real * (cross_entropy + alpha / 2 * (kl_pq + kl_qp) / 2))


@pytest.mark.parametrize("alpha", [0.7, 5.0])
def test_the_loss_and_gradient_are_the_two_passes_cross_entropy_and_their_weighted_kl(alpha):
    """The step's loss and gradient equal the formula's, computed from the same dropout masks (the
    seed generators' states put back between the two)."""
    model = kt.Transformer.from_preset("tiny", vocab_size=30, dropout_rate=0.3, rdrop_alpha=alpha)
    model.compile(optimizer=keras.optimizers.SGD(1.0))
    x, y = _batch(np.random.default_rng(0))
    model(x)
    states = [variable.numpy() for variable in rng_state_variables(model)]
    assert states, "the dropout layers' seed generators"
    count = float(tf.reduce_sum(tf.cast(tf.not_equal(y, 0), tf.float32)))
    gradients, logits, total, returned_count = model._uncompiled_loss_and_gradients(x, y, tf.constant(count))

    for variable, state in zip(rng_state_variables(model), states):
        variable.assign(state)
    with tf.GradientTape() as tape:
        both = model(tuple(tf.concat([t, t], 0) for t in x), training=True)
        expected_total = _reference_total(y, both, alpha, model.config.label_smoothing)
        expected_loss = expected_total / count
    expected_gradients = tape.gradient(expected_loss, model.trainable_weights)

    assert float(returned_count) == count
    np.testing.assert_allclose(logits.numpy(), both.numpy()[:6], rtol=1e-6, atol=1e-6)
    assert not np.allclose(both.numpy()[:6], both.numpy()[6:]), "the two passes had the same masks"
    assert float(total) == pytest.approx(float(expected_total), rel=1e-5)
    for got, want in zip(gradients, expected_gradients):
        np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), tf.convert_to_tensor(want).numpy(),
                                   rtol=1e-4, atol=1e-6)


def test_without_it_the_loss_is_one_pass():
    """rdrop_alpha=0 (the default) keeps the one-pass loss: same masks, same total."""
    model = kt.Transformer.from_preset("tiny", vocab_size=30, dropout_rate=0.3)
    assert model.config.rdrop_alpha == 0
    model.compile(optimizer=keras.optimizers.SGD(1.0))
    x, y = _batch(np.random.default_rng(1))
    model(x)
    states = [variable.numpy() for variable in rng_state_variables(model)]
    _, logits, total, _ = model._uncompiled_loss_and_gradients(x, y, tf.constant(1.0))
    for variable, state in zip(rng_state_variables(model), states):
        variable.assign(state)
    one_pass = model(x, training=True)
    expected, _, _ = model.loss.sum_and_count(y, one_pass)
    np.testing.assert_allclose(logits.numpy(), one_pass.numpy(), rtol=1e-6, atol=1e-6)
    assert float(total) == pytest.approx(float(expected), rel=1e-6)


@pytest.mark.parametrize("alpha", [-1.0, float("nan"), float("inf"), "5"])
def test_a_bad_alpha_is_refused(alpha):
    with pytest.raises(ValueError, match="rdrop_alpha must be a finite number >= 0"):
        kt.TransformerConfig(dropout_rate=0.1, rdrop_alpha=alpha)


def test_it_needs_dropout():
    with pytest.raises(ValueError, match="every dropout rate is 0"):
        kt.TransformerConfig(dropout_rate=0.0, rdrop_alpha=1.0)
    assert kt.TransformerConfig(dropout_rate=0.0, relu_dropout_rate=0.1, rdrop_alpha=1.0).rdrop_alpha == 1.0


def test_fit_with_it_learns_to_copy():
    """Keras' fit through the model's train_step, with R-Drop: a copy task is learned."""
    rng = np.random.default_rng(0)
    source = rng.integers(4, 20, size=(2048, 6)).astype(np.int32)
    source[:, -1] = kt.EOS_ID
    target_in = np.concatenate([np.full((2048, 1), kt.BOS_ID, np.int32), source[:, :-1]], 1)
    dataset = tf.data.Dataset.from_tensor_slices(((source, target_in), source)).batch(64).repeat()
    model = kt.Transformer.from_preset("tiny", vocab_size=20, dropout_rate=0.1, rdrop_alpha=1.0, num_layers=1)
    model.compile(optimizer=kt.paper_optimizer(model.config.d_model, TrainConfig(warmup_steps=100)))
    history = model.fit(dataset, steps_per_epoch=100, epochs=3, verbose=0, shuffle=False).history
    assert history["loss"][-1] < 0.5 * history["loss"][0], history
    assert history["token_accuracy"][-1] > 0.9, history
