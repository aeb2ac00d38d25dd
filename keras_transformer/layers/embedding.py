"""Token embeddings and the pre-softmax projection (section 3.4)."""
import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenEmbedding(keras.layers.Layer):
    """Embedding(ids) * sqrt(d_model), and the linear map back to vocabulary logits (section 3.4).

    One instance serves as the source embedding, the target embedding and the pre-softmax
    projection when they are shared (the paper); the model makes three when they are not.
    The matrix is drawn from N(0, d_model^-1/2) so that the scaled embeddings have unit variance.

    Args:
      vocab_size: V.
      d_model: D.

    Call arguments: ids (B, T) int. Returns (B, T, D).
    `logits(x)`: x (B, T, D) -> float32 logits (B, T, V), x E^T.
    """

    def __init__(self, vocab_size, d_model, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))
        super().build(input_shape)

    def call(self, ids):
        vectors = tf.gather(tf.cast(self.embeddings, self.compute_dtype), tf.cast(ids, tf.int32))
        return vectors * tf.cast(self.d_model ** 0.5, self.compute_dtype)

    def transposed_embeddings(self, dtype=None, block_sizes=None):
        """E^T (D, V) in dtype (default: the compute dtype), for `logits(x, transposed)`; with
        block_sizes (ints adding up to V), the list of its column blocks (D, V_i), each made by
        its own ops from the rows of E."""
        embeddings = tf.cast(self.embeddings, dtype or self.compute_dtype)
        if block_sizes is None:
            return tf.transpose(embeddings)
        return [tf.transpose(rows) for rows in tf.split(embeddings, block_sizes, axis=0)]

    def logits(self, x, transposed=None):
        """x (B, T, D) -> float32 logits (B, T, V). transposed: E^T from `transposed_embeddings`,
        made once when logits are taken many times (decoding): on CPU the matmul with a (D, V)
        operand is up to twice as fast as with E transposed on the fly. It may be a block of
        E^T's columns (D, V_i), which gives the logits of those tokens (B, T, V_i)."""
        shape = tf.shape(x)
        flat = tf.reshape(x, (-1, self.d_model))
        if transposed is None:
            logits = tf.matmul(flat, tf.cast(self.embeddings, x.dtype), transpose_b=True)  # (B*T, V)
        else:
            logits = tf.matmul(flat, tf.cast(transposed, x.dtype))  # (B*T, V_i)
        return tf.cast(tf.reshape(logits, tf.concat([shape[:-1], [logits.shape[-1]]], 0)), tf.float32)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}
