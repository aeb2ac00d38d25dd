"""Every attention mask of the model, built in one place.

Masks are booleans, True meaning "may attend". Attention layers turn them into an additive bias
(0 where True, a large negative number where False) with `mask_to_bias`.
"""
import tensorflow as tf

from keras_transformer.config import PAD_ID
from keras_transformer.shapes import dimension


def padding_mask(ids, pad_id=PAD_ID):
    """(B, S) True at real tokens, False at padding."""
    return tf.not_equal(ids, pad_id)


def causal_mask(length):
    """(T, T) True where query position i may see key position j, i.e. j <= i (section 3.2.3)."""
    positions = tf.range(length)
    return positions[:, None] >= positions[None, :]


def self_attention_mask(target_ids, pad_id=PAD_ID):
    """(B, T, T) for the decoder's masked self-attention: causal and not attending to padding."""
    length = tf.shape(target_ids)[1]
    return tf.logical_and(causal_mask(length)[None, :, :], padding_mask(target_ids, pad_id)[:, None, :])


def cross_attention_mask(source_padding_mask):
    """(B, 1, S) for encoder-decoder attention: every target position sees every real source token."""
    return source_padding_mask[:, None, :]


def encoder_attention_mask(source_padding_mask):
    """(B, 1, S) for the encoder's self-attention: every position sees every real source token."""
    return source_padding_mask[:, None, :]


def cached_causal_mask(cache_length, step):
    """(1, 1, L) for incremental decoding: the position at `step` sees cache slots 0..step."""
    return tf.reshape(tf.range(cache_length) <= step, (1, 1, -1))


def cached_beam_mask(beams, step):
    """(B, W, L * W) for incremental beam decoding with a cache shared by a sentence's W hypotheses
    (MultiHeadAttention.call_cached): hypothesis w sees cache slot (position l, beam w') iff
    l <= step and beams[b, w, l] == w', i.e. if that slot holds its own prefix's position l.

    beams: int (B, W, L), the beam slot holding each position of each hypothesis' prefix.
    """
    beam_size = dimension(beams, 1)
    shape = tf.shape(beams)
    holds_prefix = tf.equal(beams[..., None], tf.range(beam_size, dtype=beams.dtype))  # (B, W, L, W)
    mask = tf.logical_and(holds_prefix, cached_causal_mask(shape[2], step)[..., None])
    return tf.reshape(mask, (shape[0], beam_size, shape[2] * beam_size))


def large_negative(dtype):
    # Big enough to zero a softmax term, small enough not to overflow float16 (max 65504).
    return -3e4 if dtype == tf.float16 else -1e9


def mask_to_bias(mask, dtype):
    """Boolean mask (B, T, S) or (B, S) -> additive bias (B, 1, T, S) or (B, 1, 1, S) for (B, H, T, S) logits."""
    mask = tf.convert_to_tensor(mask)
    rank = mask.shape.rank
    if rank == 2:  # (B, S): a key padding mask
        mask = mask[:, None, :]
    elif rank != 3:
        raise ValueError(
            f"attention mask must have rank 2 (B, S) or rank 3 (B, T, S), True meaning 'may attend'; "
            f"got rank {rank} with shape {mask.shape}")
    if mask.dtype != tf.bool:
        raise ValueError(f"attention mask must be boolean (True = may attend); got dtype {mask.dtype.name}")
    bias = tf.where(mask, tf.constant(0.0, dtype), tf.constant(large_negative(dtype), dtype))
    return bias[:, None, :, :]
