"""Where the training runs: the distribution strategy and the mixed-precision policy, chosen explicitly.

    TF_CONFIG naming several workers     -> MultiWorkerMirroredStrategy (every worker's GPUs)
    --devices GPU:0,GPU:1 (or CPU:0,...) -> MirroredStrategy over exactly those devices
    otherwise, GPUs visible              -> MirroredStrategy over all of them
    otherwise                            -> the default strategy: one device, no replication
"""
import json
import logging
import os
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


def select_strategy(devices: Optional[Sequence[str]] = None) -> tf.distribute.Strategy:
    """The strategy of the table in this module's docstring.

    Args:
      devices: device names such as ["GPU:0", "GPU:1"] (logical devices; "CPU:0".. work too);
        None chooses as described above.
    """
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


def set_mixed_precision(mode: str) -> str:
    """Sets the global Keras dtype policy for `mode` (before the model is built); returns its name."""
    policy = mixed_precision_policy(mode)
    keras.config.set_dtype_policy(policy)
    return policy


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files: always, except on non-chief workers."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not tf_config_workers():
        return True
    return resolver.task_type in (None, "chief") or (resolver.task_type == "worker" and resolver.task_id == 0
                                                     and "chief" not in resolver.cluster_spec().as_dict())
