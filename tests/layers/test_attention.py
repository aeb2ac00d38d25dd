import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import masking
from keras_transformer.layers import MultiHeadAttention
from keras_transformer.layers import attention
from keras_transformer.layers.attention import scaled_dot_product_attention
from tests.layer_checks import run_layer_checks

B, T, S, D, H, K, V = 2, 5, 7, 16, 4, 3, 6


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_scaled_dot_product_matches_formula():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(B, H, T, K)), rng.normal(size=(B, H, S, K)), rng.normal(size=(B, H, S, V))
    mask = rng.random((B, 1, S)) > 0.3
    mask[:, :, 0] = True
    context, weights = scaled_dot_product_attention(
        *(tf.constant(a, tf.float32) for a in (q, k, v)), masking.mask_to_bias(mask, tf.float32))
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(K)
    logits = np.where(mask[:, None], logits, -np.inf)
    expected_weights = _softmax(logits)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    np.testing.assert_allclose(context, expected_weights @ v, atol=1e-5)


def test_self_attention_layer_checks(tmp_path):
    layer = MultiHeadAttention(H, K, V, name="self_attention")
    inputs = {"query": np.random.normal(size=(B, T, D)).astype("float32"),
              "attention_mask": np.random.random((B, 1, T)) > 0.2}
    weights = D * H * (2 * K + V) + H * (2 * K + V) + H * V * D + D
    run_layer_checks(layer, inputs, (B, T, D), weights, kwarg_inputs=("attention_mask",), tmp_path=tmp_path)


def test_cross_attention_layer_checks(tmp_path):
    layer = MultiHeadAttention(H, K, V, cross_attention=True, name="cross_attention")
    inputs = {"query": np.random.normal(size=(B, T, D)).astype("float32"),
              "memory": np.random.normal(size=(B, S, D)).astype("float32"),
              "attention_mask": np.random.random((B, S)) > 0.2}
    weights = D * H * K + H * K + D * H * (K + V) + H * (K + V) + H * V * D + D
    run_layer_checks(layer, inputs, (B, T, D), weights, kwarg_inputs=("memory", "attention_mask"),
                     tmp_path=tmp_path)


def test_padded_key_never_changes_output():
    layer = MultiHeadAttention(H, K, V, cross_attention=True)
    query = tf.random.normal((B, T, D))
    memory = np.random.normal(size=(B, S, D)).astype("float32")
    mask = np.ones((B, S), bool)
    mask[:, -2:] = False
    before = layer(query, memory, attention_mask=mask)
    memory[:, -2:] = np.random.normal(size=(B, 2, D)) * 100
    np.testing.assert_allclose(layer(query, memory, attention_mask=mask), before, atol=1e-5)


def test_cached_self_attention_equals_causal_full_pass():
    layer = MultiHeadAttention(H, K, V)
    x = tf.random.normal((B, T, D))
    full = layer(x, attention_mask=masking.causal_mask(T)[None])
    cache = layer.initial_cache(B, T + 3, tf.float32)
    steps = []
    for t in range(T):
        out, cache = layer.call_cached(x[:, t:t + 1], cache, tf.constant(t))
        steps.append(out)
    np.testing.assert_allclose(tf.concat(steps, 1), full, atol=1e-5)


def test_a_cached_step_reads_its_prefix_only_except_under_xla():
    """Outside XLA a step at position t reads t + 1 cache positions, not the cache's length (the
    parser's beam 21 over input + 300 positions spent most of its time on empty slots); XLA, whose
    shapes are fixed, reads them all. The outputs are the same either way."""
    assert int(attention.visible_positions(tf.constant(50), tf.constant(3))) == 4
    assert int(attention.visible_positions(tf.constant(50), tf.constant(70))) == 50
    assert int(tf.function(attention.visible_positions)(tf.constant(50), tf.constant(3))) == 4
    assert int(tf.function(attention.visible_positions, jit_compile=True)(tf.constant(50), tf.constant(3))) == 50

    layer = MultiHeadAttention(H, K, V)
    x = tf.random.normal((B, T, D))
    full = layer(x, attention_mask=masking.causal_mask(T)[None])

    def decode(x):
        cache, steps = layer.initial_cache(B, T + 40, tf.float32), []
        for t in range(T):
            out, cache = layer.call_cached(x[:, t:t + 1], cache, tf.constant(t))
            steps.append(out)
        return tf.concat(steps, 1)

    np.testing.assert_allclose(tf.function(decode)(x), full, atol=1e-5)
    np.testing.assert_allclose(tf.function(decode, jit_compile=True)(x), full, atol=1e-5)


def test_cross_attention_with_shared_memory_matches_tiled_memory():
    """W hypotheses per sentence attending to keys/values computed once equal tiling the memory W times."""
    W = 3
    layer = MultiHeadAttention(H, K, V, cross_attention=True)
    memory = tf.random.normal((B, S, D))
    mask = tf.constant(np.random.random((B, S)) > 0.3)
    query = tf.random.normal((B * W, 1, D))
    tiled = layer(query, tf.repeat(memory, W, axis=0), attention_mask=tf.repeat(mask, W, axis=0))
    key, value = layer.project_memory(memory)
    shared = layer.call_with_memory(query, key, value, masking.mask_to_bias(mask, tf.float32), beam_size=W)
    np.testing.assert_allclose(shared, tiled, atol=1e-5)


@pytest.mark.parametrize("shape", [(B,), (B, 1, 1, S)])
def test_mask_of_wrong_rank_is_named(shape):
    layer = MultiHeadAttention(H, K, V)
    with pytest.raises(ValueError, match=r"rank 2 \(B, S\) or rank 3 \(B, T, S\).*got rank"):
        layer(tf.random.normal((B, T, D)), attention_mask=tf.ones(shape, tf.bool))


def test_cross_attention_without_memory_is_an_error():
    with pytest.raises(ValueError, match="needs `memory`"):
        MultiHeadAttention(H, K, V, cross_attention=True)(tf.random.normal((B, T, D)))


@pytest.mark.parametrize("shape", [(3, 1, 4, 5), (3, 2, 4, 5), (1, 1, 4, 1)])
def test_transpose_equals_tf_transpose(shape):
    x = tf.reshape(tf.range(np.prod(shape), dtype=tf.float32), shape)
    perm = (0, 2, 1, 3)
    np.testing.assert_array_equal(attention.transpose(x, perm), tf.transpose(x, perm))
    # Traced with an unknown batch size (the Translator's signatures), and with two unknown sizes.
    for spec in ([None, *shape[1:]], [None, None, *shape[2:]]):
        traced = tf.function(lambda y: attention.transpose(y, perm), input_signature=[tf.TensorSpec(spec)])
        np.testing.assert_array_equal(traced(x), tf.transpose(x, perm))
