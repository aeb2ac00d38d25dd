import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import masking


def test_padding_mask():
    np.testing.assert_array_equal(masking.padding_mask(tf.constant([[5, 3, 0], [0, 0, 0]])),
                                  [[True, True, False], [False, False, False]])


def test_causal_mask_lets_position_i_see_only_up_to_i():
    np.testing.assert_array_equal(masking.causal_mask(3), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])


def test_self_attention_mask_is_causal_and_hides_padding():
    mask = masking.self_attention_mask(tf.constant([[2, 7, 0]]))
    np.testing.assert_array_equal(mask[0], [[1, 0, 0], [1, 1, 0], [1, 1, 0]])


def test_cross_and_encoder_masks_broadcast_over_queries():
    source = masking.padding_mask(tf.constant([[4, 0]]))
    np.testing.assert_array_equal(masking.cross_attention_mask(source), [[[True, False]]])
    np.testing.assert_array_equal(masking.encoder_attention_mask(source), [[[True, False]]])


def test_cached_causal_mask():
    np.testing.assert_array_equal(masking.cached_causal_mask(4, tf.constant(1)), [[[1, 1, 0, 0]]])


def test_mask_to_bias_values_and_shape():
    bias = masking.mask_to_bias(tf.constant([[True, False]]), tf.float32)
    assert bias.shape == (1, 1, 1, 2)
    assert bias[0, 0, 0, 0] == 0 and bias[0, 0, 0, 1] <= -1e9
    assert masking.mask_to_bias(tf.constant([[False]]), tf.float16)[0, 0, 0, 0] == -3e4  # no float16 overflow


def test_mask_to_bias_rejects_wrong_rank_and_dtype():
    with pytest.raises(ValueError, match="got rank 1 with shape"):
        masking.mask_to_bias(tf.constant([True]), tf.float32)
    with pytest.raises(ValueError, match="must be boolean"):
        masking.mask_to_bias(tf.constant([[1, 0]]), tf.float32)


def test_cached_beam_mask_sees_the_slots_of_each_hypothesis_prefix():
    # One sentence, W = 2, L = 3, at step 1: hypothesis 0 holds position 0 in beam slot 1 and
    # position 1 in its own slot 0; hypothesis 1 holds both in slot 1. Slots (l, w') in order
    # (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1); position 2 is not written yet.
    beams = tf.constant([[[1, 0, 0], [1, 1, 1]]])
    np.testing.assert_array_equal(masking.cached_beam_mask(beams, tf.constant(1)),
                                  [[[0, 1, 1, 0, 0, 0], [0, 1, 0, 1, 0, 0]]])
