"""The encoder layer and stack (section 3.1)."""
import keras
import tensorflow as tf

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout, replica_seed
from keras_transformer.layers.feed_forward import PositionwiseFeedForward


class LayerNormalization(keras.layers.LayerNormalization):
    """keras.layers.LayerNormalization over the last axis (the same weights and outputs, to float
    rounding), computed in fewer TensorFlow ops: (x - mean) * (gamma / sqrt(variance + epsilon)) +
    beta, in float32 whatever the compute dtype. On CPU it takes two thirds to three quarters of the
    time of Keras's own (measured at 64 to 1,600 rows of 512), whose extra element-wise passes over
    (B, T, D) showed in decoding profiles. Only the last axis, with gamma and beta."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.axis not in (-1, [-1]) or not (self.center and self.scale) or self.rms_scaling:
            raise ValueError("keras_transformer's LayerNormalization normalizes the last axis with gamma and "
                             f"beta; got axis={self.axis}, center={self.center}, scale={self.scale}, "
                             f"rms_scaling={self.rms_scaling}")

    def call(self, inputs):
        x = tf.cast(inputs, tf.float32)
        centered = x - tf.reduce_mean(x, axis=-1, keepdims=True)
        variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
        scale = tf.math.rsqrt(variance + self.epsilon) * tf.cast(self.gamma, tf.float32)
        return tf.cast(centered * scale + tf.cast(self.beta, tf.float32), self.compute_dtype)


class SublayerConnection(keras.layers.Layer):
    """The residual wrapper of every sub-layer (section 5.4, "Residual Dropout").

    Post-norm (the paper): LayerNorm(x + Dropout(Sublayer(x))).
    Pre-norm (`norm_first=True`, an option): x + Dropout(Sublayer(LayerNorm(x))).
    Not serialized on its own: the encoder and decoder layers own and configure it.
    """

    def __init__(self, dropout_rate, norm_first, layer_norm_epsilon, **kwargs):
        super().__init__(**kwargs)
        self.norm_first = norm_first
        self.layer_norm = LayerNormalization(epsilon=layer_norm_epsilon, name="layer_norm")
        self.dropout = Dropout(dropout_rate, name="dropout")

    def build(self, input_shape):
        self.layer_norm.build(input_shape)
        self.dropout.build(input_shape)
        super().build(input_shape)

    def call(self, x, sublayer, training=None):
        """x (B, T, D); sublayer: a function (B, T, D) -> (B, T, D)."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.layer_norm(x)), training=training)
        return self.layer_norm(x + self.dropout(sublayer(x), training=training))


class _LayerArgs:
    """The constructor arguments every encoder/decoder layer and stack shares."""

    def _set_layer_args(self, num_heads, key_dim, value_dim, d_ff, dropout_rate, attention_dropout_rate,
                        relu_dropout_rate, norm_first, layer_norm_epsilon):
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.d_ff = d_ff
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.relu_dropout_rate = relu_dropout_rate
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon

    def _layer_args(self):
        return {"num_heads": self.num_heads, "key_dim": self.key_dim, "value_dim": self.value_dim,
                "d_ff": self.d_ff, "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "relu_dropout_rate": self.relu_dropout_rate, "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon}

    def _sublayer_connection(self, name):
        return SublayerConnection(self.dropout_rate, self.norm_first, self.layer_norm_epsilon, name=name)

    def _attention(self, name, cross_attention=False, partitions=1):
        return MultiHeadAttention(self.num_heads, self.key_dim, self.value_dim, self.attention_dropout_rate,
                                  cross_attention=cross_attention, partitions=partitions, name=name)

    def _feed_forward(self, partitions=1):
        return PositionwiseFeedForward(self.d_ff, self.relu_dropout_rate, partitions=partitions, name="feed_forward")


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(_LayerArgs, keras.layers.Layer):
    """One encoder layer: self-attention, then the feed-forward network, each in a residual
    connection with dropout and layer normalization (section 3.1).

    Args: num_heads (h), key_dim (d_k), value_dim (d_v), d_ff, dropout_rate (P_drop),
      attention_dropout_rate, relu_dropout_rate, norm_first, layer_norm_epsilon (see TransformerConfig);
      partitions: 1 (the paper), or P > 1 for Kitaev and Klein's factored layer: its self-attention
      and feed-forward network partitioned (MultiHeadAttention, PositionwiseFeedForward), D read as
      P equal parts (content and position) that mix only through the attention weights; the
      residual connections and layer normalization are over all of D, as theirs.

    Call arguments:
      x: (B, S, D).
      attention_mask: boolean (B, S) or (B, 1, S), True at real source tokens.
      training: enables dropout.
    Returns (B, S, D).
    """

    def __init__(self, num_heads, key_dim, value_dim, d_ff, dropout_rate=0.1, attention_dropout_rate=0.0,
                 relu_dropout_rate=0.0, norm_first=False, layer_norm_epsilon=1e-6, partitions=1, **kwargs):
        super().__init__(**kwargs)
        self._set_layer_args(num_heads, key_dim, value_dim, d_ff, dropout_rate, attention_dropout_rate,
                             relu_dropout_rate, norm_first, layer_norm_epsilon)
        self.partitions = partitions
        self.self_attention = self._attention("self_attention", partitions=partitions)
        self.feed_forward = self._feed_forward(partitions=partitions)
        self.self_attention_residual = self._sublayer_connection("self_attention_residual")
        self.feed_forward_residual = self._sublayer_connection("feed_forward_residual")

    def build(self, input_shape):
        for layer in (self.self_attention, self.feed_forward, self.self_attention_residual,
                      self.feed_forward_residual):
            layer.build(input_shape)
        super().build(input_shape)

    def call(self, x, attention_mask=None, training=None):
        x = self.self_attention_residual(
            x, sublayer=lambda y: self.self_attention(y, attention_mask=attention_mask, training=training),
            training=training)
        return self.feed_forward_residual(x, sublayer=lambda y: self.feed_forward(y, training=training),
                                          training=training)

    def get_config(self):
        return {**super().get_config(), **self._layer_args(), "partitions": self.partitions}


class _Stack(_LayerArgs, keras.layers.Layer):
    """N identical layers of `layer_class`, and a final LayerNorm when pre-norm.

    layer_drop_rate: LayerDrop (TransformerConfig.layer_drop_rate), 0 (off) or a probability in
    (0, 1) with which a training call skips each layer, drawn for each call and each replica.
    """

    layer_class = None

    def __init__(self, num_layers, num_heads, key_dim, value_dim, d_ff, dropout_rate=0.1,
                 attention_dropout_rate=0.0, relu_dropout_rate=0.0, norm_first=False, layer_norm_epsilon=1e-6,
                 layer_drop_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= layer_drop_rate < 1.0:
            raise ValueError(f"{type(self).__name__}: layer_drop_rate must be in [0, 1); got {layer_drop_rate!r}")
        self.num_layers = num_layers
        self.layer_drop_rate = layer_drop_rate
        self._set_layer_args(num_heads, key_dim, value_dim, d_ff, dropout_rate, attention_dropout_rate,
                             relu_dropout_rate, norm_first, layer_norm_epsilon)
        # One attribute per layer, not a list: tf.train.Checkpoint does not follow Keras 3's tracked
        # lists, so layers kept in a list would be missing from the training checkpoints.
        for i in range(num_layers):
            setattr(self, f"layer_{i}", self._new_layer(f"layer_{i}"))
        self.final_norm = (LayerNormalization(epsilon=layer_norm_epsilon, name="final_norm")
                           if norm_first else None)
        # Only with LayerDrop: a stack without it has no seed state in its checkpoints, and draws
        # no seed that the layers made after it would otherwise have drawn.
        self.layer_drop_seed_generator = (keras.random.SeedGenerator(name=f"{self.name}_layer_drop_seed_generator")
                                          if layer_drop_rate > 0 else None)

    def _new_layer(self, name):
        return self.layer_class(**self._layer_args(), name=name)

    @property
    def stack(self):
        """The N layers, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.num_layers)]

    def build(self, input_shape):
        for layer in self.stack:
            layer.build(input_shape)
        if self.final_norm is not None:
            self.final_norm.build(input_shape)
        super().build(input_shape)

    def _final(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def _drops_layers(self, training):
        """Whether this call may skip layers: a training call with LayerDrop."""
        return bool(training) and self.layer_drop_rate > 0

    def _kept_layers(self, training):
        """(N,) bool, True for each layer this call runs: None (every layer) but in training with
        LayerDrop, where each is skipped with probability layer_drop_rate."""
        if not self._drops_layers(training):
            return None
        draws = tf.random.stateless_uniform([self.num_layers], seed=replica_seed(self.layer_drop_seed_generator))
        return draws >= self.layer_drop_rate

    def _run_layers(self, x, run, training):
        """x through the N layers, bottom first, then _final: run(layer, x) for each layer this call
        keeps (every one but in training with LayerDrop, see _kept_layers), x unchanged for the others."""
        kept = self._kept_layers(training)
        for index, layer in enumerate(self.stack):
            if kept is None:
                x = run(layer, x)
            else:
                x = tf.cond(kept[index], lambda layer=layer, x=x: run(layer, x), lambda x=x: tf.identity(x))
        return self._final(x)

    def get_config(self):
        return {**super().get_config(), "num_layers": self.num_layers, "layer_drop_rate": self.layer_drop_rate,
                **self._layer_args()}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(_Stack):
    """The encoder stack: N encoder layers (section 3.1), and a final LayerNorm when pre-norm.

    Args: num_layers (N), layer_drop_rate, and the EncoderLayer arguments (partitions included).
    Call arguments: x (B, S, D), the embedded source; attention_mask (B, S) or (B, 1, S); training.
    Returns the memory (B, S, D) that the decoder attends to.
    """

    layer_class = EncoderLayer

    def __init__(self, *args, partitions=1, **kwargs):
        self.partitions = partitions  # before the stack makes its layers, which read it
        super().__init__(*args, **kwargs)

    def _new_layer(self, name):
        return self.layer_class(**self._layer_args(), partitions=self.partitions, name=name)

    def call(self, x, attention_mask=None, training=None):
        return self._run_layers(x, lambda layer, y: layer(y, attention_mask=attention_mask, training=training),
                                training)

    def get_config(self):
        return {**super().get_config(), "partitions": self.partitions}
