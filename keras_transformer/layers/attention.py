"""Multi-head attention (section 3.2), with a key/value cache for incremental decoding."""
import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # whether a function is traced for XLA

from keras_transformer import masking
from keras_transformer.layers.dropout import Dropout
from keras_transformer.shapes import dimension


def dense(x, kernel, bias, transposed_kernel=None):
    """x (..., D_in) @ kernel (D_in, D_out) + bias, as one 2-D matmul (faster than a batched one on CPU).

    transposed_kernel: kernel^T (D_out, D_in) in x's dtype, made once (`transposed`) for a loop that
    multiplies by it many times (a decoding step's); the product is then (kernel^T @ x^T)^T, the
    same numbers by another memory layout of the operands (see Transformer.decoding_step_fn).
    """
    shape = tf.shape(x)
    flat = tf.reshape(x, (-1, kernel.shape[0]))  # (N, D_in)
    if transposed_kernel is None:
        y = tf.matmul(flat, tf.cast(kernel, x.dtype))
    else:
        y = tf.transpose(tf.matmul(transposed_kernel, flat, transpose_b=True))  # (D_out, N) -> (N, D_out)
    y = y + tf.cast(bias, x.dtype)
    return tf.reshape(y, tf.concat([shape[:-1], [kernel.shape[1]]], axis=0))


def block_glorot_uniform(shape, dtype=None):
    """Glorot-uniform blocks: each (..., D_in, D_out) matrix of a stack of them (the partitions of
    a partitioned layer's kernel, whose leading axis counts them) drawn with its own fans, as a
    kernel of that shape alone would be (Keras' GlorotUniform would count the leading axis in
    both fans)."""
    blocks = int(np.prod(shape[:-2]))
    # An initializer per block: one unseeded initializer draws the same numbers at every call.
    drawn = [keras.initializers.GlorotUniform()(tuple(shape[-2:]), dtype=dtype) for _ in range(blocks)]
    return keras.ops.reshape(keras.ops.stack(drawn), shape)


def check_partitions(name, partitions, d_model):
    """Raises unless d_model (an input's width) is `partitions` equal parts."""
    if d_model % partitions:
        raise ValueError(f"{name}: partitions={partitions} cuts d_model={d_model} in equal parts: it must divide it")


def partitioned_dense(x, kernel, bias):
    """x (..., P * D_in) cut into P equal parts along its last axis, `dense` of part p with kernel[p]
    (D_in, D_out) and bias p of P equal parts of bias (P * D_out,), the P results side by side:
    (..., P * D_out). A block-diagonal kernel's product in P smaller ones, 1 / P of the full
    kernel's work."""
    parts = kernel.shape[0]
    # The blocks by Unpack, in x's dtype: its gradient stacks theirs in one write, where indexing
    # (kernel[p], a StridedSlice) has each block's gradient fill a whole kernel of zeros and the P
    # of them summed (9% of a partitioned span parser's training step's thread time, bfloat16, Zen 4).
    blocks = tf.unstack(tf.cast(kernel, x.dtype))
    pieces = zip(tf.split(x, parts, axis=-1), blocks, tf.split(bias, parts))
    return tf.concat([dense(part, block, part_bias) for part, block, part_bias in pieces], axis=-1)


def transposed(kernels, dtype):
    """{name: kernel^T in dtype} of {name: kernel}, for `dense`'s transposed_kernel."""
    return {name: tf.transpose(tf.cast(kernel, dtype)) for name, kernel in kernels.items()}


def transpose(x, perm):
    """tf.transpose(x, perm), as a reshape (no copy) when it moves only axes of size 1 (the single
    position of greedy decoding) and at most one size is unknown when traced."""
    sizes = x.shape.as_list()
    kept = [axis for axis in perm if sizes[axis] != 1]
    if kept == sorted(kept) and sizes.count(None) <= 1:
        return tf.reshape(x, [-1 if sizes[axis] is None else sizes[axis] for axis in perm])
    return tf.transpose(x, perm)


def split_heads(x, num_heads, depth):
    """(B, T, H*depth) -> (B, H, T, depth)."""
    shape = tf.shape(x)
    x = tf.reshape(x, (shape[0], x.shape[1] or shape[1], num_heads, depth))  # (B, T, H, K)
    return transpose(x, (0, 2, 1, 3))  # (B, H, T, K)


def merge_heads(x):
    """(B, H, T, depth) -> (B, T, H*depth)."""
    shape = tf.shape(x)
    x = transpose(x, (0, 2, 1, 3))  # (B, T, H, K)
    return tf.reshape(x, (shape[0], x.shape[1] or shape[2], x.shape[2] * x.shape[3]))


def new_buffer(shape, dtype):
    """Zeros of `shape`, freshly allocated at every run (never a constant folded into the graph, nor
    shared with another tensor), so that `write_slots` may write into it in place."""
    shape = tf.stack([tf.cast(size, tf.int32) for size in shape])
    return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


def write_slots(buffer, rows, values):
    """buffer from `new_buffer`, seen as rows of values.shape[-1] entries, with values (R, C)
    written at rows (R,); returns it.

    The write is in place, so that a decoding step costs the slots it writes, not a copy of the
    whole cache: the buffer passed in must not be read again. XLA, which has no InplaceUpdate,
    updates in place a scatter into a loop variable.
    """
    shape = tf.shape(buffer)
    flat = tf.reshape(buffer, (-1, dimension(values, -1)))
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        flat = tf.tensor_scatter_nd_update(flat, rows[:, None], values)
    else:
        flat = tf.raw_ops.InplaceUpdate(x=flat, i=rows, v=values)
    return tf.reshape(flat, shape)


def visible_positions(cache_length, step):
    """How many cache positions an incremental decoding step reads: step + 1 (the rest cannot be
    seen yet), so a step costs the prefix it attends to rather than the cache's whole length L
    (beam 21 with L = input + 300, the parser's, would read mostly empty slots); L under XLA,
    whose shapes must not change from one step to the next."""
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return cache_length
    return tf.minimum(tf.cast(step, tf.int32) + 1, cache_length)


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

    Partitioned (`partitions` P > 1, self-attention only, not in the paper): Kitaev and Klein's
    (ACL 2018) factored attention. The input's D is P equal parts (theirs: content, then position),
    each projected by its own kernels to its share of every head's query, key and value (K / P and
    V / P wide); a head's query is its P shares side by side, so its dot products are the sum of
    the parts', and its weights mix the parts; the context's part p goes through its own output
    kernel to part p of the output. Block-diagonal projections: 1 / P of the multiply-adds.

    Args:
      num_heads: h.
      key_dim: d_k, the width of each head's queries and keys.
      value_dim: d_v, the width of each head's values.
      attention_dropout_rate: dropout on the attention weights (not in the paper; default 0).
      cross_attention: whether keys and values come from a separate `memory`.
      partitions: P, 1 (the paper) or the parts of a partitioned self-attention; D, K and V must
        be multiples of P. Its kernels are (P, D / P, H (2K + V) / P) and (P, H V / P, D / P).

    Call arguments:
      query: (B, T, D).
      memory: (B, S, D) for cross-attention; None for self-attention.
      attention_mask: boolean, True = may attend: (B, S) for key padding, or (B, T, S) / (B, 1, S).
      training: enables dropout.
      return_attention_scores: also return the weights (B, H, T, S).

    Returns (B, T, D), and the weights when asked.
    """

    def __init__(self, num_heads, key_dim, value_dim, attention_dropout_rate=0.0, cross_attention=False,
                 partitions=1, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.attention_dropout_rate = attention_dropout_rate
        self.cross_attention = cross_attention
        self.partitions = partitions
        if partitions != 1 and (cross_attention or partitions < 1 or key_dim % partitions or value_dim % partitions):
            raise ValueError(f"{self.name}: partitions={partitions} needs self-attention and d_k={key_dim} and "
                             f"d_v={value_dim} divisible by it (cross_attention={cross_attention})")
        self.attention_dropout = Dropout(attention_dropout_rate, name="attention_dropout")

    def build(self, input_shape):
        d_model = input_shape[-1]
        h, k, v = self.num_heads, self.key_dim, self.value_dim
        if self.partitions > 1:
            self._build_partitioned(d_model)
        elif self.cross_attention:
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
        if self.partitions == 1:
            self.output_kernel = self.add_weight(name="output_kernel", shape=(h * v, d_model))
        self.output_bias = self.add_weight(name="output_bias", shape=(d_model,), initializer="zeros")
        self.attention_dropout.build(None)
        super().build(input_shape)

    def _build_partitioned(self, d_model):
        parts, h, k, v = self.partitions, self.num_heads, self.key_dim, self.value_dim
        check_partitions(self.name, parts, d_model)
        width = h * (2 * k + v) // parts
        self.query_key_value_kernel = self.add_weight(name="query_key_value_kernel",
                                                      shape=(parts, d_model // parts, width),
                                                      initializer=block_glorot_uniform)
        self.query_key_value_bias = self.add_weight(name="query_key_value_bias", shape=(parts * width,),
                                                    initializer="zeros")
        self.output_kernel = self.add_weight(name="output_kernel", shape=(parts, h * v // parts, d_model // parts),
                                             initializer=block_glorot_uniform)

    def _project_partitioned(self, x):
        """Partitioned self-attention's queries, keys (B, H, T, K) and values (B, H, T, V): each
        head's P shares side by side."""
        parts, h = self.partitions, self.num_heads
        k, v = self.key_dim // parts, self.value_dim // parts
        qkv = partitioned_dense(x, self.query_key_value_kernel, self.query_key_value_bias)  # (B, T, H (2K + V))
        queries, keys, values = [], [], []
        for part in tf.split(qkv, parts, axis=-1):  # (B, T, H (2K + V) / P)
            q, key, value = tf.split(part, [h * k, h * k, h * v], axis=-1)
            queries.append(split_heads(q, h, k))  # (B, H, T, K / P)
            keys.append(split_heads(key, h, k))
            values.append(split_heads(value, h, v))  # (B, H, T, V / P)
        return tf.concat(queries, axis=-1), tf.concat(keys, axis=-1), tf.concat(values, axis=-1)

    def _output_partitioned(self, context):
        """context (B, H, T, V) -> (B, T, D): part p of every head through output kernel p."""
        merged = tf.concat([merge_heads(part) for part in tf.split(context, self.partitions, axis=-1)], axis=-1)
        return partitioned_dense(merged, self.output_kernel, self.output_bias)

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
        elif self.partitions > 1:
            q, key, value = self._project_partitioned(query)
        else:
            q, key, value = self._project_self(query)
        bias = None if attention_mask is None else masking.mask_to_bias(attention_mask, query.dtype)
        context, weights = scaled_dot_product_attention(q, key, value, bias, self.attention_dropout, training)
        if self.partitions > 1:
            output = self._output_partitioned(context)
        else:
            output = dense(merge_heads(context), self.output_kernel, self.output_bias)
        return (output, weights) if return_attention_scores else output

    def initial_cache(self, batch_size, cache_length, dtype, beam_size=1):
        """Zeros for `call_cached` of N = batch_size rows, W = beam_size hypotheses per sentence:
        keys (B, H, L, W, K) and values (B, H, L, W, V), B = N / W.

        Slot (l, w) of sentence b holds what the hypothesis in row b * W + w fed at position l.
        Beam search never moves these slots: a hypothesis that continues another one reads its
        prefix from its ancestors' slots through the attention mask (masking.cached_beam_mask),
        so a step writes one position instead of reordering the whole cache.
        """
        sentences = batch_size // beam_size
        return {"key": new_buffer((sentences, self.num_heads, cache_length, beam_size, self.key_dim), dtype),
                "value": new_buffer((sentences, self.num_heads, cache_length, beam_size, self.value_dim), dtype)}

    def transposed_kernels(self, dtype):
        """The kernels a decoding step multiplies by, transposed (`dense`'s transposed_kernel), keyed
        by name: query_key_value and output (self-attention), or query and output (cross-attention:
        its keys and values are projected once per sentence)."""
        if self.cross_attention:
            return transposed({"query": self.query_kernel, "output": self.output_kernel}, dtype)
        return transposed({"query_key_value": self.query_key_value_kernel, "output": self.output_kernel}, dtype)

    def call_cached(self, query, cache, step, attention_mask=None, kernels=None):
        """Causal self-attention of one new position against the cache (incremental decoding).

        query (B*W, 1, D) is position `step` of W hypotheses per sentence, batch-major; cache (see
        `initial_cache`) holds keys/values of positions < step in slots [0, step) of a fixed
        length L. attention_mask: boolean (B, W, P*W), the slots of the first P positions each
        hypothesis may see (masking.cached_beam_mask), P = `visible_positions`: only those are
        read; by default each row sees its own slots 0..step. Returns the
        output (B*W, 1, D) and the cache with position `step` written in, in place: the cache
        passed in is consumed (write_slots). kernels: `transposed_kernels` (optional), the same
        output by another layout of the matrix products.
        """
        if self.partitions > 1:
            raise ValueError(f"{self.name}: a partitioned self-attention is an encoder's; it has no cached decoding")
        kernels = kernels or {}
        h, k, v = self.num_heads, self.key_dim, self.value_dim
        beam_size = dimension(cache["value"], 3)
        cache_shape = tf.shape(cache["value"])
        sentences, cache_length = cache_shape[0], cache_shape[2]
        step = tf.cast(step, tf.int32)
        qkv = dense(query, self.query_key_value_kernel, self.query_key_value_bias,
                    kernels.get("query_key_value"))  # (B*W, 1, H*(2K+V))
        qkv = tf.reshape(qkv, (sentences, beam_size, h * (2 * k + v)))  # (B, W, H*(2K+V))
        q, key, value = tf.split(qkv, [h * k, h * k, h * v], axis=-1)
        q, key, value = split_heads(q, h, k), split_heads(key, h, k), split_heads(value, h, v)  # (B, H, W, K)
        rows = tf.range(sentences * h) * cache_length + step  # rows (b, h, step) of (B*H*L, W*K)
        cache = {"key": write_slots(cache["key"], rows, tf.reshape(key, (-1, beam_size * k))),
                 "value": write_slots(cache["value"], rows, tf.reshape(value, (-1, beam_size * v)))}
        if attention_mask is None:
            visible = visible_positions(cache_length, step)
            own_slots = tf.broadcast_to(tf.range(beam_size)[None, :, None], (1, beam_size, visible))
            attention_mask = masking.cached_beam_mask(own_slots, step)
        # Only the first P = attention_mask's width / W positions are read (P = step + 1 outside XLA).
        visible = tf.shape(attention_mask)[-1] // beam_size
        keys = tf.reshape(cache["key"][:, :, :visible], (sentences, h, visible * beam_size, k))  # (B, H, P*W, K)
        values = tf.reshape(cache["value"][:, :, :visible], (sentences, h, visible * beam_size, v))  # (B, H, P*W, V)
        bias = masking.mask_to_bias(attention_mask, query.dtype)  # (B, 1, W, P*W)
        context, _ = scaled_dot_product_attention(q, keys, values, bias)  # (B, H, W, V)
        context = tf.reshape(transpose(context, (0, 2, 1, 3)), (sentences * beam_size, 1, h * v))
        return dense(context, self.output_kernel, self.output_bias, kernels.get("output")), cache

    def call_with_memory(self, query, memory_key, memory_value, memory_bias, beam_size=1, kernels=None):
        """Cross-attention of decoder positions against precomputed memory keys/values.

        query (B*W, T, D) for W hypotheses per sentence, batch-major; memory_key (B, H, S, K) and
        memory_value (B, H, S, V) from `project_memory`, computed once per sentence and shared by its
        W hypotheses; memory_bias (B, 1, 1, S); kernels: `transposed_kernels` (optional). Returns
        (B*W, T, D).
        """
        kernels = kernels or {}
        q = dense(query, self.query_kernel, self.query_bias, kernels.get("query"))  # (B*W, T, H*K)
        shape = tf.shape(q)
        batch, length = shape[0] // beam_size, query.shape[1] or shape[1]
        q = tf.reshape(q, (batch, beam_size * length, self.num_heads, self.key_dim))  # (B, W*T, H, K)
        q = transpose(q, (0, 2, 1, 3))  # (B, H, W*T, K)
        context, _ = scaled_dot_product_attention(q, memory_key, memory_value, memory_bias)  # (B, H, W*T, V)
        context = tf.reshape(merge_heads(context), (batch * beam_size, length, self.num_heads * self.value_dim))
        return dense(context, self.output_kernel, self.output_bias, kernels.get("output"))

    def get_config(self):
        return {**super().get_config(), "num_heads": self.num_heads, "key_dim": self.key_dim,
                "value_dim": self.value_dim, "attention_dropout_rate": self.attention_dropout_rate,
                "cross_attention": self.cross_attention, "partitions": self.partitions}
