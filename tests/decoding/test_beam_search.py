import numpy as np
import pytest
import tensorflow as tf

from decoding_fakes import (
    A, B, BOS, C, EOS, PrefixModel, TableModel, in_blocks, length_penalty, log_softmax,
    probability_rows, reference_beam_search)
from keras_transformer.decoding import beam_search, greedy_decode


def winner_table(num_steps=6, vocab_size=6):
    """Short A EOS (p = .5 * .6 = .30) against long B C C EOS (p = .4 * .9 ** 3 = .29)."""
    return probability_rows(num_steps, vocab_size, {
        (0, BOS): {A: 0.5, B: 0.4, EOS: 0.01}, (1, A): {EOS: 0.6}, (1, B): {C: 0.9, EOS: 0.01},
        (2, C): {C: 0.9, EOS: 0.01}, (3, C): {EOS: 0.9}})


def no_eos_table(num_steps=4, vocab_size=6):
    """EOS nearly impossible; the best sequences are A A A A, then B A A A."""
    no_eos = {EOS: 1e-4}
    return probability_rows(num_steps, vocab_size, {
        (0, None): {A: 0.5, B: 0.3, **no_eos}, (1, None): {A: 0.6, B: 0.2, **no_eos},
        (2, None): {A: 0.7, B: 0.25, **no_eos}, (3, None): {A: 0.8, B: 0.1, **no_eos}})


def search(model, max_lengths, beam_size, **kwargs):
    result = beam_search(model.step_fn, model.initial_cache(beam_size), len(max_lengths),
                         beam_size, tf.constant(max_lengths, tf.int32), BOS, EOS, **kwargs)
    return {name: value.numpy() for name, value in result.items()}


def path_log_prob(log_probs, ids):
    """Sum of log-probabilities of ids under a (T, V, V) table indexed by (step, last id)."""
    return sum(log_probs[step, last, token]
               for step, (last, token) in enumerate(zip((BOS,) + tuple(ids), ids)))


def assert_matches(result, expected):
    """expected: per sentence, [(ids tuple, score)] best first, as from reference_beam_search."""
    for sentence, hypotheses in enumerate(expected):
        for rank, (ids, score) in enumerate(hypotheses):
            length = result["lengths"][sentence, rank]
            assert (length, tuple(result["ids"][sentence, rank, :length])) == (len(ids), ids)
            assert not result["ids"][sentence, rank, length:].any()
            np.testing.assert_allclose(result["scores"][sentence, rank], score, rtol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_length_penalty_changes_the_winner(alpha):
    table = winner_table()
    log_probs = log_softmax(table)
    short, long = (A, EOS), (B, C, C, EOS)
    assert path_log_prob(log_probs, short) > path_log_prob(log_probs, long)
    result = search(TableModel(table[None]), [6], beam_size=2, alpha=alpha)
    ranking = [short, long] if alpha == 0.0 else [long, short]
    assert_matches(result, [[
        (ids, path_log_prob(log_probs, ids) / length_penalty(len(ids), alpha))
        for ids in ranking]])
    np.testing.assert_allclose(
        result["scores"][0], [np.log(0.3), np.log(0.4 * 0.9 ** 3)] if alpha == 0.0 else
        [np.log(0.4 * 0.9 ** 3) / 1.5 ** 0.6, np.log(0.3) / (7 / 6) ** 0.6], rtol=1e-5)


def test_no_hypothesis_ends_before_the_maximum_length():
    table = no_eos_table()
    log_probs = log_softmax(table)
    result = search(TableModel(table[None]), [4], beam_size=2, alpha=0.6)
    np.testing.assert_array_equal(result["ids"], [[[A, A, A, A], [B, A, A, A]]])
    np.testing.assert_array_equal(result["lengths"], [[4, 4]])
    np.testing.assert_allclose(result["scores"][0], [
        np.log(0.5 * 0.6 * 0.7 * 0.8) / length_penalty(4, 0.6),
        path_log_prob(log_probs, (B, A, A, A)) / length_penalty(4, 0.6)], rtol=1e-5)


def test_sentences_with_different_max_lengths_in_one_batch():
    no_eos, winner = no_eos_table(num_steps=6), winner_table()
    result = search(TableModel(np.stack([no_eos, winner, no_eos])), [2, 6, 3], beam_size=2)
    np.testing.assert_array_equal(result["ids"], [
        [[A, A, 0, 0, 0, 0], [B, A, 0, 0, 0, 0]],
        [[B, C, C, EOS, 0, 0], [A, EOS, 0, 0, 0, 0]],
        [[A, A, A, 0, 0, 0], [B, A, A, 0, 0, 0]]])
    np.testing.assert_array_equal(result["lengths"], [[2, 2], [4, 2], [3, 3]])
    no_eos_log_probs, winner_log_probs = log_softmax(no_eos), log_softmax(winner)
    np.testing.assert_allclose(result["scores"], [
        [np.log(0.5 * 0.6) / length_penalty(2, 0.6),
         path_log_prob(no_eos_log_probs, (B, A)) / length_penalty(2, 0.6)],
        [np.log(0.4 * 0.9 ** 3) / length_penalty(4, 0.6),
         np.log(0.3) / length_penalty(2, 0.6)],
        [np.log(0.5 * 0.6 * 0.7) / length_penalty(3, 0.6),
         np.log(0.3 * 0.6 * 0.7) / length_penalty(3, 0.6)]], rtol=1e-5)
    np.testing.assert_allclose(path_log_prob(winner_log_probs, (A, EOS)), np.log(0.3), rtol=1e-6)


def test_stops_early_once_no_live_hypothesis_can_win():
    table = probability_rows(10, 6, {(0, BOS): {EOS: 0.9}})
    model = TableModel(table[None])

    def step_fn(ids, step, cache):
        tf.debugging.assert_less(step, 1, message="decoded past the end")
        return model.step_fn(ids, step, cache)

    def run(num_return):
        return beam_search(step_fn, model.initial_cache(2), 1, 2, tf.constant([10]), BOS, EOS,
                           num_return=num_return)

    # EOS at once scores log .9; any live hypothesis is at most log(.1) / lp(10) below it.
    result = run(num_return=1)
    np.testing.assert_array_equal(result["ids"].numpy(), [[[EOS] + [0] * 9]])
    np.testing.assert_allclose(result["scores"].numpy(), [[np.log(0.9)]], rtol=1e-6)
    # Two hypotheses wanted, one finished: the search must go on.
    with pytest.raises(tf.errors.InvalidArgumentError, match="decoded past the end"):
        run(num_return=2)


def test_early_stop_bound_uses_the_longest_possible_length():
    """EOS at once (p .5) against A A A A EOS (p .35 * .99 ** 4): with alpha 2 the long one wins,
    although after step 0 its log-prob over lp(2) is below the short one's score; the bound must
    divide by lp(max length). After step 4 nothing live can win: decoding stops there."""
    table = probability_rows(6, 6, {
        (0, BOS): {EOS: 0.5, A: 0.35}, (1, A): {A: 0.99}, (2, A): {A: 0.99}, (3, A): {A: 0.99},
        (4, A): {EOS: 0.99}})
    model = TableModel(table[None])
    assert np.log(0.35) / length_penalty(2, 2.0) < np.log(0.5)

    def step_fn(ids, step, cache):
        tf.debugging.assert_less(step, 5, message="decoded past the end")
        return model.step_fn(ids, step, cache)

    result = beam_search(step_fn, model.initial_cache(2), 1, 2, tf.constant([6]), BOS, EOS,
                         alpha=2.0, num_return=1)
    np.testing.assert_array_equal(result["ids"].numpy(), [[[A, A, A, A, EOS, 0]]])
    np.testing.assert_allclose(
        result["scores"].numpy(), [[np.log(0.35 * 0.99 ** 4) / length_penalty(5, 2.0)]],
        rtol=1e-5)


@pytest.mark.parametrize("beam_size,alpha,num_return,min_length", [
    (2, 0.0, None, 0), (2, 0.6, None, 0), (3, 0.6, 2, 0), (4, 1.5, None, 0), (4, 0.6, 4, 3),
    (3, 0.0, 1, 5)])
def test_random_prefix_model_matches_reference(beam_size, alpha, num_return, min_length):
    max_lengths, max_length = [7, 3, 6, 1, 7], 7
    model = PrefixModel(len(max_lengths), vocab_size=11, max_length=max_length, seed=beam_size)
    parents = []
    expected = reference_beam_search(model, max_lengths, max_length, beam_size, alpha,
                                     num_return=num_return, min_length=min_length, trace=parents)
    result = search(model, max_lengths, beam_size, alpha=alpha, max_length=max_length,
                    num_return=num_return, min_length=min_length)
    assert result["ids"].shape == (len(max_lengths), num_return or beam_size, max_length)
    assert_matches(result, expected)
    # Hypotheses changed rows after step 0: the cache, which alone decides the logits, had to
    # follow them.
    assert any(beams != list(range(len(beams))) for beams in parents[1:])
    if min_length:
        assert all(len(ids) >= min(min_length, max_lengths[sentence])
                   for sentence, hypotheses in enumerate(expected) for ids, _ in hypotheses)


@pytest.mark.parametrize("widths,min_length", [((4, 7), 0), ((5, 6), 4), ((7, 4), 3)])
def test_logits_in_blocks_match_reference(widths, min_length):
    """A step function that returns its logits in column blocks (each of at least 2W columns)
    decodes as the documented beam search over the whole vocabulary."""
    max_lengths, max_length, beam_size = [7, 3, 6, 1, 7], 7, 2
    model = PrefixModel(len(max_lengths), vocab_size=11, max_length=max_length, seed=7)
    expected = reference_beam_search(model, max_lengths, max_length, beam_size, 0.6,
                                     min_length=min_length)
    result = beam_search(in_blocks(model.step_fn, widths), model.initial_cache(beam_size),
                         len(max_lengths), beam_size, tf.constant(max_lengths), BOS, EOS, alpha=0.6,
                         max_length=max_length, min_length=min_length)
    assert_matches({name: value.numpy() for name, value in result.items()}, expected)


def test_num_return_gives_the_best_of_the_full_list():
    max_lengths = [7, 5, 6]
    model = PrefixModel(len(max_lengths), vocab_size=10, max_length=7, seed=11)
    full = search(model, max_lengths, beam_size=4)
    best_two = search(model, max_lengths, beam_size=4, num_return=2)
    for name in ("ids", "scores", "lengths"):
        np.testing.assert_array_equal(best_two[name], full[name][:, :2])
    assert np.all(np.diff(full["scores"], axis=1) <= 0)
    with pytest.raises(ValueError, match="num_return"):
        search(model, max_lengths, beam_size=2, num_return=3)
    with pytest.raises(TypeError, match="Python ints"):
        beam_search(model.step_fn, model.initial_cache(2), 3, 2.0, tf.constant(max_lengths), BOS, EOS)
    with pytest.raises(ValueError, match="num_return must be left to its default"):
        tf.function(lambda size: beam_search(
            model.step_fn, model.initial_cache(2), 3, size, tf.constant(max_lengths), BOS, EOS, num_return=2)
        )(tf.constant(2))


@pytest.mark.parametrize("widths", [None, [700, 500]])
def test_a_width_given_as_a_tensor_searches_as_that_width_given_as_an_int(widths):
    """translate_nbest's search: one trace for every width >= 2, the same hypotheses and scores as
    each width's own trace. With 1,200 tokens in one block, the best 2W tokens are found block by
    block (selection.blockwise_top_k) at W = 2 and by one top_k at W >= 3, a choice the tensor's
    search makes when it runs; in two blocks of 700 and 500, by one top_k per block."""
    max_lengths = [7, 5, 6]
    model = PrefixModel(len(max_lengths), vocab_size=1200, max_length=7, seed=11, scale=3.0)
    step_fn = model.step_fn if widths is None else in_blocks(model.step_fn, widths)

    @tf.function(input_signature=[tf.TensorSpec([], tf.int32)])
    def any_width(width):
        return beam_search(step_fn, model.initial_cache(width), len(max_lengths), width,
                           tf.constant(max_lengths), BOS, EOS, alpha=0.6)

    for width in (2, 3, 5):
        expected = beam_search(step_fn, model.initial_cache(width), len(max_lengths), width,
                               tf.constant(max_lengths), BOS, EOS, alpha=0.6)
        got = any_width(tf.constant(width))
        assert got["ids"].shape == expected["ids"].shape == (len(max_lengths), width, max(max_lengths))
        for name in ("ids", "lengths"):
            np.testing.assert_array_equal(got[name], expected[name])
        np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-6)
    assert any_width.experimental_get_tracing_count() == 1


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_is_greedy(alpha):
    max_lengths = [9, 4, 9, 2, 9, 9]
    model = PrefixModel(len(max_lengths), vocab_size=8, max_length=9, seed=5, scale=1.0)
    greedy = greedy_decode(model.step_fn, model.initial_cache(), len(max_lengths),
                           tf.constant(max_lengths), BOS, EOS)
    beam = search(model, max_lengths, beam_size=1, alpha=alpha)
    np.testing.assert_array_equal(beam["ids"][:, 0], greedy["ids"].numpy())
    np.testing.assert_array_equal(beam["lengths"][:, 0], greedy["lengths"].numpy())
    penalty = ((5.0 + greedy["lengths"].numpy()) / 6.0) ** alpha  # GNMT's lp, written out
    np.testing.assert_allclose(beam["scores"][:, 0], greedy["scores"].numpy() / penalty, rtol=1e-6)
    assert len(set(greedy["lengths"].numpy())) > 1


def test_beam_size_one_stops_at_the_first_eos_even_if_a_longer_one_would_win():
    """Greedy ends with EOS at once (p .5); a 2-beam search finds A A A A EOS (p .49 * .99 ** 4),
    better once normalised with alpha 0.6. Beam size 1 stays greedy."""
    table = probability_rows(6, 6, {
        (0, BOS): {EOS: 0.5, A: 0.49}, (1, A): {A: 0.99}, (2, A): {A: 0.99}, (3, A): {A: 0.99},
        (4, A): {EOS: 0.99}})
    model = TableModel(table[None])
    one = search(model, [6], beam_size=1)
    np.testing.assert_array_equal(one["ids"], [[[EOS, 0, 0, 0, 0, 0]]])
    np.testing.assert_allclose(one["scores"], [[np.log(0.5)]], rtol=1e-6)
    two = search(model, [6], beam_size=2, num_return=1)
    np.testing.assert_array_equal(two["ids"], [[[A, A, A, A, EOS, 0]]])
    assert two["scores"][0, 0] > one["scores"][0, 0]


def test_general_loop_with_one_beam_and_alpha_zero_agrees_with_greedy():
    """The dispatch to greedy is not hiding a disagreement: with alpha = 0, the reference of the
    W-beam loop run with W = 1 ends where greedy ends."""
    max_lengths = [9, 4, 9, 2, 9, 9]
    model = PrefixModel(len(max_lengths), vocab_size=8, max_length=9, seed=5, scale=1.0)
    greedy = greedy_decode(model.step_fn, model.initial_cache(), len(max_lengths),
                           tf.constant(max_lengths), BOS, EOS)
    expected = reference_beam_search(model, max_lengths, 9, beam_size=1, alpha=0.0)
    for sentence, [(ids, score)] in enumerate(expected):
        assert tuple(greedy["ids"][sentence, :len(ids)].numpy()) == ids
        np.testing.assert_allclose(greedy["scores"][sentence], score, rtol=1e-5)


def test_min_length_forces_the_exact_output_length():
    max_lengths = [5, 5]
    model = TableModel(np.stack([winner_table(num_steps=5), no_eos_table(num_steps=5)]))
    result = search(model, max_lengths, beam_size=3, min_length=5)
    np.testing.assert_array_equal(result["lengths"], np.full([2, 3], 5))
    assert not np.any(result["ids"][:, :, :4] == EOS)
    assert len({tuple(ids) for ids in result["ids"][0]}) == 3


def test_float16_logits_are_scored_in_float32():
    model = TableModel(np.stack([winner_table(), no_eos_table(num_steps=6)]), dtype=tf.float16)
    result = search(model, [6, 6], beam_size=2)
    assert result["scores"].dtype == np.float32
    assert_matches(result, reference_beam_search(model, [6, 6], 6, beam_size=2, alpha=0.6))


@pytest.mark.parametrize("jit_compile", [False, True])
def test_runs_in_tf_function(jit_compile):
    max_lengths, max_length, beam_size = [6, 2, 5], 6, 3
    model = PrefixModel(len(max_lengths), vocab_size=9, max_length=max_length, seed=7)

    @tf.function(jit_compile=jit_compile)
    def run(max_lengths, alpha):
        return beam_search(model.step_fn, model.initial_cache(beam_size), len(max_lengths),
                           beam_size, max_lengths, BOS, EOS, alpha=alpha, max_length=max_length)

    for alpha in (0.0, 0.6):
        result = run(tf.constant(max_lengths), tf.constant(alpha))
        assert_matches({name: value.numpy() for name, value in result.items()},
                       reference_beam_search(model, max_lengths, max_length, beam_size, alpha))


def test_dynamic_batch_size_in_a_signature():
    """As in a SavedModel signature: batch size and maximum length known only at run time."""
    beam_size = 2
    model = PrefixModel(4, vocab_size=9, max_length=6, seed=2)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
    def run(max_lengths):
        batch_size = tf.shape(max_lengths)[0]
        cache = model.initial_cache(beam_size)
        cache = tf.nest.map_structure(lambda t: t[:batch_size * beam_size], cache)
        return beam_search(model.step_fn, cache, batch_size, beam_size, max_lengths, BOS, EOS)

    for max_lengths in ([6, 3, 4, 5], [2, 6]):
        result = run(tf.constant(max_lengths))
        expected = reference_beam_search(model, max_lengths, max(max_lengths), beam_size, 0.6)
        assert result["ids"].shape == (len(max_lengths), beam_size, max(max_lengths))
        assert_matches({name: value.numpy() for name, value in result.items()}, expected)


def test_survives_a_saved_model_round_trip(tmp_path):
    """Exported with tf.saved_model.save and reloaded, the decoders give the same hypotheses, and
    the graph holds only core TensorFlow ops (no py_function, nothing TF Serving lacks)."""
    beam_size = 2
    model = PrefixModel(3, vocab_size=9, max_length=6, seed=4)

    class Decoders(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
        def beam(self, max_lengths):
            batch_size = tf.shape(max_lengths)[0]
            cache = tf.nest.map_structure(lambda t: t[:batch_size * beam_size],
                                          model.initial_cache(beam_size))
            return beam_search(model.step_fn, cache, batch_size, beam_size, max_lengths, BOS, EOS)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
        def greedy(self, max_lengths):
            batch_size = tf.shape(max_lengths)[0]
            cache = tf.nest.map_structure(lambda t: t[:batch_size], model.initial_cache())
            return greedy_decode(model.step_fn, cache, batch_size, max_lengths, BOS, EOS)

    decoders = Decoders()
    tf.saved_model.save(decoders, str(tmp_path))
    loaded = tf.saved_model.load(str(tmp_path))
    max_lengths = tf.constant([6, 2, 5])
    for name in ("beam", "greedy"):
        before = getattr(decoders, name)(max_lengths)
        after = getattr(loaded, name)(max_lengths)
        for key in ("ids", "scores", "lengths"):
            np.testing.assert_array_equal(after[key].numpy(), before[key].numpy())
    assert_matches({key: value.numpy() for key, value in loaded.beam(max_lengths).items()},
                   reference_beam_search(model, [6, 2, 5], 6, beam_size, 0.6))

    graph = decoders.beam.get_concrete_function().graph.as_graph_def()
    op_types = {node.op for node in graph.node}
    for function in graph.library.function:
        op_types |= {node.op for node in function.node_def}
    assert {"TopKV2", "While"} <= op_types or {"TopKV2", "StatelessWhile"} <= op_types
    assert not op_types & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
