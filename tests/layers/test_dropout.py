"""Dropout: the rate and the output's mean exact in every precision (keras.layers.Dropout's are
not in bfloat16), one mask per seed whatever the dtype, and under a distribution strategy a mask of
its own on each replica (keras.layers.Dropout draws the same one on every replica)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import Dropout


def _replica_results(strategy, function):
    return [np.asarray(value) for value in strategy.experimental_local_results(function())]


@pytest.mark.parametrize("jit_compile", [False, True])
def test_each_replica_draws_its_own_mask_and_every_call_a_new_one(jit_compile):
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{index}" for index in range(4)])
    with strategy.scope():
        ours, keras_dropout = Dropout(0.5, seed=7), keras.layers.Dropout(0.5, seed=7)
    inputs = tf.ones([3, 5, 16])

    @tf.function
    def masks(layer):
        # Under jit_compile each replica's pass is compiled apart, as Transformer.compile does it.
        def replica_pass():
            return tf.cast(layer(inputs, training=True) > 0, tf.int32)

        return strategy.run(lambda: tf.function(replica_pass, jit_compile=jit_compile, autograph=False)())

    first, second = _replica_results(strategy, lambda: masks(ours)), _replica_results(strategy, lambda: masks(ours))
    for results in (first, second):
        assert len({result.tobytes() for result in results}) == 4  # four replicas, four masks
        for result in results:
            assert 0.3 < result.mean() < 0.7
    assert all((a != b).any() for a, b in zip(first, second))
    # What this layer fixes: Keras' own draws one mask for every replica.
    assert len({result.tobytes() for result in _replica_results(strategy, lambda: masks(keras_dropout))}) == 1


def test_one_replica_draws_what_no_strategy_draws():
    ours = Dropout(0.3, seed=11)
    inputs = tf.random.normal([2, 7, 8])
    first, second = ours(inputs, training=True), ours(inputs, training=True)
    assert not np.array_equal(first, second)  # the seed advances
    np.testing.assert_array_equal(ours(inputs, training=False), inputs)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        mirrored = Dropout(0.3, seed=11)
    results = [strategy.run(tf.function(lambda: mirrored(inputs, training=True))) for _ in range(2)]
    np.testing.assert_array_equal(results[0], first)
    np.testing.assert_array_equal(results[1], second)


# 2^21 units: the dropped share's standard deviation is at most 3.5e-4, the mean's at most 4.6e-4.
UNITS = 1 << 21


def _policy(dtype):
    return keras.DTypePolicy(dtype if dtype == "float32" else f"mixed_{dtype}")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_the_rate_and_the_mean_are_exact_in_every_precision(dtype, rate):
    """keras.layers.Dropout in bfloat16 drops 10.14% at rate 0.1 and 30.46% at 0.3 (a bfloat16
    uniform number takes 128 values) and scales by 1 / (1 - rate) rounded to bfloat16: its output's
    mean is 0.997 and 0.994 times the input's, 13 standard deviations off here."""
    inputs = tf.random.uniform([UNITS], 1.0, 2.0)
    outputs = Dropout(rate, seed=5, dtype=_policy(dtype))(inputs, training=True)
    assert outputs.dtype == dtype
    seen = np.asarray(tf.cast(tf.cast(inputs, dtype), tf.float64))  # what the layer multiplies
    values = np.asarray(tf.cast(outputs, tf.float64))
    dropped = values == 0
    assert abs(dropped.mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / UNITS), dropped.mean()
    ratio = values.mean() / seen.mean()  # E[x^2] / E[x]^2 = 1.037 for x uniform in [1, 2)
    assert abs(ratio - 1) < 4 * np.sqrt(1.04 * rate / (1 - rate) / UNITS), ratio
    # The kept units: times 1 / keep probability in float32, rounded once to the dtype.
    scale = np.float32(2 ** 16 / (2 ** 16 - round(rate * 2 ** 16)))
    expected = np.asarray(tf.cast(tf.constant(seen, tf.float32) * scale, dtype), np.float64)
    np.testing.assert_array_equal(values[~dropped], expected[~dropped])


def test_a_seed_drops_the_same_units_in_every_precision_and_any_shape():
    inputs = tf.random.normal([3, 5, 7])  # 105 units: an odd number of 16-bit draws
    masks = []
    for dtype in ("float32", "bfloat16", "float16"):
        layer = Dropout(0.4, seed=3, dtype=_policy(dtype))
        outputs = layer(inputs, training=True)
        assert outputs.shape == inputs.shape
        masks.append(np.asarray(outputs) != 0)
    assert 0.2 < masks[0].mean() < 0.8
    for mask in masks[1:]:
        np.testing.assert_array_equal(mask, masks[0])


def test_a_noise_shape_drops_whole_vectors():
    layer = Dropout(0.5, noise_shape=(None, None, 1), seed=2)
    outputs = np.asarray(layer(tf.ones([4, 9, 6]), training=True))
    dropped = outputs == 0
    assert dropped.any() and not dropped.all()
    assert (dropped.all(axis=-1) | ~dropped.any(axis=-1)).all()  # a vector is dropped whole or kept whole
    np.testing.assert_allclose(outputs[~dropped], 2.0, rtol=1e-6)


def test_the_model_trains_each_replica_with_its_own_masks():
    """The tiny Transformer on the same batch on 2 replicas: different outputs under dropout, the
    same in inference."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        model = kt.Transformer.from_preset("tiny", vocab_size=50, num_layers=1)
    assert model.config.dropout_rate > 0
    source, target = tf.constant([[5, 6, 7, 2], [8, 9, 2, 0]]), tf.constant([[1, 5, 6, 7], [1, 8, 9, 0]])

    @tf.function
    def outputs(training):
        return strategy.run(lambda: model((source, target), training=training))

    training = _replica_results(strategy, lambda: outputs(True))
    assert not np.array_equal(*training)
    np.testing.assert_array_equal(*_replica_results(strategy, lambda: outputs(False)))
