"""Multi-head attention (section 3.2), with a key/value cache for incremental decoding."""
import keras
import tensorflow as tf

from keras_transformer import masking


def dense(x, kernel, bias):
    """x (..., D_in) @ kernel (D_in, D_out) + bias, as one 2-D matmul (faster than a batched one on CPU)."""
    shape = tf.shape(x)
    y = tf.matmul(tf.reshape(x, (-1, kernel.shape[0])), tf.cast(kernel, x.dtype)) + tf.cast(bias, x.dtype)
    return tf.reshape(y, tf.concat([shape[:-1], [kernel.shape[1]]], axis=0))


def split_heads(x, num_heads, depth):
    """(B, T, H*depth) -> (B, H, T, depth)."""
    shape = tf.shape(x)
    x = tf.reshape(x, (shape[0], shape[1], num_heads, depth))  # (B, T, H, K)
    return tf.transpose(x, (0, 2, 1, 3))  # (B, H, T, K)


def merge_heads(x):
    """(B, H, T, depth) -> (B, T, H*depth)."""
    shape = tf.shape(x)
    x = tf.transpose(x, (0, 2, 1, 3))  # (B, T, H, K)
    return tf.reshape(x, (shape[0], shape[2], x.shape[2] * x.shape[3]))


def scaled_dot_product_attention(query, key, value, bias, dropout=None, training=None):
    """softmax(Q K^T / sqrt(d_k) + bias) V (section 3.2.1).

    query (B, H, T, K), key (B, H, S, K), value (B, H, S, V), bias broadcastable to (B, H, T, S).
    Returns the context (B, H, T, V) and the attention weights (B, H, T, S). The softmax runs in
    float32 whatever the compute dtype.
    """
    depth = query.shape[-1]
    query = query * tf.cast(depth ** -0.5, query.dtype)
    logits = tf.matmul(query, key, transpose_b=True)  # (B, H, T, S)
    if bias is not None:
        logits += bias
    weights = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
    weights = tf.cast(weights, value.dtype)
    dropped = dropout(weights, training=training) if dropout is not None else weights
    return tf.matmul(dropped, value), weights  # (B, H, T, V)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    Section 3.2.2. Self-attention (`cross_attention=False`) projects Q, K and V from one input with
    one fused kernel; encoder-decoder attention (`cross_attention=True`) projects Q from the decoder
    and K, V from the encoder output (`memory`), whose width must equal the query's (d_model).

    Args:
      num_heads: h.
      key_dim: d_k, the width of each head's queries and keys.
      value_dim: d_v, the width of each head's values.
      attention_dropout_rate: dropout on the attention weights (not in the paper; default 0).
      cross_attention: whether keys and values come from a separate `memory`.

    Call arguments:
      query: (B, T, D).
      memory: (B, S, D) for cross-attention; None for self-attention.
      attention_mask: boolean, True = may attend: (B, S) for key padding, or (B, T, S) / (B, 1, S).
      training: enables dropout.
      return_attention_scores: also return the weights (B, H, T, S).

    Returns (B, T, D), and the weights when asked.
    """

    def __init__(self, num_heads, key_dim, value_dim, attention_dropout_rate=0.0, cross_attention=False,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.attention_dropout_rate = attention_dropout_rate
        self.cross_attention = cross_attention
        self.attention_dropout = keras.layers.Dropout(attention_dropout_rate, name="attention_dropout")

    def build(self, input_shape):
        d_model = input_shape[-1]
        h, k, v = self.num_heads, self.key_dim, self.value_dim
        if self.cross_attention:
            self.query_kernel = self.add_weight(name="query_kernel", shape=(d_model, h * k))
            self.query_bias = self.add_weight(name="query_bias", shape=(h * k,), initializer="zeros")
            self.key_value_kernel = self.add_weight(name="key_value_kernel", shape=(d_model, h * (k + v)))
            self.key_value_bias = self.add_weight(name="key_value_bias", shape=(h * (k + v),),
                                                  initializer="zeros")
        else:
            self.query_key_value_kernel = self.add_weight(name="query_key_value_kernel",
                                                          shape=(d_model, h * (2 * k + v)))
            self.query_key_value_bias = self.add_weight(name="query_key_value_bias", shape=(h * (2 * k + v),),
                                                        initializer="zeros")
        self.output_kernel = self.add_weight(name="output_kernel", shape=(h * v, d_model))
        self.output_bias = self.add_weight(name="output_bias", shape=(d_model,), initializer="zeros")
        self.attention_dropout.build(None)
        super().build(input_shape)

    def project_memory(self, memory):
        """Keys (B, H, S, K) and values (B, H, S, V) of the encoder output, computed once per sentence."""
        key_value = dense(memory, self.key_value_kernel, self.key_value_bias)
        key, value = tf.split(key_value, [self.num_heads * self.key_dim, self.num_heads * self.value_dim], -1)
        return split_heads(key, self.num_heads, self.key_dim), split_heads(value, self.num_heads, self.value_dim)

    def _project_self(self, query):
        h, k, v = self.num_heads, self.key_dim, self.value_dim
        qkv = dense(query, self.query_key_value_kernel, self.query_key_value_bias)
        q, key, value = tf.split(qkv, [h * k, h * k, h * v], axis=-1)
        return split_heads(q, h, k), split_heads(key, h, k), split_heads(value, h, v)

    def call(self, query, memory=None, attention_mask=None, training=None, return_attention_scores=False):
        if self.cross_attention:
            if memory is None:
                raise ValueError(f"{self.name}: cross-attention needs `memory` (the encoder output)")
            q = split_heads(dense(query, self.query_kernel, self.query_bias), self.num_heads, self.key_dim)
            key, value = self.project_memory(memory)
        else:
            q, key, value = self._project_self(query)
        bias = None if attention_mask is None else masking.mask_to_bias(attention_mask, query.dtype)
        context, weights = scaled_dot_product_attention(q, key, value, bias, self.attention_dropout, training)
        output = dense(merge_heads(context), self.output_kernel, self.output_bias)
        return (output, weights) if return_attention_scores else output

    def initial_cache(self, batch_size, cache_length, dtype):
        """Zeros for `call_cached`: keys (N, H, L, K) and values (N, H, L, V)."""
        return {"key": tf.zeros((batch_size, self.num_heads, cache_length, self.key_dim), dtype),
                "value": tf.zeros((batch_size, self.num_heads, cache_length, self.value_dim), dtype)}

    def call_cached(self, query, cache, step):
        """Causal self-attention of one new position against the cache (incremental decoding).

        query (N, 1, D) is position `step`; cache holds keys/values of positions < step in slots
        [0, step) of a fixed length L. Returns the output (N, 1, D) and the cache with position
        `step` written in.
        """
        q, key, value = self._project_self(query)  # (N, H, 1, K)
        cache_length = cache["key"].shape[2] or tf.shape(cache["key"])[2]
        slots = tf.range(cache_length)
        is_step = tf.reshape(tf.equal(slots, step), (1, 1, -1, 1))
        cache = {"key": tf.where(is_step, key, cache["key"]), "value": tf.where(is_step, value, cache["value"])}
        bias = masking.mask_to_bias(masking.cached_causal_mask(cache_length, step), query.dtype)
        context, _ = scaled_dot_product_attention(q, cache["key"], cache["value"], bias)
        return dense(merge_heads(context), self.output_kernel, self.output_bias), cache

    def call_with_memory(self, query, memory_key, memory_value, memory_bias, beam_size=1):
        """Cross-attention of decoder positions against precomputed memory keys/values.

        query (B*W, T, D) for W hypotheses per sentence, batch-major; memory_key (B, H, S, K) and
        memory_value (B, H, S, V) from `project_memory`, computed once per sentence and shared by its
        W hypotheses; memory_bias (B, 1, 1, S). Returns (B*W, T, D).
        """
        q = dense(query, self.query_kernel, self.query_bias)  # (B*W, T, H*K)
        shape = tf.shape(q)
        batch, length = shape[0] // beam_size, shape[1]
        q = tf.reshape(q, (batch, beam_size * length, self.num_heads, self.key_dim))  # (B, W*T, H, K)
        q = tf.transpose(q, (0, 2, 1, 3))  # (B, H, W*T, K)
        context, _ = scaled_dot_product_attention(q, memory_key, memory_value, memory_bias)  # (B, H, W*T, V)
        context = tf.reshape(merge_heads(context), (batch * beam_size, length, self.num_heads * self.value_dim))
        return dense(context, self.output_kernel, self.output_bias)

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "attention_dropout_rate": self.attention_dropout_rate,
                "cross_attention": self.cross_attention}
