"""Greedy decoding driven by a step function (the model is never seen).

The step-function contract, shared with beam_search.py:

    step_fn(ids, step, cache) -> (logits, new_cache)

- ids: int32 (N,), the token at position `step` of each row (the BOS id at step 0);
- step: int32 scalar tensor, the 0-based position being fed;
- cache: nested structure (dict / list / tuple) of tensors with leading dimension N (any shape
  with a reorder_cache, below), whose shapes never change from one step to the next;
- logits: (N, V), any float dtype, scoring the token at position step + 1, or a list of column
  blocks (N, V_1), (N, V_2), ... covering the vocabulary in order, each searched and normalised
  by its own ops (selection.py); new_cache has the structure and shapes of cache. The step
  function may write into the cache's tensors in place: a cache passed to it is never used again.
- optionally, an attribute step_fn.reorder_cache(cache, parents) -> cache, for beam search: row n
  goes on from the hypothesis of row parents[n] (int32 (N,)). Without it, beam search gathers
  every tensor of the cache along axis 0 with parents.
Greedy decoding uses N = B.

Lengths count output tokens, EOS included, BOS excluded. Decoding is one tf.while_loop over
fixed-shape tensors, so it runs inside tf.function, exports in a SavedModel, and compiles with XLA
(jit_compile=True) when max_length is a Python int (the output buffer has max_length columns).
"""
import tensorflow as tf

from keras_transformer.decoding import selection
from keras_transformer.decoding.selection import NEG_INF


def clip_max_lengths(max_lengths, max_length):
    """Returns (max_lengths clipped to [1, max_length], max_length).

    max_length, the static loop bound and width T of the outputs, defaults to the largest
    per-sentence maximum. At least one token is always generated, so a maximum below 1 counts as 1.
    """
    max_lengths = tf.cast(max_lengths, tf.int32)  # (B,)
    if max_length is None:
        max_length = tf.reduce_max(max_lengths)
    return tf.clip_by_value(max_lengths, 1, max_length), max_length


def forbid_early_eos(scores, token_ids, step, eos_id, min_length):
    """scores (logits or log-probs) with -inf wherever token_ids is EOS and EOS at position step
    would end the output before min_length tokens (EOS at position step gives length step + 1).
    Only the selection sees it: the normaliser is the model's, so the other tokens keep their own
    log-probabilities rather than being renormalised without EOS."""
    if min_length is None:
        return scores
    forbidden = tf.logical_and(step + 1 < tf.cast(min_length, tf.int32),
                               tf.equal(token_ids, eos_id))
    return tf.where(forbidden, NEG_INF, scores)


def write_position(sequences, step, ids):
    """sequences (..., T) with ids (...) written at position step (fixed shapes, XLA friendly)."""
    at_step = tf.equal(tf.range(tf.shape(sequences)[-1]), step)  # (T,)
    return tf.where(at_step, ids[..., None], sequences)


def greedy_decode(step_fn, initial_cache, batch_size, max_lengths, bos_id, eos_id,
                  max_length=None, min_length=None):
    """Greedy decoding: at every step each sentence takes its most probable next token.

    Args:
      step_fn: `(ids (B,), step, cache) -> (logits (B, V), cache)`, see the module docstring.
      initial_cache: nested structure of tensors with leading dimension B.
      batch_size: B, Python int or int32 scalar tensor.
      max_lengths: int32 (B,), maximum output length of each sentence, EOS included (the paper
        uses source length + 50). A sentence that reaches it without EOS stops there, unended.
      bos_id, eos_id: int token ids.
      max_length: loop bound and output width T, Python int or int32 scalar tensor; defaults to
        max(max_lengths). Per-sentence maxima above it are clipped to it. Must be a Python int
        under XLA.
      min_length: optional int (or int32 scalar tensor): EOS is forbidden while the output would
        be shorter than this (EOS included), e.g. min_length = max_length forces an exact length
        for benchmarks. The per-sentence maximum still wins over it.

    Returns:
      dict with
        ids: int32 (B, T), the tokens without BOS, EOS included, 0 after the end;
        scores: float32 (B,), sum of the log-probabilities of the emitted tokens;
        lengths: int32 (B,), number of emitted tokens, EOS included.
    """
    max_lengths, max_length = clip_max_lengths(max_lengths, max_length)

    def cond(step, ids, cache, sequences, scores, lengths, finished):
        del ids, cache, sequences, scores, lengths
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(finished)))

    def body(step, ids, cache, sequences, scores, lengths, finished):
        logits, cache = step_fn(ids, step, cache)
        blocks = selection.logit_blocks(logits)  # [(B, V_i)]
        # The best token, or the best two when EOS may be forbidden: one of them is not EOS.
        candidate_logits, candidate_ids, block_best = selection.top_k(
            blocks, 1 if min_length is None else 2)  # (B, 1 or 2)
        pick = tf.argmax(forbid_early_eos(candidate_logits, candidate_ids, step, eos_id, min_length),
                         axis=-1, output_type=tf.int32)  # (B,)
        ids = tf.gather(candidate_ids, pick, batch_dims=1)  # (B,)
        token_log_probs = (tf.gather(candidate_logits, pick, batch_dims=1)
                           - selection.log_normalizer(blocks, block_best))  # (B,)
        running = tf.logical_not(finished)
        sequences = write_position(sequences, step, tf.where(running, ids, 0))
        scores += tf.where(running, token_log_probs, 0.0)
        lengths = tf.where(running, step + 1, lengths)
        finished = finished | tf.equal(ids, eos_id) | (step + 1 >= max_lengths)
        return step + 1, ids, cache, sequences, scores, lengths, finished

    loop_vars = (
        tf.constant(0, tf.int32),
        tf.fill([batch_size], tf.cast(bos_id, tf.int32)),
        initial_cache,
        tf.zeros([batch_size, max_length], tf.int32),
        tf.zeros([batch_size], tf.float32),
        tf.zeros([batch_size], tf.int32),
        tf.zeros([batch_size], tf.bool),
    )
    _, _, _, sequences, scores, lengths, _ = tf.while_loop(
        cond, body, loop_vars, maximum_iterations=max_length)
    return {"ids": sequences, "scores": scores, "lengths": lengths}
