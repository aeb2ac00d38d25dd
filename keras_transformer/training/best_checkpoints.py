"""Selection on validation across the whole run: the best checkpoints by validation loss, kept besides
the latest ones, and early stopping when it stops improving.

The measure is the validation loss (lower is better): the label-smoothed cross-entropy per target
token over the whole validation split, which TrainingMonitor computes at every evaluation. Not BLEU:
BLEU is computed on the first run.eval_sentences sentences only, costs a beam search, and moves by
about a point between evaluations of the same model quality; the loss is cheap, covers the whole
split and is smooth (fairseq's best_checkpoint_metric and Marian's first valid-metric default to it).

    workdir/checkpoints/selection.json       every evaluation: step, validation values, training
                                             seconds; the best steps; evaluations since the loss last
                                             improved (early stopping's counter)
    workdir/checkpoints/best/ckpt-<step>.*   the best checkpoints' files: hard links (copies where the
                                             file system has none) of the run's own, which
                                             CheckpointManager's rotation (max_to_keep) does not touch

A new best checkpoint's files are linked first, then selection.json is replaced (a temporary file,
then os.replace), then the files of the checkpoint it displaced are removed. A run killed at any
moment, SIGKILL included, thus restarts with the best set and the counter of its last recorded
evaluation; files of best/ that selection.json does not name are removed at the next update.
"""
import json
import logging
import math
import os
import pathlib
import shutil
import time
from typing import Optional

import keras

from keras_transformer.files import write_text_atomically
from keras_transformer.training.checkpointing import CHECKPOINT_PREFIX, checkpoint_directory
from keras_transformer.training.distribution import CLUSTER_WAIT_SECONDS, any_worker, wait_for_all_workers

logger = logging.getLogger(__name__)

MEASURE = "loss"  # of TrainingMonitor's validation values; lower is better
SELECTION_FILE = "selection.json"
BEST_DIRECTORY = "best"


class NoBestCheckpoints(FileNotFoundError):
    """Best checkpoints were asked for but the run has none (no evaluation yet, or it keeps none)."""


class ValidationRecord:
    """The evaluations of a run and its best checkpoints by validation loss, as in selection.json.

    Attributes:
      evaluations: [{"step", "train_seconds", "validation": {name: value}}], in step order.
      best: [{"step", "loss"}], best first (ties: the earlier step first), at most `keep` of them.
      since_improvement: evaluations since the one with the lowest loss so far.
    """

    def __init__(self, evaluations=(), best=(), since_improvement=0):
        self.evaluations = list(evaluations)
        self.best = list(best)
        self.since_improvement = since_improvement

    @classmethod
    def read(cls, workdir) -> "ValidationRecord":
        path = selection_path(workdir)
        if not path.is_file():
            return cls()
        saved = json.loads(path.read_text())
        return cls(saved["evaluations"], saved["best"], saved["since_improvement"])

    def to_json(self) -> str:
        return json.dumps({"measure": MEASURE, "best": self.best, "since_improvement": self.since_improvement,
                           "evaluations": self.evaluations}, indent=1) + "\n"

    def steps(self) -> set:
        return {evaluation["step"] for evaluation in self.evaluations}

    def add(self, step: int, values: dict, train_seconds: float, keep: int) -> tuple[bool, list[int]]:
        """Records the evaluation at `step`; returns (whether it joined the best `keep`, the steps
        that left them)."""
        loss = float(values[MEASURE])
        earlier = [evaluation["validation"][MEASURE] for evaluation in self.evaluations]
        improved = math.isfinite(loss) and all(loss < value for value in earlier if math.isfinite(value))
        self.since_improvement = 0 if improved else self.since_improvement + 1
        self.evaluations.append({"step": step, "train_seconds": round(train_seconds, 3),
                                 "validation": {name: float(value) for name, value in values.items()}})
        candidates = self.best + ([{"step": step, "loss": loss}] if math.isfinite(loss) else [])
        ranked = sorted(candidates, key=lambda entry: (entry["loss"], entry["step"]))
        kept, self.best = {entry["step"] for entry in ranked[:keep]}, ranked[:keep]
        return step in kept, [entry["step"] for entry in ranked[keep:]]

    def patience_exhausted(self, patience: int) -> bool:
        """Whether the loss has not improved for `patience` evaluations (0: never)."""
        return patience > 0 and self.since_improvement >= patience

    def evaluation_missing(self, step: int, eval_every_steps: int, train_steps: int) -> bool:
        """Whether `step` is one the run evaluates at but no evaluation of it is recorded: the run was
        stopped between saving that step and recording its evaluation."""
        return evaluation_due(step, eval_every_steps, train_steps) and step not in self.steps()

    def training_left(self, step: int, train_steps: int, eval_every_steps: int, patience: int) -> bool:
        """Whether a run restored at `step` has steps to train, or `step`'s evaluation to make up for."""
        if self.patience_exhausted(patience):
            return False
        return step < train_steps or self.evaluation_missing(step, eval_every_steps, train_steps)

    def seconds_at(self, step: int) -> float:
        """Training seconds recorded at the last evaluation at or before `step` (0 without one)."""
        return max([e["train_seconds"] for e in self.evaluations if e["step"] <= step], default=0.0)


def selection_path(workdir) -> pathlib.Path:
    return checkpoint_directory(workdir) / SELECTION_FILE


def best_directory(workdir) -> pathlib.Path:
    return checkpoint_directory(workdir) / BEST_DIRECTORY


def best_checkpoints(workdir, count: int) -> list[str]:
    """Paths of the `count` best checkpoints by validation loss (in step order), in workdir/checkpoints/best.

    Raises NoBestCheckpoints when there are none (no evaluation recorded yet, or none kept).
    """
    record = ValidationRecord.read(workdir)
    if not record.best:
        if record.evaluations:
            why = "the run keeps no best checkpoints (run.keep_best_checkpoints=0); keep some, or"
        else:
            why = (f"no validation evaluation is recorded in {selection_path(workdir)} yet, so there are no best "
                   f"checkpoints: they are chosen at each evaluation (every run.eval_every_steps steps). Train past "
                   f"the first evaluation, or")
        raise NoBestCheckpoints(f"{why} average the last checkpoints (pipelines.average_checkpoints --select last; "
                                f"train_wmt --average last)")
    steps = sorted(entry["step"] for entry in record.best[:count])
    return [str(best_directory(workdir) / f"{CHECKPOINT_PREFIX}-{step}") for step in steps]


def _link_checkpoint(source_prefix: pathlib.Path, directory: pathlib.Path):
    directory.mkdir(parents=True, exist_ok=True)
    for source in source_prefix.parent.glob(source_prefix.name + ".*"):
        target = directory / source.name
        if target.exists():
            continue
        try:
            os.link(source, target)
        except OSError:  # no hard links here (another file system): a copy, written whole then renamed
            temporary = target.with_name(target.name + ".tmp")
            shutil.copyfile(source, temporary)
            os.replace(temporary, target)


def _remove_unlisted(directory: pathlib.Path, steps: set):
    for path in directory.glob(f"{CHECKPOINT_PREFIX}-*"):
        step = path.name.split(".", 1)[0].rsplit("-", 1)[-1]
        if not step.isdigit() or int(step) not in steps:
            path.unlink(missing_ok=True)


def evaluation_due(step: int, eval_every_steps: int, train_steps: int) -> bool:
    """Whether a run evaluates at `step` (an optimizer step): every eval_every_steps, and at its end."""
    return step > 0 and (step % eval_every_steps == 0 or step == train_steps)


class ValidationSelection(keras.callbacks.Callback):
    """After each evaluation of `monitor` (after the batch or Keras epoch it ends): saves a checkpoint at
    that step if none is saved (so every evaluated step has one), records the evaluation, keeps the
    `keep` best checkpoints, and stops training once the loss has not improved for `patience`
    evaluations (0: never). Put it after `monitor` in fit's callbacks.

    Args:
      run_checkpoint: the run's RunCheckpoint.
      monitor: the TrainingMonitor whose history holds the evaluations.
      workdir: the run directory.
      keep: how many best checkpoints to keep (0: none, the evaluations are still recorded).
      patience: early stopping's patience in evaluations; 0 turns it off.
      write: False on the workers other than the chief: they save (saving may run collectives) and
        keep the same record in memory, to stop at the same step, but write nothing.

    On a cluster the workers first wait for each other at a barrier of the coordination service:
    an evaluation is work each worker does apart (its translations; the chief's TensorBoard writing),
    which may take one worker longer than the collective timeout allows the others to wait in the
    collectives that follow (saving, the early stopping's agreement); a barrier waits
    CLUSTER_WAIT_SECONDS, and fails at once if a worker is lost.

    `stopped` says whether the patience is exhausted, also when it already was in the record read.
    """

    def __init__(self, run_checkpoint, monitor, workdir, keep: int, patience: int, write: bool = True):
        super().__init__()
        self.run_checkpoint = run_checkpoint
        self.monitor = monitor
        self.workdir = pathlib.Path(workdir)
        self.keep = keep
        self.patience = patience
        self.write = write
        self.record = ValidationRecord.read(workdir)
        self.stopped = self.record.patience_exhausted(patience)
        # Training time goes on from the restored checkpoint's, or, where its time is not recorded, from
        # the last evaluation before it.
        saved = run_checkpoint.saved_seconds(run_checkpoint.step)
        self._seconds_before = self.record.seconds_at(run_checkpoint.step) if saved is None else saved
        self._started = time.monotonic()
        self._evaluations = 0
        run_checkpoint.clock = self.train_seconds

    def train_seconds(self) -> float:
        """The run's training seconds so far, those before its restarts included."""
        return self._seconds_before + time.monotonic() - self._started

    def on_train_batch_end(self, batch, logs=None):
        self._record_new_evaluation()

    def on_epoch_end(self, epoch, logs=None):
        self._record_new_evaluation()

    def _record_new_evaluation(self):
        """Records the monitor's evaluation at this step, if it made one (none after a NaN loss or
        SIGTERM) and it is not recorded yet (the monitor evaluates once per step; a float16 step
        whose gradients overflowed leaves the step where it was)."""
        step = self.run_checkpoint.step
        if self.monitor.history and self.monitor.history[-1][0] == step and step not in self.record.steps():
            self.after_evaluation(step, self.monitor.history[-1][1])

    def after_evaluation(self, step: int, values: dict):
        self._evaluations += 1  # the barrier's name: one barrier for each evaluation of this process
        wait_for_all_workers(self.model.distribute_strategy, f"evaluated/{step}/{self._evaluations}",
                             CLUSTER_WAIT_SECONDS)
        path = pathlib.Path(self.run_checkpoint.save())
        joined, left = self.record.add(step, values, self.train_seconds(), self.keep)
        if self.write:
            self._write(path if joined else None, left)
        (self.stopped,) = any_worker(self.model.distribute_strategy, [self.record.patience_exhausted(self.patience)])
        if self.stopped:
            best = self.record.best[0] if self.record.best else {}
            logger.info("early stopping at step %d: the validation loss has not improved on %.4f (step %s) for %d "
                        "evaluations", step, best.get("loss", float("nan")), best.get("step"), self.patience)
            self.model.stop_training = True

    def _write(self, new_checkpoint: Optional[pathlib.Path], left: list[int]):
        directory = best_directory(self.workdir)
        if new_checkpoint is not None:
            _link_checkpoint(new_checkpoint, directory)
        write_text_atomically(selection_path(self.workdir), self.record.to_json())
        if directory.is_dir():
            _remove_unlisted(directory, {entry["step"] for entry in self.record.best})
        if left:
            logger.info("best checkpoints by validation loss: %s (removed %s)",
                        ", ".join(str(entry["step"]) for entry in self.record.best), ", ".join(map(str, left)))
