"""Dropout that drops at its rate in every precision, with a mask of its own on every replica.

keras.layers.Dropout draws one uniform number per unit in the layer's compute dtype and drops the
unit when it is below the rate. A bfloat16 uniform number takes 128 values, so under
mixed_bfloat16 rate 0.1 drops 10.14% of the units and 0.3 drops 30.46%, and the kept ones are
scaled by 1 / (1 - rate) rounded to bfloat16: the output's mean is 0.997 (0.994) times the
input's, which inference passes on unchanged (float16: 0.9994 and 0.9989). This layer draws 16
random bits per unit, two units from each 32-bit word of a stateless random draw (half the random
numbers a float32 mask takes), keeps a unit when its bits are at least round(rate * 2^16), and
scales the kept units by the inverse of that keep probability in float32 before it rounds them to
the compute dtype: in every dtype the rate is exact to 2^-16 and the mean is the input's.

keras.layers.Dropout's seed is one variable, mirrored under MirroredStrategy,
MultiWorkerMirroredStrategy and TPUStrategy: every replica would draw the same mask for tensors of
the same shape, so example i of every replica would lose the same units, where one device
training on the same global batch draws an independent mask for each example. This layer folds
the replica's id in the sync group (global across workers) into the seed.
"""
import keras
import tensorflow as tf

# Random bits per unit: a keep probability is a multiple of 2^-16.
MASK_BITS = 16


def keep_threshold(rate):
    """The 16-bit draws below which a unit is dropped: round(rate * 2^16), within [1, 2^16 - 1]
    for 0 < rate < 1 (a rate that rounds to 0 or to 1 still drops, and still keeps, some)."""
    return min(max(round(rate * 2 ** MASK_BITS), 1), 2 ** MASK_BITS - 1)


def dropout_mask(shape, rate, seed):
    """A bool tensor of `shape` (a 1-D int32 tensor or list), True where a unit is kept: with
    probability 1 - keep_threshold(rate) / 2^16 each, from the stateless int32 seed (2,)."""
    size = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform([(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:size]  # 2 x 16 bits from each word
    return tf.reshape(bits >= tf.constant(keep_threshold(rate), tf.uint16), shape)


def stateless_dropout(inputs, rate, seed, noise_shape=None):
    """inputs with the units of dropout_mask dropped and the others scaled by 1 / keep probability
    (multiplied in float32, then rounded to the inputs' dtype once). noise_shape as
    keras.layers.Dropout's (None entries: the inputs' size), broadcast to the inputs."""
    shape = tf.shape(inputs) if noise_shape is None else tf.stack(
        [tf.shape(inputs)[axis] if size is None else size for axis, size in enumerate(noise_shape)])
    keep = dropout_mask(shape, rate, seed)
    scale = 2 ** MASK_BITS / (2 ** MASK_BITS - keep_threshold(rate))
    if inputs.dtype == tf.float32 or inputs.dtype == tf.float64:
        scaled = inputs * tf.constant(scale, inputs.dtype)
    else:  # a reduced-precision product with the float32 scale, rounded once: unbiased
        scaled = tf.cast(tf.cast(inputs, tf.float32) * scale, inputs.dtype)
    return tf.where(keep, scaled, tf.zeros([], inputs.dtype))


def replica_seed(seed_generator):
    """The next stateless int32 seed (2,) of a keras.random.SeedGenerator, with the replica's id in
    its sync group folded in under a distribution strategy of several replicas (see above)."""
    seed = seed_generator.next()
    # As Keras' TensorFlow backend makes the int32 seed of its int64 state (XLA wants int32 seeds).
    seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
        seed = tf.random.experimental.stateless_fold_in(seed, replica)
    return seed


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout, with masks exact in every dtype and different on every replica (see above)."""

    def call(self, inputs, training=False):
        if not (training and self.rate > 0):
            return inputs
        if self.rate >= 1:
            return tf.zeros_like(inputs)
        return stateless_dropout(inputs, self.rate, replica_seed(self.seed_generator), self.noise_shape)
