"""Selection on validation: the best checkpoints by validation loss, kept through the CheckpointManager's
rotation and through restarts, early stopping's counter, averaging the best set, and the errors."""
import json

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.export import restore_checkpoint
from keras_transformer.model import Transformer
from keras_transformer.training.averaging import average_run, last_checkpoints
from keras_transformer.training.best_checkpoints import (ValidationRecord, ValidationSelection, best_checkpoints,
                                                         best_directory, selection_path)
from keras_transformer.training.checkpointing import RunCheckpoint, checkpoint_directory, checkpoint_step
from keras_transformer.training.data_stream import DataPosition
from keras_transformer.training.run import train_and_evaluate
from keras_transformer.training.run_config import apply_overrides, preset_configs
from keras_transformer.training.summaries import TrainingMonitor
from keras_transformer.training.training_model import TrainingTransformer
from pipelines import average_checkpoints, train_wmt
from tests.numbers_files import write_numbers_spec

CONFIG = TransformerConfig.from_preset("tiny", vocab_size=30, num_layers=1)
# (step, validation loss): the best is 40, then 50; no improvement after 40.
LOSSES = [(10, 3.0), (20, 2.0), (30, 2.5), (40, 1.5), (50, 1.8), (60, 1.9)]


def _record(losses, keep):
    record = ValidationRecord()
    for step, loss in losses:
        record.add(step, {"loss": loss, "bleu": 10.0}, train_seconds=step / 10, keep=keep)
    return record


@pytest.mark.parametrize("keep, best", [(1, [40]), (2, [40, 50]), (3, [40, 50, 60]), (10, [40, 50, 60, 20, 30, 10])])
def test_the_best_set_is_the_lowest_losses_so_far(keep, best):
    record = _record(LOSSES, keep)
    assert [entry["step"] for entry in record.best] == best
    assert [entry["loss"] for entry in record.best] == sorted(entry["loss"] for entry in record.best)
    assert [e["step"] for e in record.evaluations] == [step for step, _ in LOSSES]
    assert record.since_improvement == 2
    assert record.seconds_at(45) == 4.0 and record.seconds_at(5) == 0.0


def test_a_step_leaves_the_best_set_when_a_lower_loss_comes():
    record = _record(LOSSES[:3], keep=2)  # best 20 (2.0), 30 (2.5)
    joined, left = record.add(40, {"loss": 1.5}, 4.0, keep=2)
    assert joined and left == [30]
    joined, left = record.add(50, {"loss": 2.9}, 5.0, keep=2)
    assert not joined and left == [50]
    joined, left = record.add(60, {"loss": float("nan")}, 6.0, keep=2)  # a NaN loss never counts as best
    assert not joined and left == [] and record.since_improvement == 2


@pytest.mark.parametrize("patience, stop_at", [(0, None), (1, 30), (2, 60), (3, None)])
def test_patience_is_exhausted_at_the_right_evaluation(patience, stop_at):
    """The loss improves at 10, 20 and 40 only: patience 1 stops at 30, the first evaluation without
    an improvement; patience 2 at 60, the second in a row after 40."""
    record = ValidationRecord()
    stopped = None
    for step, loss in LOSSES:
        record.add(step, {"loss": loss}, 0.0, keep=2)
        if record.patience_exhausted(patience):
            stopped = step
            break
    assert stopped == stop_at


def _marked(run_checkpoint, step):
    """Sets the step and makes the first weight equal `step` everywhere, to recognize each checkpoint."""
    model = run_checkpoint.model
    model.optimizer.iterations.assign(step)
    weight = model.trainable_weights[0]
    weight.assign(tf.fill(weight.shape, float(step)))


class _Monitor:
    history = []


def _selection(workdir, patience=0):
    """A new model, its RunCheckpoint (2 kept), restored from workdir's latest checkpoint if there is
    one, and a ValidationSelection keeping 2 best, as a run (or a resumed run) makes them."""
    model = TrainingTransformer(CONFIG)
    model.compile()
    model.prepare_for_training()
    run_checkpoint = RunCheckpoint(checkpoint_directory(workdir), model, DataPosition(), max_to_keep=2)
    run_checkpoint.restore_latest()
    selection = ValidationSelection(run_checkpoint, _Monitor(), workdir, keep=2, patience=patience)
    selection.set_model(model)
    return run_checkpoint, selection


@pytest.fixture
def selected_run(tmp_path):
    """A run directory whose selection saw LOSSES with 2 latest and 2 best checkpoints, patience 3."""
    (tmp_path / "model_config.json").write_text(CONFIG.to_json())
    run_checkpoint, selection = _selection(tmp_path, patience=3)
    for step, loss in LOSSES:
        _marked(run_checkpoint, step)
        selection.after_evaluation(step, {"loss": loss, "bleu": 1.0})
    return tmp_path, run_checkpoint, selection


def test_best_checkpoints_survive_the_rotation_of_the_latest(selected_run):
    workdir, run_checkpoint, selection = selected_run
    state = tf.train.get_checkpoint_state(str(checkpoint_directory(workdir)))
    assert [checkpoint_step(path) for path in state.all_model_checkpoint_paths] == [50, 60]  # 40 rotated out
    assert not list(checkpoint_directory(workdir).glob("ckpt-40.*"))
    assert sorted(path.name.split(".")[0] for path in best_directory(workdir).glob("ckpt-*")) == \
        ["ckpt-40", "ckpt-40", "ckpt-50", "ckpt-50"]  # .index and .data-00000-of-00001 of each
    paths = best_checkpoints(workdir, 2)
    assert [checkpoint_step(path) for path in paths] == [40, 50]
    np.testing.assert_array_equal(_weights(paths[0])[0], 40.0)  # the weights of step 40, not another's
    assert [checkpoint_step(path) for path in last_checkpoints(workdir, 1)] == [60]
    assert last_checkpoints(workdir, 0) == []  # not all of them, as [-0:] gives
    saved = json.loads(selection_path(workdir).read_text())
    assert saved["measure"] == "loss" and saved["since_improvement"] == 2
    assert [entry["step"] for entry in saved["best"]] == [40, 50]
    assert not selection.stopped and not run_checkpoint.model.stop_training


def test_a_restarted_selection_keeps_counting_and_stops(selected_run):
    """A new ValidationSelection reads the record (as a restarted run does): one more evaluation
    without an improvement exhausts patience 3; the new second best replaces 50 in best/, and a file
    that selection.json does not name (left by a kill before it was written) is removed."""
    workdir, run_checkpoint, _ = selected_run
    (best_directory(workdir) / "ckpt-999.index").write_text("left by a kill")
    restarted = ValidationSelection(run_checkpoint, _Monitor(), workdir, keep=2, patience=3)
    restarted.set_model(run_checkpoint.model)
    assert restarted.record.since_improvement == 2 and not restarted.stopped
    _marked(run_checkpoint, 70)
    restarted.after_evaluation(70, {"loss": 1.6})
    assert restarted.stopped and run_checkpoint.model.stop_training
    assert [checkpoint_step(path) for path in best_checkpoints(workdir, 5)] == [40, 70]
    assert sorted({path.name.split(".")[0] for path in best_directory(workdir).iterdir()}) == ["ckpt-40", "ckpt-70"]
    again = ValidationSelection(run_checkpoint, _Monitor(), workdir, keep=2, patience=3)
    assert again.stopped  # a run restarted after it stopped early trains no more
    assert not again.record.training_left(70, 1000, 10, patience=3)
    assert again.record.training_left(70, 1000, 10, patience=4)  # a larger patience trains on


def test_workers_other_than_the_chief_keep_the_record_but_write_nothing(tmp_path):
    model = TrainingTransformer(CONFIG)
    model.compile()
    model.prepare_for_training()
    run_checkpoint = RunCheckpoint(checkpoint_directory(tmp_path), model, DataPosition(), max_to_keep=2,
                                   scratch_directory=checkpoint_directory(tmp_path) / "workertemp_1")
    selection = ValidationSelection(run_checkpoint, _Monitor(), tmp_path, keep=2, patience=1, write=False)
    selection.set_model(model)
    for step, loss in LOSSES[:3]:
        _marked(run_checkpoint, step)
        selection.after_evaluation(step, {"loss": loss})
    assert selection.stopped and [entry["step"] for entry in selection.record.best] == [20, 30]
    assert not selection_path(tmp_path).exists() and not best_directory(tmp_path).exists()


def test_a_resumed_run_counts_its_minutes_from_its_checkpoint_not_from_its_last_evaluation(tmp_path):
    """A run killed after a checkpoint saved past its last evaluation (ckpt-30 after the evaluation at
    10) goes on counting its training seconds from that checkpoint's, which train_seconds.json
    recorded when it was saved, so the time in between is not lost (the benchmarks plot validation
    against it). The file keeps the seconds of the checkpoints the manager keeps; a checkpoint whose
    seconds it lacks (a kill between saving and recording) falls back to the last evaluation's."""
    run_checkpoint, selection = _selection(tmp_path)
    assert run_checkpoint.clock == selection.train_seconds
    _marked(run_checkpoint, 10)
    selection.after_evaluation(10, {"loss": 2.0})
    evaluated = selection.record.evaluations[0]["train_seconds"]
    assert 0 < evaluated < 100 and run_checkpoint.saved_seconds(10) <= evaluated
    run_checkpoint.clock = lambda: 500.0  # the run's clock at ckpt-20, then at ckpt-30
    _marked(run_checkpoint, 20)
    run_checkpoint.save()
    run_checkpoint.clock = lambda: 1000.0
    _marked(run_checkpoint, 30)
    run_checkpoint.save()
    assert json.loads((checkpoint_directory(tmp_path) / "train_seconds.json").read_text()) == \
        {"20": 500.0, "30": 1000.0}  # ckpt-10 rotated out, and its seconds with it

    resumed, selection = _selection(tmp_path)
    assert resumed.step == 30 and 1000.0 <= selection.train_seconds() < 1100.0
    selection.after_evaluation(30, {"loss": 1.0})
    assert 1000.0 <= selection.record.evaluations[-1]["train_seconds"] < 1100.0

    (checkpoint_directory(tmp_path) / "train_seconds.json").write_text('{"20": 500.0}')
    _, selection = _selection(tmp_path)
    recorded = selection.record.evaluations[-1]["train_seconds"]  # the evaluation at 30, the last
    assert recorded <= selection.train_seconds() < recorded + 100.0


def test_average_checkpoints_select_best_averages_exactly_the_best_set(selected_run):
    """The command's weights are the mean of best/ckpt-40's and best/ckpt-50's, weight by weight;
    --select last averages the latest two (50 and 60) instead."""
    workdir, _, _ = selected_run
    output = workdir / "best.weights.h5"
    assert average_checkpoints.main(["--workdir", str(workdir), "--count", "2", "--select", "best",
                                     "--output", str(output)]) == output
    best = [_weights(path) for path in best_checkpoints(workdir, 2)]
    averaged = _weights(None, output)
    assert len(averaged) == len(best[0]) > 30
    for got, first, second in zip(averaged, *best):
        np.testing.assert_allclose(got, (first.astype(np.float64) + second) / 2, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(averaged[0], 45.0)  # (40 + 50) / 2: the marked weight
    last = average_run(workdir, 2, workdir / "last.weights.h5", select="last")
    np.testing.assert_array_equal(_weights(None, last)[0], 55.0)  # (50 + 60) / 2


def _weights(prefix, weights_file=None, config=CONFIG):
    """The model's weights from a checkpoint prefix or a Keras weights file."""
    model = Transformer(config)
    model.build()
    if weights_file is not None:
        model.load_weights(str(weights_file))
    else:
        restore_checkpoint(model, prefix)
    return model.get_weights()


def test_asking_for_the_best_before_any_evaluation_says_what_to_do(tmp_path, capsys):
    (tmp_path / "model_config.json").write_text(CONFIG.to_json())
    with pytest.raises(SystemExit) as exit_info:
        average_checkpoints.main(["--workdir", str(tmp_path), "--count", "2", "--select", "best"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "no validation evaluation is recorded" in error and "--select last" in error, error


def test_a_run_that_keeps_no_best_checkpoints_still_counts_and_says_why_there_is_no_best(tmp_path):
    record = _record(LOSSES, keep=0)
    assert record.best == [] and record.since_improvement == 2  # early stopping needs no kept checkpoint
    selection_path(tmp_path).parent.mkdir(parents=True)
    selection_path(tmp_path).write_text(record.to_json())
    with pytest.raises(FileNotFoundError, match=r"keeps no best checkpoints \(run.keep_best_checkpoints=0\)"):
        best_checkpoints(tmp_path, 2)


def test_an_unknown_select_names_the_flag_and_the_value(capsys):
    with pytest.raises(SystemExit) as exit_info:
        average_checkpoints.parse_args(["--workdir", "w", "--select", "worst"])
    assert exit_info.value.code == 2
    assert "argument --select: invalid choice: 'worst'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--early-stopping-patience", "-1"], "argument --early-stopping-patience: expected an integer >= 0"),
    (["--early-stopping-patience", "two"], "argument --early-stopping-patience: expected an integer >= 0, got 'two'"),
    (["--average", "median"], "argument --average: invalid choice: 'median'"),
])
def test_bad_selection_flags_name_the_flag_and_the_value(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_wmt.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("assignment, message", [
    ("run.early_stopping_patience=-2", "RunConfig.early_stopping_patience must be an integer >= 0"),
    ("run.keep_best_checkpoints=-1", "RunConfig.keep_best_checkpoints must be an integer >= 0"),
    ("train.average=median", "TrainConfig.average must be one of ('last', 'best'); got 'median'"),
])
def test_bad_selection_settings_name_the_value(assignment, message):
    with pytest.raises(ValueError) as error:
        apply_overrides(preset_configs("tiny"), [assignment])
    assert str(error.value).startswith(f"{assignment}: ") and message in str(error.value)


def test_the_paper_presets_average_the_last_and_never_stop_early():
    for preset in ("base", "big", "small", "tiny"):
        configs = preset_configs(preset)
        assert configs.train.average == "last" and configs.run.early_stopping_patience == 0
    configs = train_wmt.build_configs(train_wmt.parse_args(
        ["--preset", "tiny", "--early-stopping-patience", "3", "--average", "best", "--keep-best-checkpoints", "4"]))
    assert (configs.run.early_stopping_patience, configs.train.average, configs.run.keep_best_checkpoints) == \
        (3, "best", 4)


class _Killed(Exception):
    """Stands for a SIGKILL: nothing after the point where it is raised is written."""


@pytest.fixture
def numbers_spec(tmp_path):
    """A local corpus spec of the numbers corpus (German -> English): 2,000 training pairs, 10 validation
    and test pairs."""
    return write_numbers_spec(tmp_path, reverse=True)


@pytest.mark.slow
def test_a_run_killed_before_an_evaluation_resumes_with_its_counter_and_stops_early(numbers_spec, tmp_path,
                                                                                   monkeypatch):
    """The job itself (train_and_evaluate), its validation losses replaced by LOSSES (the real ones of
    so short a run only go down) and killed while evaluating step 50, whose checkpoint is saved. Run
    again, it evaluates step 50 before training on, so the counter reaches patience 2 at step 60 as
    in a run never killed: it stops there, averages the best two (40, rotated out of the latest two,
    and 50), scores the test set; run a third time, it trains no more."""
    scripted, kill_at = dict(LOSSES), [50]
    real_evaluate = TrainingMonitor.evaluate

    def evaluate(monitor):
        if monitor._step() in kill_at:
            kill_at.clear()
            raise _Killed()
        values = real_evaluate(monitor)  # the dict its history holds too
        values["loss"] = scripted[monitor._step()]
        return values

    monkeypatch.setattr(TrainingMonitor, "evaluate", evaluate)
    configs = apply_overrides(preset_configs("tiny", numbers_spec), [
        "train_steps=100", "eval_every_steps=10", "checkpoint_every_steps=10", "keep_checkpoints=2",
        "keep_best_checkpoints=2", "checkpoints_to_average=2", "average=best", "early_stopping_patience=2",
        "eval_sentences=2", "sample_translations=0", "log_every_steps=10", "train.tokens_per_batch=1024",
        "num_layers=1"])
    workdir = tmp_path / "run"
    with pytest.raises(_Killed):
        train_and_evaluate(workdir, configs, verbose=0)
    assert [e["step"] for e in ValidationRecord.read(workdir).evaluations] == [10, 20, 30, 40]
    assert checkpoint_step(tf.train.latest_checkpoint(str(checkpoint_directory(workdir)))) == 50

    result = train_and_evaluate(workdir, configs, verbose=0)
    assert result.step == 60 and result.stopped_early
    assert [step for step, _ in result.evaluations] == [50, 60]
    record = ValidationRecord.read(workdir)
    assert [e["step"] for e in record.evaluations] == [10, 20, 30, 40, 50, 60]
    assert [e["validation"]["loss"] for e in record.evaluations] == [loss for _, loss in LOSSES]
    assert all(e["validation"]["bleu"] >= 0 for e in record.evaluations)
    seconds = [e["train_seconds"] for e in record.evaluations]
    assert seconds == sorted(seconds) and seconds[0] > 0
    assert record.since_improvement == 2 and [entry["step"] for entry in record.best] == [40, 50]
    state = tf.train.get_checkpoint_state(str(checkpoint_directory(workdir)))
    assert [checkpoint_step(path) for path in state.all_model_checkpoint_paths] == [50, 60]
    config = TransformerConfig.from_json((workdir / "model_config.json").read_text())
    best = [_weights(path, config=config) for path in best_checkpoints(workdir, 2)]
    for got, first, second in zip(_weights(None, result.averaged_weights, config), *best):
        np.testing.assert_allclose(got, (first.astype(np.float64) + second) / 2, rtol=1e-6, atol=1e-7)
    assert result.scores is not None and (workdir / "test_scores.json").is_file()

    # Run a third time (without the test set, as benchmarks that choose on validation first do), it
    # trains no more.
    (workdir / "test_scores.json").unlink()
    again = train_and_evaluate(workdir, configs, verbose=0, evaluate_test=False)
    assert (again.step, again.stopped_early, again.evaluations) == (60, True, [])
    assert again.scores is None and not (workdir / "test_scores.json").exists()


def test_a_run_stopped_by_its_time_budget_is_evaluated_where_it_stopped(numbers_spec, tmp_path, capsys):
    """--max-train-minutes ends the run after its first steps, long before its first scheduled
    evaluation (step 50): those weights are evaluated where it stopped and join the best, so
    --average best averages them. (Before any evaluation, averaging the best is an error that says
    what to do: test_asking_for_the_best_before_any_evaluation_says_what_to_do.)"""
    workdir = tmp_path / "run"
    code = train_wmt.main(["--preset", "tiny", "--dataset", numbers_spec, "--workdir", str(workdir),
                           "--no-export", "--average", "best", "--train-steps", "50", "--eval-every-steps", "50",
                           "--max-train-minutes", "0.000001", "--verbose", "0", "--set", "num_layers=1"])
    assert code == 0, capsys.readouterr().err[-3000:]
    record = ValidationRecord.read(workdir)
    (stopped,) = [e["step"] for e in record.evaluations]
    assert 0 < stopped < 50 and [entry["step"] for entry in record.best] == [stopped]
    assert (best_directory(workdir) / f"ckpt-{stopped}.index").is_file()


@pytest.mark.slow
def test_float16_steps_skipped_for_overflowing_gradients_keep_the_evaluations_on_their_steps(
        numbers_spec, tmp_path, monkeypatch):
    """mixed_float16 skips a step whose gradients overflow, and Keras still counts its batch in the
    epoch. The gradients of batches 3 and 9 are made inf: the run evaluates (and saves with its
    evaluations) at steps 5, 10, 15 and 20 as planned, once each, not where Keras' epochs end
    (tried before the evaluations went by step: 4, 8, 13, 18 and 20)."""
    batches, poisoned = tf.Variable(0), tf.constant([3, 9])
    real = TrainingTransformer._loss_and_gradients

    def overflowing(model, x, y, global_count):
        gradients, logits, total, count = real(model, x, y, global_count)
        overflow = tf.reduce_any(tf.equal(batches.assign_add(1), poisoned))
        factor = tf.where(overflow, np.inf, 1.0)
        return [g * tf.cast(factor, g.dtype) for g in map(tf.convert_to_tensor, gradients)], logits, total, count

    monkeypatch.setattr(TrainingTransformer, "_loss_and_gradients", overflowing)
    configs = apply_overrides(preset_configs("tiny", numbers_spec), [
        "train_steps=20", "eval_every_steps=5", "checkpoint_every_steps=5", "keep_checkpoints=10",
        "mixed_precision=mixed_float16", "eval_sentences=2", "sample_translations=0", "log_every_steps=5",
        "train.tokens_per_batch=1024", "num_layers=1"])
    workdir = tmp_path / "run"
    result = train_and_evaluate(workdir, configs, verbose=0, evaluate_test=False)
    assert result.step == 20 and int(batches.numpy()) >= 22  # at least the 2 skipped steps' batches more
    assert [step for step, _ in result.evaluations] == [5, 10, 15, 20]
    assert [e["step"] for e in ValidationRecord.read(workdir).evaluations] == [5, 10, 15, 20]
    state = tf.train.get_checkpoint_state(str(checkpoint_directory(workdir)))
    assert [checkpoint_step(path) for path in state.all_model_checkpoint_paths] == [5, 10, 15, 20]
