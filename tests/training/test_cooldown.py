"""TrainConfig.cooldown_fraction: the learning rate falls linearly to 0 over the last fraction of the
run, of train_steps or of a time budget (TrainingTimeLimit moves the cooldown), a checkpoint keeps
where it is, and a run started again with another plan (or with a cooldown for the first time) gets
the new one."""
import keras
import pytest

from keras_transformer.config import TrainConfig, TransformerConfig
from keras_transformer.schedule import TransformerSchedule, paper_optimizer, schedule_cooldown
from keras_transformer.training import run as run_module
from keras_transformer.training.checkpointing import RunCheckpoint
from keras_transformer.training.data_stream import DataPosition
from keras_transformer.training.training_model import TrainingTransformer

PLAIN = TrainConfig(train_steps=100, warmup_steps=10)
COOLED = TrainConfig(train_steps=100, warmup_steps=10, cooldown_fraction=0.2)


def _rate(config, iteration):
    return float(paper_optimizer(64, config)._learning_rate(iteration))


@pytest.mark.parametrize("iteration,factor", [(0, 1.0), (50, 1.0), (79, 1.0), (80, 1.0), (85, 0.75), (90, 0.5),
                                              (99, 0.05), (100, 0.0), (150, 0.0)])
def test_the_rate_falls_linearly_to_zero_over_the_last_fraction_of_train_steps(iteration, factor):
    assert _rate(COOLED, iteration) == pytest.approx(factor * _rate(PLAIN, iteration), rel=1e-6, abs=1e-12)


def test_no_cooldown_by_default_and_a_fraction_must_be_below_one():
    assert schedule_cooldown(paper_optimizer(64, PLAIN)) is None
    optimizer = paper_optimizer(64, COOLED)
    # mixed_float16 wraps the optimizer: the cooldown is the wrapped one's
    assert schedule_cooldown(keras.optimizers.LossScaleOptimizer(optimizer)) is schedule_cooldown(optimizer) is not None
    for fraction in (1.0, -0.1, "0.2"):
        with pytest.raises(ValueError, match="cooldown_fraction must be a number in \\[0, 1\\)"):
            TrainConfig(cooldown_fraction=fraction)


def test_a_schedule_with_a_cooldown_serializes_where_it_is():
    schedule = paper_optimizer(64, COOLED)._learning_rate
    schedule.cooldown.set(60, 70)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(clone, TransformerSchedule)
    for iteration in (59, 65, 70):
        assert float(clone(iteration)) == pytest.approx(float(schedule(iteration)), abs=1e-12)
    assert float(schedule(65)) == pytest.approx(0.5 * _rate(PLAIN, 65), rel=1e-6)


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def _batch_end(clock, model, limit, step, seconds):
    """Step `step` ends at `seconds` on the clock: what Keras's fit tells the TrainingTimeLimit."""
    clock.now = seconds
    model.optimizer.iterations.assign(step)
    limit.on_train_batch_end(step - 1)


def _limited_model(config, checkpoints, minutes):
    """(a compiled tiny model, the TrainingTimeLimit of `minutes` set on it, saving into `checkpoints`)."""
    model = _model(config)
    limit = run_module.TrainingTimeLimit(RunCheckpoint(checkpoints, model, DataPosition()), minutes,
                                         config.cooldown_fraction)
    limit.set_model(model)
    return model, limit


def _model(config):
    model = TrainingTransformer(TransformerConfig.from_preset("tiny", vocab_size=30))
    model.compile(optimizer=paper_optimizer(64, config))
    model.prepare_for_training()
    return model


def test_a_time_budget_starts_the_cooldown_with_its_fraction_left_and_stops_at_its_end(tmp_path, monkeypatch):
    """10 minutes and a fraction of 0.25: at 450 s the cooldown starts at this step and ends where
    this process's rate since its first step (500 steps in 440 s) says the 150 s left will end; the
    run stops there, saved, and the checkpoint restores the cooldown."""
    clock = Clock(1000.0)
    monkeypatch.setattr(run_module.time, "monotonic", clock)
    config = TrainConfig(train_steps=10_000, warmup_steps=10, cooldown_fraction=0.25)
    model, limit = _limited_model(config, tmp_path / "checkpoints", 10.0)
    cooldown = schedule_cooldown(model.optimizer)
    assert (float(cooldown.start), float(cooldown.end)) == (7500.0, 10_000.0)  # train_steps' own

    def batch_end(step, seconds):
        _batch_end(clock, model, limit, step, 1000.0 + seconds)

    batch_end(100, 10.0)  # the first step: start-up and tracing are left out of the rate
    batch_end(500, 449.0)
    assert float(cooldown.start) == 7500.0 and not model.stop_training
    batch_end(600, 450.0)
    steps_left = round(500 / 440 * 150)  # 170
    assert (float(cooldown.start), float(cooldown.end)) == (600.0, 600.0 + steps_left)
    assert _rate(config, 685) > 0
    assert float(model.optimizer._learning_rate(685)) == pytest.approx(0.5 * _rate(config, 685), rel=1e-5)
    batch_end(700, 500.0)  # moved once only
    assert float(cooldown.end) == 770.0 and not model.stop_training
    batch_end(770, 560.0)
    assert model.stop_training and limit.reached
    assert limit.run_checkpoint.manager.latest_checkpoint.endswith("ckpt-770")

    restored = _model(config)
    RunCheckpoint(tmp_path / "checkpoints", restored, DataPosition()).restore_latest()
    assert (float(schedule_cooldown(restored.optimizer).start), float(schedule_cooldown(restored.optimizer).end)) \
        == (600.0, 770.0)
    assert run_module.cooldown_ended(schedule_cooldown(restored.optimizer), 770)


def test_a_cooldown_planned_in_steps_that_starts_before_the_budgets_is_kept(tmp_path, monkeypatch):
    """train_steps whose cooldown (steps 750 to 1,000) starts before the budget's fraction is left:
    the budget moves nothing, and the run stops at train_steps, as it would with any longer budget
    (what makes a recipe planned in steps train the same model given 60 minutes or 120)."""
    clock = Clock(0.0)
    monkeypatch.setattr(run_module.time, "monotonic", clock)
    config = TrainConfig(train_steps=1000, warmup_steps=10, cooldown_fraction=0.25)
    for minutes in (10.0, 20.0):
        clock.now = 0.0  # the budget counts from here
        model, limit = _limited_model(config, tmp_path / f"checkpoints-{minutes}", minutes)
        cooldown = schedule_cooldown(model.optimizer)
        # the first step, then step 800 (cooling since 750) when the budget's cooldown would be due
        for step, seconds in [(1, 0.0), (800, 60.0 * minutes * 0.75), (999, 60.0 * minutes * 0.8)]:
            _batch_end(clock, model, limit, step, seconds)
            assert (float(cooldown.start), float(cooldown.end)) == (750.0, 1000.0) and not model.stop_training
        _batch_end(clock, model, limit, 1000, 60.0 * minutes * 0.8)
        assert model.stop_training and limit.reached
        assert limit.run_checkpoint.manager.latest_checkpoint.endswith("ckpt-1000")


def test_the_deadline_still_stops_a_run_whose_cooldown_would_end_later(tmp_path, monkeypatch):
    """Steps slower than the rate so far: the deadline comes first, and stops the run as without a cooldown."""
    clock = Clock(0.0)
    monkeypatch.setattr(run_module.time, "monotonic", clock)
    config = TrainConfig(train_steps=10_000, warmup_steps=10, cooldown_fraction=0.5)
    model, limit = _limited_model(config, tmp_path / "checkpoints", 1.0)
    for step, seconds in [(1, 0.0), (31, 30.0), (40, 59.9)]:
        _batch_end(clock, model, limit, step, seconds)
    assert float(schedule_cooldown(model.optimizer).end) == 61.0 and not model.stop_training
    _batch_end(clock, model, limit, 45, 60.0)
    assert model.stop_training and limit.reached


def test_a_run_checkpointed_without_a_cooldown_resumes_with_the_configs_one(tmp_path):
    """cooldown_fraction set when a run is started again: its checkpoints hold no cooldown, and the
    schedule keeps the config's plan (the restore used to fail on the cooldown's unmatched variables)."""
    plain = _model(PLAIN)
    plain.optimizer.iterations.assign(50)
    RunCheckpoint(tmp_path / "checkpoints", plain, DataPosition()).save()
    cooled = _model(COOLED)
    RunCheckpoint(tmp_path / "checkpoints", cooled, DataPosition()).restore_latest()
    cooldown = schedule_cooldown(cooled.optimizer)
    assert int(cooled.optimizer.iterations) == 50
    assert (float(cooldown.start), float(cooldown.end)) == (80.0, 100.0)
    for weight, saved in zip(cooled.weights, plain.weights):
        assert (weight.numpy() == saved.numpy()).all()


def test_a_changed_plan_replaces_the_restored_cooldown_and_an_unchanged_one_keeps_it(tmp_path):
    """A checkpoint whose cooldown a time budget moved (60 to 70) keeps it when the run starts again
    with the same train config, and gets the new one's when train_steps or cooldown_fraction changed."""
    longer = TrainConfig(train_steps=200, warmup_steps=10, cooldown_fraction=0.2)
    model = _model(COOLED)
    schedule_cooldown(model.optimizer).set(60, 70)
    model.optimizer.iterations.assign(65)
    RunCheckpoint(tmp_path / "checkpoints", model, DataPosition()).save()
    for saved, new, expected in [(COOLED, COOLED, (60.0, 70.0)), (COOLED, longer, (160.0, 200.0)),
                                 (COOLED, TrainConfig(train_steps=100, warmup_steps=10, cooldown_fraction=0.5),
                                  (50.0, 100.0)),
                                 (None, longer, (60.0, 70.0))]:  # None: no train config in the workdir
        restored = _model(new)
        RunCheckpoint(tmp_path / "checkpoints", restored, DataPosition()).restore_latest()
        cooldown = schedule_cooldown(restored.optimizer)
        run_module.replan_cooldown(cooldown, saved, new)
        assert (float(cooldown.start), float(cooldown.end)) == expected, (saved, new)


def test_the_saved_train_config_is_the_one_the_workdir_was_last_started_with(tmp_path):
    from keras_transformer.training.run_config import preset_configs

    assert run_module.saved_train_config(tmp_path) is None
    configs = preset_configs("tiny", "numbers")
    configs.write(tmp_path)
    assert run_module.saved_train_config(tmp_path) == configs.train
    (tmp_path / "train_config.json").write_text('{"train_steps": 5, "renamed_field": 1}')
    assert run_module.saved_train_config(tmp_path) is None  # unreadable: the checkpoint's cooldown stays
