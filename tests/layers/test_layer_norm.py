import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers.encoder import LayerNormalization


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16"])
def test_layer_norm_equals_keras_layer_norm(dtype):
    x = tf.random.stateless_normal((3, 5, 16), seed=(1, 2)) * 3.0 + 1.5
    ours = LayerNormalization(epsilon=1e-6, dtype=dtype)
    reference = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    ours.build(x.shape)
    reference.build(x.shape)
    weights = [np.linspace(0.5, 2.0, 16, dtype="float32"), np.linspace(-1.0, 1.0, 16, dtype="float32")]
    ours.set_weights(weights)
    reference.set_weights(weights)
    assert [w.name for w in ours.weights] == [w.name for w in reference.weights] == ["gamma", "beta"]
    got, expected = ours(x), reference(x)
    assert got.dtype == expected.dtype
    tolerance = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(tf.cast(got, tf.float32), tf.cast(expected, tf.float32), atol=tolerance)
    # Normalized over the last axis: zero mean and unit variance before gamma and beta.
    normalized = (tf.cast(got, tf.float32) - weights[1]) / weights[0]
    np.testing.assert_allclose(tf.reduce_mean(normalized, -1), 0.0, atol=tolerance)
    np.testing.assert_allclose(tf.math.reduce_std(normalized, -1), 1.0, atol=tolerance)


def test_layer_norm_gradients_equal_keras_layer_norm():
    x = tf.random.stateless_normal((4, 8), seed=(3, 4))
    ours, reference = LayerNormalization(epsilon=1e-6), keras.layers.LayerNormalization(epsilon=1e-6)
    gradients = []
    for layer in (ours, reference):
        layer.build(x.shape)
        layer.set_weights([np.full(8, 1.5, "float32"), np.full(8, 0.25, "float32")])
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x) * tf.range(8, dtype=tf.float32))
        gradients.append(tape.gradient(loss, [x] + layer.trainable_weights))
    for got, expected in zip(*gradients):
        np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("kwargs", [dict(center=False), dict(scale=False), dict(rms_scaling=True), dict(axis=1)])
@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`:UserWarning")  # Keras' own, for the option refused
def test_layer_norm_refuses_options_it_does_not_compute(kwargs):
    with pytest.raises(ValueError, match="last axis with gamma and beta"):
        LayerNormalization(**kwargs)
