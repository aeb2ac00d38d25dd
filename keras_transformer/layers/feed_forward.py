"""Position-wise feed-forward network (section 3.3)."""
import keras
import tensorflow as tf

from keras_transformer.layers.attention import (block_glorot_uniform, check_partitions, dense, partitioned_dense,
                                               transposed)
from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike (section 3.3).

    Partitioned (`partitions` P > 1, not in the paper): the input's D is P equal parts, each with
    its own network of inner width d_ff / P (Kitaev and Klein's factored encoder, with
    MultiHeadAttention's partitions): block-diagonal W_1 and W_2, 1 / P of the multiply-adds.

    Args:
      d_ff: inner width (2048 in base).
      relu_dropout_rate: dropout after the ReLU (not in the paper; default 0).
      partitions: P, 1 (the paper) or the parts; D and d_ff must be multiples of it. Its kernels
        are then (P, D / P, d_ff / P) and (P, d_ff / P, D / P).

    Call arguments: x (B, T, D); training. Returns (B, T, D).
    """

    def __init__(self, d_ff, relu_dropout_rate=0.0, partitions=1, **kwargs):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.relu_dropout_rate = relu_dropout_rate
        self.partitions = partitions
        if partitions < 1 or d_ff % partitions:
            raise ValueError(f"{self.name}: partitions={partitions} must be >= 1 and divide d_ff={d_ff}")
        self.relu_dropout = Dropout(relu_dropout_rate, name="relu_dropout")

    def build(self, input_shape):
        d_model, parts = input_shape[-1], self.partitions
        check_partitions(self.name, parts, d_model)
        if parts == 1:
            inner_shape, output_shape, initializer = (d_model, self.d_ff), (self.d_ff, d_model), "glorot_uniform"
        else:
            inner_shape, output_shape = (parts, d_model // parts, self.d_ff // parts), (parts, self.d_ff // parts,
                                                                                       d_model // parts)
            initializer = block_glorot_uniform
        self.inner_kernel = self.add_weight(name="inner_kernel", shape=inner_shape, initializer=initializer)
        self.inner_bias = self.add_weight(name="inner_bias", shape=(self.d_ff,), initializer="zeros")
        self.output_kernel = self.add_weight(name="output_kernel", shape=output_shape, initializer=initializer)
        self.output_bias = self.add_weight(name="output_bias", shape=(d_model,), initializer="zeros")
        self.relu_dropout.build(None)
        super().build(input_shape)

    def call(self, x, training=None, kernels=None):
        """kernels: `transposed_kernels` (optional, for decoding), the same output by another layout
        of the matrix products; not for a partitioned network."""
        kernels = kernels or {}
        hidden = tf.nn.relu(self._product(x, self.inner_kernel, self.inner_bias, kernels.get("inner")))  # (B, T, d_ff)
        if self.relu_dropout_rate > 0:
            hidden = self.relu_dropout(hidden, training=training)
        return self._product(hidden, self.output_kernel, self.output_bias, kernels.get("output"))

    def _product(self, x, kernel, bias, transposed_kernel):
        if self.partitions == 1:
            return dense(x, kernel, bias, transposed_kernel)
        if transposed_kernel is not None:
            raise ValueError(f"{self.name}: a partitioned network takes no transposed kernels")
        return partitioned_dense(x, kernel, bias)

    def transposed_kernels(self, dtype):
        """W_1^T and W_2^T in dtype, keyed inner and output (`dense`'s transposed_kernel)."""
        return transposed({"inner": self.inner_kernel, "output": self.output_kernel}, dtype)

    def get_config(self):
        return {**super().get_config(), "d_ff": self.d_ff, "relu_dropout_rate": self.relu_dropout_rate,
                "partitions": self.partitions}
