"""Label-smoothed cross-entropy over sparse targets, ignoring padding (section 5.4)."""
import keras
import tensorflow as tf

from keras_transformer.config import PAD_ID


def token_cross_entropy(labels, logits, label_smoothing):
    """Per-token smoothed loss and plain negative log-likelihood, both (B, T) float32.

    The smoothed target puts 1 - eps on the label and eps / V on every class (Szegedy et al.), so
    loss = (1 - eps) * NLL + eps * mean_k(-log p_k). Written with logsumexp so the (B, T, V) log-softmax
    is never materialized: -log p_k = logsumexp(z) - z_k.
    """
    logits = tf.cast(logits, tf.float32)
    log_normalizer = tf.reduce_logsumexp(logits, axis=-1)  # (B, T)
    label_logit = tf.gather(logits, labels, batch_dims=labels.shape.rank)  # (B, T)
    nll = log_normalizer - label_logit
    if label_smoothing == 0:
        return nll, nll
    uniform = log_normalizer - tf.reduce_mean(logits, axis=-1)
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform, nll


@keras.saving.register_keras_serializable(package="keras_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Cross-entropy against label-smoothed targets, summed over real target tokens and divided by
    their number (padding, id `pad_id`, counts for nothing).

    Call with y_true (B, T) int ids and y_pred (B, T, V) logits; returns a scalar. The model's
    `train_step` uses `sum_and_count` instead so that, under a distribution strategy, the loss is
    divided by the number of real tokens in the whole global batch.
    """

    def __init__(self, label_smoothing=0.1, pad_id=PAD_ID, name="label_smoothed_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing
        self.pad_id = pad_id

    def sum_and_count(self, y_true, y_pred):
        """(sum of the smoothed loss over real tokens, number of real tokens, sum of the NLL)."""
        y_true = tf.cast(y_true, tf.int32)
        real = tf.cast(tf.not_equal(y_true, self.pad_id), tf.float32)
        loss, nll = token_cross_entropy(y_true, y_pred, self.label_smoothing)
        return tf.reduce_sum(loss * real), tf.reduce_sum(real), tf.reduce_sum(nll * real)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if sample_weight is not None:
            raise ValueError("LabelSmoothedCrossEntropy weighs tokens by the padding of y_true; "
                             "sample_weight is not supported")
        total, count, _ = self.sum_and_count(y_true, y_pred)
        return total / tf.maximum(count, 1.0)

    def call(self, y_true, y_pred):
        y_true = tf.cast(y_true, tf.int32)
        loss, _ = token_cross_entropy(y_true, y_pred, self.label_smoothing)
        return loss * tf.cast(tf.not_equal(y_true, self.pad_id), loss.dtype)

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing, "pad_id": self.pad_id}
