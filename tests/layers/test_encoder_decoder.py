import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import masking
from keras_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer
from tests.layer_checks import run_layer_checks

B, S, T, D, H, FF = 2, 6, 5, 16, 4, 32
ATTENTION = D * 3 * D + 3 * D + D * D + D  # fused Q/K/V and output projection, with biases
CROSS = D * D + D + D * 2 * D + 2 * D + D * D + D
FFN = D * FF + FF + FF * D + D
NORM = 2 * D
ARGS = dict(num_heads=H, key_dim=D // H, value_dim=D // H, d_ff=FF, dropout_rate=0.1)


def _source_mask():
    mask = np.ones((B, S), bool)
    mask[1, -2:] = False
    return mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_checks(tmp_path, norm_first):
    layer = EncoderLayer(**ARGS, norm_first=norm_first, name="encoder_layer")
    inputs = {"x": np.random.normal(size=(B, S, D)).astype("float32"), "attention_mask": _source_mask()}
    run_layer_checks(layer, inputs, (B, S, D), ATTENTION + FFN + 2 * NORM, kwarg_inputs=("attention_mask",),
                     tmp_path=tmp_path)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_checks(tmp_path, norm_first):
    layer = DecoderLayer(**ARGS, norm_first=norm_first, name="decoder_layer")
    target = np.random.randint(1, 9, size=(B, T))
    inputs = {"x": np.random.normal(size=(B, T, D)).astype("float32"),
              "memory": np.random.normal(size=(B, S, D)).astype("float32"),
              "self_attention_mask": np.asarray(masking.self_attention_mask(target)),
              "cross_attention_mask": _source_mask()}
    run_layer_checks(layer, inputs, (B, T, D), ATTENTION + CROSS + FFN + 3 * NORM,
                     kwarg_inputs=("self_attention_mask", "cross_attention_mask"), tmp_path=tmp_path)


def test_stacks_layer_checks(tmp_path):
    encoder = Encoder(num_layers=2, **ARGS, norm_first=True, name="encoder")
    run_layer_checks(encoder, {"x": np.random.normal(size=(B, S, D)).astype("float32"),
                               "attention_mask": _source_mask()},
                     (B, S, D), 2 * (ATTENTION + FFN + 2 * NORM) + NORM, kwarg_inputs=("attention_mask",),
                     tmp_path=tmp_path)
    decoder = Decoder(num_layers=2, **ARGS, name="decoder")
    target = np.random.randint(1, 9, size=(B, T))
    run_layer_checks(decoder, {"x": np.random.normal(size=(B, T, D)).astype("float32"),
                               "memory": np.random.normal(size=(B, S, D)).astype("float32"),
                               "self_attention_mask": np.asarray(masking.self_attention_mask(target)),
                               "cross_attention_mask": _source_mask()},
                     (B, T, D), 2 * (ATTENTION + CROSS + FFN + 3 * NORM),
                     kwarg_inputs=("self_attention_mask", "cross_attention_mask"), tmp_path=tmp_path)


def test_post_norm_is_the_default_and_normalizes_the_output():
    layer = EncoderLayer(**ARGS)
    out = np.asarray(layer(tf.random.normal((B, S, D)) * 5))
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)  # LayerNorm last, gamma 1, beta 0
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-2)


@pytest.mark.parametrize("norm_first", [False, True])
def test_incremental_decoding_equals_full_pass(norm_first):
    """Decoding one position at a time with the cache gives the full pass's outputs (dropout off)."""
    decoder = Decoder(num_layers=2, **{**ARGS, "dropout_rate": 0.0}, norm_first=norm_first)
    x = tf.random.normal((B, T, D))
    memory = tf.random.normal((B, S, D))
    source_mask = tf.constant(_source_mask())
    full = decoder(x, memory, masking.causal_mask(T)[None], source_mask)
    memory_key_values = decoder.project_memory(memory)
    bias = masking.mask_to_bias(source_mask, tf.float32)
    cache = decoder.initial_cache(B, T + 2, tf.float32)
    steps = []
    for t in range(T):
        out, cache = decoder.call_cached(x[:, t:t + 1], memory_key_values, bias, cache, tf.constant(t))
        steps.append(out)
    np.testing.assert_allclose(tf.concat(steps, 1), full, atol=1e-5)
