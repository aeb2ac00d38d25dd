"""Position-wise feed-forward network (section 3.3)."""
import keras
import tensorflow as tf

from keras_transformer.layers.attention import dense, transposed
from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, applied to each position alike (section 3.3).

    Args:
      d_ff: inner width (2048 in base).
      relu_dropout_rate: dropout after the ReLU (not in the paper; default 0).

    Call arguments: x (B, T, D); training. Returns (B, T, D).
    """

    def __init__(self, d_ff, relu_dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.relu_dropout_rate = relu_dropout_rate
        self.relu_dropout = Dropout(relu_dropout_rate, name="relu_dropout")

    def build(self, input_shape):
        d_model = input_shape[-1]
        self.inner_kernel = self.add_weight(name="inner_kernel", shape=(d_model, self.d_ff))
        self.inner_bias = self.add_weight(name="inner_bias", shape=(self.d_ff,), initializer="zeros")
        self.output_kernel = self.add_weight(name="output_kernel", shape=(self.d_ff, d_model))
        self.output_bias = self.add_weight(name="output_bias", shape=(d_model,), initializer="zeros")
        self.relu_dropout.build(None)
        super().build(input_shape)

    def call(self, x, training=None, kernels=None):
        """kernels: `transposed_kernels` (optional, for decoding), the same output by another layout
        of the matrix products."""
        kernels = kernels or {}
        hidden = tf.nn.relu(dense(x, self.inner_kernel, self.inner_bias, kernels.get("inner")))  # (B, T, d_ff)
        if self.relu_dropout_rate > 0:
            hidden = self.relu_dropout(hidden, training=training)
        return dense(hidden, self.output_kernel, self.output_bias, kernels.get("output"))

    def transposed_kernels(self, dtype):
        """W_1^T and W_2^T in dtype, keyed inner and output (`dense`'s transposed_kernel)."""
        return transposed({"inner": self.inner_kernel, "output": self.output_kernel}, dtype)

    def get_config(self):
        return {**super().get_config(), "d_ff": self.d_ff, "relu_dropout_rate": self.relu_dropout_rate}
