"""The fast paths of the decoders' per-step selection equal TensorFlow's reference ops."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding.selection import blockwise_top_k, log_normalizer, top_k


@pytest.mark.parametrize("num_columns,block_size", [(1000, 16), (1003, 16), (32000, 128)])
def test_blockwise_top_k_equals_top_k_ties_included(num_columns, block_size):
    rng = np.random.default_rng(num_columns)
    # Few distinct values: many ties, inside blocks and across them; some -inf.
    values = rng.integers(-20, 5, size=(24, num_columns)).astype(np.float32)
    values[rng.random(values.shape) < 0.05] = -np.inf
    values[0, :] = -np.inf
    values[1, :] = 3.0
    for k in (1, 2, 8):
        expected_values, expected_indices = tf.math.top_k(values, k=k)
        top_values, indices = blockwise_top_k(tf.constant(values), k, block_size=block_size)
        np.testing.assert_array_equal(top_values, expected_values)
        np.testing.assert_array_equal(indices, expected_indices)


def test_blockwise_top_k_on_few_columns_is_top_k():
    values = tf.random.normal((3, 50))
    for got, expected in zip(blockwise_top_k(values, 4), tf.math.top_k(values, k=4)):
        np.testing.assert_array_equal(got, expected)


def test_log_normalizer_equals_logsumexp():
    logits = tf.random.normal((16, 32000)) * 8.0
    top_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
    np.testing.assert_allclose(log_normalizer([logits], [top_ids]), tf.reduce_logsumexp(logits, axis=-1),
                               rtol=1e-6)


@pytest.mark.parametrize("widths", [(1000,), (300, 700), (257, 256, 487)])
def test_top_k_over_blocks_equals_top_k_of_the_whole_ties_included(widths):
    rng = np.random.default_rng(len(widths))
    values = rng.integers(-20, 5, size=(16, sum(widths))).astype(np.float32)
    values[2, :] = 3.0  # ties across every block
    blocks = tf.split(tf.constant(values), widths, axis=-1)
    for k in (1, 2, 8):
        expected_values, expected_ids = tf.math.top_k(values, k=k)
        top_values, ids, block_best = top_k(blocks, k)
        np.testing.assert_array_equal(top_values, expected_values)
        np.testing.assert_array_equal(ids, expected_ids)
        for block, best in zip(blocks, block_best):  # each block's own best column
            np.testing.assert_array_equal(best, tf.argmax(block, axis=-1, output_type=tf.int32))


def test_log_normalizer_over_blocks_equals_logsumexp_of_the_whole():
    logits = tf.random.normal((16, 3000)) * 8.0
    blocks = tf.split(logits, [1000, 500, 1500], axis=-1)
    _, _, block_best = top_k(blocks, 2)
    np.testing.assert_allclose(log_normalizer(blocks, block_best), tf.reduce_logsumexp(logits, axis=-1),
                               rtol=1e-6)
