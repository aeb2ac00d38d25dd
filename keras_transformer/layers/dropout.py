"""Dropout with a mask of its own on every replica of a distribution strategy.

keras.layers.Dropout draws each mask with a stateless random op seeded by its SeedGenerator, whose
state is one variable, mirrored under MirroredStrategy, MultiWorkerMirroredStrategy and
TPUStrategy: every replica draws the same seed, and so the same mask for tensors of the same shape
(the first rows of a smaller batch too). Example i of every replica then loses the same units,
where one device training on the same global batch draws an independent mask for each example.
This layer folds the replica's id in the sync group (global across workers) into the seed. With
one replica it draws exactly what keras.layers.Dropout draws.
"""
import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class Dropout(keras.layers.Dropout):
    """keras.layers.Dropout whose masks differ between the replicas of a strategy (see above)."""

    def call(self, inputs, training=False):
        context = tf.distribute.get_replica_context()
        if not (training and 0 < self.rate < 1) or context is None or context.num_replicas_in_sync == 1:
            return super().call(inputs, training=training)
        seed = self.seed_generator.next()
        # As Keras' TensorFlow backend makes the int32 seed of its int64 state (XLA wants int32 seeds).
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
        replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
        seed = tf.random.experimental.stateless_fold_in(seed, replica)
        noise_shape = None if self.noise_shape is None else [
            tf.shape(inputs)[axis] if size is None else size for axis, size in enumerate(self.noise_shape)]
        return tf.nn.experimental.stateless_dropout(inputs, rate=self.rate, noise_shape=noise_shape, seed=seed)
