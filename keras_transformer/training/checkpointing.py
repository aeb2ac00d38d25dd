"""Checkpoints that lose nothing: written every N steps and every M minutes, kept K at a time, on SIGTERM
before exiting, never after the loss or the weights turned NaN.

    workdir/checkpoints/ckpt-<step>.{index,data-*}   tf.train.Checkpoint(model, optimizer,
                                                      data_position, dropout_rng[, cooldown])
    workdir/checkpoints/checkpoint                    the CheckpointManager's list, latest last
    workdir/checkpoints/train_seconds.json            the run's training seconds when each kept
                                                      checkpoint was saved (the chief's)

tf.train.CheckpointManager writes a checkpoint's files before it lists it, so a run killed at any
moment (SIGKILL included) leaves its latest listed checkpoint whole. The optimizer's iteration
count is the step: restoring it (and the schedule's cooldown, when it has one) restores the
learning rate (a function of the step); the DataPosition restores the data, and the dropout
layers' seed states the dropout masks. The training seconds are kept beside the checkpoints, not in
them, so that runs that train the same write the same checkpoint files; a resumed run's minutes go on
from its checkpoint's (ValidationSelection's clock records them).
"""
import contextlib
import json
import logging
import math
import pathlib
import shutil
import signal
import time
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.files import write_text_atomically
from keras_transformer.schedule import schedule_cooldown
from keras_transformer.training.distribution import any_worker, loss_scale
from keras_transformer.training.training_model import rng_state_variables

logger = logging.getLogger(__name__)

CHECKPOINT_DIRECTORY = "checkpoints"
CHECKPOINT_PREFIX = "ckpt"
# Below this, a mixed_float16 run's gradients overflow float16 even unscaled (every step since the
# scale was 2**15 had inf or NaN gradients and was skipped): the run has stopped learning.
MIN_LOSS_SCALE = 1.0
TRAIN_SECONDS_FILE = "train_seconds.json"


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the run stopped without saving after the last good checkpoint."""


class TrainingInterrupted(RuntimeError):
    """SIGTERM stopped the run after saving a checkpoint; the same command resumes it."""


@contextlib.contextmanager
def _model_optimizer(model, optimizer):
    """model.optimizer is `optimizer` inside (a checkpoint holds the model's reference to its
    optimizer as well as its own), then the model's own again."""
    own = model.optimizer
    model.optimizer = optimizer
    try:
        yield
    finally:
        model.optimizer = own


class RunCheckpoint:
    """The run's tf.train.Checkpoint and its CheckpointManager in workdir/checkpoints.

    Args:
      directory: the checkpoints folder, workdir/checkpoints.
      model: the (Training)Transformer; model.optimizer must exist (compile first).
      data_position: the stream's DataPosition, or None.
      max_to_keep: how many checkpoints to keep.
      scratch_directory: on the workers other than the chief under MultiWorkerMirroredStrategy, which
        must save too (saving may run collectives) but whose files nobody reads: TensorFlow's
        multi-worker rule is to write them to a temporary folder and delete it after each save. They
        restore from `directory`, the chief's (so the workdir must be shared by the workers).
    """

    def __init__(self, directory, model, data_position=None, max_to_keep=5, scratch_directory=None):
        self.model = model
        objects = dict(model=model, optimizer=model.optimizer, dropout_rng=rng_state_variables(model))
        if data_position is not None:
            objects["data_position"] = data_position
        if schedule_cooldown(model.optimizer) is not None:
            objects["cooldown"] = schedule_cooldown(model.optimizer)
        self._objects = objects
        self.checkpoint = tf.train.Checkpoint(**objects)
        self.directory = pathlib.Path(directory)
        self.scratch_directory = None if scratch_directory is None else pathlib.Path(scratch_directory)
        self.manager = tf.train.CheckpointManager(self.checkpoint, str(self.scratch_directory or directory),
                                                  max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_PREFIX)
        self._saved_step = None  # restored or saved: the same on every worker, unlike their folders
        # A function giving the run's training seconds, which save() records for the step
        # (ValidationSelection sets it); None records nothing.
        self.clock = None

    @property
    def step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def restore_latest(self):
        """Restores the latest checkpoint, if any; returns its path or None."""
        path = tf.train.latest_checkpoint(str(self.directory))
        if path is not None:
            restorer, optimizer = self._restorer(path)
            with _model_optimizer(self.model, optimizer):
                status = restorer.restore(path).assert_existing_objects_matched()
            if optimizer is not self.model.optimizer:  # a stand-in: the loss scale changed
                status.expect_partial()  # a mixed_float16 run's loss scale, not restored into a run without
            self._saved_step = self.step
            logger.info("restored %s (step %d)", path, self.step)
        return path

    def _restorer(self, path):
        """(the checkpoint to restore `path` with, the optimizer the model refers to meanwhile): ours
        and the model's, or objects adapted to what `path` holds:
          - written without a cooldown (its run had none until now): without the cooldown, which
            then keeps its config's plan;
          - written by a run with a loss scale (mixed_float16) and restored into one without (float32
            or mixed_bfloat16, e.g. a run moved from GPUs to a CPU or a TPU, or taken out of
            float16), or the other way: Adam's state is restored into this run's Adam, and the loss
            scale is left behind, or starts as a new mixed_float16 run's does (2**15). The model
            refers to its optimizer too, and that reference is in the checkpoint as well: it is
            pointed at the same stand-in while restoring, so that each saved object has one match.
        """
        names = [name for name, _ in tf.train.list_variables(path)]
        objects = dict(self._objects)
        if "cooldown" in objects and not any(name.startswith("cooldown/") for name in names):
            del objects["cooldown"]
        if self._loss_scale_changed(names):
            optimizer = self.model.optimizer
            if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
                objects["optimizer"] = optimizer.inner_optimizer
                logger.info("%s was saved without a loss scale: its optimizer state goes to this mixed_float16 "
                            "run's, whose loss scale starts at %g", path, loss_scale(optimizer))
            else:
                objects["optimizer"] = tf.train.Checkpoint(inner_optimizer=optimizer)
                logger.info("%s was saved by a mixed_float16 run: its optimizer state goes to this run's, without "
                            "its loss scale", path)
        restorer = self.checkpoint if objects == self._objects else tf.train.Checkpoint(**objects)
        return restorer, objects["optimizer"]

    def _loss_scale_changed(self, names) -> bool:
        """Whether a checkpoint of these variable names was saved with a loss-scaled optimizer and this
        run has none, or the other way."""
        saved = any(name.startswith("optimizer/inner_optimizer/") for name in names)
        return saved != isinstance(self.model.optimizer, keras.optimizers.LossScaleOptimizer)

    def weights_are_finite(self) -> bool:
        return all(bool(tf.reduce_all(tf.math.is_finite(weight))) for weight in self.model.trainable_weights)

    def save(self):
        """Saves a checkpoint numbered by the step (no-op if that step is saved); returns its path
        (for a step saved already, its path in `directory`: the newest one listed there may still be
        an older step while the chief of a cluster writes this one).

        Raises TrainingDiverged rather than save weights that are not finite.
        """
        step = self.step
        if self._saved_step == step:
            return str(self.directory / f"{CHECKPOINT_PREFIX}-{step}")
        if not self.weights_are_finite():
            raise TrainingDiverged(f"weights are not finite at step {step}; not saved")
        path = self.manager.save(checkpoint_number=step)
        self._saved_step = step
        if self.scratch_directory is not None:
            shutil.rmtree(self.scratch_directory, ignore_errors=True)
        self._record_seconds(step)
        return path

    def saved_seconds(self, step: int) -> Optional[float]:
        """The training seconds recorded when `step` was saved, or None (saved by a version that did not
        record them, or killed between saving and recording)."""
        return self._read_seconds().get(step)

    def _record_seconds(self, step: int):
        """Adds `step`'s training seconds (self.clock's) to train_seconds.json, which keeps those of the
        checkpoints the manager keeps; the chief only (the workers restore from its folder)."""
        if self.clock is None or self.scratch_directory is not None:
            return
        kept = {checkpoint_step(path) for path in self.manager.checkpoints}
        seconds = {saved: value for saved, value in self._read_seconds().items() if saved in kept}
        seconds[step] = round(float(self.clock()), 3)
        write_text_atomically(self.directory / TRAIN_SECONDS_FILE,
                              json.dumps({str(saved): seconds[saved] for saved in sorted(seconds)}, indent=1) + "\n")

    def _read_seconds(self) -> dict:
        path = self.directory / TRAIN_SECONDS_FILE
        if not path.is_file():
            return {}
        try:
            return {int(step): float(value) for step, value in json.loads(path.read_text()).items()}
        except (ValueError, TypeError, AttributeError) as error:
            logger.warning("%s cannot be read (%s): the training minutes go on from the last evaluation's", path,
                           error)
            return {}


class CheckpointCallback(keras.callbacks.Callback):
    """Saves every `every_steps` steps, every `every_minutes` minutes and at `train_steps`; stops the
    run (without saving) on a NaN loss or when a mixed_float16 run's loss scale collapses (below
    MIN_LOSS_SCALE: its steps are all skipped for overflowing gradients), and (after saving) when
    SIGTERM was received.

    After `fit` returns, `diverged` (a message) or `interrupted` tell why it stopped early.
    """

    def __init__(self, run_checkpoint, every_steps, every_minutes, train_steps):
        super().__init__()
        self.run_checkpoint = run_checkpoint
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60.0
        self.train_steps = train_steps
        self.terminate_requested = False
        self.interrupted = False
        self.diverged = None
        self._last_save = time.monotonic()

    def request_termination(self, *_):
        """A signal handler: save at the end of the current step, then stop."""
        self.terminate_requested = True

    def on_train_batch_end(self, batch, logs=None):
        step = self.run_checkpoint.step
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(np.asarray(loss))):
            self._stop_diverged(f"the training loss is {float(np.asarray(loss))} at step {step}")
            return
        scale = loss_scale(self.model.optimizer)
        if scale is not None and scale < MIN_LOSS_SCALE:  # the same on every worker: the gradients are reduced
            self._stop_diverged(
                f"the float16 loss scale collapsed to {scale:g} at step {step}: the gradients overflowed "
                f"float16 at every scale down from 2**15, and a step with overflowing gradients is skipped, "
                f"so the run had stopped learning (train with --mixed-precision mixed_bfloat16 or off)")
            return
        # Every worker must save at the same steps: one worker's SIGTERM or clock counts for all.
        self.terminate_requested, clock_due = any_worker(
            self.model.distribute_strategy,
            [self.terminate_requested, time.monotonic() - self._last_save >= self.every_seconds])
        due = ((step > 0 and step % self.every_steps == 0) or step >= self.train_steps or self.terminate_requested
               or clock_due)
        if due:
            try:
                path = self.run_checkpoint.save()
            except TrainingDiverged as error:
                self._stop_diverged(str(error))
                return
            self._last_save = time.monotonic()
            logger.info("saved %s", path)
        if self.terminate_requested:
            self.interrupted = True
            self.model.stop_training = True

    def _stop_diverged(self, reason):
        last = tf.train.latest_checkpoint(str(self.run_checkpoint.directory))
        self.diverged = (f"{reason}: training stopped. The last good checkpoint is "
                         f"{last or 'none (nothing was saved yet)'}; nothing was saved after it. "
                         f"Lower the learning rate (longer warm-up) or check the data, then run again.")
        self.model.stop_training = True


class sigterm_handler:
    """Context manager: SIGTERM calls `handler` instead of killing the process (main thread only)."""

    def __init__(self, handler):
        self.handler = handler
        self.previous = None

    def __enter__(self):
        try:
            self.previous = signal.signal(signal.SIGTERM, self.handler)
        except ValueError:  # not the main thread: leave signals alone
            self.previous = None
        return self

    def __exit__(self, *exc_info):
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
        return False


def checkpoint_directory(workdir) -> pathlib.Path:
    return pathlib.Path(workdir) / CHECKPOINT_DIRECTORY


def checkpoint_step(path) -> int:
    """The step a checkpoint path ends with (ckpt-1200 -> 1200)."""
    return int(str(path).rsplit("-", 1)[-1])
