import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.config import TrainConfig
from keras_transformer.decoding import beam_search
from keras_transformer.precision import model_in_precision
from keras_transformer.training.summaries import cross_attention

SOURCE = np.array([[5, 6, 7, 8, 3, 0, 0], [9, 10, 3, 0, 0, 0, 0]], np.int32)
TARGET = np.array([[2, 11, 5, 6, 14, 7], [2, 9, 17, 10, 0, 0]], np.int32)  # copies some of the source's pieces
ALIGNED = dict(aligned_decoder=True)
ALIGNED_NEXT = dict(aligned_decoder=True, aligned_next=True)
VARIANTS = [dict(), dict(tie_embeddings=False), dict(positional="learned"), dict(norm_first=True),
            dict(num_layers=3, decoder_layers=1), ALIGNED, ALIGNED_NEXT]


def _tiny(**fields):
    return kt.Transformer.from_preset("tiny", **{"dropout_rate": 0.0, **fields})


@pytest.mark.parametrize("fields", VARIANTS)
def test_logits_shape_and_round_trips(tmp_path, fields):
    model = _tiny(**fields)
    logits = np.asarray(model((SOURCE, TARGET), training=False))
    assert logits.shape == (2, 6, model.config.vocab_size) and logits.dtype == np.float32
    clone = kt.Transformer.from_config(model.get_config())
    assert clone.config == model.config
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(np.asarray(reloaded((SOURCE, TARGET), training=False)), logits)


def test_untied_and_learned_variants_add_their_weights():
    c = kt.TransformerConfig.from_preset("tiny")
    base = _tiny().count_params()
    assert _tiny(tie_embeddings=False).count_params() - base == 2 * c.vocab_size * c.d_model
    assert _tiny(positional="learned").count_params() - base == 2 * c.max_length * c.d_model
    assert _tiny(norm_first=True).count_params() - base == 2 * 2 * c.d_model  # final norm of each stack


def test_decoder_layers_sets_the_decoder_stack_alone():
    paper = _tiny(num_layers=3)
    shallow = _tiny(num_layers=3, decoder_layers=1)
    assert len(shallow.encoder.stack) == 3 and len(shallow.decoder.stack) == 1
    assert len(paper.decoder.stack) == 3
    decoder_layer = sum(w.numpy().size for w in paper.decoder.stack[0].weights)
    assert paper.count_params() - shallow.count_params() == 2 * decoder_layer


def test_word_dropout_drops_whole_token_vectors_in_training_only():
    """word_dropout_rate zeroes each token's embedding vector, on the source and on the decoder's
    input, or keeps all of it (scaled); at inference nothing is dropped; at rate 0 there is no layer."""
    assert _tiny().source_word_dropout is None and _tiny().target_word_dropout is None
    model = _tiny(word_dropout_rate=0.5)  # dropout_rate 0: word dropout is the only randomness
    for layer in (model.source_word_dropout, model.target_word_dropout):
        x = tf.ones((8, 40, model.config.d_model))
        dropped = np.asarray(layer(x, training=True))
        zeroed, kept = np.all(dropped == 0, axis=-1), np.all(dropped == 2, axis=-1)
        assert np.all(zeroed | kept) and 0.3 < zeroed.mean() < 0.7
        np.testing.assert_array_equal(np.asarray(layer(x, training=False)), np.asarray(x))
    inference = np.asarray(model((SOURCE, TARGET), training=False))
    np.testing.assert_array_equal(np.asarray(model((SOURCE, TARGET), training=False)), inference)
    assert not np.allclose(np.asarray(model((SOURCE, TARGET), training=True)), inference)
    memory = [np.asarray(model.encode(SOURCE, training=training)[0]) for training in (True, False)]
    assert not np.allclose(*memory)  # the source side's own
    plain = _tiny()
    np.testing.assert_array_equal(np.asarray(plain((SOURCE, TARGET), training=True)),
                                  np.asarray(plain((SOURCE, TARGET), training=False)))
    with pytest.raises(ValueError, match=r"word_dropout_rate must be in \[0, 1\); got 1.0"):
        kt.TransformerConfig(word_dropout_rate=1.0)


def test_tied_embedding_is_one_matrix():
    model = _tiny()
    assert model.source_embedding is model.target_embedding is model.output_embedding
    assert sum("embeddings" in w.path for w in model.weights) == 1


def test_changing_a_padded_source_position_never_changes_any_output():
    """Whatever sits at a padded source position, in the encoder's input, in its output (the
    memory) or as extra padding, no logit changes."""
    model = _tiny()
    before = np.asarray(model((SOURCE, TARGET)))
    memory, mask = model.encode(SOURCE)
    padded = ~mask.numpy()
    rng = np.random.default_rng(0)

    embedded = model.source_positional(model.source_embedding(SOURCE)).numpy()
    embedded[padded] = 100 * rng.normal(size=embedded[padded].shape)
    noisy_memory = model.encoder(tf.constant(embedded), attention_mask=mask[:, None, :])
    np.testing.assert_allclose(noisy_memory.numpy()[~padded], memory.numpy()[~padded], atol=1e-5)
    np.testing.assert_allclose(model.decode(TARGET, noisy_memory, mask), before, atol=1e-5)

    noisy = memory.numpy()
    noisy[padded] = 1e3 * rng.normal(size=noisy[padded].shape)
    np.testing.assert_allclose(model.decode(TARGET, tf.constant(noisy), mask), before, atol=1e-5)

    longer = np.concatenate([SOURCE, np.zeros((2, 5), np.int32)], 1)
    np.testing.assert_allclose(model((longer, TARGET)), before, atol=1e-5)


def test_changing_target_token_t_never_changes_earlier_logits():
    model = _tiny()
    before = np.asarray(model((SOURCE, TARGET)))
    for t in range(1, TARGET.shape[1]):
        changed = TARGET.copy()
        changed[:, t] = 99
        after = np.asarray(model((SOURCE, changed)))
        np.testing.assert_allclose(after[:, :t], before[:, :t], atol=1e-5)
        assert not np.allclose(after[:, t:], before[:, t:], atol=1e-5)


@pytest.mark.parametrize("fields,parallel_groups,transposed_kernels", [
    (dict(), 1, False), (dict(), 1, True), (dict(norm_first=True, tie_embeddings=False), 1, False),
    (dict(norm_first=True, tie_embeddings=False), 1, True), (dict(), 2, True), (dict(), 3, False),
    (dict(num_layers=3, decoder_layers=1), 2, True), (ALIGNED, 1, False), (ALIGNED, 2, True),
    (ALIGNED_NEXT, 1, False), (ALIGNED_NEXT, 2, True)])
def test_cached_decoding_equals_the_full_pass(fields, parallel_groups, transposed_kernels):
    """Feeding the target one token at a time through the cache: logits within 1e-5 of one pass,
    also with the sentences in groups (3 groups of 2 sentences: one is empty) and the logits in
    vocabulary blocks, and with the products computed on transposed kernels."""
    model = _tiny(**fields)
    full = np.asarray(model((SOURCE, TARGET)))
    step_fn, cache = model.decoding_step_fn(tf.constant(SOURCE), beam_size=1, cache_length=10,
                                            parallel_groups=parallel_groups, transposed_kernels=transposed_kernels)
    logits = []
    for t in range(TARGET.shape[1]):
        step_logits, cache = step_fn(tf.constant(TARGET[:, t]), tf.constant(t), cache)
        if parallel_groups > 1:
            assert len(step_logits) == parallel_groups
            step_logits = tf.concat(step_logits, axis=-1)
        logits.append(step_logits)
    incremental = np.stack(logits, axis=1)
    real = TARGET != 0
    np.testing.assert_allclose(incremental[real], full[real], atol=1e-5)


def test_the_aligned_decoder_reads_the_memory_at_the_last_copied_piece():
    """A target token is a copy when it is the source's next piece not copied yet (in order, never
    PAD, BOS or EOS): the decoder's input at each position gets the memory at the piece copied
    last, nothing before the first copy, and stays there once the source's pieces run out."""
    model = _tiny(**ALIGNED)
    # Row 0's source is 5 6 7 8 EOS: 6 before 5 is no copy, 5 6 7 are, 7 again and EOS are not, 8 is.
    target = np.array([[2, 6, 5, 11, 6, 7, 7, 3, 8, 8], [2, 9, 9, 10, 3, 9, 10, 0, 0, 0]], np.int32)
    counts = model._copied_counts(tf.constant(target), tf.constant(SOURCE)).numpy()
    np.testing.assert_array_equal(counts, [[0, 0, 1, 1, 2, 3, 3, 3, 4, 4], [0, 1, 1, 2, 2, 2, 2, 2, 2, 2]])
    memory, _ = model.encode(SOURCE)
    got = model._copied_memory(memory, tf.range(2)[:, None], tf.constant(counts)).numpy()
    for row in range(2):
        for t in range(target.shape[1]):
            want = np.zeros(memory.shape[-1]) if counts[row, t] == 0 else memory.numpy()[row, counts[row, t] - 1]
            np.testing.assert_array_equal(got[row, t], want)
    # The input changes the logits: the same weights without the alignment answer otherwise.
    paper = _tiny()
    paper.set_weights(model.get_weights())
    assert not np.allclose(model((SOURCE, target)), paper((SOURCE, target)), atol=1e-3)
    with pytest.raises(ValueError, match="source_ids"):
        model.decode(target, memory, SOURCE != 0)
    # TensorBoard's attention picture (training.summaries) decodes with the source too: (H, T, S) weights.
    scores = cross_attention(model, SOURCE[0][:5], target[0][1:9])
    assert scores.shape == (model.config.num_heads, 8, 5)
    np.testing.assert_allclose(scores.sum(axis=-1), 1.0, rtol=1e-5)


def test_aligned_next_adds_the_projected_memory_at_the_next_piece():
    """aligned_next: a d_model x d_model projection more, and the decoder's input also gets the
    projected memory at the next piece not copied yet (the source's EOS once all are copied)."""
    model = _tiny(**ALIGNED_NEXT)
    d = model.config.d_model
    assert model.count_params() == _tiny(**ALIGNED).count_params() + d * d
    counts = tf.constant([[0, 1, 4, 4], [0, 1, 2, 2]])  # row 1's source is 9 10 EOS: 2 is all it has
    memory, _ = model.encode(SOURCE)
    projected = model.next_piece_projection(memory).numpy()
    got = model._copied_memory(memory, tf.range(2)[:, None], counts, model._next_memory(memory)).numpy()
    last = model._copied_memory(memory, tf.range(2)[:, None], counts).numpy()
    for row in range(2):
        for t in range(4):
            np.testing.assert_allclose(got[row, t] - last[row, t], projected[row, counts[row, t]], atol=1e-6)
    # The same weights without it answer otherwise, and alike once the projection is zero.
    aligned = _tiny(**ALIGNED)
    aligned.set_weights([w.numpy() for w in model.weights if "next_piece_projection" not in w.path])
    assert not np.allclose(model((SOURCE, TARGET)), aligned((SOURCE, TARGET)), atol=1e-3)
    model.next_piece_projection.kernel.assign(tf.zeros([d, d]))
    np.testing.assert_allclose(model((SOURCE, TARGET)), aligned((SOURCE, TARGET)), atol=1e-6)
    with pytest.raises(ValueError, match="aligned_next .* needs aligned_decoder"):
        kt.TransformerConfig.from_preset("tiny", aligned_next=True)


@pytest.mark.parametrize("fields", [ALIGNED, ALIGNED_NEXT])
def test_the_aligned_decoders_count_follows_the_beams(fields):
    """Two hypotheses per sentence that copied different numbers of pieces, swapped by the beam
    search's reorder_cache after 3 steps: each row goes on with the other's count, as the full pass
    of the sequence it now continues says."""
    model = _tiny(**fields)
    beams = np.array([[2, 5, 6, 11, 7, 12], [2, 11, 5, 12, 6, 7],    # sentence 0 (5 6 7 8), beams 0 and 1
                      [2, 11, 12, 9, 13, 10], [2, 9, 10, 11, 12, 13]], np.int32)  # sentence 1 (9 10)
    step_fn, cache = model.decoding_step_fn(tf.constant(SOURCE), beam_size=2, cache_length=10)
    swapped_after = 3
    for t in range(swapped_after):
        _, cache = step_fn(tf.constant(beams[:, t]), tf.constant(t), cache)
    parents = tf.constant([1, 0, 3, 2])
    cache = step_fn.reorder_cache(cache, parents)
    continued = np.concatenate([beams[parents.numpy(), :swapped_after], beams[:, swapped_after:]], axis=1)
    logits = []
    for t in range(swapped_after, beams.shape[1]):
        step_logits, cache = step_fn(tf.constant(continued[:, t]), tf.constant(t), cache)
        logits.append(step_logits)
    full = np.asarray(model((np.repeat(SOURCE, 2, axis=0), continued)))
    np.testing.assert_allclose(np.stack(logits, axis=1), full[:, swapped_after:], atol=1e-5)


def _copy_task(rng, n, length=8):
    """Source: random symbols then EOS; target: the same sequence (a copy)."""
    lengths = rng.integers(3, length + 1, size=n)
    source = np.zeros((n, length + 1), np.int32)
    for i, size in enumerate(lengths):
        source[i, :size] = rng.integers(4, 20, size=size)
        source[i, size] = kt.EOS_ID
    target_in = np.concatenate([np.full((n, 1), kt.BOS_ID, np.int32), source[:, :-1]], 1)
    target_in[target_in == kt.EOS_ID] = 0
    return (source, target_in), source


def test_fit_learns_to_copy():
    rng = np.random.default_rng(0)
    train_x, train_y = _copy_task(rng, 4096)
    dataset = tf.data.Dataset.from_tensor_slices((train_x, train_y)).shuffle(4096, seed=0).batch(64).repeat()
    model = kt.Transformer.from_preset("tiny", vocab_size=20, dropout_rate=0.0, num_layers=1)
    model.compile(optimizer=kt.paper_optimizer(model.config.d_model, TrainConfig(warmup_steps=100)))
    history = model.fit(dataset, steps_per_epoch=100, epochs=4, verbose=0, shuffle=False).history
    assert history["loss"][-1] < 0.5 * history["loss"][0]
    held_out = model.evaluate(*_copy_task(rng, 512), verbose=0, return_dict=True)
    assert held_out["token_accuracy"] >= 0.95, held_out


def _global_batch(rng):
    """16 pairs whose replicas (2 pairs each over 8 devices) hold very different numbers of tokens."""
    source = rng.integers(4, 30, size=(16, 6)).astype(np.int32)
    target = rng.integers(4, 30, size=(16, 7)).astype(np.int32)
    for i in range(16):
        source[i, 1 + i % 5:] = 0
        target[i, 1 + (i * 3) % 7:] = 0
    return (source, target[:, :-1]), target[:, 1:]


def _one_step(strategy, initial_weights, batch):
    with strategy.scope():
        model = kt.Transformer.from_preset("tiny", vocab_size=30, dropout_rate=0.0, num_layers=1)
        model.set_weights(initial_weights)
        model.compile(optimizer=keras.optimizers.SGD(1.0))
    dataset = tf.data.Dataset.from_tensors(batch)
    history = model.fit(dataset, epochs=1, verbose=0, shuffle=False).history
    return history["loss"][0], model.get_weights()


def test_mirrored_strategy_step_equals_one_device_step():
    """One step over 8 replicas: same loss and weights as one device on the same global batch.

    SGD, not Adam: Adam's first update is about lr * sign(gradient) whatever the gradient's scale,
    which would hide a wrongly normalized loss.
    """
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) == 8, "tests/conftest.py declares 8 logical CPUs"
    batch = _global_batch(np.random.default_rng(0))
    initial = kt.Transformer.from_preset("tiny", vocab_size=30, dropout_rate=0.0, num_layers=1).get_weights()
    one_loss, one_weights = _one_step(tf.distribute.OneDeviceStrategy(devices[0]), initial, batch)
    mirrored_loss, mirrored_weights = _one_step(tf.distribute.MirroredStrategy(devices), initial, batch)
    assert mirrored_loss == pytest.approx(one_loss, rel=1e-5)
    for a, b, start in zip(mirrored_weights, one_weights, initial):
        np.testing.assert_allclose(a, b, atol=2e-6)
    assert any(not np.allclose(a, s) for a, s in zip(one_weights, initial))


@pytest.mark.parametrize("beam_size", [1, 3])
def test_beam_search_on_the_shared_cache_equals_reordering_prefixes(beam_size):
    """The cached step function moves only its prefix slots between beams (reorder_cache); beam
    search with it finds what beam search finds by rerunning the whole prefix at every step."""
    model = _tiny()
    source, length = tf.constant(SOURCE), 6
    step_fn, cache = model.decoding_step_fn(source, beam_size, cache_length=length)
    full_source = tf.repeat(source, beam_size, axis=0)

    def full_step_fn(ids, step, prefix):
        prefix = tf.where(tf.range(length) == step, ids[:, None], prefix)
        return model((full_source, prefix[:, :step + 1]), training=False)[:, -1, :], prefix

    def search(step_fn, cache):
        return beam_search(step_fn, cache, len(SOURCE), beam_size, tf.fill([len(SOURCE)], length),
                           kt.BOS_ID, kt.EOS_ID, min_length=length)

    cached = search(step_fn, cache)
    full = search(full_step_fn, tf.zeros([len(SOURCE) * beam_size, length], tf.int32))
    np.testing.assert_array_equal(cached["ids"], full["ids"])
    np.testing.assert_allclose(cached["scores"], full["scores"], rtol=1e-5)


@pytest.mark.parametrize("beam_size,batch,parallel_groups,dynamic,precision", [
    (1, 5, 2, False, "float32"), (3, 5, 2, False, "float32"), (3, 5, 2, True, "float32"),
    (3, 4, 3, True, "float32"), (2, 1, 2, False, "float32"), (3, 5, 2, True, "bfloat16")])
def test_parallel_groups_decode_as_one_group(beam_size, batch, parallel_groups, dynamic, precision):
    """Sentences in groups decoded side by side (uneven groups, an empty one when there are more
    groups than sentences), logits in vocabulary blocks: the same translations and scores, with
    the batch size known when traced or not (a serving signature), in float32 or bfloat16."""
    model = model_in_precision(_tiny(), precision)
    rng = np.random.default_rng(batch)
    source = np.zeros((batch, 7), np.int32)
    for row, size in enumerate(rng.integers(1, 7, size=batch)):
        source[row, :size] = rng.integers(4, 40, size=size)
        source[row, size] = kt.EOS_ID
    length = 6

    def decode(source, parallel_groups):
        sentences = tf.shape(source)[0] if dynamic else batch
        step_fn, cache = model.decoding_step_fn(source, beam_size, cache_length=length,
                                                parallel_groups=parallel_groups)
        return beam_search(step_fn, cache, sentences, beam_size, tf.fill([sentences], length),
                           kt.BOS_ID, kt.EOS_ID, num_return=beam_size)

    signature = [tf.TensorSpec([None if dynamic else batch, 7], tf.int32)]
    one, grouped = (tf.function(functools.partial(decode, parallel_groups=groups), input_signature=signature)(
        tf.constant(source)) for groups in (1, parallel_groups))
    np.testing.assert_array_equal(grouped["ids"], one["ids"])
    np.testing.assert_array_equal(grouped["lengths"], one["lengths"])
    np.testing.assert_allclose(grouped["scores"], one["scores"], rtol=1e-5)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_transposed_kernels_decode_as_the_stored_ones(precision):
    """Beam search with the step's products on transposed kernels (W^T x^T)^T and on the stored
    ones x W: the same translations, scores within float rounding, in float32 or bfloat16."""
    model = model_in_precision(_tiny(), precision)
    rng = np.random.default_rng(7)
    source = np.zeros((6, 7), np.int32)
    for row, size in enumerate(rng.integers(1, 7, size=6)):
        source[row, :size] = rng.integers(4, 40, size=size)
        source[row, size] = kt.EOS_ID
    results = []
    for transposed_kernels in (False, True):
        step_fn, cache = model.decoding_step_fn(tf.constant(source), 3, cache_length=6,
                                                transposed_kernels=transposed_kernels)
        results.append(beam_search(step_fn, cache, 6, 3, tf.fill([6], 6), kt.BOS_ID, kt.EOS_ID, num_return=3))
    stored, transposed = results
    np.testing.assert_array_equal(transposed["ids"], stored["ids"])
    np.testing.assert_allclose(transposed["scores"], stored["scores"],
                               rtol=1e-5 if precision == "float32" else 2e-2)


def test_transposed_kernels_by_default_where_measured_faster(monkeypatch):
    """On an x86 CPU with AVX2 and no AVX-512 (where it was measured faster) and no GPU, else not."""
    from keras_transformer import cpu, model as model_module
    from tests.test_precision import CPUINFO_AMX, CPUINFO_ARM, CPUINFO_AVX2

    for text, expected in ((CPUINFO_AVX2, True), (CPUINFO_AMX, False), (CPUINFO_ARM, False), ("", False)):
        monkeypatch.setattr(model_module, "avx2_without_avx512", lambda: cpu.avx2_without_avx512(text))
        assert model_module.transposed_here() is expected, text
    monkeypatch.setattr(model_module, "avx2_without_avx512", lambda: True)
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: ["a GPU"] if kind == "GPU" else [])
    assert model_module.transposed_here() is False


def test_parallel_groups_must_be_a_positive_integer():
    with pytest.raises(ValueError, match="parallel_groups must be an integer >= 1; got 0"):
        _tiny().decoding_step_fn(tf.constant(SOURCE), parallel_groups=0)
