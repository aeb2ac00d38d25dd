"""The precision a trained model is exported (and benchmarked) in: float32, bfloat16 or float16.

    model = model_in_precision(model, "bfloat16")   # a copy whose weights are bfloat16

In a reduced precision the weights are stored, and the matrix products and attention computed, in
that dtype (Keras's "bfloat16" / "float16" dtype policy, not a mixed one: the point is an export
half the size). What needs float32 stays float32 whatever the precision: the attention softmax, the
layer normalization, the logits (TokenEmbedding.logits returns float32), hence the decoders'
log-softmax and beam scores and the `score` signature.

- bfloat16 keeps float32's range with 8 bits of mantissa; on a CPU with bfloat16 arithmetic
  (avx512_bf16 or amx_bf16 on x86, bf16 on Arm) oneDNN runs its matrix products natively. Without
  it bfloat16 arithmetic is emulated, which is slower than float32: `warn_if_slow_here` says so,
  once per process.
- float16 (for GPUs) has 11 bits of mantissa but a largest value of 65,504: a model with a weight
  beyond it is refused (`check_float16_range`), naming the weight.
"""
import logging

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.cpu import cpu_flags

PRECISIONS = ("float32", "bfloat16", "float16")
DEFAULT_PRECISION = "float32"
FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504
# /proc/cpuinfo flags of CPUs that compute in bfloat16: AVX512_BF16 (Intel Cooper Lake and Sapphire
# Rapids on, AMD Zen 4 on), AMX-BF16 (Intel Sapphire Rapids on), and Arm's BF16 extension.
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")

logger = logging.getLogger(__name__)
_warned_slow = False


def check_precision(precision):
    """precision if it is one of PRECISIONS; else ValueError listing them."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: expected one of {', '.join(PRECISIONS)}")
    return precision


def cpu_has_bfloat16(cpuinfo_text=None):
    """True if the CPU computes in bfloat16, False if not, None if its flags cannot be read."""
    flags = cpu_flags(cpuinfo_text)
    return None if flags is None else bool(flags & set(BFLOAT16_CPU_FLAGS))


def warn_if_slow_here(precision, cpuinfo_text=None):
    """Logs a warning, once per process, when precision is bfloat16 and this CPU has no bfloat16
    arithmetic (no avx512_bf16 / amx_bf16 / bf16 flag): it then runs slower than float32 here.
    Returns whether it warned now."""
    global _warned_slow
    if precision != "bfloat16" or _warned_slow or cpu_has_bfloat16(cpuinfo_text) is not False:
        return False
    _warned_slow = True
    logger.warning("this CPU has no bfloat16 arithmetic (none of the flags %s in /proc/cpuinfo): a bfloat16 "
                   "model works here but runs slower than float32; it pays off on CPUs with AVX512_BF16 or "
                   "AMX (Intel Xeon since Cooper Lake / Sapphire Rapids, AMD Zen 4 and later)",
                   "/".join(BFLOAT16_CPU_FLAGS))
    return True


def check_float16_range(model):
    """ValueError naming every weight of model with a value beyond float16's largest (65,504)."""
    too_large = []
    for weight in model.weights:
        values = weight.numpy()
        largest = float(np.max(np.abs(values))) if values.size else 0.0
        if not largest <= FLOAT16_MAX:
            too_large.append(f"{weight.path} (largest magnitude {largest:g})")
    if too_large:
        raise ValueError(f"cannot export in float16: {len(too_large)} weight(s) outside float16's range "
                         f"(+-{FLOAT16_MAX:g}): {', '.join(too_large)}; export in bfloat16 or float32")


def _relative_path(weight):
    return weight.path.split("/", 1)[-1]  # without the model's own name, which differs between copies


_remapping_disabled = False


def avoid_slow_float16_fusions(policy: str):
    """Turns Grappler's remapper off while float16 (policy mixed_float16 or float16) runs without a
    GPU, and back on for any other policy.

    On CPUs, TensorFlow 2.21's remapper fuses a float16 MatMul and its BiasAdd into one oneDNN op
    that is about 400 times slower than the two ops apart (0.42 s against 1 ms for 1024 x 64 x 256,
    measured on an Intel Xeon with AVX512_FP16): a tiny model's float16 training step took 4 s
    instead of 0.07 s. bfloat16 and float32 are not affected, and on GPUs the fusion is fast, so
    only this case changes. It holds for the functions traced after the call.
    """
    global _remapping_disabled
    disable = policy in ("mixed_float16", "float16") and not tf.config.list_logical_devices("GPU")
    if disable != _remapping_disabled:
        tf.config.optimizer.set_experimental_options({"remapping": not disable})
        _remapping_disabled = disable


def set_dtype_policy(policy: str):
    """keras.config.set_dtype_policy(policy), with the remapper set for it (avoid_slow_float16_fusions)."""
    avoid_slow_float16_fusions(policy)
    keras.config.set_dtype_policy(policy)


def model_in_precision(model, precision):
    """model with its weights stored and its products computed in `precision` (see the module
    docstring): model itself if it is in that precision already, else a new model of its class
    and config (a Transformer or a span parser's model) built under that dtype policy, with model's
    weights cast into it; an ensemble (keras_transformer.ensemble), an ensemble of its members in it."""
    check_precision(precision)
    members = getattr(model, "members", None)
    if members is not None and any(member.dtype_policy.name != precision for member in members):
        return type(model)([model_in_precision(member, precision) for member in members])
    if model.dtype_policy.name == precision:
        return model
    if precision == "float16":
        check_float16_range(model)
        avoid_slow_float16_fusions(precision)  # for the rest of the process: its functions trace later
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        copy = type(model).from_config(model.get_config())
        copy.build()
    finally:
        keras.config.set_dtype_policy(previous)
    if [_relative_path(w) for w in copy.weights] != [_relative_path(w) for w in model.weights]:
        raise ValueError("the model's weights do not match those of a model built from its config")
    for target, source in zip(copy.weights, model.weights):
        target.assign(tf.cast(source.value, target.dtype))
    return copy
