"""Dropout under a distribution strategy: each replica draws its own mask (keras.layers.Dropout
draws the same one on every replica); one replica draws what keras.layers.Dropout draws."""
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


def test_one_replica_draws_what_keras_dropout_draws():
    ours, keras_dropout = Dropout(0.3, seed=11), keras.layers.Dropout(0.3, seed=11)
    inputs = tf.random.normal([2, 7, 8])
    for _ in range(2):  # the seeds advance alike
        np.testing.assert_array_equal(ours(inputs, training=True), keras_dropout(inputs, training=True))
    np.testing.assert_array_equal(ours(inputs, training=False), inputs)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        ours, keras_dropout = Dropout(0.3, seed=11), keras.layers.Dropout(0.3, seed=11)
    results = [strategy.run(tf.function(lambda layer=layer: layer(inputs, training=True)))
               for layer in (ours, keras_dropout)]
    np.testing.assert_array_equal(*results)


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
