"""Positional information added to the embeddings (section 3.5, Table 3 row E)."""
import keras
import numpy as np
import tensorflow as tf

from keras_transformer.shapes import dimension


def sinusoid_table(max_length, d_model):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...): (max_length, d_model)."""
    positions = np.arange(max_length, dtype=np.float64)[:, None]
    rates = 1.0 / np.power(10000.0, np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    table = np.zeros((max_length, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(positions * rates)
    table[:, 1::2] = np.cos(positions * rates[: d_model // 2])
    return table.astype(np.float32)


class _PositionalBase(keras.layers.Layer):
    def __init__(self, max_length, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def _check_length(self, x, start):
        length = x.shape[1]
        if length is not None and isinstance(start, int) and start + length > self.max_length:
            raise ValueError(f"{self.name}: sequence of {length} positions from {start} exceeds "
                             f"max_length={self.max_length}; raise TransformerConfig.max_length or "
                             f"truncate the input")

    def call(self, x, start=0):
        self._check_length(x, start)
        # A gather, not a slice: XLA gives a slice with a dynamic start a padded, bounded shape.
        indices = start + tf.range(dimension(x, 1))
        return x + tf.cast(tf.gather(self.position_table(), indices), x.dtype)[None]

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(_PositionalBase):
    """Adds the paper's fixed sinusoids (section 3.5) to x.

    Args: max_length, the number of positions tabulated.
    Call arguments: x (B, T, D); start, the position of x[:, 0] (the step, when decoding one token
    at a time). Returns x + PE[start:start+T], (B, T, D). It has no weights.
    """

    def build(self, input_shape):
        self.table = tf.constant(sinusoid_table(self.max_length, input_shape[-1]))
        super().build(input_shape)

    def position_table(self):
        return self.table


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(_PositionalBase):
    """Adds learned position vectors to x (Table 3 row E, an option; the paper keeps sinusoids).

    Args: max_length, the number of positions learned.
    Call arguments: x (B, T, D); start as in SinusoidalPositionalEncoding. Returns (B, T, D).
    """

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="position_embeddings", shape=(self.max_length, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=input_shape[-1] ** -0.5))
        super().build(input_shape)

    def position_table(self):
        return self.position_embeddings


def positional_layer(kind: str):
    """The positional layer class of TransformerConfig.positional: "sinusoidal" (the paper's) or "learned"."""
    return SinusoidalPositionalEncoding if kind == "sinusoidal" else LearnedPositionalEmbedding
