"""The paper's learning rate (section 5.3) and optimizer."""
import keras
import tensorflow as tf

from keras_transformer.config import TrainConfig
from keras_transformer.optimizers import Adam


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step counted from 1.

    Linear warm-up for `warmup_steps` steps, then decay with the inverse square root of the step;
    the peak, d_model^-0.5 * warmup_steps^-0.5, is at step = warmup_steps. `scale` (1 in the paper)
    multiplies the whole curve. The optimizer passes its iteration count, which starts at 0, so
    the schedule adds 1.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        warmup = tf.cast(self.warmup_steps, tf.float32)
        return (self.scale * self.d_model ** -0.5) * tf.minimum(tf.math.rsqrt(step), step * warmup ** -1.5)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def paper_optimizer(d_model, train_config=None, **kwargs):
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) on the warm-up schedule (section 5.3), scaled to
    train_config.peak_learning_rate when it is set."""
    train_config = train_config or TrainConfig()
    scale = 1.0
    if train_config.peak_learning_rate is not None:
        scale = train_config.peak_learning_rate / (d_model ** -0.5 * train_config.warmup_steps ** -0.5)
    return Adam(
        learning_rate=TransformerSchedule(d_model, train_config.warmup_steps, scale=scale),
        beta_1=train_config.adam_beta_1, beta_2=train_config.adam_beta_2, epsilon=train_config.adam_epsilon,
        **kwargs)
