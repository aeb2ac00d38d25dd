"""Adam (Kingma & Ba) as keras.optimizers.Adam computes it, applied by TensorFlow's fused kernel."""
import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="keras_transformer")
class Adam(keras.optimizers.Adam):
    """keras.optimizers.Adam whose dense updates run as one `ResourceApplyAdam` kernel per variable.

    The arithmetic is Keras' own: m += (g - m)(1 - beta_1), v += (g^2 - v)(1 - beta_2),
    w -= lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon). Keras spells it as about
    a dozen element-wise ops, each a pass over every weight; the fused kernel makes one pass (on a CPU,
    about a third of the time for the 60 M weights of the base model). Sparse gradients and amsgrad
    keep Keras' path. Checkpoints are the same as keras.optimizers.Adam's.

    The step's scalars (beta_1, beta_2, their powers at this step, epsilon, the learning rate) are
    made once per device and dtype for all of a step's updates, not once per variable: the tiny
    model's traced training step had 925 of its 4,101 nodes in Adam, 14 a variable (and as many
    again for each further replica), which every trace and graph optimization pays for; 285 of
    3,461 now (benchmarks/trace_step.py).
    """

    def _distributed_tf_update_step(self, distribution, grads_and_vars, learning_rate):
        # (dtype, device) -> the scalars of this step's updates there. In a holder: TensorFlow's
        # object tracking would wrap a dict attribute for checkpoints, and refuse its tuple keys.
        self._step_scalars = _StepScalars()
        try:
            return super()._distributed_tf_update_step(distribution, grads_and_vars, learning_rate)
        finally:
            self._step_scalars = None

    def _scalars(self, dtype, device, learning_rate):
        """(beta_1, beta_2, beta_1^t, beta_2^t, epsilon, learning rate) in dtype for step t."""
        holder = getattr(self, "_step_scalars", None)
        cache, key = (holder.by_place if holder is not None else None), (dtype, device)
        if cache is not None and key in cache:
            return cache[key]
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        scalars = (beta_1, beta_2, tf.pow(beta_1, step), tf.pow(beta_2, step), tf.cast(self.epsilon, dtype),
                   tf.cast(learning_rate, dtype))
        if cache is not None:
            cache[key] = scalars
        return scalars

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        beta_1, beta_2, beta1_power, beta2_power, epsilon, lr = self._scalars(dtype, variable.device, learning_rate)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(self._momentums[index]), v=_handle(self._velocities[index]),
            beta1_power=beta1_power, beta2_power=beta2_power, lr=lr, beta1=beta_1, beta2=beta_2,
            epsilon=epsilon, grad=tf.cast(gradient, dtype))


class _StepScalars:
    def __init__(self):
        self.by_place = {}


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable (in a distribution strategy's update,
    a mirrored variable's handle is this device's copy)."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle
