"""The paths our users run on GPUs and TPUs, proven on a CPU: mixed_float16 with loss scaling,
mixed_bfloat16, and the XLA-compiled training step.

One training step on a fixed batch, from the same weights, under each policy: the loss and Adam's
slots after the step (m = (1 - beta_1) g and v = (1 - beta_2) g^2, i.e. the gradients, with the loss
scale divided out) are compared with the float32 step. Adam's first update itself is lr * sign(g)
whatever g's size, so the slots, not the weights, are what shows a wrong gradient.

Tolerances: float16 keeps 11 significant bits and bfloat16 8, so the forward pass alone differs from
float32 by about 1e-3 (float16) and 7e-3 (bfloat16) relative (the tiny preset's logits, measured with
its 2 + 2 layers; the tests run one encoder and one decoder layer, which take a third less time).
Gradients differ more: a pre-activation near zero that rounds to the other side of a ReLU switches
its whole path, and with 4 sentences a few such switches show. Compared per variable by the relative
norm of the difference, ||g_mixed - g_float32|| / ||g_float32|| (so that near-zero elements do not
dominate), the largest errors measured over several initializations were 5.5e-2 (float16) and 1.0e-1
(bfloat16, also XLA against no XLA, which rounds intermediate values at other places), with 2 + 2
layers; the tolerances are about twice those. A gradient still multiplied by the loss scale (2**15), or one
that overflowed, misses by orders of magnitude more; so does a loss that is not the float32 one.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.optimizers import Adam
from keras_transformer.precision import set_dtype_policy
from keras_transformer.training.checkpointing import MIN_LOSS_SCALE, CheckpointCallback, RunCheckpoint
from keras_transformer.training.distribution import inner_optimizer, loss_scale
from keras_transformer.training.training_model import TrainingTransformer

VOCAB = 40
CONFIG = TransformerConfig.from_preset("tiny", vocab_size=VOCAB, dropout_rate=0.0, num_layers=1)
LEARNING_RATE = 1e-3
# (loss relative tolerance, gradient relative-norm tolerance) of one step against float32.
TOLERANCE = {"float32": (1e-5, 1e-4), "mixed_float16": (1e-3, 0.1), "mixed_bfloat16": (5e-3, 0.2)}
POLICIES = tuple(TOLERANCE)


def _batch():
    """((source (4, 7), target input (4, 6)), target output (4, 6)), padded rows of several lengths."""
    rng = np.random.default_rng(0)
    source = rng.integers(4, VOCAB, size=(4, 7)).astype(np.int32)
    target = rng.integers(4, VOCAB, size=(4, 7)).astype(np.int32)
    for row, (source_length, target_length) in enumerate([(7, 7), (5, 3), (2, 6), (6, 2)]):
        source[row, source_length:] = 0
        target[row, target_length:] = 0
    return (tf.constant(source), tf.constant(target[:, :-1])), tf.constant(target[:, 1:])


@pytest.fixture(scope="module")
def initial_weights():
    keras.config.set_dtype_policy("float32")
    model = TrainingTransformer(CONFIG)
    model.build()
    return model.get_weights()


def _model(policy, initial_weights, jit_compile=False, loss=None):
    """A compiled TrainingTransformer under `policy` with initial_weights and a built optimizer (our
    fused Adam; Keras wraps it in a LossScaleOptimizer under mixed_float16)."""
    set_dtype_policy(policy)
    model = TrainingTransformer(CONFIG)
    model.compile(optimizer=Adam(LEARNING_RATE, beta_1=0.9, beta_2=0.98, epsilon=1e-9), loss=loss,
                  jit_compile=jit_compile)
    model.prepare_for_training()
    model.set_weights(initial_weights)
    return model


def _adam_slots(model):
    """Adam's first and second moments, one array per trainable weight each, in float64."""
    adam = inner_optimizer(model.optimizer)
    return ([np.asarray(m, np.float64) for m in adam._momentums],
            [np.asarray(v, np.float64) for v in adam._velocities])


def _one_step(policy, initial_weights, jit_compile=False):
    model = _model(policy, initial_weights, jit_compile=jit_compile)
    x, y = _batch()
    logs = model.train_on_batch(x, y, return_dict=True)
    assert int(model.optimizer.iterations.numpy()) == 1
    return float(logs["loss"]), _adam_slots(model), model


def _relative_error(got, expected):
    return float(np.linalg.norm(got - expected) / max(np.linalg.norm(expected), 1e-30))


def _assert_same_step(result, expected, policy):
    loss_tolerance, gradient_tolerance = TOLERANCE[policy]
    loss, (momentums, velocities), _ = result
    expected_loss, (expected_momentums, expected_velocities), _ = expected
    assert loss == pytest.approx(expected_loss, rel=loss_tolerance)
    for got, want in zip(momentums, expected_momentums, strict=True):
        assert np.linalg.norm(want) > 0
        assert _relative_error(got, want) < gradient_tolerance
    for got, want in zip(velocities, expected_velocities, strict=True):
        assert _relative_error(got, want) < 2 * gradient_tolerance  # g^2: twice g's relative error


@pytest.fixture(scope="module")
def plain_steps(initial_weights):
    """policy -> the step without XLA, computed once for this module's tests."""
    steps = {}

    def plain_step(policy):
        if policy not in steps:
            steps[policy] = _one_step(policy, initial_weights)
        return steps[policy]

    return plain_step


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_mixed_precision_step_matches_the_float32_step(policy, plain_steps):
    result = plain_steps(policy)
    model = result[2]
    assert model.dtype_policy.name == policy and model.compute_dtype != "float32"
    assert all(weight.dtype == "float32" for weight in model.weights)  # float32 master weights
    if policy == "mixed_float16":  # Keras wraps our fused Adam in its dynamic loss scaling
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        assert isinstance(model.optimizer.inner_optimizer, Adam)
        assert loss_scale(model.optimizer) == 2.0 ** 15
    else:  # bfloat16 has float32's range: nothing to scale
        assert isinstance(model.optimizer, Adam) and loss_scale(model.optimizer) is None
    _assert_same_step(result, plain_steps("float32"), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_xla_compiled_step_matches_the_plain_step(policy, initial_weights, plain_steps):
    plain = plain_steps(policy)
    compiled = _one_step(policy, initial_weights, jit_compile=True)
    assert compiled[2].jit_compile
    _assert_same_step(compiled, plain, policy)


def overflowing(logits, poisoned):
    """logits as they are, whose gradient is inf where `poisoned` (a bool tensor) is True: an
    injected float16 overflow (the loss itself stays finite, as it does when gradients overflow)."""
    @tf.custom_gradient
    def identity(logits):
        def gradient(upstream):
            return tf.where(poisoned, tf.constant(np.inf, upstream.dtype), upstream)
        return tf.identity(logits), gradient

    return identity(logits)


class _PoisonedGradient(LabelSmoothedCrossEntropy):
    """The paper's loss, whose gradient with respect to the logits is inf while `poisoned` is True."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.poisoned = tf.Variable(False, trainable=False)

    def sum_and_count(self, y_true, y_pred):
        return super().sum_and_count(y_true, overflowing(y_pred, tf.convert_to_tensor(self.poisoned)))


def test_an_overflowing_step_changes_nothing_but_the_loss_scale(initial_weights):
    loss = _PoisonedGradient()
    model = _model("mixed_float16", initial_weights, loss=loss)
    x, y = _batch()
    optimizer_state = [np.array(variable) for variable in inner_optimizer(model.optimizer).variables]

    loss.poisoned.assign(True)
    logs = model.train_on_batch(x, y, return_dict=True)
    assert np.isfinite(logs["loss"])
    for got, expected in zip(model.get_weights(), initial_weights, strict=True):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip(inner_optimizer(model.optimizer).variables, optimizer_state, strict=True):
        np.testing.assert_array_equal(np.array(got), expected)  # Adam's slots and its step count
    assert int(model.optimizer.iterations.numpy()) == 0
    assert loss_scale(model.optimizer) == 2.0 ** 14

    loss.poisoned.assign(False)
    for step in (1, 2):
        logs = model.train_on_batch(x, y, return_dict=True)
        assert np.isfinite(logs["loss"]) and int(model.optimizer.iterations.numpy()) == step
    assert loss_scale(model.optimizer) == 2.0 ** 14  # it grows again after 2,000 finite steps
    moved = [not np.array_equal(got, initial) for got, initial in zip(model.get_weights(), initial_weights)]
    assert all(moved)
    momentums, _ = _adam_slots(model)
    assert all(np.all(np.isfinite(m)) and np.linalg.norm(m) > 0 for m in momentums)


def test_a_collapsed_loss_scale_stops_the_run_and_says_why(initial_weights, tmp_path):
    loss = _PoisonedGradient()
    loss.poisoned.assign(True)  # every step overflows
    model = _model("mixed_float16", initial_weights, loss=loss)
    callback = CheckpointCallback(RunCheckpoint(tmp_path, model), every_steps=1, every_minutes=60.0,
                                  train_steps=100)
    dataset = tf.data.Dataset.from_tensors(_batch()).repeat()
    history = model.fit(dataset, steps_per_epoch=40, epochs=1, callbacks=[callback], verbose=0,
                        shuffle=False).history

    # 2**15 halved at each skipped step: below MIN_LOSS_SCALE (1) after 16 of them.
    assert len(history["loss"]) == 1 and all(np.isfinite(history["loss"]))
    assert loss_scale(model.optimizer) == 2.0 ** -1 < MIN_LOSS_SCALE
    assert callback.diverged is not None and "loss scale collapsed to 0.5" in callback.diverged
    assert "mixed_bfloat16" in callback.diverged  # what to do instead
    assert int(model.optimizer.iterations.numpy()) == 0 and callback.run_checkpoint.manager.latest_checkpoint is None
    for got, expected in zip(model.get_weights(), initial_weights, strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("saved_policy, restored_policy", [("mixed_float16", "float32"),
                                                           ("float32", "mixed_float16")])
def test_a_run_resumes_with_or_without_a_loss_scale(saved_policy, restored_policy, initial_weights, tmp_path):
    """A checkpoint of a mixed_float16 run (Adam wrapped in a LossScaleOptimizer) restores into a
    run without one (float32 or mixed_bfloat16: moved off the GPUs, or out of float16), and the
    other way: the weights, the step and Adam's moments as saved; the loss scale is left behind,
    or starts at 2**15 as a new run's does. (Before, the restore failed on the optimizer's
    step_counter: "expected dtype float does not equal original dtype int64".)"""
    saved = _model(saved_policy, initial_weights)
    x, y = _batch()
    for _ in range(2):
        saved.train_on_batch(x, y)
    assert int(saved.optimizer.iterations.numpy()) == 2
    RunCheckpoint(tmp_path, saved, max_to_keep=1).save()
    saved_momentums, saved_velocities = _adam_slots(saved)
    saved_weights = saved.get_weights()

    restored = _model(restored_policy, initial_weights)
    assert RunCheckpoint(tmp_path, restored, max_to_keep=1).restore_latest() is not None
    assert int(restored.optimizer.iterations.numpy()) == 2
    for got, expected in zip(restored.get_weights(), saved_weights, strict=True):
        np.testing.assert_array_equal(got, expected)
    momentums, velocities = _adam_slots(restored)
    for got, expected in zip([*momentums, *velocities], [*saved_momentums, *saved_velocities], strict=True):
        assert np.linalg.norm(expected) > 0
        np.testing.assert_array_equal(got, expected)
    assert loss_scale(restored.optimizer) == (2.0 ** 15 if restored_policy == "mixed_float16" else None)
    # The model's own optimizer again after the restore (it pointed at a stand-in meanwhile).
    assert isinstance(restored.optimizer, keras.optimizers.LossScaleOptimizer) == (restored_policy == "mixed_float16")
    restored.train_on_batch(x, y)  # and it trains on
    assert int(restored.optimizer.iterations.numpy()) == 3
