import numpy as np
import pytest
import tensorflow as tf

from decoding_fakes import (
    A, B, BOS, C, EOS, PrefixModel, TableModel, in_blocks, log_softmax, probability_rows,
    reference_greedy)
from keras_transformer.decoding import greedy_decode


def two_sentence_table(num_steps=5, vocab_size=6):
    """Sentence 0 says A EOS; sentence 1 says B C EOS."""
    first = probability_rows(num_steps, vocab_size, {
        (0, BOS): {A: 0.6, B: 0.3}, (1, A): {EOS: 0.7, C: 0.2}, (2, C): {EOS: 0.6, B: 0.3},
        (3, B): {EOS: 0.9}})
    second = probability_rows(num_steps, vocab_size, {
        (0, BOS): {B: 0.5, A: 0.4}, (1, B): {C: 0.6}, (2, C): {EOS: 0.8}})
    return np.stack([first, second])


def decode(model, max_lengths, **kwargs):
    result = greedy_decode(model.step_fn, model.initial_cache(), len(max_lengths),
                           tf.constant(max_lengths, tf.int32), BOS, EOS, **kwargs)
    return {name: value.numpy() for name, value in result.items()}


def test_stops_at_eos_and_pads_after_it():
    table = two_sentence_table()
    log_probs = log_softmax(table)
    result = decode(TableModel(table), [5, 5])
    np.testing.assert_array_equal(result["ids"], [[A, EOS, 0, 0, 0], [B, C, EOS, 0, 0]])
    np.testing.assert_array_equal(result["lengths"], [2, 3])
    np.testing.assert_allclose(result["scores"], [
        log_probs[0, 0, BOS, A] + log_probs[0, 1, A, EOS],
        log_probs[1, 0, BOS, B] + log_probs[1, 1, B, C] + log_probs[1, 2, C, EOS]], rtol=1e-6)
    np.testing.assert_allclose(result["scores"][0], np.log(0.6) + np.log(0.7), rtol=1e-6)


def test_per_sentence_max_lengths_cut_without_eos():
    table = two_sentence_table()
    result = decode(TableModel(table), [1, 2])
    np.testing.assert_array_equal(result["ids"], [[A, 0], [B, C]])
    np.testing.assert_array_equal(result["lengths"], [1, 2])
    log_probs = log_softmax(table)
    np.testing.assert_allclose(result["scores"], [
        log_probs[0, 0, BOS, A], log_probs[1, 0, BOS, B] + log_probs[1, 1, B, C]], rtol=1e-6)


def test_max_length_is_the_output_width_and_clips_sentence_maxima():
    result = decode(TableModel(two_sentence_table()), [5, 5], max_length=2)
    np.testing.assert_array_equal(result["ids"], [[A, EOS], [B, C]])
    np.testing.assert_array_equal(result["lengths"], [2, 2])


def test_min_length_forbids_eos_and_keeps_the_model_log_probs():
    table = two_sentence_table()
    result = decode(TableModel(table), [5, 5], min_length=4)
    np.testing.assert_array_equal(result["ids"][0], [A, C, B, EOS, 0])
    np.testing.assert_array_equal(result["lengths"][0], 4)
    # Not renormalised without EOS: the scores are the model's log-probabilities.
    np.testing.assert_allclose(
        result["scores"][0], np.log(0.6) + np.log(0.2) + np.log(0.3) + np.log(0.9), rtol=1e-6)


def test_min_length_equal_to_max_length_forces_the_exact_length():
    result = decode(TableModel(two_sentence_table()), [5, 5], min_length=5)
    np.testing.assert_array_equal(result["lengths"], [5, 5])
    assert not np.any(result["ids"][:, :4] == EOS)


def test_stops_once_every_sentence_is_finished():
    model = TableModel(two_sentence_table(num_steps=10))

    def step_fn(ids, step, cache):
        tf.debugging.assert_less(step, 3, message="decoded past the last EOS")
        return model.step_fn(ids, step, cache)

    result = greedy_decode(step_fn, model.initial_cache(), 2, tf.constant([10, 10]), BOS, EOS)
    np.testing.assert_array_equal(result["lengths"], [2, 3])
    with pytest.raises(tf.errors.InvalidArgumentError, match="decoded past the last EOS"):
        greedy_decode(step_fn, model.initial_cache(), 2, tf.constant([10, 10]), BOS, EOS,
                      min_length=5)


def test_float16_logits_are_decoded_in_float32():
    model = TableModel(two_sentence_table(), dtype=tf.float16)
    result = decode(model, [5, 5])
    for sentence, (ids, score) in enumerate(reference_greedy(model, [5, 5], 5)):
        assert tuple(result["ids"][sentence, :len(ids)]) == ids
        np.testing.assert_allclose(result["scores"][sentence], score, rtol=1e-6)
    assert result["scores"].dtype == np.float32


@pytest.mark.parametrize("mode,widths", [("eager", None), ("tf.function", None), ("xla", None),
                                         ("tf.function", (4, 5)), ("xla", (2, 3, 4))])
def test_random_prefix_model_matches_reference(mode, widths):
    """widths: the step function returns its logits in column blocks of these widths."""
    max_lengths, max_length = [7, 3, 5, 1], 7
    model = PrefixModel(len(max_lengths), vocab_size=9, max_length=max_length, seed=3)
    step_fn = model.step_fn if widths is None else in_blocks(model.step_fn, widths)

    def run(max_lengths):
        return greedy_decode(step_fn, model.initial_cache(), len(max_lengths),
                             max_lengths, BOS, EOS, max_length=max_length, min_length=2)

    if mode != "eager":
        run = tf.function(run, jit_compile=(mode == "xla"))
    result = {name: value.numpy() for name, value in run(tf.constant(max_lengths)).items()}
    expected = reference_greedy(model, max_lengths, max_length, min_length=2)
    for sentence, (ids, score) in enumerate(expected):
        length = result["lengths"][sentence]
        assert length == len(ids)
        assert tuple(result["ids"][sentence, :length]) == ids
        assert not result["ids"][sentence, length:].any()
        np.testing.assert_allclose(result["scores"][sentence], score, rtol=1e-5)
    assert any(ids[-1] == EOS for ids, _ in expected)
    assert any(ids[-1] != EOS for ids, _ in expected)


def test_logits_in_blocks_decode_as_one_tensor_ties_and_eos_included():
    """Ties between blocks go to the lower id, as argmax over the whole vocabulary; a forbidden
    EOS leads its block; without min_length the top-1 path runs."""
    max_lengths, max_length = [6, 4, 6], 6
    model = PrefixModel(len(max_lengths), vocab_size=8, max_length=max_length, seed=5, scale=0.0)
    model.bias[:] = 0.0
    model.table[:, EOS] = 1.0  # EOS the single best token; the others tie across both blocks
    for min_length in (None, 4):
        whole, blocked = (
            {name: value.numpy() for name, value in greedy_decode(
                fn, model.initial_cache(), len(max_lengths), tf.constant(max_lengths), BOS, EOS,
                max_length=max_length, min_length=min_length).items()}
            for fn in (model.step_fn, in_blocks(model.step_fn, (3, 5))))
        for name in ("ids", "lengths"):
            np.testing.assert_array_equal(blocked[name], whole[name])
        np.testing.assert_allclose(blocked["scores"], whole["scores"], rtol=1e-6)
        expected_lengths = [1, 1, 1] if min_length is None else [4, 4, 4]
        np.testing.assert_array_equal(whole["lengths"], expected_lengths)
    # After EOS is forbidden, the tie among the others goes to the lowest id, PAD (0).
    np.testing.assert_array_equal(whole["ids"][:, :4], [[0, 0, 0, EOS]] * 3)
