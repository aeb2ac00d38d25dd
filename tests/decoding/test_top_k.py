"""The fast paths of the decoders' per-step selection equal TensorFlow's reference ops."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding.beam_search import blockwise_top_k
from keras_transformer.decoding.greedy import log_normalizer


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
    np.testing.assert_allclose(log_normalizer(logits, top_ids), tf.reduce_logsumexp(logits, axis=-1),
                               rtol=1e-6)
