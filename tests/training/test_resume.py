"""Nothing is lost: a run killed (SIGKILL) and started again ends where an uninterrupted run ends (in
mixed_float16, whose state holds float32's and the loss scale; test_multi_worker.py kills a float32
run); SIGTERM saves and exits with 143; a NaN loss stops the run without saving over the last good checkpoint.

The subprocess tests run `python -m pipelines.train_wmt` (tiny preset, dropout on, so the saved dropout
state matters) on a small local corpus: 2,000 training pairs (about 10 batches an epoch, so a
checkpoint at step 15 is in the middle of an epoch and a restart must skip batches), 10 validation
and 10 test pairs to keep the evaluation and test translation short, and --no-export (the export is
tested by tests/training/test_pipeline.py and tests/test_export.py).
"""
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.model import Transformer
from keras_transformer.training.checkpointing import (CheckpointCallback, RunCheckpoint, checkpoint_directory,
                                                      checkpoint_step)
from keras_transformer.training.data_stream import DataPosition
from keras_transformer.training.training_model import TrainingTransformer
from tests.numbers_files import write_numbers_spec

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
TRAIN_STEPS = 30
CHECKPOINT_EVERY = 15
# A guard against a hung subprocess, not a measure of speed.
DEADLINE_SECONDS = 900


@pytest.fixture(scope="module")
def corpus_spec(tmp_path_factory):
    """A local corpus spec (English TAB German files) for --dataset: 2,000 / 10 / 10 numbers pairs."""
    return write_numbers_spec(tmp_path_factory.mktemp("corpus"))


def _command(corpus_spec, run_directory, train_steps=TRAIN_STEPS, precision="off", export=False):
    export_flags = ["--export-dir", str(run_directory / "exported")] if export else ["--no-export"]
    return [sys.executable, "-m", "pipelines.train_wmt", "--preset", "tiny", "--dataset", corpus_spec,
            "--workdir", str(run_directory / "workdir"), *export_flags, "--mixed-precision", precision,
            "--train-steps", str(train_steps), "--checkpoint-every-steps", str(CHECKPOINT_EVERY),
            "--eval-every-steps", str(train_steps), "--verbose", "2",
            "--set", "dropout_rate=0.1", "--set", "eval_sentences=5", "--set", "sample_translations=1",
            "--set", "num_layers=1"]


def _start(command, log_path):
    """The pipeline in a subprocess, its stdout and stderr written to log_path."""
    with open(log_path, "w") as log:
        return subprocess.Popen(command, cwd=REPOSITORY, stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))


def _run_to_the_end(command, log_path):
    """Runs the pipeline to its end; returns its output."""
    process = _start(command, log_path)
    process.wait(timeout=DEADLINE_SECONDS)
    output = log_path.read_text()
    assert process.returncode == 0, output[-4000:]
    return output


def _listed_steps(workdir):
    """The steps of the checkpoints listed in workdir/checkpoints/checkpoint (written atomically)."""
    state = tf.train.get_checkpoint_state(str(checkpoint_directory(workdir)))
    return [] if state is None else [checkpoint_step(path) for path in state.all_model_checkpoint_paths]


def _wait_for_first_checkpoint(process, workdir, log_path):
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not _listed_steps(workdir):
        if process.poll() is not None:
            pytest.fail(f"the run exited ({process.returncode}) before its first checkpoint:\n"
                        f"{log_path.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("no checkpoint was listed before the deadline")
        time.sleep(0.02)
    return _listed_steps(workdir)[0]


def _checkpoint(workdir, step):
    return tf.train.load_checkpoint(str(checkpoint_directory(workdir) / f"ckpt-{step}"))


@pytest.mark.slow
# mixed_float16's state is float32's (the float32 weights, Adam's moments, the step, the data position,
# the dropout seeds) plus its loss scale, so it covers float32 and mixed_bfloat16 (which adds nothing).
# A float32 run killed and resumed is also checked bit for bit in test_multi_worker.py.
def test_killed_run_resumes_and_ends_with_the_uninterrupted_weights(corpus_spec, tmp_path):
    """SIGKILL once the first checkpoint is listed, then the same command: it goes on from that
    checkpoint's step and ends with the weights of an uninterrupted run with the same seed, bit for bit.
    mixed_float16's loss scale and its growth counter are part of the state.

    Tolerance 0: the data order is a pure function of (seed, epoch), the restarted stream skips the
    consumed batches, the dropout seed states and the step (hence the learning rate) are restored, and
    both runs use the same CPU kernels with the same thread layout, so every step computes the same
    float32 numbers in the same order (no TF_DETERMINISTIC_OPS needed here). A repeated or skipped
    batch, other dropout masks or another learning rate would move the weights by about Adam's step,
    the learning rate (2e-4 to 5e-4 over steps 15 to 30), so any tolerance would only make room for
    such losses.
    """
    reference, interrupted = tmp_path / "reference", tmp_path / "interrupted"
    precision = "mixed_float16"
    # The float16 reference is the whole job: trained, averaged, scored and exported.
    reference_output = _run_to_the_end(_command(corpus_spec, reference, precision=precision, export=True),
                                       tmp_path / "reference.log")
    assert re.search(rf"^{TRAIN_STEPS}/{TRAIN_STEPS} - ", reference_output, re.MULTILINE), reference_output[-4000:]
    assert re.search(rf"^test \({TRAIN_STEPS} steps, .*sacreBLEU", reference_output,
                     re.MULTILINE), reference_output[-4000:]
    _assert_exported_in_float32(reference, reference_output)

    process = _start(_command(corpus_spec, interrupted, precision=precision), tmp_path / "killed.log")
    first = _wait_for_first_checkpoint(process, interrupted / "workdir", tmp_path / "killed.log")
    process.kill()
    process.wait(timeout=DEADLINE_SECONDS)
    assert first == CHECKPOINT_EVERY
    saved = _listed_steps(interrupted / "workdir")[-1]
    assert saved < TRAIN_STEPS, "the kill came after the run had finished training; nothing to resume"
    reader = _checkpoint(interrupted / "workdir", saved)
    epoch, batch = (int(reader.get_tensor(f"data_position/{name}/.ATTRIBUTES/VARIABLE_VALUE"))
                    for name in ("epoch", "batch"))
    assert batch > 0, f"checkpoint at a data epoch's start ({epoch}, {batch}): the test would not cover skipping"

    resumed_output = _run_to_the_end(_command(corpus_spec, interrupted, precision=precision),
                                     tmp_path / "resumed.log")
    # One Keras epoch of the remaining steps: the run went on from `saved`, not from 0.
    remaining = TRAIN_STEPS - saved
    assert re.search(rf"^{remaining}/{remaining} - ", resumed_output, re.MULTILINE), resumed_output[-4000:]
    assert _listed_steps(interrupted / "workdir")[-1] == _listed_steps(reference / "workdir")[-1] == TRAIN_STEPS
    assert "SavedModel" not in resumed_output  # --no-export
    assert sorted(path.name for path in interrupted.iterdir()) == ["workdir"]
    # The progress line's loss is the mean over the last log_every_steps steps (TrainingMonitor).
    assert _last_training_loss(resumed_output) == _last_training_loss(reference_output)

    expected_weights = _model_weights(reference, TRAIN_STEPS)
    got_weights = _model_weights(interrupted, TRAIN_STEPS)
    assert len(got_weights) == len(expected_weights) > 30
    for got, expected in zip(got_weights, expected_weights):
        np.testing.assert_array_equal(got, expected)
    # Everything else too: Adam's moments, the step, the data position and the dropout seed states.
    expected, got = _checkpoint(reference / "workdir", TRAIN_STEPS), _checkpoint(interrupted / "workdir", TRAIN_STEPS)
    names = set(expected.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert names == set(got.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert any(name.startswith("dropout_rng/") for name in names)
    assert "optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE" in names  # the loss scale
    for name in sorted(names):
        np.testing.assert_array_equal(got.get_tensor(name), expected.get_tensor(name), err_msg=name)


def _assert_exported_in_float32(run_directory, output):
    """The SavedModel of a mixed-precision run: its weights loaded into a float32 model, it translates."""
    exported = re.findall(r"^SavedModel: (\S+)$", output, re.MULTILINE)
    assert exported and pathlib.Path(exported[-1]).parent == run_directory / "exported", output[-4000:]
    loaded = tf.saved_model.load(exported[-1])
    answer = loaded.signatures["serving_default"](inputs=tf.constant(["sieben", ""]))
    assert answer["translations"].dtype == tf.string and answer["scores"].dtype == tf.float32
    assert answer["translations"].numpy()[1] == b"" and np.isfinite(answer["scores"].numpy()).all()
    stored = tf.train.load_checkpoint(str(pathlib.Path(exported[-1]) / "variables" / "variables"))
    floating = {dtype for dtype in stored.get_variable_to_dtype_map().values() if dtype.is_floating}
    assert floating == {tf.float32}, floating  # float32 weights, as in any float32 export


def _last_training_loss(output):
    return re.findall(r"^\d+/\d+ - .* - loss: (\S+)", output, re.MULTILINE)[-1]


def _model_weights(run_directory, step):
    """The model's weights in a checkpoint, restored through the object graph as averaging.py reads them
    (by name, TensorFlow files most of them under optimizer/_trainable_variables/<i>, their shortest
    path in the graph, not under model/)."""
    workdir = run_directory / "workdir"
    model = Transformer(TransformerConfig.from_json((workdir / "model_config.json").read_text()))
    model.build()
    checkpoint = tf.train.Checkpoint(model=model)
    status = checkpoint.restore(str(checkpoint_directory(workdir) / f"ckpt-{step}"))
    status.expect_partial().assert_existing_objects_matched()
    return model.get_weights()


@pytest.mark.slow
def test_sigterm_saves_and_exits_with_143(corpus_spec, tmp_path):
    """SIGTERM after the first checkpoint: a checkpoint at the step where the run stopped (at or after
    the first), exit code 143, and a message saying how to resume."""
    train_steps = 1000  # far more than the run reaches before SIGTERM stops it
    process = _start(_command(corpus_spec, tmp_path, train_steps), tmp_path / "run.log")
    first = _wait_for_first_checkpoint(process, tmp_path / "workdir", tmp_path / "run.log")
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=DEADLINE_SECONDS)
    output = (tmp_path / "run.log").read_text()
    assert process.returncode == 143, output[-4000:]

    stopped = _listed_steps(tmp_path / "workdir")[-1]
    assert first <= stopped < train_steps
    reader = _checkpoint(tmp_path / "workdir", stopped)
    assert int(reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE")) == stopped
    assert re.search(rf"SIGTERM: saved \S*ckpt-{stopped} at step {stopped}; run the same command again to resume",
                     output), output[-4000:]


def test_nan_loss_stops_without_saving_after_the_last_good_checkpoint(tmp_path):
    """A NaN loss at a step where a checkpoint is due: the run stops, nothing is saved, the last good
    checkpoint stays the latest, and the message names the step and that checkpoint."""
    model = TrainingTransformer(TransformerConfig.from_preset("tiny", vocab_size=30))
    model.compile()
    model.prepare_for_training()
    directory = tmp_path / "checkpoints"
    run_checkpoint = RunCheckpoint(directory, model, DataPosition())
    callback = CheckpointCallback(run_checkpoint, every_steps=20, every_minutes=10.0, train_steps=100)
    callback.set_model(model)

    model.optimizer.iterations.assign(20)
    callback.on_train_batch_end(19, logs={"loss": 2.5})
    good = run_checkpoint.manager.latest_checkpoint
    assert good is not None and checkpoint_step(good) == 20 and not model.stop_training

    model.optimizer.iterations.assign(40)  # a step where a checkpoint is due
    callback.on_train_batch_end(39, logs={"loss": float("nan")})
    assert model.stop_training
    assert run_checkpoint.manager.latest_checkpoint == good
    assert sorted(path.name for path in directory.glob("ckpt-*")) == ["ckpt-20.data-00000-of-00001", "ckpt-20.index"]
    assert "step 40" in callback.diverged and good in callback.diverged, callback.diverged
    assert not callback.interrupted


def test_non_finite_weights_are_never_saved(tmp_path):
    """A finite loss but a NaN weight at a due step: stopped as diverged, not saved."""
    model = TrainingTransformer(TransformerConfig.from_preset("tiny", vocab_size=30))
    model.compile()
    model.prepare_for_training()
    run_checkpoint = RunCheckpoint(tmp_path / "checkpoints", model, DataPosition())
    callback = CheckpointCallback(run_checkpoint, every_steps=20, every_minutes=10.0, train_steps=100)
    callback.set_model(model)
    model.optimizer.iterations.assign(20)
    callback.on_train_batch_end(19, logs={"loss": 2.5})
    good = run_checkpoint.manager.latest_checkpoint

    weight = model.trainable_weights[0]
    weight.assign(tf.fill(weight.shape, math.nan))
    model.optimizer.iterations.assign(40)
    callback.on_train_batch_end(39, logs={"loss": 2.4})
    assert model.stop_training and run_checkpoint.manager.latest_checkpoint == good
    assert "weights are not finite at step 40" in callback.diverged and good in callback.diverged
