"""The run's configs: presets, --set overrides and their errors, the micro-batch budget, fit segments."""
import dataclasses
import json

import pytest

from keras_transformer.config import TrainConfig, TransformerConfig
from keras_transformer.training.run import fit_segments
from keras_transformer.training.run_config import (RunConfig, RunConfigs, apply_overrides, micro_batch_budget,
                                                   preset_configs, with_micro_batch_budget)
from pipelines import train_wmt


def test_base_and_big_recipes_are_the_papers():
    base, big = preset_configs("base"), preset_configs("big")
    assert (base.train.train_steps, big.train.train_steps) == (100_000, 300_000)
    assert base.train.warmup_steps == big.train.warmup_steps == 4000
    assert (base.train.adam_beta_1, base.train.adam_beta_2, base.train.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert base.train.tokens_per_batch == 25_000
    assert (base.train.checkpoints_to_average, big.train.checkpoints_to_average) == (5, 20)
    assert (base.model.dropout_rate, big.model.dropout_rate) == (0.1, 0.3)
    assert base.model.label_smoothing == big.model.label_smoothing == 0.1
    assert (base.decode.beam_size, base.decode.alpha, base.decode.extra_length) == (4, 0.6, 50)
    assert base.run.checkpoint_every_minutes == 10.0
    assert base.data.dataset == "wmt14"


def test_overrides_reach_every_config_and_parse_types():
    configs = apply_overrides(preset_configs("tiny"), [
        "dropout_rate=0.2", "train.train_steps=7", "data.max_length=64", "beam_size=2",
        "run.jit_compile=true", "tfds_data_dir=none"])
    assert configs.model.dropout_rate == 0.2
    assert configs.train.train_steps == 7
    assert configs.data.max_length == 64
    assert configs.decode.beam_size == 2
    assert configs.run.jit_compile is True
    assert configs.data.tfds_data_dir is None


@pytest.mark.parametrize("assignment, message", [
    ("dropout_rate", "FIELD=VALUE"),
    ("no_such_field=1", "no config has a field 'no_such_field'"),
    ("max_length=64", "'max_length' is a field of model, data; qualify it"),
    ("optimizer.warmup_steps=3", "unknown config 'optimizer'"),
    ("train_steps=many", "cannot read 'many' as int"),
    ("jit_compile=maybe", "expected true or false, got 'maybe'"),
    ("dropout_rate=1.5", "dropout_rate must be in [0, 1); got 1.5"),
    ("profile_steps=-1", "RunConfig.profile_steps must be an integer >= 0 (0: no profile); got -1"),
])
def test_bad_overrides_name_the_value(assignment, message):
    with pytest.raises(ValueError, match=None) as error:
        apply_overrides(preset_configs("tiny"), [assignment])
    assert message in str(error.value)


@pytest.mark.parametrize("assignment", ["model.vocab_size=500", "data.vocab_size=500", "vocab_size=500"])
def test_any_vocab_size_override_sets_the_vocabulary_the_run_trains(assignment):
    configs = apply_overrides(preset_configs("tiny"), [assignment])
    assert configs.data.vocab_size == configs.model.vocab_size == 500


def test_two_different_vocab_sizes_are_refused():
    with pytest.raises(ValueError, match="model.vocab_size and data.vocab_size are both the vocabulary's size"):
        apply_overrides(preset_configs("tiny"), ["model.vocab_size=500", "data.vocab_size=600"])


def test_flags_become_overrides():
    args = train_wmt.parse_args(["--preset", "tiny", "--dataset", "numbers", "--reverse", "--train-steps", "30",
                                 "--accumulate-steps", "2", "--set", "d_ff=96"])
    configs = train_wmt.build_configs(args)
    assert configs.data.reverse is True
    assert configs.train.train_steps == 30
    assert configs.run.accumulate_steps == 2
    assert configs.model.d_ff == 96
    assert configs.data.dataset == "numbers"


def test_an_unknown_precision_is_one_error_naming_the_flag_and_the_value(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_wmt.parse_args(["--mixed-precision", "fp16"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --mixed-precision: invalid choice: 'fp16'" in error and "mixed_float16" in error
    with pytest.raises(ValueError, match="^run.mixed_precision=fp16: RunConfig.mixed_precision must be one of"):
        train_wmt.build_configs(train_wmt.parse_args(["--set", "run.mixed_precision=fp16"]))


def test_micro_batch_budget_splits_the_step_over_replicas_and_micro_batches():
    train = TrainConfig(tokens_per_batch=25_000)
    # The paper's 8 GPUs, and one GPU accumulating 8 micro-batches, get the same micro-batch.
    assert micro_batch_budget(train, RunConfig(), num_replicas=8) == 3125
    assert micro_batch_budget(train, RunConfig(accumulate_steps=8), num_replicas=1) == 3125
    configs = with_micro_batch_budget(preset_configs("base"), num_replicas=8)
    assert configs.data.tokens_per_batch == 3125
    with pytest.raises(ValueError, match="less than one pair of data.max_length=256"):
        with_micro_batch_budget(dataclasses.replace(preset_configs("base"), run=RunConfig(accumulate_steps=200)), 1)


@pytest.mark.parametrize("start, steps, every, expected", [
    (0, 1000, 200, [(0, 5, 200)]),
    (0, 500, 200, [(0, 2, 200), (2, 3, 100)]),
    (300, 1000, 200, [(1, 2, 100), (2, 5, 200)]),
    (1000, 1000, 200, []),
])
def test_fit_segments_cover_the_remaining_steps(start, steps, every, expected):
    segments = fit_segments(start, steps, every)
    assert segments == expected
    assert start + sum((epochs - initial) * per_epoch for initial, epochs, per_epoch in segments) == steps


def test_written_configs_read_back_and_guard_resumption(tmp_path):
    configs = preset_configs("tiny", "numbers")
    configs.write(tmp_path)
    assert RunConfigs.read(tmp_path) == configs
    configs.check_resumable(tmp_path)  # the same run resumes
    longer = apply_overrides(configs, ["train_steps=5000"])
    longer.check_resumable(tmp_path)  # training longer is allowed
    other_model = apply_overrides(configs, ["d_model=128"])
    with pytest.raises(ValueError, match=r"model_config.json differs .*d_model: 64 in the workdir, 128 now"):
        other_model.check_resumable(tmp_path)


def test_a_workdir_from_before_a_data_field_resumes_only_as_it_read_the_data(tmp_path):
    """data.stream_regions came after runs that read their files in order: such a run resumes with 1."""
    configs = preset_configs("tiny", "numbers")
    configs.write(tmp_path)
    saved = json.loads((tmp_path / "data_config.json").read_text())
    del saved["stream_regions"]
    (tmp_path / "data_config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"data_config.json differs .*stream_regions: 1 in the workdir, 8 now"):
        configs.check_resumable(tmp_path)
    apply_overrides(configs, ["data.stream_regions=1"]).check_resumable(tmp_path)


# The model's fields in the first release (commit 76f00a1): a field added since must say in
# TransformerConfig.LEGACY_VALUES how a model_config.json written before it reads.
FIRST_MODEL_FIELDS = {"vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "d_k", "d_v", "dropout_rate",
                      "label_smoothing", "max_length", "layer_norm_epsilon", "positional", "norm_first",
                      "tie_embeddings", "attention_dropout_rate", "relu_dropout_rate"}


def test_every_model_field_added_since_the_first_release_has_a_legacy_value_that_is_its_default():
    defaults = {field.name: field.default for field in dataclasses.fields(TransformerConfig)}
    assert set(defaults) - FIRST_MODEL_FIELDS == set(TransformerConfig.LEGACY_VALUES)
    assert all(defaults[name] == value for name, value in TransformerConfig.LEGACY_VALUES.items())


def test_a_workdir_from_before_the_later_model_and_data_fields_resumes_with_them_off(tmp_path):
    """A run made before span_loss, rdrop_alpha, lowercase, bidirectional_epochs and the rest existed
    (its model_config.json and data_config.json without them) resumes with each of them at its default,
    which does what the code did then; turning one on is refused, named."""
    configs = preset_configs("tiny", "numbers")
    configs.write(tmp_path)
    for filename, names in (("model_config.json", TransformerConfig.LEGACY_VALUES),
                            ("data_config.json", ("subword_dropout", "lowercase", "bidirectional_epochs"))):
        saved = json.loads((tmp_path / filename).read_text())
        for name in names:
            del saved[name]
        (tmp_path / filename).write_text(json.dumps(saved))
    configs.check_resumable(tmp_path)
    with pytest.raises(ValueError, match=r"model_config.json differs .*layer_drop_rate: 0.0 in the workdir, 0.1 now"):
        apply_overrides(configs, ["model.layer_drop_rate=0.1"]).check_resumable(tmp_path)
    with pytest.raises(ValueError, match=r"data_config.json differs .*bidirectional_epochs: 0 in the workdir, 2 now"):
        apply_overrides(configs, ["data.bidirectional_epochs=2"]).check_resumable(tmp_path)


def test_a_workdir_from_before_source_only_subword_dropout_resumes_with_it_on_both_sides(tmp_path):
    """data.subword_dropout_target came after runs that split both sides: such a run resumes with True."""
    configs = apply_overrides(preset_configs("tiny", "numbers"), ["data.subword_dropout=0.1"])
    configs.write(tmp_path)
    saved = json.loads((tmp_path / "data_config.json").read_text())
    del saved["subword_dropout_target"]
    (tmp_path / "data_config.json").write_text(json.dumps(saved))
    configs.check_resumable(tmp_path)
    with pytest.raises(ValueError, match=r"data_config.json differs .*subword_dropout_target: True in the workdir, "
                                         r"False now"):
        apply_overrides(configs, ["data.subword_dropout_target=false"]).check_resumable(tmp_path)


def test_runs_of_several_seeds_hold_out_the_same_pairs(tmp_path):
    """--seed (data.seed) orders the batches; generated and held-out splits follow data.split_seed,
    so runs of several seeds are scored on the same pairs. A workdir from before split_seed took its
    splits from its seed, and is read and resumed so."""
    from keras_transformer.data.data_config import DataConfig
    from keras_transformer.training.task import translation_corpus

    configs = preset_configs("tiny", "numbers")
    other_seed = apply_overrides(configs, ["data.seed=3"])

    def validation(data):
        return list(translation_corpus(data).pairs("validation"))

    assert validation(other_seed.data) == validation(configs.data)
    assert validation(apply_overrides(configs, ["data.split_seed=3"]).data) != validation(configs.data)

    other_seed.write(tmp_path)
    saved = json.loads((tmp_path / "data_config.json").read_text())
    assert (saved["seed"], saved["split_seed"]) == (3, 0)
    del saved["split_seed"]  # as written before the field
    (tmp_path / "data_config.json").write_text(json.dumps(saved))
    legacy = DataConfig.from_json((tmp_path / "data_config.json").read_text())
    assert (legacy.seed, legacy.split_seed) == (3, 3)
    with pytest.raises(ValueError, match=r"data_config.json differs .*split_seed: 3 in the workdir, 0 now"):
        other_seed.check_resumable(tmp_path)
    apply_overrides(other_seed, ["data.split_seed=3"]).check_resumable(tmp_path)


def test_a_run_resumes_with_either_padding(tmp_path):
    """data.separate_padding shapes the batches, not which pairs they hold: a workdir from before the
    field, or one written with the other value, resumes; a field that moves the data does not."""
    configs = preset_configs("tiny", "numbers")
    configs.write(tmp_path)
    saved = json.loads((tmp_path / "data_config.json").read_text())
    del saved["separate_padding"]
    (tmp_path / "data_config.json").write_text(json.dumps(saved))
    configs.check_resumable(tmp_path)
    apply_overrides(configs, ["data.separate_padding=false"]).check_resumable(tmp_path)
    with pytest.raises(ValueError, match=r"data_config.json differs .*seed: 0 in the workdir, 1 now"):
        apply_overrides(configs, ["data.separate_padding=false", "data.seed=1"]).check_resumable(tmp_path)
