import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.optimizers import Adam


def _train(optimizer_class, strategy, steps=5):
    """Weights and optimizer state of a Dense layer after `steps` updates on a squared-error loss."""
    with strategy.scope():
        layer = keras.layers.Dense(3, kernel_initializer=keras.initializers.RandomNormal(seed=0),
                                   bias_initializer="ones")
        layer.build((None, 5))
        optimizer = optimizer_class(learning_rate=0.01, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
        optimizer.build(layer.trainable_variables)

    def replica_step(inputs, targets):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum((layer(inputs) - targets) ** 2)
        optimizer.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables))

    step = tf.function(lambda inputs, targets: strategy.run(replica_step, args=(inputs, targets)))
    for index in range(steps):
        rng = np.random.default_rng(index)
        step(tf.constant(rng.normal(size=(4, 5)), tf.float32), tf.constant(rng.normal(size=(4, 3)), tf.float32))
    return [np.array(variable) for variable in [*layer.weights, *optimizer.variables]]


@pytest.mark.parametrize("strategy", [tf.distribute.get_strategy(), tf.distribute.MirroredStrategy(["/cpu:0"])],
                         ids=["default", "mirrored"])
def test_fused_adam_equals_keras_adam(strategy):
    for fused, keras_own in zip(_train(Adam, strategy), _train(keras.optimizers.Adam, strategy), strict=True):
        np.testing.assert_allclose(fused, keras_own, rtol=1e-5, atol=1e-7)


def test_fused_adam_moves_the_weights_the_first_step_by_the_learning_rate():
    # Adam's first step is lr * g / (|g| + epsilon) per weight: exactly lr in the direction of -g.
    weight = keras.Variable(np.zeros(3, "float32"))
    Adam(learning_rate=0.5, epsilon=1e-9).apply_gradients([(tf.constant([2.0, -3.0, 0.25]), weight)])
    np.testing.assert_allclose(weight.numpy(), [-0.5, 0.5, -0.5], rtol=1e-6)


def test_sparse_gradients_take_keras_path():
    weight = keras.Variable(np.zeros((4, 2), "float32"))
    gradient = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([2]), dense_shape=tf.constant([4, 2]))
    Adam(learning_rate=0.5).apply_gradients([(gradient, weight)])
    np.testing.assert_allclose(weight.numpy()[2], [-0.5, -0.5], rtol=1e-5)
    np.testing.assert_array_equal(weight.numpy()[[0, 1, 3]], 0.0)


def test_serializes():
    optimizer = keras.optimizers.deserialize(keras.optimizers.serialize(Adam(beta_2=0.98, epsilon=1e-9)))
    assert isinstance(optimizer, Adam) and optimizer.beta_2 == 0.98 and optimizer.epsilon == 1e-9


def test_dense_updates_are_one_fused_kernel_per_variable():
    weights = [keras.Variable(np.zeros((2, 3), "float32")), keras.Variable(np.zeros(3, "float32"))]
    optimizer = Adam(learning_rate=0.1)
    optimizer.build(weights)
    update = tf.function(lambda: optimizer.apply_gradients(zip([tf.ones((2, 3)), tf.ones(3)], weights)))
    op_types = [op.type for op in update.get_concrete_function().graph.get_operations()]
    assert op_types.count("ResourceApplyAdam") == 2
