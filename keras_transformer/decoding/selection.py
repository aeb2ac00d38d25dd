"""The decoders' per-step selection over the vocabulary: the best tokens and the log-normaliser.

A step function returns its logits as one tensor (N, V), or as a list of column blocks
[(N, V_1), (N, V_2), ...] that cover the vocabulary in order (a vocabulary projection split
across threads: each block is made, searched and normalised by its own ops, and the blocks are
never concatenated). Only (N, k) candidates per block and one normaliser per block leave them.
"""
import tensorflow as tf

from keras_transformer.shapes import dimension

NEG_INF = float("-inf")


def logit_blocks(logits):
    """The step function's logits as a list of float32 column blocks (N, V_i), in vocabulary order."""
    blocks = list(logits) if isinstance(logits, (list, tuple)) else [logits]
    return [tf.cast(block, tf.float32) for block in blocks]


def blockwise_top_k(values, k, block_size=128):
    """tf.math.top_k(values, k) of float values (N, C), the same values and indices (ties to the
    lower index), several times faster on CPU when C is large (a vocabulary).

    Cut each row into blocks of block_size consecutive entries. A block holding one of the k best
    entries ranks among the k best blocks by their best entry (each block ranked above it holds an
    entry ranked above that one), so top_k runs over the (N, C / block_size) block maxima, then
    over the k chosen blocks, taken in row order so that ties still go to the lower index.

    It is used when 2 * k * block_size <= C. k: a Python int, or an int32 scalar tensor (a beam
    width chosen at run time), for which a tf.cond checks that condition when the graph runs.
    """
    num_columns = values.shape[-1]
    if num_columns is None or num_columns < 2 * block_size:
        return tf.math.top_k(values, k=k)
    if isinstance(k, int):
        return _blocks_top_k(values, k, block_size) if 2 * k * block_size <= num_columns else tf.math.top_k(values, k=k)
    return tf.cond(2 * k * block_size <= num_columns, lambda: _blocks_top_k(values, k, block_size),
                   lambda: tuple(tf.math.top_k(values, k=k)))


def _blocks_top_k(values, k, block_size):
    num_columns = values.shape[-1]
    padding = -num_columns % block_size
    if padding:
        values = tf.pad(values, [[0, 0], [0, padding]], constant_values=NEG_INF)
    num_blocks = (num_columns + padding) // block_size
    blocks = tf.reshape(values, [-1, num_blocks, block_size])  # (N, C / block_size, block_size)
    _, best_blocks = tf.math.top_k(tf.reduce_max(blocks, axis=-1), k=k)  # (N, k)
    best_blocks = tf.sort(best_blocks, axis=-1)
    candidates = tf.reshape(tf.gather(blocks, best_blocks, batch_dims=1), [-1, k * block_size])
    top_values, positions = tf.math.top_k(candidates, k=k)  # (N, k)
    block_starts = tf.gather(best_blocks, positions // block_size, batch_dims=1) * block_size
    return top_values, block_starts + positions % block_size


def _block_top_k(block, k):
    """(values (N, k), column indices (N, k)) of one block; k = 1 (a Python int) is an argmax."""
    if isinstance(k, int) and k == 1:
        ids = tf.argmax(block, axis=-1, output_type=tf.int32)  # (N,)
        return tf.gather(block, ids, batch_dims=1)[:, None], ids[:, None]
    return blockwise_top_k(block, k)


def top_k(blocks, k):
    """The k largest logits over all blocks: values (N, k) and vocabulary ids (N, k), best first,
    ties to the lower id (as tf.math.top_k over the concatenated logits); and each block's own
    best column (N,), local to the block, for `log_normalizer`. Each block needs k columns."""
    values, ids, block_best, start = [], [], [], 0
    for block in blocks:
        block_values, block_ids = _block_top_k(block, k)  # (N, k)
        block_best.append(block_ids[:, 0])
        values.append(block_values)
        ids.append(block_ids + start)
        start += dimension(block, -1)
    if len(blocks) == 1:
        return values[0], ids[0], block_best
    # Candidates in block order, each block's sorted: top_k's ties go to the earlier block.
    top_values, positions = tf.math.top_k(tf.concat(values, axis=1), k=k)  # (N, k)
    return top_values, tf.gather(tf.concat(ids, axis=1), positions, batch_dims=1), block_best


def _block_log_normalizer(logits, top_ids):
    # logits[top] - log softmax(logits)[top]: softmax is one fused kernel, several times faster on
    # CPU than reduce_logsumexp's passes over (N, V), and at the largest logit it is at least 1 / V,
    # so its log is as exact as the logsumexp.
    top_logits = tf.gather(logits, top_ids, batch_dims=1)  # (N,)
    top_probabilities = tf.gather(tf.nn.softmax(logits), top_ids, batch_dims=1)  # (N,)
    return top_logits - tf.math.log(top_probabilities)


def log_normalizer(blocks, block_best):
    """log sum_v exp(logits) over the whole vocabulary -> (N,), given each block's best column
    (N,) (from `top_k`): log p(v) = logits[v] - normalizer. Decoders select on the logits (the
    ranking is the same) and normalise the selected tokens alone, never writing a (N, V)
    log-softmax."""
    normalizers = [_block_log_normalizer(block, best) for block, best in zip(blocks, block_best)]
    if len(normalizers) == 1:
        return normalizers[0]
    return tf.reduce_logsumexp(tf.stack(normalizers, axis=1), axis=1)  # (N,)
