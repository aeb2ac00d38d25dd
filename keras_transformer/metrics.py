"""Token accuracy and perplexity over real target tokens (padding ignored)."""
import keras
import tensorflow as tf

from keras_transformer.config import PAD_ID
from keras_transformer.losses import token_cross_entropy
from keras_transformer.masking import padding_mask


class _TokenMean(keras.metrics.Metric):
    """A mean over real target tokens of a per-token value; y_true (B, T) ids, y_pred (B, T, V) logits."""

    def __init__(self, name, pad_id=PAD_ID, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = pad_id
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_true = tf.cast(y_true, tf.int32)
        real = tf.cast(padding_mask(y_true, self.pad_id), tf.float32)
        if sample_weight is not None:
            real *= tf.cast(sample_weight, tf.float32)
        self.total.assign_add(tf.reduce_sum(self.token_values(y_true, y_pred) * real))
        self.count.assign_add(tf.reduce_sum(real))

    def mean(self):
        return self.total / tf.maximum(self.count, 1.0)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {"name": self.name, "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedTokenAccuracy(_TokenMean):
    """Share of real target tokens whose arg-max logit is the label."""

    def __init__(self, name="token_accuracy", pad_id=PAD_ID, **kwargs):
        super().__init__(name=name, pad_id=pad_id, **kwargs)

    def token_values(self, y_true, y_pred):
        return tf.cast(tf.equal(tf.argmax(y_pred, axis=-1, output_type=tf.int32), y_true), tf.float32)

    def result(self):
        return self.mean()


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_TokenMean):
    """exp of the mean negative log-likelihood per real target token (no label smoothing)."""

    def __init__(self, name="perplexity", pad_id=PAD_ID, **kwargs):
        super().__init__(name=name, pad_id=pad_id, **kwargs)

    def token_values(self, y_true, y_pred):
        return token_cross_entropy(y_true, y_pred, 0.0)[1]

    def result(self):
        return tf.exp(self.mean())
