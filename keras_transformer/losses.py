"""Label-smoothed cross-entropy over sparse targets, ignoring padding (section 5.4)."""
import keras
import tensorflow as tf

from keras_transformer.config import PAD_ID
from keras_transformer.masking import padding_mask


def token_cross_entropy(labels, logits, label_smoothing):
    """Per-token smoothed loss and plain negative log-likelihood, both (B, T) float32.

    The smoothed target puts 1 - eps on the label and eps / V on every class (Szegedy et al.), so
    loss = (1 - eps) * NLL + eps * mean_k(-log p_k), with -log p_k = logsumexp(z) - z_k.

    The (B, T, V) logits are the largest tensor of a training step (0.5 GB at the base shapes), so
    the forward pass and the gradient are each one XLA-fused function that reads them once or twice
    and never materializes the log-softmax or a one-hot target; written with plain TensorFlow ops,
    the loss and its gradient took about a tenth of a base training step on a CPU.
    """
    labels = tf.cast(labels, tf.int32)
    logits = tf.cast(logits, tf.float32)
    vocab_size = tf.shape(logits)[-1]
    loss, nll = _flat_cross_entropy(tf.reshape(logits, [-1, vocab_size]), tf.reshape(labels, [-1]),
                                    float(label_smoothing))
    return tf.reshape(loss, tf.shape(labels)), tf.reshape(nll, tf.shape(labels))


def _flat_cross_entropy(logits, labels, label_smoothing):
    """token_cross_entropy on (N, V) logits and (N,) labels, with a hand-written gradient."""

    @tf.custom_gradient
    def loss_and_nll(logits):
        loss, nll, log_normalizer = _forward(logits, labels, label_smoothing)

        def gradient(loss_upstream, nll_upstream):
            return _logits_gradient(logits, labels, log_normalizer, _or_zeros(loss_upstream, loss),
                                    _or_zeros(nll_upstream, nll), label_smoothing)

        return (loss, nll), gradient

    return loss_and_nll(logits)


def _or_zeros(upstream, like):
    return tf.zeros_like(like) if upstream is None else upstream


@tf.function(jit_compile=True, autograph=False)
def _forward(logits, labels, label_smoothing):
    """(smoothed loss, NLL, logsumexp), each (N,)."""
    log_normalizer = tf.reduce_logsumexp(logits, axis=-1)
    nll = log_normalizer - tf.gather(logits, labels[:, None], batch_dims=1)[:, 0]
    if label_smoothing == 0:
        return nll, nll, log_normalizer
    uniform = log_normalizer - tf.reduce_mean(logits, axis=-1)
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform, nll, log_normalizer


@tf.function(jit_compile=True, autograph=False)
def _logits_gradient(logits, labels, log_normalizer, loss_upstream, nll_upstream, label_smoothing):
    """d(sum loss_upstream * loss + nll_upstream * nll) / d logits, (N, V).

    d loss / d z = p - (1 - eps) * onehot(label) - eps / V and d NLL / d z = p - onehot(label).
    """
    probabilities = tf.exp(logits - log_normalizer[:, None])
    vocab_size = tf.cast(tf.shape(logits)[-1], logits.dtype)
    on_label = (1.0 - label_smoothing) * loss_upstream + nll_upstream
    is_label = tf.equal(tf.range(tf.shape(logits)[-1])[None, :], labels[:, None])
    return (probabilities * (loss_upstream + nll_upstream)[:, None]
            - tf.where(is_label, on_label[:, None], 0.0)
            - (label_smoothing / vocab_size) * loss_upstream[:, None])


def symmetric_kl_sum(logits_p, logits_q, real):
    """sum over tokens of real * (KL(P || Q) + KL(Q || P)) / 2, P and Q the softmaxes of the (B, T, V)
    logits, real (B, T) 1 for a real token and 0 for padding: R-Drop's term (TransformerConfig's
    rdrop_alpha). KL(P || Q) + KL(Q || P) = sum_v (p_v - q_v) (log p_v - log q_v)."""
    return _symmetric_kl_sum(tf.cast(logits_p, tf.float32), tf.cast(logits_q, tf.float32),
                             tf.cast(real, tf.float32))


@tf.function(jit_compile=True, autograph=False)
def _symmetric_kl_sum(logits_p, logits_q, real):
    log_p = tf.nn.log_softmax(logits_p, axis=-1)
    log_q = tf.nn.log_softmax(logits_q, axis=-1)
    per_token = tf.reduce_sum((tf.exp(log_p) - tf.exp(log_q)) * (log_p - log_q), axis=-1)
    return 0.5 * tf.reduce_sum(per_token * real)


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

    def real_tokens(self, y_true, dtype=tf.float32):
        """(B, T) 1 at the real tokens of target ids y_true, 0 at padding."""
        return tf.cast(padding_mask(tf.cast(y_true, tf.int32), self.pad_id), dtype)

    def sum_and_count(self, y_true, y_pred):
        """(sum of the smoothed loss over real tokens, number of real tokens, sum of the NLL)."""
        y_true = tf.cast(y_true, tf.int32)
        real = self.real_tokens(y_true)
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
        return loss * self.real_tokens(y_true, loss.dtype)

    def get_config(self):
        return {"name": self.name, "label_smoothing": self.label_smoothing, "pad_id": self.pad_id}
