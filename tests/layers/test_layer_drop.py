"""LayerDrop (TransformerConfig.layer_drop_rate): a training call of the encoder or decoder stack runs
each layer or skips it whole, at the rate, drawn anew for each call and on each replica, under XLA
too; a skipped layer gets no gradient; inference runs every layer; a stack without it keeps no
seed state."""
import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer import masking
from keras_transformer.config import TransformerConfig
from keras_transformer.layers import Decoder, Encoder
from keras_transformer.training.training_model import rng_state_variables

B, S, T, D = 2, 6, 5, 16
# Dropout off inside the layers: a layer's output then depends only on whether it ran.
ARGS = dict(num_heads=4, key_dim=4, value_dim=4, d_ff=32, dropout_rate=0.0)


def _inputs():
    source_mask = np.ones((B, S), bool)
    source_mask[1, -2:] = False
    target = np.random.RandomState(0).randint(1, 9, size=(B, T))
    return dict(source=tf.random.stateless_normal((B, S, D), seed=[1, 2]),
                x=tf.random.stateless_normal((B, T, D), seed=[5, 6]),
                memory=tf.random.stateless_normal((B, S, D), seed=[3, 4]),
                self_attention_mask=masking.self_attention_mask(target),
                source_mask=tf.constant(source_mask))


def _stack(kind, num_layers, rate, norm_first=False):
    keras.utils.set_random_seed(5)
    stack = (Encoder if kind == "encoder" else Decoder)(num_layers=num_layers, **ARGS, norm_first=norm_first,
                                                        layer_drop_rate=rate, name=kind)
    stack.build((B, S if kind == "encoder" else T, D))
    return stack


def _call(stack, inputs, training):
    if isinstance(stack, Encoder):
        return stack(inputs["source"], attention_mask=inputs["source_mask"], training=training)
    return stack(inputs["x"], inputs["memory"], inputs["self_attention_mask"], inputs["source_mask"],
                 training=training)


def _by_hand(stack, inputs, kept):
    """The stack's output when only the layers where `kept` is True run, in inference."""
    if isinstance(stack, Encoder):
        x = inputs["source"]
        for layer, run in zip(stack.stack, kept):
            x = layer(x, attention_mask=inputs["source_mask"]) if run else x
    else:
        x = inputs["x"]
        for layer, run in zip(stack.stack, kept):
            x = layer(x, inputs["memory"], inputs["self_attention_mask"], inputs["source_mask"]) if run else x
    return np.asarray(stack._final(x))


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
@pytest.mark.parametrize("norm_first,jit_compile", [(False, False), (True, False), (False, True)])
def test_a_training_call_runs_exactly_the_layers_it_keeps(kind, norm_first, jit_compile):
    """Each of 24 training calls of a 2-layer stack at rate 0.5 gives the output of one of the four
    subsets of its layers, run by hand; the calls draw anew, so several subsets turn up; the
    gradient reaches exactly the layers that ran. Compiled with XLA too (its random draws are other
    numbers than the graph's, so each call is matched on its own)."""
    stack = _stack(kind, 2, 0.5, norm_first)
    inputs = _inputs()
    subsets = list(itertools.product([False, True], repeat=2))
    expected = {subset: _by_hand(stack, inputs, subset) for subset in subsets}
    assert len({value.tobytes() for value in expected.values()}) == 4  # the subsets are told apart

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            outputs = _call(stack, inputs, training=True)
            loss = tf.reduce_sum(outputs * tf.random.stateless_normal(tf.shape(outputs), seed=[9, 9]))
        return outputs, tape.gradient(loss, [layer.trainable_variables for layer in stack.stack])

    seen = set()
    for _ in range(24):
        outputs, gradients = step()
        matches = [subset for subset in subsets if np.allclose(outputs, expected[subset], atol=1e-4)]
        assert len(matches) == 1
        seen.add(matches[0])
        reached = tuple(any(np.abs(np.asarray(g)).sum() > 0 for g in layer) for layer in gradients)
        assert reached == matches[0]
    assert len(seen) >= 3


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_inference_runs_every_layer_unscaled(kind):
    stack = _stack(kind, 3, 0.9)
    inputs = _inputs()
    for training in (False, None):
        np.testing.assert_allclose(_call(stack, inputs, training), _by_hand(stack, inputs, (True,) * 3), atol=1e-5)


def test_layers_are_skipped_at_the_rate():
    """4,000 draws of an 8-layer stack at 0.25: 32,000 layers, the skipped share's standard
    deviation 0.0024; consecutive calls draw differently."""
    stack = _stack("encoder", 8, 0.25)

    @tf.function
    def draw(count):  # a loop in the graph: 4,000 unrolled draws took a minute to trace
        rows = tf.TensorArray(tf.bool, size=count)
        for index in tf.range(count):
            rows = rows.write(index, stack._kept_layers(True))
        return rows.stack()

    draws = draw(tf.constant(4000))
    assert draws.shape == (4000, 8)
    skipped = 1.0 - np.asarray(draws, np.float64).mean()
    assert abs(skipped - 0.25) < 0.012
    assert len({row.tobytes() for row in np.asarray(draws)}) > 100
    assert stack._kept_layers(False) is None and _stack("encoder", 8, 0.0)._kept_layers(True) is None


@pytest.mark.parametrize("jit_compile", [False, True])
def test_each_replica_draws_its_own_layers(jit_compile):
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{index}" for index in range(4)])
    keras.utils.set_random_seed(5)
    with strategy.scope():
        stack = Encoder(num_layers=32, **ARGS, layer_drop_rate=0.5)

    @tf.function
    def draws():
        return strategy.run(lambda: tf.function(lambda: stack._kept_layers(True), jit_compile=jit_compile,
                                                autograph=False)())

    first = [np.asarray(value) for value in strategy.experimental_local_results(draws())]
    second = [np.asarray(value) for value in strategy.experimental_local_results(draws())]
    assert len({value.tobytes() for value in first}) == 4
    assert all((a != b).any() for a, b in zip(first, second))


def test_the_seed_state_is_checkpointed_and_only_with_layer_drop():
    with_it = kt.Transformer.from_preset("tiny", vocab_size=50, layer_drop_rate=0.2)
    without = kt.Transformer.from_preset("tiny", vocab_size=50)
    paths = [state.path for state in rng_state_variables(with_it)]
    assert any(path.startswith("encoder_layer_drop") for path in paths), paths
    assert any(path.startswith("decoder_layer_drop") for path in paths), paths
    assert len(paths) == len(rng_state_variables(without)) + 2
    assert with_it.encoder.layer_drop_seed_generator is not None
    assert without.encoder.layer_drop_seed_generator is None and without.decoder.layer_drop_seed_generator is None


def test_the_decoder_has_no_attention_weights_in_training_with_layer_drop():
    stack = _stack("decoder", 2, 0.3)
    inputs = _inputs()
    with pytest.raises(ValueError, match="no attention weights"):
        stack(inputs["x"], inputs["memory"], inputs["self_attention_mask"], inputs["source_mask"], training=True,
              return_attention_scores=True)
    outputs, scores = stack(inputs["x"], inputs["memory"], inputs["self_attention_mask"], inputs["source_mask"],
                            training=False, return_attention_scores=True)
    assert scores.shape == (B, 4, T, S)
    # The model asks for them only when its caller does: a training pass works.
    model = kt.Transformer.from_preset("tiny", vocab_size=50, layer_drop_rate=0.3)
    assert model((tf.constant([[5, 6, 2]]), tf.constant([[1, 5, 6]])), training=True).shape == (1, 3, 50)


def test_bad_rates_are_refused_and_the_rate_is_serialized():
    with pytest.raises(ValueError, match="layer_drop_rate must be in"):
        TransformerConfig(layer_drop_rate=1.0)
    with pytest.raises(ValueError, match="layer_drop_rate must be in"):
        Encoder(num_layers=2, **ARGS, layer_drop_rate=-0.1)
    stack = Encoder(num_layers=2, **ARGS, layer_drop_rate=0.3)
    assert Encoder.from_config(stack.get_config()).layer_drop_rate == 0.3
    assert TransformerConfig.from_dict(TransformerConfig(layer_drop_rate=0.3).to_dict()).layer_drop_rate == 0.3
