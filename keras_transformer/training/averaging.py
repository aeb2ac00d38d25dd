"""Checkpoint averaging (section 6.1): the base model is the average of the last 5 checkpoints, the big
one of the last 20, written every 10 minutes. Not in the paper: the average of the best checkpoints
by validation loss instead (select="best", see best_checkpoints.py).

The average is written as a Keras weights file, workdir/averaged.weights.h5, that loads into a
Transformer built from workdir/model_config.json (`model.load_weights(path)`).
"""
import logging
import pathlib
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.export import restore_checkpoint
from keras_transformer.model import Transformer
from keras_transformer.training.best_checkpoints import best_checkpoints
from keras_transformer.training.checkpointing import checkpoint_directory

AVERAGED_WEIGHTS = "averaged.weights.h5"

logger = logging.getLogger(__name__)


def last_checkpoints(workdir, count: int) -> list[str]:
    """Paths of the last `count` checkpoints of a run (oldest first), as its CheckpointManager lists
    them; none for a count of 0."""
    state = tf.train.get_checkpoint_state(str(checkpoint_directory(workdir)))
    if state is None or not state.all_model_checkpoint_paths:
        raise FileNotFoundError(f"no checkpoints in {checkpoint_directory(workdir)}")
    return list(state.all_model_checkpoint_paths)[-count:] if count > 0 else []


def average_checkpoints(model, checkpoint_paths: Sequence[str]):
    """Sets the model's weights to the element-wise mean of theirs in `checkpoint_paths`; returns it.

    Each checkpoint is one written by the run (`tf.train.Checkpoint(model=..., ...)`); only the
    model's weights are read. Sums are kept in float64.
    """
    if not checkpoint_paths:
        raise ValueError("no checkpoints to average")
    model.build()
    sums = None
    for path in checkpoint_paths:
        restore_checkpoint(model, path)
        weights = [np.asarray(weight, np.float64) for weight in model.get_weights()]
        sums = weights if sums is None else [total + weight for total, weight in zip(sums, weights)]
    model.set_weights([total / len(checkpoint_paths) for total in sums])
    return model


def average_run(workdir, count: int, output: Optional[pathlib.Path] = None, select: str = "last",
                build_model=None) -> pathlib.Path:
    """Averages `count` checkpoints of the run in workdir into its averaged.weights.h5 (or `output`):
    the last ones (select="last") or the best ones by validation loss (select="best").
    build_model: TransformerConfig -> the unbuilt model of the run (default the Transformer; a
    task's Task.model)."""
    workdir = pathlib.Path(workdir)
    choosers = {"last": last_checkpoints, "best": best_checkpoints}
    if select not in choosers:
        raise ValueError(f"select must be one of {sorted(choosers)}; got {select!r}")
    config = TransformerConfig.from_json((workdir / "model_config.json").read_text())
    paths = choosers[select](workdir, count)
    if len(paths) < count:
        logger.warning("averaging %d checkpoints: the run has only %d %s ones of the %d asked for",
                       len(paths), len(paths), select, count)
    model = average_checkpoints((build_model or Transformer)(config), paths)
    output = pathlib.Path(output) if output is not None else workdir / AVERAGED_WEIGHTS
    temporary = output.with_name(output.name.replace(".weights.h5", ".tmp.weights.h5"))
    model.save_weights(str(temporary))
    temporary.replace(output)
    logger.info("averaged the %s %s into %s", select, ", ".join(pathlib.Path(p).name for p in paths), output)
    return output
