"""The decoder layer and stack (section 3.1), with incremental decoding through a key/value cache."""
import keras
import tensorflow as tf

from keras_transformer import masking
from keras_transformer.layers.attention import visible_positions
from keras_transformer.layers.encoder import _LayerArgs, _Stack


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(_LayerArgs, keras.layers.Layer):
    """One decoder layer: masked self-attention, encoder-decoder attention, then the feed-forward
    network, each in a residual connection with dropout and layer normalization (section 3.1).

    Args: as EncoderLayer.

    Call arguments:
      x: (B, T, D), the embedded target so far.
      memory: (B, S, D), the encoder output.
      self_attention_mask: boolean (B, T, T), causal and target padding (masking.self_attention_mask).
      cross_attention_mask: boolean (B, S) or (B, 1, S), True at real source tokens.
      training: enables dropout.
      return_attention_scores: also return the encoder-decoder attention weights (B, H, T, S).
    Returns (B, T, D).

    Incremental decoding (`call_cached`) feeds one position at a time; it gives the same outputs as
    a full pass with a causal mask.
    """

    def __init__(self, num_heads, key_dim, value_dim, d_ff, dropout_rate=0.1, attention_dropout_rate=0.0,
                 relu_dropout_rate=0.0, norm_first=False, layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self._set_layer_args(num_heads, key_dim, value_dim, d_ff, dropout_rate, attention_dropout_rate,
                             relu_dropout_rate, norm_first, layer_norm_epsilon)
        self.self_attention = self._attention("self_attention")
        self.cross_attention = self._attention("cross_attention", cross_attention=True)
        self.feed_forward = self._feed_forward()
        self.self_attention_residual = self._sublayer_connection("self_attention_residual")
        self.cross_attention_residual = self._sublayer_connection("cross_attention_residual")
        self.feed_forward_residual = self._sublayer_connection("feed_forward_residual")

    def build(self, input_shape):
        for layer in (self.self_attention, self.cross_attention, self.feed_forward,
                      self.self_attention_residual, self.cross_attention_residual, self.feed_forward_residual):
            layer.build(input_shape)
        super().build(input_shape)

    def call(self, x, memory, self_attention_mask=None, cross_attention_mask=None, training=None,
             return_attention_scores=False):
        x = self.self_attention_residual(
            x, sublayer=lambda y: self.self_attention(y, attention_mask=self_attention_mask, training=training),
            training=training)
        scores = []

        def cross(y):
            output, weights = self.cross_attention(y, memory, attention_mask=cross_attention_mask,
                                                   training=training, return_attention_scores=True)
            scores.append(weights)
            return output

        x = self.cross_attention_residual(x, sublayer=cross, training=training)
        x = self.feed_forward_residual(x, sublayer=lambda y: self.feed_forward(y, training=training),
                                       training=training)
        return (x, scores[0]) if return_attention_scores else x

    def transposed_kernels(self, dtype):
        """The kernels of a decoding step transposed, for `call_cached` (MultiHeadAttention and
        PositionwiseFeedForward.transposed_kernels)."""
        return {"self_attention": self.self_attention.transposed_kernels(dtype),
                "cross_attention": self.cross_attention.transposed_kernels(dtype),
                "feed_forward": self.feed_forward.transposed_kernels(dtype)}

    def call_cached(self, x, memory_key_value, memory_bias, cache, step, beam_size=1,
                    self_attention_mask=None, kernels=None):
        """One new position: x (B*W, 1, D) at position `step`.

        memory_key_value: (key (B, H, S, K), value (B, H, S, V)) from
          `cross_attention.project_memory`, once per sentence for its W hypotheses.
        memory_bias: (B, 1, 1, S) additive bias from the source padding mask.
        cache: this layer's self-attention cache (MultiHeadAttention.initial_cache).
        self_attention_mask: boolean (B, W, L*W), the cache slots of each hypothesis' prefix
          (masking.cached_beam_mask); by default each row's own.
        kernels: `transposed_kernels` (optional): the same output by another layout of the matrix products.
        Returns (B*W, 1, D) and the updated cache. No dropout: decoding is inference.
        """
        new_cache, kernels = {}, kernels or {}

        def self_attend(y):
            output, new_cache["self"] = self.self_attention.call_cached(y, cache, step, self_attention_mask,
                                                                        kernels.get("self_attention"))
            return output

        x = self.self_attention_residual(x, sublayer=self_attend)
        x = self.cross_attention_residual(
            x, sublayer=lambda y: self.cross_attention.call_with_memory(y, *memory_key_value, memory_bias,
                                                                        beam_size, kernels.get("cross_attention")))
        x = self.feed_forward_residual(
            x, sublayer=lambda y: self.feed_forward(y, kernels=kernels.get("feed_forward")))
        return x, new_cache["self"]

    def get_config(self):
        return {**super().get_config(), **self._layer_args()}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(_Stack):
    """The decoder stack: N decoder layers (section 3.1), and a final LayerNorm when pre-norm.

    Args: num_layers (N), and the DecoderLayer arguments.
    Call arguments: x (B, T, D), the embedded target input; memory (B, S, D);
      self_attention_mask (B, T, T); cross_attention_mask (B, S) or (B, 1, S); training;
      return_attention_scores: also return the last layer's encoder-decoder weights (B, H, T, S).
    Returns (B, T, D).
    """

    layer_class = DecoderLayer

    def call(self, x, memory, self_attention_mask=None, cross_attention_mask=None, training=None,
             return_attention_scores=False):
        if not return_attention_scores:
            return self._run_layers(x, lambda layer, y: layer(y, memory, self_attention_mask, cross_attention_mask,
                                                              training=training), training)
        if self._drops_layers(training):  # a skipped last layer would have none
            raise ValueError("the decoder returns no attention weights from a training call with "
                             f"LayerDrop (layer_drop_rate={self.layer_drop_rate}): a skipped last layer has none")
        scores = None
        for layer in self.stack:
            x, scores = layer(x, memory, self_attention_mask, cross_attention_mask, training=training,
                              return_attention_scores=True)
        return self._final(x), scores

    def project_memory(self, memory):
        """Each layer's encoder-decoder keys and values, computed once per sentence."""
        return [layer.cross_attention.project_memory(memory) for layer in self.stack]

    def initial_cache(self, batch_size, cache_length, dtype, beam_size=1):
        """The cache of `call_cached` for N = batch_size rows, W = beam_size hypotheses per sentence:
        "layers", each layer's self-attention cache (MultiHeadAttention.initial_cache), and "beams"
        int32 (N, L), the beam slot holding each position of each row's prefix. Beam search moves
        only "beams" (`reorder_cache`), never the keys and values."""
        return {"beams": tf.zeros((batch_size, cache_length), tf.int32),
                "layers": [layer.self_attention.initial_cache(batch_size, cache_length, dtype, beam_size)
                           for layer in self.stack]}

    @staticmethod
    def reorder_cache(cache, parents):
        """The cache after beam search's step: row n continues the hypothesis of row parents[n]
        (N,), within the same sentence, so it takes over that row's prefix slots."""
        return {"beams": tf.gather(cache["beams"], parents), "layers": cache["layers"]}

    def transposed_kernels(self, dtype):
        """Each layer's DecoderLayer.transposed_kernels, for `call_cached`."""
        return [layer.transposed_kernels(dtype) for layer in self.stack]

    def call_cached(self, x, memory_key_values, memory_bias, cache, step, beam_size=1, kernels=None):
        """x (B*W, 1, D) at position `step` -> (B*W, 1, D) and the new cache (see DecoderLayer.call_cached);
        kernels: `transposed_kernels` (optional)."""
        rows, cache_length = tf.shape(cache["beams"])[0], tf.shape(cache["beams"])[1]
        own_slot = tf.range(rows) % beam_size  # (B*W,)
        beams = tf.where(tf.range(cache_length) == step, own_slot[:, None], cache["beams"])  # (B*W, L)
        visible = visible_positions(cache_length, step)
        mask = masking.cached_beam_mask(tf.reshape(beams[:, :visible], (-1, beam_size, visible)), step)
        new_layers = []
        for layer, key_value, layer_cache, layer_kernels in zip(self.stack, memory_key_values, cache["layers"],
                                                                kernels or [None] * len(self.stack)):
            x, layer_cache = layer.call_cached(x, key_value, memory_bias, layer_cache, step, beam_size, mask,
                                               layer_kernels)
            new_layers.append(layer_cache)
        return self._final(x), {"beams": beams, "layers": new_layers}
