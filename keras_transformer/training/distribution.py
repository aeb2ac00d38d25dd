"""Where the training runs: the distribution strategy and the mixed-precision policy, chosen explicitly.

    a TPU runtime (Colab's COLAB_TPU_ADDR,
      TPU_NAME, or a TPU VM's /dev/accel0)  -> TPUStrategy (the notebook uses this same function)
    TF_CONFIG naming several workers     -> MultiWorkerMirroredStrategy (every worker's GPUs)
    --devices GPU:0,GPU:1 (or CPU:0,...) -> MirroredStrategy over exactly those devices
    otherwise, GPUs visible              -> MirroredStrategy over all of them
    otherwise                            -> the default strategy: one device, no replication

Also here: the loss scale of a mixed_float16 run, and the error a user sees when XLA cannot compile
the training step.
"""
import contextlib
import json
import logging
import os
import pathlib
from typing import Optional, Sequence

import keras
import tensorflow as tf

logger = logging.getLogger(__name__)


def tf_config_workers() -> list:
    """The worker addresses of $TF_CONFIG's cluster (empty when unset)."""
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    return list(tf_config.get("cluster", {}).get("worker", []))


def _device_name(name: str) -> str:
    name = name.strip()
    return name if name.startswith("/") else f"/{name.lower().replace('gpu', 'device:GPU').replace('cpu', 'device:CPU')}"


# A Cloud TPU VM's TPU chips appear as /dev/accel0, /dev/accel1, ...
TPU_VM_DEVICE = pathlib.Path("/dev/accel0")


def tpu_address() -> Optional[str]:
    """The TPUClusterResolver `tpu` argument of this runtime, or None when there is no TPU.

    Colab's TPU runtime sets COLAB_TPU_ADDR (the resolver finds the address itself: ""); a TPU
    node user sets TPU_NAME to the TPU's name or grpc:// address; a TPU VM has the chips locally.
    """
    if "COLAB_TPU_ADDR" in os.environ:
        return ""
    if os.environ.get("TPU_NAME"):
        return os.environ["TPU_NAME"]
    if TPU_VM_DEVICE.exists():
        return "local"
    return None


def _tpu_strategy(address: str) -> tf.distribute.Strategy:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def select_strategy(devices: Optional[Sequence[str]] = None) -> tf.distribute.Strategy:
    """The strategy of the table in this module's docstring.

    Args:
      devices: device names such as ["GPU:0", "GPU:1"] (logical devices; "CPU:0".. work too);
        None chooses as described above.
    """
    address = tpu_address()
    if address is not None:
        if devices:
            raise ValueError(f"--devices {','.join(devices)} cannot be combined with a TPU runtime: "
                             f"TPUStrategy uses every core of the TPU")
        strategy = _tpu_strategy(address)
        logger.info("TPUStrategy (tpu=%r) with %d replicas", address, strategy.num_replicas_in_sync)
        return strategy
    if len(tf_config_workers()) > 1:
        if devices:
            raise ValueError("--devices cannot be combined with a multi-worker TF_CONFIG: each worker "
                             "uses all of its GPUs")
        return tf.distribute.MultiWorkerMirroredStrategy()
    if devices:
        available = {device.name.lower(): device.name for device in tf.config.list_logical_devices()}
        chosen = []
        for name in devices:
            full = _device_name(name)
            key = full.lower() if full.lower() in available else f"/job:localhost/replica:0/task:0{full.lower()}"
            if key not in available:
                raise ValueError(f"device {name!r} not found; logical devices: {sorted(available.values())}")
            chosen.append(available[key])
        return tf.distribute.MirroredStrategy(chosen)
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    return tf.distribute.get_strategy()


def mixed_precision_policy(mode: str) -> str:
    """The Keras dtype policy of a RunConfig.mixed_precision mode.

    "on" means mixed_float16 on GPUs (tensor cores, with loss scaling, which model.compile adds) and
    mixed_bfloat16 elsewhere (CPUs and TPUs have bfloat16 arithmetic and need no loss scaling).
    """
    if mode == "off":
        return "float32"
    if mode == "on":
        return "mixed_float16" if tf.config.list_logical_devices("GPU") else "mixed_bfloat16"
    if mode in ("mixed_float16", "mixed_bfloat16"):
        return mode
    raise ValueError(f"unknown mixed precision mode {mode!r}: expected off, on, mixed_float16 or mixed_bfloat16")


_warned_float16_without_gpu = False


def set_mixed_precision(mode: str) -> str:
    """Sets the global Keras dtype policy for `mode` (before the model is built); returns its name.

    mixed_float16 without a GPU runs (TensorFlow has float16 kernels for CPUs, which is how the tests
    prove the GPU path here) but says once that it is slow there.
    """
    global _warned_float16_without_gpu
    policy = mixed_precision_policy(mode)
    if policy == "mixed_float16" and not tf.config.list_logical_devices("GPU") and not _warned_float16_without_gpu:
        logger.warning("mixed_float16 without a GPU: TensorFlow's CPU kernels compute most float16 ops by "
                       "converting to float32 and back, so this is slower than float32 here; use it to test "
                       "what runs on GPUs (on CPUs with AVX512_BF16 or AMX, mixed_bfloat16 is the fast choice)")
        _warned_float16_without_gpu = True
    keras.config.set_dtype_policy(policy)
    return policy


def loss_scale(optimizer) -> Optional[float]:
    """The current loss scale of a mixed_float16 optimizer (Keras' LossScaleOptimizer), else None."""
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) and optimizer.built:
        return float(optimizer.dynamic_scale.numpy())
    return None


def inner_optimizer(optimizer):
    """The optimizer that applies the updates: the one a LossScaleOptimizer wraps, or `optimizer`."""
    return optimizer.inner_optimizer if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) else optimizer


class XlaCompilationError(RuntimeError):
    """XLA could not compile the training step; the message names the flag that turns XLA off."""


# Substrings of the errors TensorFlow raises when XLA cannot compile a function (an op without an XLA
# kernel, a shape XLA needs static, ...).
_XLA_ERROR_MARKERS = ("XLA", "xla", "Detected unsupported operations when trying to compile",
                      "compile-time constant")


@contextlib.contextmanager
def xla_compilation_errors_name_the_flag(jit_compile: bool):
    """Inside: an error of XLA's compiler becomes an XlaCompilationError that says to run without
    --jit-compile (when jit_compile is on; any other error passes unchanged)."""
    try:
        yield
    except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.InternalError) as error:
        if not jit_compile or not any(marker in str(error) for marker in _XLA_ERROR_MARKERS):
            raise
        cause = next(line.strip() for line in str(error).splitlines()
                     if any(marker in line for marker in _XLA_ERROR_MARKERS))
        raise XlaCompilationError(
            f"XLA could not compile the training step of this configuration ({cause[:400]}). Run without "
            f"--jit-compile (or --set run.jit_compile=false) to train it without XLA.") from error


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files: always, except on non-chief workers."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not tf_config_workers():
        return True
    return resolver.task_type in (None, "chief") or (resolver.task_type == "worker" and resolver.task_id == 0
                                                     and "chief" not in resolver.cluster_spec().as_dict())
