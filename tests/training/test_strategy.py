"""Where the training runs (keras_transformer/training/distribution.py): the TPU rules, shared by
`pipelines.train_wmt` and the training notebook, checked against a stubbed TPU cluster resolver; the
precision modes; XLA errors that name the flag to turn off."""
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.training import distribution
from keras_transformer.training.distribution import (XlaCompilationError, mixed_precision_policy, select_strategy,
                                                     set_mixed_precision, xla_compilation_errors_name_the_flag)
from keras_transformer.training.run_config import RunConfig


class _StubTPU:
    """Records what select_strategy asks of TensorFlow's TPU API; no TPU needed."""

    def __init__(self):
        self.calls = []
        stub = self

        class Resolver:
            def __init__(self, tpu=None):
                self.tpu = tpu
                stub.calls.append(("resolver", tpu))

        class Strategy:
            num_replicas_in_sync = 8

            def __init__(self, resolver):
                stub.calls.append(("strategy", resolver.tpu))
                self.resolver = resolver

        self.Resolver, self.Strategy = Resolver, Strategy

    def install(self, monkeypatch):
        monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", self.Resolver)
        monkeypatch.setattr(tf.distribute, "TPUStrategy", self.Strategy)
        monkeypatch.setattr(tf.config, "experimental_connect_to_cluster",
                            lambda resolver: self.calls.append(("connect", resolver.tpu)))
        monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system",
                            lambda resolver: self.calls.append(("initialize", resolver.tpu)))


@pytest.fixture
def no_tpu(monkeypatch, tmp_path):
    for name in ("COLAB_TPU_ADDR", "TPU_NAME", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(distribution, "TPU_VM_DEVICE", tmp_path / "accel0")  # absent
    stub = _StubTPU()
    stub.install(monkeypatch)
    return stub


@pytest.mark.parametrize("runtime, expected_address", [
    ({"COLAB_TPU_ADDR": "10.0.0.2:8470"}, ""),    # Colab's TPU runtime: the resolver finds the address
    ({"TPU_NAME": "my-tpu-node"}, "my-tpu-node"),  # a Cloud TPU node
    ({"device": True}, "local"),                   # a TPU VM: /dev/accel0
])
def test_a_tpu_runtime_gets_tpu_strategy_connected_and_initialized(no_tpu, monkeypatch, runtime, expected_address):
    for name, value in runtime.items():
        if name == "device":
            distribution.TPU_VM_DEVICE.write_text("")
        else:
            monkeypatch.setenv(name, value)
    strategy = select_strategy()
    assert isinstance(strategy, no_tpu.Strategy)
    assert no_tpu.calls == [("resolver", expected_address), ("connect", expected_address),
                            ("initialize", expected_address), ("strategy", expected_address)]


def test_without_a_tpu_nothing_of_the_tpu_api_is_called(no_tpu):
    strategy = select_strategy()
    assert strategy is tf.distribute.get_strategy() and no_tpu.calls == []
    assert isinstance(select_strategy(["CPU:0", "CPU:1"]), tf.distribute.MirroredStrategy)


def test_devices_cannot_be_chosen_on_a_tpu(no_tpu, monkeypatch):
    monkeypatch.setenv("COLAB_TPU_ADDR", "10.0.0.2:8470")
    with pytest.raises(ValueError, match="--devices and --cpu-devices cannot be combined with a TPU runtime"):
        select_strategy(["GPU:0"])


def test_the_notebook_uses_the_same_rules():
    import pathlib
    notebook = (pathlib.Path(__file__).resolve().parents[2] / "colab" / "train_transformer.py").read_text()
    assert "from keras_transformer.training.distribution import select_strategy" in notebook
    assert "TPUClusterResolver" not in notebook  # no second copy of the rules


def test_the_log_says_what_a_run_trains_on():
    devices = [device.name for device in tf.config.list_logical_devices("CPU")[:2]]
    assert distribution.describe_strategy(tf.distribute.get_strategy()) == "one device, no distribution strategy"
    assert distribution.describe_strategy(tf.distribute.MirroredStrategy(devices)) == "MirroredStrategy: 2 replicas"
    assert distribution.describe_strategy(tf.distribute.OneDeviceStrategy(devices[0])) == "OneDeviceStrategy: 1 replica"
    # Several workers: tests/training/test_multi_worker.py reads both kinds from the workers' logs.


def test_precision_modes():
    assert mixed_precision_policy("off") == "float32"
    assert mixed_precision_policy("on") == "mixed_bfloat16"  # no GPU here
    assert mixed_precision_policy("mixed_float16") == "mixed_float16"
    with pytest.raises(ValueError, match="unknown mixed precision mode 'float8'"):
        mixed_precision_policy("float8")
    with pytest.raises(ValueError, match=r"RunConfig.mixed_precision must be one of .*; got 'fp16'"):
        RunConfig(mixed_precision="fp16")


def test_float16_without_a_gpu_runs_but_says_once_that_it_is_slow(monkeypatch, caplog):
    monkeypatch.setattr(distribution, "_warned_float16_without_gpu", False)
    with caplog.at_level(logging.WARNING, logger=distribution.__name__):
        assert set_mixed_precision("mixed_float16") == "mixed_float16"
        assert set_mixed_precision("mixed_float16") == "mixed_float16"
        assert set_mixed_precision("mixed_bfloat16") == "mixed_bfloat16"
    slow = [record for record in caplog.records if "without a GPU" in record.getMessage()]
    assert len(slow) == 1 and "slower" in slow[0].getMessage()
    assert keras.config.dtype_policy().name == "mixed_bfloat16"


def test_float16_without_a_gpu_turns_off_the_remapper_that_makes_it_very_slow():
    """TF 2.21 fuses a float16 MatMul and BiasAdd on CPUs into a oneDNN op about 400 times slower
    than the two apart; float16 without a GPU traces without that fusion, every other policy with it."""
    set_mixed_precision("mixed_float16")
    assert tf.config.optimizer.get_experimental_options().get("remapping") is False
    set_mixed_precision("mixed_bfloat16")
    assert tf.config.optimizer.get_experimental_options().get("remapping") is True
    set_mixed_precision("mixed_float16")
    set_mixed_precision("off")
    assert tf.config.optimizer.get_experimental_options().get("remapping") is True


class HostOnlyStep(keras.Model):
    """A model whose training step holds an op XLA cannot compile (a string hash, host-only)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)

    def call(self, x):
        hashed = tf.strings.to_hash_bucket_fast(tf.strings.as_string(x), 7)
        return self.dense(tf.cast(hashed, tf.float32))


@pytest.mark.parametrize("jit_compile", [True, False])
def test_a_step_xla_cannot_compile_fails_naming_the_flag(jit_compile):
    model = HostOnlyStep()
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit_compile)
    x, y = np.ones((4, 3), np.float32), np.ones((4, 1), np.float32)
    if not jit_compile:  # the same model trains without XLA
        with xla_compilation_errors_name_the_flag(jit_compile):
            model.fit(x, y, epochs=1, verbose=0)
        return
    with pytest.raises(XlaCompilationError, match="Run without --jit-compile") as raised:
        with xla_compilation_errors_name_the_flag(jit_compile):
            model.fit(x, y, epochs=1, verbose=0)
    assert "AsString" in str(raised.value)  # the first op XLA could not compile
    assert isinstance(raised.value.__cause__, tf.errors.OpError)


def test_other_errors_pass_unchanged():
    with pytest.raises(tf.errors.InvalidArgumentError, match="shapes"):
        with xla_compilation_errors_name_the_flag(True):
            raise tf.errors.InvalidArgumentError(None, None, "incompatible shapes [2] and [3]")


def test_the_configs_tiny_model_compiles_with_xla_under_every_policy():
    """What a TPU needs: the XLA step of the tiny model is built (to HLO) under each policy."""
    from keras_transformer.training.training_model import TrainingTransformer
    for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
        keras.config.set_dtype_policy(policy)
        model = TrainingTransformer(TransformerConfig.from_preset("tiny", vocab_size=20, dropout_rate=0.1))
        model.compile(jit_compile=True)
        model.prepare_for_training()
        ids = tf.TensorSpec([2, 5], tf.int32)
        step = tf.function(lambda s, t, o: model.train_step(((s, t), o)), jit_compile=True)
        hlo = step.experimental_get_compiler_ir(ids, ids, ids)(stage="hlo")
        assert "HloModule" in hlo
