"""Partitioned layers (Kitaev and Klein's factored encoder, TransformerConfig.span_partitioned): a
partitioned self-attention, feed-forward network and encoder layer compute what the paper's layers
compute with block-diagonal kernels, pass the standard layer checks, and refuse what they cannot do."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import EncoderLayer, MultiHeadAttention, PositionwiseFeedForward
from keras_transformer.layers.attention import block_glorot_uniform
from tests.layer_checks import run_layer_checks

B, T, D, H, K, V, F, P = 2, 5, 16, 4, 4, 6, 24, 2


def _randomize(layer, seed):
    rng = np.random.default_rng(seed)
    layer.set_weights([rng.normal(scale=0.3, size=w.shape).astype("float32") for w in layer.get_weights()])


def _full_attention_weights(part):
    """The kernels and biases of the paper's MultiHeadAttention (H, K, V) that compute what the
    partitioned one `part` does: zeros outside the blocks, each head's P shares side by side."""
    qkv_kernel, qkv_bias, out_kernel, out_bias = (w.numpy() for w in (part.query_key_value_kernel,
                                                                      part.query_key_value_bias,
                                                                      part.output_kernel, part.output_bias))
    d, k, v = D // P, K // P, V // P
    kernel, bias = np.zeros((D, H * (2 * K + V)), np.float32), np.zeros(H * (2 * K + V), np.float32)
    output = np.zeros((H * V, D), np.float32)
    for p in range(P):
        rows = slice(p * d, (p + 1) * d)
        block_bias = qkv_bias[p * H * (2 * k + v):(p + 1) * H * (2 * k + v)]
        # Within partition p: queries (H k), keys (H k), values (H v); head i's share at i k (or i v).
        for start_full, start_part, width, share in ((0, 0, K, k), (H * K, H * k, K, k), (2 * H * K, 2 * H * k, V, v)):
            for i in range(H):
                full = slice(start_full + i * width + p * share, start_full + i * width + (p + 1) * share)
                partial = slice(start_part + i * share, start_part + (i + 1) * share)
                kernel[rows, full] = qkv_kernel[p][:, partial]
                bias[full] = block_bias[partial]
        for i in range(H):
            output[i * V + p * v:i * V + (p + 1) * v, rows] = out_kernel[p][i * v:(i + 1) * v]
    return [kernel, bias, output, out_bias]


def _full_feed_forward_weights(part):
    """The weights of the paper's PositionwiseFeedForward (F) that compute what the partitioned one
    `part` does: its blocks on the diagonals of the two kernels, zeros elsewhere."""
    inner, inner_bias, out, out_bias = (w.numpy() for w in part.weights)
    full_inner, full_out = np.zeros((D, F), np.float32), np.zeros((F, D), np.float32)
    d, f = D // P, F // P
    for p in range(P):
        full_inner[p * d:(p + 1) * d, p * f:(p + 1) * f] = inner[p]
        full_out[p * f:(p + 1) * f, p * d:(p + 1) * d] = out[p]
    return [full_inner, inner_bias, full_out, out_bias]


def test_partitioned_self_attention_is_the_paper_s_with_block_kernels():
    part = MultiHeadAttention(H, K, V, partitions=P, name="self_attention")
    full = MultiHeadAttention(H, K, V, name="self_attention")
    x = tf.constant(np.random.default_rng(0).normal(size=(B, T, D)), tf.float32)
    mask = tf.constant([[True] * T, [True] * (T - 2) + [False] * 2])
    part(x, attention_mask=mask)
    full(x, attention_mask=mask)
    _randomize(part, 1)
    full.set_weights(_full_attention_weights(part))
    assert [w.shape for w in part.weights] == [(P, D // P, H * (2 * K + V) // P), (H * (2 * K + V),),
                                               (P, H * V // P, D // P), (D,)]
    got, got_weights = part(x, attention_mask=mask, return_attention_scores=True)
    expected, expected_weights = full(x, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_weights.numpy(), expected_weights.numpy(), rtol=1e-5, atol=1e-6)
    # The position part of the output reads the content part only through the attention weights:
    # with those weights fixed (one key to attend to), content changes leave it as it is.
    single = tf.constant([[True] + [False] * (T - 1)] * B)
    moved = tf.concat([x[..., :D // P] + 1.0, x[..., D // P:]], axis=-1)
    np.testing.assert_allclose(part(moved, attention_mask=single)[..., D // P:].numpy(),
                               part(x, attention_mask=single)[..., D // P:].numpy(), atol=1e-5)
    assert not np.allclose(part(moved, attention_mask=mask)[..., D // P:].numpy(),
                           part(x, attention_mask=mask)[..., D // P:].numpy(), atol=1e-3)


def test_partitioned_feed_forward_is_the_paper_s_with_block_kernels():
    part = PositionwiseFeedForward(F, partitions=P, name="feed_forward")
    full = PositionwiseFeedForward(F, name="feed_forward")
    x = tf.constant(np.random.default_rng(2).normal(size=(B, T, D)), tf.float32)
    part(x)
    full(x)
    _randomize(part, 3)
    full.set_weights(_full_feed_forward_weights(part))
    np.testing.assert_allclose(part(x).numpy(), full(x).numpy(), rtol=1e-5, atol=1e-5)
    d = D // P
    moved = tf.concat([x[..., :d] + 1.0, x[..., d:]], axis=-1)
    np.testing.assert_array_equal(part(moved)[..., d:].numpy(), part(x)[..., d:].numpy())


def test_partitioned_kernels_get_the_gradients_of_the_paper_s_blocks():
    """The gradient of each block of a partitioned kernel is that block of the full, block-diagonal
    kernel's gradient (partitioned_dense takes the blocks apart by Unpack, whose gradient stacks
    theirs), for the feed-forward network's kernels and the self-attention's."""
    x = tf.constant(np.random.default_rng(4).normal(size=(B, T, D)), tf.float32)
    target = tf.constant(np.random.default_rng(6).normal(size=(B, T, D)), tf.float32)

    def gradients(layer):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) * target)
        return [g.numpy() for g in tape.gradient(loss, layer.trainable_weights)]

    layers = ((lambda **kwargs: PositionwiseFeedForward(F, name="feed_forward", **kwargs), _full_feed_forward_weights),
              (lambda **kwargs: MultiHeadAttention(H, K, V, name="self_attention", **kwargs), _full_attention_weights))
    for seed, (make, full_weights) in enumerate(layers, start=5):
        part, full, probe = make(partitions=P), make(), make(partitions=P)
        for layer in (part, full, probe):
            layer(x)
        _randomize(part, seed)
        full.set_weights(full_weights(part))
        # The blocks' places in the full kernels (a partitioned layer of ones, mapped), and the
        # partitioned gradients mapped there as full_weights maps the weights.
        probe.set_weights([np.ones_like(w) for w in part.get_weights()])
        in_blocks = [weights != 0 for weights in full_weights(probe)]
        part_gradients = gradients(part)
        probe.set_weights(part_gradients)
        mapped, expected = full_weights(probe), gradients(full)
        for index in (0, 2):  # the two kernels (inner and output; query-key-value and output)
            np.testing.assert_allclose(mapped[index], expected[index] * in_blocks[index], rtol=1e-5, atol=1e-5)
            for block in part_gradients[index]:  # (P, D_in, D_out): every block's gradient, none left at 0
                assert np.abs(block).max() > 1e-3


def test_partitioned_layers_pass_the_layer_checks(tmp_path):
    inputs = {"query": np.random.normal(size=(B, T, D)).astype("float32"),
              "attention_mask": np.random.random((B, 1, T)) > 0.2}
    weights = D * H * (2 * K + V) // P + H * (2 * K + V) + H * V * D // P + D
    run_layer_checks(MultiHeadAttention(H, K, V, partitions=P, name="self_attention"), inputs, (B, T, D), weights,
                     kwarg_inputs=("attention_mask",), tmp_path=tmp_path)
    run_layer_checks(PositionwiseFeedForward(F, partitions=P, name="feed_forward"), {"x": inputs["query"]},
                     (B, T, D), 2 * D * F // P + F + D, tmp_path=tmp_path)
    layer = EncoderLayer(H, K, V, F, dropout_rate=0.0, partitions=P, name="layer_0")
    layer_weights = weights + 2 * D * F // P + F + D + 4 * D  # and two layer norms
    run_layer_checks(layer, {"x": inputs["query"], "attention_mask": inputs["attention_mask"]}, (B, T, D),
                     layer_weights, kwarg_inputs=("attention_mask",), tmp_path=tmp_path)
    assert layer.self_attention.partitions == layer.feed_forward.partitions == P


def test_each_block_is_drawn_with_its_own_fans():
    keras.utils.set_random_seed(0)
    kernel = np.asarray(block_glorot_uniform((2, 64, 192)))
    limit = np.sqrt(6.0 / (64 + 192))  # a (64, 192) kernel's; counting both blocks would give sqrt(6 / 512)
    assert kernel.shape == (2, 64, 192) and np.abs(kernel).max() <= limit
    for block in kernel:
        assert np.std(block) == pytest.approx(limit / np.sqrt(3.0), rel=0.05)
    assert not np.array_equal(kernel[0], kernel[1])


def test_what_a_partitioned_layer_cannot_do_is_refused():
    with pytest.raises(ValueError, match="partitions=2 needs self-attention"):
        MultiHeadAttention(H, K, V, cross_attention=True, partitions=2)
    with pytest.raises(ValueError, match="partitions=2 needs self-attention and d_k=3"):
        MultiHeadAttention(H, 3, V, partitions=2)
    with pytest.raises(ValueError, match="partitions=2 cuts d_model=15 in equal parts"):
        MultiHeadAttention(H, K, V, partitions=2)(tf.zeros((B, T, 15)))
    with pytest.raises(ValueError, match="partitions=2 must be >= 1 and divide d_ff=25"):
        PositionwiseFeedForward(25, partitions=2)
    part = MultiHeadAttention(H, K, V, partitions=2)
    part(tf.zeros((B, T, D)))
    with pytest.raises(ValueError, match="has no cached decoding"):
        part.call_cached(tf.zeros((B, 1, D)), part.initial_cache(B, 4, tf.float32), 0)
