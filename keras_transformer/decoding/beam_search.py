"""Beam search with the GNMT length penalty, driven by a step function (section 6 of the paper:
beam size 4, alpha 0.6, maximum output length = source length + 50, early termination).

The step-function contract is the one of greedy.py, with N = B * W rows, batch-major: the beams
of sentence b are rows b * W .. b * W + W - 1. The caller builds the initial cache at B * W rows;
whatever the model keeps outside the cache (the cross-attention keys / values, computed once per
sentence) is never touched. Once per step the cache follows the parent beam of each surviving
hypothesis: step_fn.reorder_cache(cache, parents) if the step function has it, else every tensor
of the cache is gathered along axis 0.

One step, for each sentence (all tensors have fixed shapes; the work is O(B * W * V)):
1. log p(next token) = logits - logsumexp(logits) in float32 (log-softmax, normalising only the
   tokens selected; see selection.log_normalizer), added to the log-probability of each live
   hypothesis: of the W * V candidates, the best 2W are kept (two top_k, see the body).
2. Finishing: a candidate among the W best of them (those a beam of width W would keep; an EOS
   ranked lower is dropped) finishes if it is EOS, or if it reaches the sentence's maximum length
   (then it finishes there without EOS). Its score is
   log-prob / lp(length) with lp(length) = ((5 + length) / 6) ** alpha, length counting EOS; it
   joins the R best finished hypotheses kept so far.
3. Living on: the W best candidates that did not finish become the live hypotheses (the best 2W
   always hold W of them, since each live hypothesis has only one EOS continuation), so the beam
   never shrinks.
4. Early termination: a live hypothesis of log-prob L <= 0 can only end with a log-prob L' <= L
   and a length l' with length < l' <= max length, so its final score is at most
   L / max_l' lp(l'); lp is monotonic in the length, so the maximum is at one end: lp(max length)
   when alpha >= 0 (the bound is L / lp(max length); with alpha = 0 it is L itself). Once the R-th
   best finished score reaches the bound of the best live hypothesis, nothing can enter the R
   best and the sentence is done: its finished hypotheses are final and later steps ignore it
   (its rows are still fed, shapes being fixed). Decoding stops when every sentence is done, at
   the latest at its maximum length.

A batch where nothing ends with EOS before the maximum length still returns R hypotheses: those
alive at the maximum length finish there (step 2). Fewer than R hypotheses exist only when the
vocabulary is too small to make R distinct ones; the missing ones have score -inf, length 0.
The vocabulary must hold at least 2W tokens (each block of it, when the step function returns its
logits in blocks, see greedy.py).

beam_size = 1 is greedy decoding, as in the paper's own code (tensor2tensor's fast_decode): the
loop above with W = 1 would keep a runner-up alive after the best hypothesis ends with EOS, which
the length penalty may let win later, so it would not be greedy when alpha > 0.
"""
import operator

import tensorflow as tf

from keras_transformer.decoding import selection
from keras_transformer.decoding.greedy import clip_max_lengths, forbid_early_eos, greedy_decode, write_position
from keras_transformer.decoding.selection import NEG_INF


def length_penalty(length, alpha):
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha, float32, same shape as length."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, tf.cast(alpha, tf.float32))


def gather_rows(cache, parents):
    """Every tensor of the cache gathered along axis 0: row n takes row parents[n]."""
    return tf.nest.map_structure(lambda t: tf.gather(t, parents), cache)


def beam_search(step_fn, initial_cache, batch_size, beam_size, max_lengths, bos_id, eos_id,
                alpha=0.6, max_length=None, num_return=None, min_length=None):
    """Beam search; see the module docstring for the algorithm.

    Args:
      step_fn: `(ids (B*W,), step, cache) -> (logits (B*W, V), cache)`, rows batch-major, with
        an optional `reorder_cache` (see greedy.py).
      initial_cache: nested structure of tensors with leading dimension B * W (any shapes if
        step_fn has its own reorder_cache).
      batch_size: B, Python int or int32 scalar tensor.
      beam_size: W, a Python int (one trace per width), or an int32 scalar tensor >= 2 (one trace
        for every width, chosen when the graph runs: the widths of translate_nbest). Greedy
        decoding, below, needs W = 1 as a Python int.
      max_lengths: int32 (B,), maximum output length of each sentence, EOS included.
      bos_id, eos_id: int token ids.
      alpha: length-penalty exponent, >= 0 (float or float32 scalar tensor); 0 ranks by log-prob.
      max_length: loop bound and output width T, Python int or int32 scalar tensor; defaults to
        max(max_lengths); per-sentence maxima above it are clipped. A Python int under XLA.
      num_return: R, Python int, how many hypotheses to return per sentence, 1 <= R <= W;
        defaults to W (the only choice when W is a tensor).
      min_length: optional int: EOS is forbidden while the output would be shorter than this
        (EOS included); the per-sentence maximum still wins over it.

    Returns:
      dict with, best hypothesis first,
        ids: int32 (B, R, T), the tokens without BOS, EOS included, 0 after the end;
        scores: float32 (B, R), sum of log-probabilities / lp(length);
        lengths: int32 (B, R), number of tokens, EOS included.
    """
    if isinstance(beam_size, tf.Tensor):
        if num_return is not None:
            raise ValueError("num_return must be left to its default (W) when beam_size is a tensor")
        beam_size = num_return = tf.ensure_shape(tf.cast(beam_size, tf.int32), [])
    else:
        try:
            beam_size = operator.index(beam_size)
            num_return = beam_size if num_return is None else operator.index(num_return)
        except TypeError as error:
            raise TypeError("beam_size and num_return must be Python ints (or beam_size an int32 scalar "
                            f"tensor), got {beam_size!r} and {num_return!r}") from error
        if not 1 <= num_return <= beam_size:
            raise ValueError(f"num_return must be in [1, beam_size={beam_size}], got {num_return}")
    if isinstance(beam_size, int) and beam_size == 1:
        greedy = greedy_decode(step_fn, initial_cache, batch_size, max_lengths, bos_id, eos_id,
                               max_length=max_length, min_length=min_length)
        scores = greedy["scores"] / length_penalty(greedy["lengths"], alpha)
        return {"ids": greedy["ids"][:, None, :], "scores": scores[:, None],
                "lengths": greedy["lengths"][:, None]}

    max_lengths, max_length = clip_max_lengths(max_lengths, max_length)
    reorder_cache = getattr(step_fn, "reorder_cache", None) or gather_rows
    alpha = tf.cast(alpha, tf.float32)
    max_length_penalty = length_penalty(max_lengths, alpha)  # (B,)
    first_beam = tf.range(batch_size)[:, None] * beam_size  # (B, 1)

    def cond(step, ids, cache, alive_seq, alive_log_probs, finished_seq, finished_scores,
             finished_lengths, done):
        del ids, cache, alive_seq, alive_log_probs, finished_seq, finished_scores
        del finished_lengths
        return tf.logical_and(step < max_length, tf.logical_not(tf.reduce_all(done)))

    def body(step, ids, cache, alive_seq, alive_log_probs, finished_seq, finished_scores,
             finished_lengths, done):
        logits, cache = step_fn(ids, step, cache)
        # The 2W best of the W * V candidates are among the 2W best tokens of their own beam, so
        # a top_k over V per beam, then one over the W * 2W survivors, finds them (same order,
        # ties included). Unlike one top_k over (B, W * V), it stays fast under XLA on CPU, where
        # a top_k whose input depends on the previous step's top_k was measured 60 times slower.
        # A forbidden EOS is masked after the first top_k: each beam still offers 2W - 1 >= W
        # tokens, enough for the W best candidates and the W best that go on, all that is used.
        blocks = selection.logit_blocks(logits)  # [(B*W, V_i)]
        token_logits, token_ids, block_best = selection.top_k(blocks, 2 * beam_size)  # (B*W, 2W)
        token_log_probs = forbid_early_eos(
            token_logits - selection.log_normalizer(blocks, block_best)[:, None], token_ids, step,
            eos_id, min_length)
        candidate_log_probs = alive_log_probs[:, :, None] + tf.reshape(
            token_log_probs, [batch_size, beam_size, 2 * beam_size])  # (B, W, 2W)
        top_log_probs, top_indices = tf.math.top_k(
            tf.reshape(candidate_log_probs, [batch_size, -1]), k=2 * beam_size)  # (B, 2W)
        top_beams = top_indices // (2 * beam_size)  # (B, 2W)
        top_ids = tf.gather(
            tf.reshape(token_ids, [batch_size, -1]), top_indices, batch_dims=1)  # (B, 2W)
        top_seq = write_position(
            tf.gather(alive_seq, top_beams, batch_dims=1), step, top_ids)  # (B, 2W, T)
        length = step + 1
        at_max_length = (length >= max_lengths)[:, None]  # (B, 1)
        top_finish = tf.equal(top_ids, eos_id) | at_max_length  # (B, 2W)

        # Live hypotheses: the W best candidates that go on.
        alive_log_probs, keep = tf.math.top_k(
            tf.where(top_finish, NEG_INF, top_log_probs), k=beam_size)  # (B, W)
        alive_seq = tf.gather(top_seq, keep, batch_dims=1)  # (B, W, T)
        ids = tf.reshape(tf.gather(top_ids, keep, batch_dims=1), [-1])  # (B*W,)
        parents = tf.reshape(tf.gather(top_beams, keep, batch_dims=1) + first_beam, [-1])
        cache = reorder_cache(cache, parents)

        # Finished hypotheses: merge the new ones among the W best into the R best so far.
        new_finished = top_finish[:, :beam_size] & tf.logical_not(done)[:, None]  # (B, W)
        new_scores = tf.where(
            new_finished, top_log_probs[:, :beam_size] / length_penalty(length, alpha), NEG_INF)
        finished_scores, pick = tf.math.top_k(
            tf.concat([finished_scores, new_scores], axis=1), k=num_return)  # (B, R)
        finished_seq = tf.gather(
            tf.concat([finished_seq, top_seq[:, :beam_size]], axis=1), pick, batch_dims=1)
        finished_lengths = tf.gather(
            tf.concat([finished_lengths, tf.fill([batch_size, beam_size], length)], axis=1),
            pick, batch_dims=1)  # (B, R)

        # Early termination, see the module docstring (step 4).
        best_live_penalty = tf.maximum(length_penalty(length + 1, alpha), max_length_penalty)
        best_live_bound = alive_log_probs[:, 0] / best_live_penalty  # (B,)
        done = done | at_max_length[:, 0] | (finished_scores[:, -1] >= best_live_bound)
        return (step + 1, ids, cache, alive_seq, alive_log_probs, finished_seq, finished_scores,
                finished_lengths, done)

    # All beams start as the same BOS hypothesis: only the first may expand at step 0.
    initial_log_probs = tf.concat(
        [tf.zeros([batch_size, 1]), tf.fill([batch_size, beam_size - 1], NEG_INF)], axis=1)
    loop_vars = (
        tf.constant(0, tf.int32),
        tf.fill([batch_size * beam_size], tf.cast(bos_id, tf.int32)),
        initial_cache,
        tf.zeros([batch_size, beam_size, max_length], tf.int32),
        initial_log_probs,
        tf.zeros([batch_size, num_return, max_length], tf.int32),
        tf.fill([batch_size, num_return], NEG_INF),
        tf.zeros([batch_size, num_return], tf.int32),
        tf.zeros([batch_size], tf.bool),
    )
    shape_invariants = None
    if not isinstance(beam_size, int):  # rows (B * W) have no static count, whatever the caller's cache says
        shape_invariants = tf.nest.map_structure(
            lambda t: t.shape if t.shape.rank == 0 else tf.TensorShape([None]).concatenate(t.shape[1:]), loop_vars)
    outputs = tf.while_loop(cond, body, loop_vars, shape_invariants=shape_invariants, maximum_iterations=max_length)
    finished_seq, finished_scores, finished_lengths = outputs[5:8]
    return {"ids": finished_seq, "scores": finished_scores, "lengths": finished_lengths}
