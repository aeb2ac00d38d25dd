"""Where the training runs: the distribution strategy and the mixed-precision policy, chosen explicitly.

    a TPU runtime (Colab's COLAB_TPU_ADDR,
      TPU_NAME, or a TPU VM's /dev/accel0)  -> TPUStrategy (the notebook uses this same function)
    TF_CONFIG naming several workers     -> MultiWorkerMirroredStrategy (every worker's GPUs, or its
                                            `cpu_devices` logical CPUs, one replica each)
    --devices GPU:0,GPU:1 (or CPU:0,...) -> MirroredStrategy over exactly those devices
    cpu_devices=N (--cpu-devices N)      -> MirroredStrategy over the N logical CPUs
    otherwise, GPUs visible              -> MirroredStrategy over all of them
    otherwise                            -> the default strategy: one device, no replication

`--cpu-devices N` splits the machine's CPU into N logical devices (one thread pool, no speed-up):
it is how tests and a laptop run the multi-replica and multi-worker set-ups of GPU machines.
TF_CONFIG is checked here, before any networking, and every error names the field at fault.

Also here: the loss scale of a mixed_float16 run, and the error a user sees when XLA cannot compile
the training step.
"""
import contextlib
import json
import logging
import os
import pathlib
import re
from typing import Optional, Sequence

import keras
import tensorflow as tf
from tensorflow.python.distribute import collective_all_reduce_strategy
from tensorflow.python.eager import context

from keras_transformer.precision import set_dtype_policy

logger = logging.getLogger(__name__)

# Collectives (all-reduce of the gradients, checkpoint agreement) give up after this long: a worker
# that died makes the others fail with DeadlineExceeded instead of waiting for ever.
DEFAULT_COLLECTIVE_TIMEOUT_SECONDS = 120.0
# How long the workers of a cluster wait at a barrier of the coordination service (wait_for_all_workers,
# check_workers_agree): for the chief to learn the vocabulary, for each other's configs, for every
# worker to end an evaluation. A lost worker ends the wait at once.
CLUSTER_WAIT_SECONDS = 3600.0
# How long they wait for the corpus to be prepared before training (Corpus.prepare: TFDS downloads and
# prepares WMT14 in an hour or more, a large local corpus is checked line by line).
CORPUS_WAIT_SECONDS = 48 * 3600.0
_JOBS = ("chief", "worker")
_ADDRESS = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")


class ClusterConfigError(ValueError):
    """TF_CONFIG is malformed, or the workers it names disagree on the run."""


class WorkerLost(RuntimeError):
    """Another worker of the cluster stopped (killed, crashed, unreachable): a collective or the
    coordination service gave up on it. The run stops; starting every worker again resumes it."""


# What a collective or the coordination service raises when a peer is gone (DeadlineExceeded after
# the collective timeout, Unavailable when the service has seen the peer stop answering).
PEER_FAILURES = (tf.errors.DeadlineExceededError, tf.errors.UnavailableError, tf.errors.AbortedError,
                 tf.errors.CancelledError, tf.errors.InternalError)


def _fail(field, message):
    raise ClusterConfigError(f"TF_CONFIG {field}: {message}")


def read_tf_config(text: Optional[str] = None) -> Optional[dict]:
    """$TF_CONFIG (or `text`) checked: {"cluster": {"chief": [...], "worker": [...]}, "task": {...}}.

    Returns None when it is unset or empty. Raises ClusterConfigError naming the field at fault:
    invalid JSON, a job other than chief and worker, an address that is not host:port, an address
    named twice (two tasks cannot share one server), a task whose type or index the cluster lacks.
    """
    text = os.environ.get("TF_CONFIG", "") if text is None else text
    if not text.strip():
        return None
    try:
        tf_config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ClusterConfigError(f"TF_CONFIG is not valid JSON: {error}") from None
    if not isinstance(tf_config, dict):
        _fail("", f"expected a JSON object with \"cluster\" and \"task\", got {text.strip()[:80]!r}")
    cluster = tf_config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        _fail("cluster", f"expected an object such as {{\"worker\": [\"host1:2222\", \"host2:2222\"]}}, "
                         f"got {cluster!r}")
    seen = {}
    for job, addresses in cluster.items():
        if job not in _JOBS:
            _fail(f"cluster.{job}", f"unknown job {job!r}: MultiWorkerMirroredStrategy runs \"chief\" "
                                    f"and \"worker\" tasks only")
        if not isinstance(addresses, list) or not addresses:
            _fail(f"cluster.{job}", f"expected a non-empty list of \"host:port\" addresses, got {addresses!r}")
        if job == "chief" and len(addresses) != 1:
            _fail("cluster.chief", f"names {len(addresses)} tasks; a cluster has one chief")
        for index, address in enumerate(addresses):
            field = f"cluster.{job}[{index}]"
            match = _ADDRESS.match(address) if isinstance(address, str) else None
            if not match or not 0 < int(match.group(2)) < 65536:
                _fail(field, f"expected \"host:port\", got {address!r}")
            if address in seen:
                _fail(field, f"{address} is named twice (also {seen[address]}): every task needs its own "
                             f"host:port")
            seen[address] = field
    task = tf_config.get("task")
    if not isinstance(task, dict):
        _fail("task", f"expected {{\"type\": \"worker\", \"index\": N}} for this process, got {task!r}")
    if task.get("type") not in cluster:
        _fail("task.type", f"{task.get('type')!r} is not a job of the cluster ({', '.join(cluster)})")
    index = task.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(cluster[task["type"]]):
        _fail("task.index", f"expected an integer from 0 to {len(cluster[task['type']]) - 1} "
                            f"(cluster.{task['type']} has {len(cluster[task['type']])}), got {index!r}")
    return tf_config


def split_cpu(count: int):
    """Splits the CPU into `count` logical devices; must run before TensorFlow initializes."""
    if count < 1:
        raise ValueError(f"--cpu-devices must be at least 1, got {count}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu)
    if len(configured or [None]) == count:
        return
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        raise RuntimeError(f"cannot split the CPU into {count} logical devices: TensorFlow is initialized "
                           f"already") from None


def _logical_cpu_count() -> int:
    return len(tf.config.get_logical_device_configuration(tf.config.list_physical_devices("CPU")[0]) or [None])


class _LogicalCpuReplicasExtended(collective_all_reduce_strategy.CollectiveAllReduceExtended):
    """MultiWorkerMirroredStrategy's own machinery with one replica per logical CPU of each worker.

    Without GPUs the stock strategy takes CPU:0 of each worker only; this lists CPU:0..N-1 (after
    `split_cpu(N)`), as it lists every GPU of a GPU worker. Nothing else differs.
    """

    def _initialize_local_devices(self, cluster_resolver, worker_device):
        return tuple(f"{worker_device}/device:CPU:{i}" for i in range(_logical_cpu_count())), "CPU"


class LogicalCpuMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """tf.distribute.MultiWorkerMirroredStrategy over the logical CPUs of each worker (see above)."""

    def __init__(self, communication_options=None):
        options = communication_options or tf.distribute.experimental.CommunicationOptions()
        tf.distribute.Strategy.__init__(self, _LogicalCpuReplicasExtended(self, cluster_resolver=None,
                                                                          communication_options=options))


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


def _mirrored_over(devices: Sequence[str]) -> tf.distribute.MirroredStrategy:
    available = {device.name.lower(): device.name for device in tf.config.list_logical_devices()}
    chosen = []
    for name in devices:
        full = _device_name(name)
        key = full.lower() if full.lower() in available else f"/job:localhost/replica:0/task:0{full.lower()}"
        if key not in available:
            raise ValueError(f"device {name!r} not found; logical devices: {sorted(available.values())}")
        chosen.append(available[key])
    return tf.distribute.MirroredStrategy(chosen)


def select_strategy(devices: Optional[Sequence[str]] = None, cpu_devices: Optional[int] = None,
                    collective_timeout_seconds: float = DEFAULT_COLLECTIVE_TIMEOUT_SECONDS
                    ) -> tf.distribute.Strategy:
    """The strategy of the table in this module's docstring.

    Args:
      devices: device names such as ["GPU:0", "GPU:1"] (logical devices; "CPU:0".. work too);
        None chooses as described above.
      cpu_devices: split the CPU into this many logical devices and replicate over them (each
        worker's, under a multi-worker TF_CONFIG); call before TensorFlow initializes.
      collective_timeout_seconds: under a multi-worker TF_CONFIG, how long a collective waits for
        the other workers before failing (0: for ever).
    Raises ClusterConfigError for a malformed TF_CONFIG (see read_tf_config).
    """
    address = tpu_address()
    if address is not None:
        if devices or cpu_devices:
            raise ValueError("--devices and --cpu-devices cannot be combined with a TPU runtime: "
                             "TPUStrategy uses every core of the TPU")
        strategy = _tpu_strategy(address)
        logger.info("TPUStrategy (tpu=%r) with %d replicas", address, strategy.num_replicas_in_sync)
        return strategy
    tf_config = read_tf_config()
    if cpu_devices is not None:
        split_cpu(cpu_devices)
    if tf_config is not None and sum(len(tf_config["cluster"].get(job, [])) for job in _JOBS) > 1:
        if devices:
            raise ValueError("--devices cannot be combined with a multi-worker TF_CONFIG: each worker "
                             "uses all of its GPUs (or its --cpu-devices logical CPUs)")
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=collective_timeout_seconds or None)
        if (cpu_devices or 1) > 1 and not tf.config.list_physical_devices("GPU"):
            return LogicalCpuMultiWorkerMirroredStrategy(options)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    if devices:
        return _mirrored_over(devices)
    if cpu_devices is not None and cpu_devices > 1:
        return _mirrored_over([f"CPU:{i}" for i in range(cpu_devices)])
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tf.distribute.MirroredStrategy([gpu.name for gpu in gpus])
    return tf.distribute.get_strategy()


def is_multi_worker(strategy: tf.distribute.Strategy) -> bool:
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and strategy.extended._in_multi_worker_mode())


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This worker's place among the workers (the chief is 0); 0 outside a multi-worker cluster."""
    if not is_multi_worker(strategy):
        return 0
    resolver = strategy.cluster_resolver
    return _worker_position(resolver.cluster_spec().as_dict(), resolver.task_type, resolver.task_id)


def _worker_position(cluster: dict, task_type: str, task_id: int) -> int:
    return (1 if "chief" in cluster and task_type == "worker" else 0) + task_id


def num_workers(strategy: tf.distribute.Strategy) -> int:
    return strategy.extended._num_workers if is_multi_worker(strategy) else 1


# The names users know for TensorFlow's strategy classes (tf.distribute.MultiWorkerMirroredStrategy
# makes a CollectiveAllReduceStrategy, tf.distribute.TPUStrategy a TPUStrategyV2).
_PUBLIC_NAMES = {"CollectiveAllReduceStrategy": "MultiWorkerMirroredStrategy", "TPUStrategyV2": "TPUStrategy"}


def describe_strategy(strategy: tf.distribute.Strategy) -> str:
    """What a run trains on, for its log: "MultiWorkerMirroredStrategy: 2 workers, 4 replicas"."""
    name = type(strategy).__name__
    if name == "_DefaultDistributionStrategy":
        return "one device, no distribution strategy"
    replicas, workers = strategy.num_replicas_in_sync, num_workers(strategy)
    where = f"{workers} workers, " if workers > 1 else ""
    return f"{_PUBLIC_NAMES.get(name, name)}: {where}{replicas} replica{'s' if replicas > 1 else ''}"


def any_worker(strategy: tf.distribute.Strategy, flags: Sequence[bool]) -> list[bool]:
    """For each flag, whether it is true on any worker: a collective, which every worker must call at
    the same point (e.g. to agree on saving when one worker's clock says a checkpoint is due)."""
    if not is_multi_worker(strategy):
        return [bool(flag) for flag in flags]
    if not hasattr(strategy, "_keras_transformer_any"):  # traced once: eager collectives are slow
        strategy._keras_transformer_any = tf.function(lambda values: strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(values)), axis=None))
    totals = strategy._keras_transformer_any(tf.constant([1.0 if flag else 0.0 for flag in flags]))
    return [bool(total > 0) for total in totals.numpy()]


def mean_over_workers(strategy: tf.distribute.Strategy, values: Sequence[float]) -> list[float]:
    """Each value's mean over the replicas of every worker (each worker weighted by its replicas):
    the same numbers on every worker. A collective, like any_worker."""
    if not is_multi_worker(strategy):
        return [float(value) for value in values]
    if not hasattr(strategy, "_keras_transformer_mean"):
        strategy._keras_transformer_mean = tf.function(lambda values: strategy.reduce(
            tf.distribute.ReduceOp.MEAN, strategy.run(lambda: tf.identity(values)), axis=None))
    return [float(mean) for mean in strategy._keras_transformer_mean(tf.constant(values, tf.float32)).numpy()]


def wait_for_all_workers(strategy: tf.distribute.Strategy, name: str, timeout_seconds: float):
    """Blocks until every worker reached the barrier `name` (the cluster's coordination service);
    fails after timeout_seconds, or as soon as a worker is lost. No-op on one worker."""
    if is_multi_worker(strategy):
        context.context().wait_at_barrier(f"keras_transformer/{name}", int(timeout_seconds * 1000))


def check_workers_agree(strategy: tf.distribute.Strategy, name: str, description: dict, timeout_seconds: float):
    """Raises ClusterConfigError, on every worker, naming each field of `description` (a flat dict of
    JSON values: this worker's configs, vocabulary, replicas, restored step) on which the workers
    differ. Exchanged through the coordination service's key-value store, not collectives, so that
    workers with different replica counts get this error rather than a collective that never matches.
    """
    if not is_multi_worker(strategy):
        return
    descriptions = [values[0] for values in gather_from_workers(strategy, name, [description], timeout_seconds)]
    differences = []
    for field in sorted(set().union(*descriptions)):
        values = [worker.get(field) for worker in descriptions]
        if any(value != values[0] for value in values[1:]):
            differences.append(f"{field} (" + ", ".join(
                f"{value!r} on worker {index}{' (chief)' if index == 0 else ''}"
                for index, value in enumerate(values)) + ")")
    if differences:
        raise ClusterConfigError(
            f"the workers of TF_CONFIG disagree on the run's configuration: {'; '.join(differences)}. "
            f"Start every worker with the same flags (all but --export-dir and --verbose), the same "
            f"--cpu-devices or number of GPUs, and one shared --workdir")


def gather_from_workers(strategy: tf.distribute.Strategy, name: str, values: list, timeout_seconds: float
                        ) -> list[list]:
    """Every worker's `values` (a JSON list), in worker order, on every worker; [values] on one worker.

    Through the coordination service's key-value store (no collectives: the workers may reach this
    after different amounts of work of their own). Each worker writes its values, then waits at a
    barrier until all have (at most timeout_seconds; a barrier fails at once if a worker is lost),
    reads them, and deletes its own once every worker has read them, so that a long run's store does
    not grow. `name` must be new for each call.
    """
    if not is_multi_worker(strategy):
        return [list(values)]
    service, index = context.context(), worker_index(strategy)
    service.set_config_key_value(f"keras_transformer/{name}/{index}", json.dumps(list(values)))
    wait_for_all_workers(strategy, f"{name}/written", timeout_seconds)
    gathered = [json.loads(service.get_config_key_value(f"keras_transformer/{name}/{other}",
                                                        int(timeout_seconds * 1000)))
                for other in range(num_workers(strategy))]
    wait_for_all_workers(strategy, f"{name}/read", timeout_seconds)
    service.delete_config_key_value(f"keras_transformer/{name}/{index}")
    return gathered


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
    prove the GPU path here) but says once that it is slow there, and avoids the fusion that makes it
    very slow there (`avoid_slow_float16_fusions`).
    """
    global _warned_float16_without_gpu
    policy = mixed_precision_policy(mode)
    if policy == "mixed_float16" and not tf.config.list_logical_devices("GPU") and not _warned_float16_without_gpu:
        logger.warning("mixed_float16 without a GPU: TensorFlow's CPU kernels compute most float16 ops by "
                       "converting to float32 and back, so this is slower than float32 here; use it to test "
                       "what runs on GPUs (on CPUs with AVX512_BF16 or AMX, mixed_bfloat16 is the fast choice)")
        _warned_float16_without_gpu = True
    set_dtype_policy(policy)
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
    return bool(strategy.extended.should_checkpoint)
