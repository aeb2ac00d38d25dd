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

    With a `Cooldown` (not in the paper; TrainConfig.cooldown_fraction), the rate is also
    multiplied by the cooldown's factor: 1 before its start, falling linearly to 0 at its end.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0, cooldown=None):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        if isinstance(cooldown, (list, tuple)):  # from get_config
            cooldown = Cooldown(*cooldown)
        self.cooldown = cooldown

    def __call__(self, step):
        iteration = tf.cast(step, tf.float32)
        step = iteration + 1.0
        warmup = tf.cast(self.warmup_steps, tf.float32)
        rate = (self.scale * self.d_model ** -0.5) * tf.minimum(tf.math.rsqrt(step), step * warmup ** -1.5)
        return rate if self.cooldown is None else rate * self.cooldown.factor(iteration)

    def get_config(self):
        cooldown = (None if self.cooldown is None
                    else [float(self.cooldown.start.numpy()), float(self.cooldown.end.numpy())])
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale,
                "cooldown": cooldown}


class Cooldown(tf.Module):
    """A linear decay of the learning rate to 0 (the last phase of a warm-up, stable, decay
    schedule), over optimizer iterations [start, end): the update of iteration i is scaled by
    (end - i) / (end - start), and none is left at `end`. Variables, so that a checkpoint restores
    them and a time budget can move them while training runs (training.run.TrainingTimeLimit)."""

    def __init__(self, start, end):
        super().__init__(name="cooldown")
        self.start = tf.Variable(float(start), trainable=False, dtype=tf.float32, name="start")
        self.end = tf.Variable(float(end), trainable=False, dtype=tf.float32, name="end")

    def factor(self, iteration):
        length = tf.maximum(self.end - self.start, 1.0)
        return tf.where(iteration < self.start, 1.0, tf.clip_by_value((self.end - iteration) / length, 0.0, 1.0))

    def set(self, start, end):
        self.start.assign(float(start))
        self.end.assign(float(end))


def schedule_cooldown(optimizer):
    """The Cooldown of an optimizer on a TransformerSchedule (or of the one a LossScaleOptimizer
    wraps, whose own rate is 0), or None."""
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)
    return getattr(getattr(optimizer, "_learning_rate", None), "cooldown", None)


def cooldown_plan(train_config):
    """(start, end) of the cooldown over the last cooldown_fraction of train_config.train_steps, or
    None without one (a time budget may move it: training.run.TrainingTimeLimit)."""
    if train_config.cooldown_fraction <= 0:
        return None
    steps = train_config.train_steps
    return round(steps * (1.0 - train_config.cooldown_fraction)), steps


def paper_optimizer(d_model, train_config=None, **kwargs):
    """Adam(beta_1=0.9, beta_2=0.98, epsilon=1e-9) on the warm-up schedule (section 5.3), scaled to
    train_config.peak_learning_rate when it is set, and cooled down to 0 over the last
    train_config.cooldown_fraction of train_steps when that is set (a time budget may start the
    cooldown sooner: training.run.TrainingTimeLimit)."""
    train_config = train_config or TrainConfig()
    scale = 1.0
    if train_config.peak_learning_rate is not None:
        scale = train_config.peak_learning_rate / (d_model ** -0.5 * train_config.warmup_steps ** -0.5)
    plan = cooldown_plan(train_config)
    cooldown = None if plan is None else Cooldown(*plan)
    return Adam(
        learning_rate=TransformerSchedule(d_model, train_config.warmup_steps, scale=scale, cooldown=cooldown),
        beta_1=train_config.adam_beta_1, beta_2=train_config.adam_beta_2, epsilon=train_config.adam_epsilon,
        **kwargs)
