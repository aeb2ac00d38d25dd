"""TrainingTransformer's step on the stream's elements: 8 replicas, or 4 accumulated micro-batches, equal
one device on the whole global batch (loss and updated weights); the DataPosition follows the last batch.

The model is the tiny preset with one encoder and one decoder layer: what is shared between replicas and
micro-batches does not depend on how many layers there are, and one layer each takes about a third less
time than the preset's two (the 8-replica test: 48 against 75 CPU seconds, 2026-11-29).

Tolerances: float32 sums taken in another order (per replica, per micro-batch) differ in their last
bits, so losses agree to 1e-5 relative and weights to 1e-5 relative plus 1e-6 absolute (weights
near zero). A wrongly normalized loss is off by far more: dividing each replica's token-loss sum
by its own real-token count (then by the 8 replicas) weighs a token by 1 / (8 x its replica's count)
instead of 1 / (the global count); tried on the mirrored test (with 2 + 2 layers), every element of some weights then
misses by up to 0.1 (100% mismatched), although the token-weighted reported loss still agrees.

SGD, not Adam, as in tests/test_model.py: Adam's first update is about lr * sign(gradient) whatever
the gradient's scale, which would hide a wrongly normalized loss.

Both tests also run under mixed_float16 (Keras' LossScaleOptimizer around SGD, the loss scaled per
replica and per micro-batch and divided out once), as on 8 GPUs. Batches of other shapes round
float16 values at other places, so there the loss agrees to 1e-3 and each weight's update (its
gradient, at learning rate 1) to 5% of its norm (measured: at most 2%); the wrongly normalized loss
above, or a loss scale divided out per micro-batch and again at the step, misses by far more.
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.precision import set_dtype_policy
from keras_transformer.training.data_stream import DataPosition, pack_micro_batches
from keras_transformer.training.distribution import loss_scale
from keras_transformer.training.training_model import TrainingTransformer
from tests.training.test_precision import overflowing

VOCAB = 30
CONFIG = TransformerConfig.from_preset("tiny", vocab_size=VOCAB, dropout_rate=0.0, num_layers=1)
RTOL, ATOL = 1e-5, 1e-6
MIXED_LOSS_RTOL, MIXED_UPDATE_TOLERANCE = 1e-3, 5e-2
POLICIES = ("float32", "mixed_float16")


def _batches(rng, num_batches):
    """Batches of the stream's format, each padded only to its own lengths (its own bucket), with
    real-token counts that differ a lot from one batch to the next: ((source, target_in), target_out)."""
    batches = []
    for index in range(num_batches):
        size = 1 + index % 3
        source_lengths = 1 + (np.arange(size) + 2 * index) % 6
        target_lengths = 2 + (np.arange(size) * 3 + index) % 7
        source = np.zeros((size, source_lengths.max()), np.int32)
        target = np.zeros((size, target_lengths.max() + 1), np.int32)
        for row in range(size):
            source[row, :source_lengths[row]] = rng.integers(4, VOCAB, size=source_lengths[row])
            target[row, :target_lengths[row] + 1] = rng.integers(4, VOCAB, size=target_lengths[row] + 1)
        batches.append(((source, target[:, :-1]), target[:, 1:]))
    return batches


def _union(batches):
    """The batches as one batch, padded to the longest source and target."""
    source_length = max(b[0][0].shape[1] for b in batches)
    target_length = max(b[1].shape[1] for b in batches)

    def stack(tensors, length):
        return np.concatenate([np.pad(t, [[0, 0], [0, length - t.shape[1]]]) for t in tensors])

    return ((stack([b[0][0] for b in batches], source_length), stack([b[0][1] for b in batches], target_length)),
            stack([b[1] for b in batches], target_length))


def _real_tokens(batch):
    return int(np.count_nonzero(batch[1]))


def _element(batch, position):
    """A stream element: {"batch": ((source, target_in), target_out), "position": [epoch, segment, index]}."""
    return {"batch": batch, "position": np.array(position, np.int64)}


def _train_one_step(strategy, initial_weights, dataset, accumulate_steps=1, policy="float32", jit_compile=False,
                    model_out=None):
    """One optimizer step of a TrainingTransformer (SGD, learning rate 1) from initial_weights on
    `dataset` (one step's elements) under a dtype policy; returns (reported loss, weights,
    DataPosition value). The model is appended to model_out (a list) if given."""
    set_dtype_policy(policy)
    with strategy.scope():
        position = DataPosition()
        model = TrainingTransformer(CONFIG, accumulate_steps=accumulate_steps, data_position=position)
        model.compile(optimizer=keras.optimizers.SGD(1.0), jit_compile=jit_compile)
        model.prepare_for_training()
        model.set_weights(initial_weights)
    history = model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False).history
    assert int(model.optimizer.iterations.numpy()) == 1
    if model_out is not None:
        model_out.append(model)
    return history["loss"][0], model.get_weights(), position.value()


def _initial_weights():
    model = TrainingTransformer(CONFIG)
    model.build()
    return model.get_weights()


def _assert_same_step(result, expected, initial, policy="float32"):
    loss, weights, _ = result
    expected_loss, expected_weights, _ = expected
    assert any(not np.allclose(w, s) for w, s in zip(expected_weights, initial)), "the step changed nothing"
    if policy == "float32":
        assert loss == pytest.approx(expected_loss, rel=RTOL)
        for got, want in zip(weights, expected_weights):
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
        return
    assert loss == pytest.approx(expected_loss, rel=MIXED_LOSS_RTOL)
    for got, want, start in zip(weights, expected_weights, initial, strict=True):
        update, expected_update = np.float64(got) - start, np.float64(want) - start
        assert np.linalg.norm(update - expected_update) <= MIXED_UPDATE_TOLERANCE * np.linalg.norm(expected_update)


@pytest.mark.parametrize("policy", POLICIES)
def test_mirrored_step_on_stream_elements_equals_one_device_on_the_global_batch(policy):
    """8 replicas, each given its own batch of the stream (own shape, own real-token count): same loss
    and weights as one device on their union; the DataPosition is after the last batch of all replicas."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) == 8, "tests/conftest.py declares 8 logical CPUs"
    batches = _batches(np.random.default_rng(0), len(devices))
    assert len({_real_tokens(b) for b in batches}) > 1
    # Replica i reads batch i; the batches straddle a segment's and an epoch's end. The first replica's
    # is the earliest: without gathering all replicas' positions, its (0, 0, 5) would be recorded (tried: it is).
    positions = [[0, 0, 4], [0, 0, 5], [0, 0, 6], [0, 1, 0], [0, 1, 1], [0, 1, 2], [1, 0, 0], [1, 0, 1]]
    initial = _initial_weights()

    strategy = tf.distribute.MirroredStrategy(devices)
    elements = [_element(b, p) for b, p in zip(batches, positions)]
    # One input pipeline (one worker) whose consecutive elements go to replicas 0..7, as in run.py.
    per_replica = strategy.distribute_datasets_from_function(lambda context: _ragged_elements(elements))
    mirrored = _train_one_step(strategy, initial, per_replica, policy=policy)

    one_device = tf.distribute.OneDeviceStrategy(devices[0])
    union = _ragged_elements([_element(_union(batches), [1, 0, 1])])
    expected = _train_one_step(one_device, initial, union, policy=policy)

    _assert_same_step(mirrored, expected, initial, policy)
    assert mirrored[2] == (1, 0, 2), "position after batch [1, 0, 1], the last one any replica consumed"


def _ragged_elements(elements):
    """A dataset yielding `elements` (of different shapes) in order."""
    signature = {"batch": ((tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None, None], tf.int32)),
                 "position": tf.TensorSpec([3], tf.int64)}
    return tf.data.Dataset.from_generator(lambda: iter(elements), output_signature=signature)


@pytest.mark.parametrize("policy", POLICIES)
def test_accumulated_micro_batches_equal_one_step_on_their_union(policy):
    """accumulate_steps=4 on micro-batches of different lengths, packed by `pack_micro_batches` as the
    stream packs them: same loss and weights as one step on the union; position after the last one."""
    batches = _batches(np.random.default_rng(1), 4)
    assert len({_real_tokens(b) for b in batches}) == 4
    assert len({b[1].shape for b in batches}) > 1
    budget = max(max(b[0][0].size, b[1].size) for b in batches)
    positions = [[3, 2, 7], [3, 2, 8], [3, 2, 9], [4, 0, 0]]
    stream = _ragged_elements([_element(b, p) for b, p in zip(batches, positions)])
    packed = pack_micro_batches(stream, 4, budget)
    initial = _initial_weights()
    device = tf.distribute.OneDeviceStrategy("/cpu:0")

    accumulated = _train_one_step(device, initial, packed, accumulate_steps=4, policy=policy)
    expected = _train_one_step(device, initial, _ragged_elements([_element(_union(batches), [4, 0, 0])]),
                               policy=policy)

    _assert_same_step(accumulated, expected, initial, policy)
    assert accumulated[2] == (4, 0, 1)


class OrderRecorded(TrainingTransformer):
    """Appends to `events` "start" when a micro-batch's forward pass may begin (its data are there)
    and "end" when its gradients are done, by numpy functions the pass's tensors flow through (not
    stateful ones, which automatic control dependencies would order in any case)."""

    def __init__(self, *args, events, **kwargs):
        super().__init__(*args, **kwargs)
        self._append_event = events.append  # (Keras would track a list attribute as a copy)

    def _record(self, event, tensor):
        def append(value):
            self._append_event(event)
            return value

        return tf.ensure_shape(tf.numpy_function(append, [tensor], tf.int32, stateful=False), [])

    def _uncompiled_loss_and_gradients(self, x, y, global_count):
        (source, target_input), target_output = x, y
        started = self._record("start", tf.shape(source)[0])
        source = tf.where(started >= 0, source, tf.zeros_like(source))
        gradients, logits, total, count = super()._uncompiled_loss_and_gradients(
            (source, target_input), target_output, global_count)
        gradients = [tf.convert_to_tensor(gradient) for gradient in gradients]
        ended = self._record("end", tf.cast(tf.add_n([tf.reduce_sum(g) for g in gradients]) * 0, tf.int32))
        gradients[-1] = tf.where(ended >= 0, gradients[-1], tf.zeros_like(gradients[-1]))
        return gradients, logits, total, count


def test_micro_batches_run_one_after_the_other():
    """Micro-batch k + 1's forward pass starts after micro-batch k's gradients are done: the memory
    of one micro-batch's activations at a time, what accumulating on one GPU is for (a while loop's
    iterations may otherwise overlap; the accumulation's runs with parallel_iterations=1)."""
    batches = _batches(np.random.default_rng(2), 8)
    budget = max(max(b[0][0].size, b[1].size) for b in batches)
    packed = pack_micro_batches(_ragged_elements([_element(b, [0, 0, i]) for i, b in enumerate(batches)]), 8, budget)
    events = []
    model = OrderRecorded(CONFIG, accumulate_steps=8, data_position=DataPosition(), events=events)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    model.prepare_for_training()
    model.fit(packed.repeat(), epochs=1, steps_per_epoch=3, verbose=0, shuffle=False)
    assert events == ["start", "end"] * 8 * 3


class _OverflowOnReplica1(LabelSmoothedCrossEntropy):
    """The paper's loss, whose gradient with respect to the logits is inf on replica 1 alone: a
    float16 overflow on one replica of several."""

    def sum_and_count(self, y_true, y_pred):
        context = tf.distribute.get_replica_context()
        replica = -1 if context is None else context.replica_id_in_sync_group
        return super().sum_and_count(y_true, overflowing(y_pred, tf.equal(tf.cast(replica, tf.int32), 1)))


@pytest.mark.parametrize("accumulate_steps", [1, 2])
def test_a_float16_overflow_on_one_replica_skips_the_step_on_every_replica(accumulate_steps):
    """mixed_float16 over 2 replicas, the gradients overflowing on replica 1 only: the step is
    skipped (weights and step count unchanged, the loss scale halved), as on one device. Keras'
    LossScaleOptimizer looks at replica 0's gradients alone; before the replicas agreed on an
    overflow, this step put NaN into every weight (tried: it did)."""
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "tests/conftest.py declares 8 logical CPUs"
    batches = _batches(np.random.default_rng(3), 2 * accumulate_steps)
    elements = [_element(b, [0, 0, index]) for index, b in enumerate(batches)]
    budget = max(max(b[0][0].size, b[1].size) for b in batches)
    initial = _initial_weights()
    # Not collective ops: their group of 2 devices would clash with this process's groups of 8.
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    if accumulate_steps == 1:
        dataset = strategy.distribute_datasets_from_function(lambda context: _ragged_elements(elements))
    else:
        dataset = strategy.distribute_datasets_from_function(
            lambda context: pack_micro_batches(_ragged_elements(elements), accumulate_steps, budget))
    set_dtype_policy("mixed_float16")
    with strategy.scope():
        model = TrainingTransformer(CONFIG, accumulate_steps=accumulate_steps, data_position=DataPosition())
        model.compile(optimizer=keras.optimizers.SGD(1.0), loss=_OverflowOnReplica1())
        model.prepare_for_training()
        model.set_weights(initial)
    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    assert int(model.optimizer.iterations.numpy()) == 0
    assert loss_scale(model.optimizer) == 2.0 ** 14
    for got, expected in zip(model.get_weights(), initial, strict=True):
        np.testing.assert_array_equal(got, expected)

def _xla_compiled_functions(model):
    """Names of the functions that the model's traced training step calls with XLA's must-compile mark
    (Keras keeps the step's tf.function in its train_function's closure)."""
    functions = [cell.cell_contents for cell in model.train_function.__closure__ or ()
                 if isinstance(cell.cell_contents, tf.types.experimental.PolymorphicFunction)]
    assert functions, "no tf.function in the train_function's closure"
    names = set()
    for function in functions:
        for concrete in function._list_all_concrete_functions():
            graph = concrete.graph.as_graph_def()
            for node in [*graph.node, *(node for library in graph.library.function for node in library.node_def)]:
                if "_XlaMustCompile" in node.attr and node.attr["_XlaMustCompile"].b:
                    names.add(node.attr["f"].func.name)
    return names


@pytest.mark.parametrize("replicas", [2, 1])
def test_jit_compile_compiles_each_pass_apart_and_equals_the_plain_step(replicas):
    """--jit-compile over 2 replicas: Keras 3 would compile the step of both as one XLA function,
    which fails (a replica's variables are on another device; under MultiWorkerMirroredStrategy,
    CollectiveGatherV2 has no XLA kernel). Each replica's forward and backward pass is compiled
    apart instead, and the step equals the one without XLA, here with float16's loss scale and 2
    accumulated micro-batches (the same function computes a step without accumulation; several
    workers, float32, no accumulation, with XLA: tests/training/test_multi_worker.py).

    On one device (no strategy, as run.py trains there) the accumulated step is no whole-step XLA
    function either: its micro-batches' shapes come from the data, and the whole step failed to
    compile ("Input 1 to node `while/Reshape` with op Reshape must be a compile-time constant"),
    which `--jit-compile --accumulate-steps 8`, the paper's batch on one GPU, ran into."""
    policy, accumulate_steps = "mixed_float16", 2
    devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
    batches = _batches(np.random.default_rng(2), replicas * accumulate_steps)
    elements = [_element(b, [0, 0, index]) for index, b in enumerate(batches)]
    budget = max(max(b[0][0].size, b[1].size) for b in batches)
    initial = _initial_weights()

    def step(jit_compile):
        models = []
        if replicas == 1:
            strategy = tf.distribute.get_strategy()
            dataset = pack_micro_batches(_ragged_elements(elements), accumulate_steps, budget)
        else:
            # Not collective ops: their group of 2 devices would clash with this process's groups of 8.
            strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
            # One input pipeline: consecutive packs of micro-batches go to replicas 0, 1.
            dataset = strategy.distribute_datasets_from_function(
                lambda context: pack_micro_batches(_ragged_elements(elements), accumulate_steps, budget))
        result = _train_one_step(strategy, initial, dataset, accumulate_steps=accumulate_steps, policy=policy,
                                 jit_compile=jit_compile, model_out=models)
        return result, models[0]

    (compiled, compiled_model), (plain, plain_model) = step(True), step(False)
    assert compiled_model.replica_xla and not plain_model.replica_xla
    compiled_functions = _xla_compiled_functions(compiled_model)
    assert any("_uncompiled_loss_and_gradients" in name for name in compiled_functions), compiled_functions
    assert not any("_uncompiled_loss_and_gradients" in name for name in _xla_compiled_functions(plain_model))
    _assert_same_step(compiled, plain, initial, policy)
    assert compiled[2] == plain[2] == (0, 0, len(batches))
