"""RunConfig (checkpointing, evaluation, monitoring, distribution) and the run's configs as one set.

A run is described by five configs, each written as JSON into its workdir:

    model_config.json   TransformerConfig (vocab_size is the trained vocabulary's real size)
    train_config.json   TrainConfig: steps, warm-up, Adam, tokens per step, checkpoints to average
    data_config.json    DataConfig: corpus, vocabulary, tf.data pipeline (its tokens_per_batch is
                        the budget of one micro-batch on one replica, derived from the above)
    decode_config.json  DecodeConfig: beam search of the evaluations and the export
    run_config.json     RunConfig (this module): how the job runs, not what it computes

`--set FIELD=VALUE` overrides reach any field of any of them: a field name alone when only one config
has it, or qualified (`model.max_length=512`, `data.max_length=128`) when several do.
"""
import dataclasses
import json
import pathlib
import typing
from typing import Optional

from keras_transformer.config import TRAIN_PRESETS, DecodeConfig, TrainConfig, TransformerConfig
from keras_transformer.data import DataConfig
from keras_transformer.files import write_text_atomically

MIXED_PRECISION_MODES = ("off", "on", "mixed_float16", "mixed_bfloat16")


def _require(condition, message):
    if not condition:
        raise ValueError(message)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """How a training job runs: the defaults follow the paper where it says something.

    Fields:
      seed: seeds the weights' initialization, dropout and the order of the data.
      accumulate_steps: micro-batches whose gradients make one optimizer step; the loss is divided
        by the real target tokens of all of them, so one step equals a step on their union.
      checkpoint_every_steps, checkpoint_every_minutes: a checkpoint is written when either is due
        (the paper: every 10 minutes), at the last step, and on SIGTERM.
      keep_checkpoints: the latest checkpoints kept on disk (at least TrainConfig.checkpoints_to_average).
      keep_best_checkpoints: the best checkpoints by validation loss kept besides the latest ones, in
        workdir/checkpoints/best (at least checkpoints_to_average when TrainConfig.average is "best");
        0 keeps none. Validation loss, not BLEU: see keras_transformer/training/best_checkpoints.py.
      eval_every_steps: validation loss, BLEU, sample translations and an attention map this often;
        a checkpoint is saved at each evaluation too, so that each evaluated step can be kept.
      early_stopping_patience: stop training (then average, score and export as at the last step)
        once the validation loss has not improved for this many evaluations; 0 (the default, as in
        the paper) never stops early. A resumed run keeps counting (workdir/checkpoints/selection.json).
      log_every_steps: training loss, learning rate, token accuracy and perplexity, each the mean
        over the last log_every_steps steps.
      eval_sentences: validation sentences translated for the BLEU of each evaluation.
      sample_translations: translations shown in TensorBoard at each evaluation.
      mixed_precision: "off", "mixed_float16", "mixed_bfloat16", or "on" (mixed_float16 on GPUs,
        mixed_bfloat16 elsewhere).
      jit_compile: compile the training step with XLA (one compilation per batch shape).
      max_train_minutes: stop training after this many minutes of this process (saving a
        checkpoint), then average, evaluate and export as at the last step; None: no limit.
      profile_steps: trace this many training steps with TensorFlow's profiler, from the job's
        sixth step on (training.summaries.StepProfiler), into workdir/tensorboard/train for
        TensorBoard's profile tab (the chief's); 0 (the default) traces none.
    """

    seed: int = 0
    accumulate_steps: int = 1
    checkpoint_every_steps: int = 1000
    checkpoint_every_minutes: float = 10.0
    keep_checkpoints: int = 20
    keep_best_checkpoints: int = 5
    eval_every_steps: int = 5000
    early_stopping_patience: int = 0
    log_every_steps: int = 100
    eval_sentences: int = 500
    sample_translations: int = 4
    mixed_precision: str = "off"
    jit_compile: bool = False
    max_train_minutes: Optional[float] = None
    profile_steps: int = 0

    def __post_init__(self):
        for name in ("accumulate_steps", "checkpoint_every_steps", "keep_checkpoints", "eval_every_steps",
                     "log_every_steps", "eval_sentences"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value > 0, f"RunConfig.{name} must be a positive integer; got {value!r}")
        for name in ("keep_best_checkpoints", "early_stopping_patience", "profile_steps"):
            value = getattr(self, name)
            meaning = {"keep_best_checkpoints": "keep none", "early_stopping_patience": "no early stopping",
                       "profile_steps": "no profile"}[name]
            _require(isinstance(value, int) and value >= 0,
                     f"RunConfig.{name} must be an integer >= 0 (0: {meaning}); got {value!r}")
        _require(self.checkpoint_every_minutes > 0,
                 f"RunConfig.checkpoint_every_minutes must be positive; got {self.checkpoint_every_minutes!r}")
        _require(self.max_train_minutes is None or self.max_train_minutes > 0,
                 f"RunConfig.max_train_minutes must be positive or None; got {self.max_train_minutes!r}")
        _require(self.sample_translations >= 0, "RunConfig.sample_translations must be >= 0")
        _require(self.mixed_precision in MIXED_PRECISION_MODES,
                 f"RunConfig.mixed_precision must be one of {MIXED_PRECISION_MODES}; got {self.mixed_precision!r}")

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))


RUN_PRESETS = {
    "base": RunConfig(keep_checkpoints=10),
    "big": RunConfig(keep_checkpoints=25),
    "small": RunConfig(checkpoint_every_steps=250, keep_checkpoints=10, eval_every_steps=1000,
                       log_every_steps=50, eval_sentences=300),
    # Its steps are half of small's (2,048 tokens): checkpoints and evaluations about as many minutes apart.
    "small_data": RunConfig(checkpoint_every_steps=500, keep_checkpoints=10, eval_every_steps=2000,
                            log_every_steps=50, eval_sentences=300),
    # fairseq saves a checkpoint per epoch (about 46 of Wu et al.'s updates on Multi30k): the last
    # 10 checkpoints, 50 steps apart, span about as many updates.
    "small_data_wu2021": RunConfig(checkpoint_every_steps=50, keep_checkpoints=10, eval_every_steps=500,
                                   log_every_steps=50, eval_sentences=300),
    # The offline quick run: a few minutes on 2 CPU cores.
    "tiny": RunConfig(checkpoint_every_steps=100, keep_checkpoints=5, eval_every_steps=200,
                      log_every_steps=20, eval_sentences=200, sample_translations=3),
    "parsing": RunConfig(keep_checkpoints=10),
    "parsing_small": RunConfig(checkpoint_every_steps=250, keep_checkpoints=10, eval_every_steps=1000,
                               log_every_steps=50, eval_sentences=300),
    "parsing_tiny": RunConfig(checkpoint_every_steps=100, keep_checkpoints=5, eval_every_steps=300,
                              log_every_steps=20, eval_sentences=100, sample_translations=3),
}


@dataclasses.dataclass(frozen=True)
class RunConfigs:
    """The five configs of one run."""

    model: TransformerConfig
    train: TrainConfig
    data: DataConfig
    decode: DecodeConfig
    run: RunConfig

    FILENAMES = {"model": "model_config.json", "train": "train_config.json", "data": "data_config.json",
                 "decode": "decode_config.json", "run": "run_config.json"}

    def write(self, workdir):
        """Writes each config next to the checkpoints (after checking any existing ones agree)."""
        workdir = pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        for name, filename in self.FILENAMES.items():
            write_text_atomically(workdir / filename, getattr(self, name).to_json() + "\n")

    def check_resumable(self, workdir):
        """Raises ValueError if workdir holds a run whose model or data differ from these configs.

        A different model cannot load the checkpoints; a different data config would make the data
        position meaningless. Training, decoding and run settings may change between restarts
        (e.g. more train_steps to train longer).
        """
        workdir = pathlib.Path(workdir)
        for name in ("model", "data"):
            path = workdir / self.FILENAMES[name]
            if not path.exists():
                continue
            config = getattr(self, name)
            # A field added since the workdir was made counts as the value that did what runs did then.
            saved = config.with_legacy_fields(json.loads(path.read_text()))
            current = json.loads(config.to_json())
            free = getattr(config, "RESUMABLE_CHANGES", frozenset())
            changed = {key: (saved.get(key), current.get(key)) for key in set(saved) | set(current)
                       if saved.get(key) != current.get(key) and key not in free}
            differences = ", ".join(f"{key}: {old!r} in the workdir, {new!r} now"
                                    for key, (old, new) in sorted(changed.items()))
            _require(not changed, f"{path} differs from this run's {name} config ({differences}); "
                f"use the same settings to resume, or another --workdir")

    @classmethod
    def read(cls, workdir):
        workdir = pathlib.Path(workdir)
        readers = {"model": TransformerConfig.from_json, "train": TrainConfig.from_json,
                   "data": DataConfig.from_json, "decode": DecodeConfig.from_json, "run": RunConfig.from_json}
        return cls(**{name: readers[name]((workdir / filename).read_text())
                      for name, filename in cls.FILENAMES.items()})


def preset_configs(preset, dataset="wmt14"):
    """The paper's recipe for a preset (tiny: a few minutes on a CPU), before any override.

    The data config's vocab_size is the preset's; the model's vocab_size is replaced by the trained
    vocabulary's real size once it exists. data.tokens_per_batch is a placeholder until
    `with_micro_batch_budget` derives it from train.tokens_per_batch.
    """
    model = TransformerConfig.from_preset(preset)
    train = TRAIN_PRESETS[preset]
    data = DataConfig(dataset=dataset, vocab_size=model.vocab_size, tokens_per_batch=train.tokens_per_batch,
                      max_length=min(DataConfig.max_length, model.max_length))
    return RunConfigs(model=model, train=train, data=data, decode=DecodeConfig(), run=RUN_PRESETS[preset])


def micro_batch_budget(train: TrainConfig, run: RunConfig, num_replicas: int) -> int:
    """Tokens of one micro-batch on one replica: the step's budget over replicas and micro-batches.

    TrainConfig.tokens_per_batch is what one optimizer step sees in all (the paper: about 25,000
    source and 25,000 target tokens per step, on 8 GPUs together), so 8 GPUs, or 1 GPU with
    accumulate_steps=8, both get 3,125 per micro-batch.
    """
    return max(1, train.tokens_per_batch // (num_replicas * run.accumulate_steps))


def with_micro_batch_budget(configs: RunConfigs, num_replicas: int) -> RunConfigs:
    budget = micro_batch_budget(configs.train, configs.run, num_replicas)
    _require(budget >= configs.data.max_length,
             f"train.tokens_per_batch={configs.train.tokens_per_batch} over {num_replicas} replica(s) x "
             f"{configs.run.accumulate_steps} micro-batch(es) leaves {budget} tokens per micro-batch, less "
             f"than one pair of data.max_length={configs.data.max_length}; raise --tokens-per-batch or "
             f"lower --accumulate-steps or data.max_length")
    return dataclasses.replace(configs, data=dataclasses.replace(configs.data, tokens_per_batch=budget))


def _parse_value(text, annotation, where):
    """`text` as the type of a dataclass field (int, float, bool, str, Optional[...])."""
    if isinstance(annotation, str):
        annotation = eval(annotation, {"Optional": Optional, "typing": typing})  # noqa: S307 (our own annotations)
    if typing.get_origin(annotation) is typing.Union:
        if text.lower() in ("none", "null"):
            return None
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    if annotation is bool:
        lowered = text.lower()
        _require(lowered in ("true", "false", "1", "0", "yes", "no"), f"{where}: expected true or false, got {text!r}")
        return lowered in ("true", "1", "yes")
    try:
        return annotation(text)
    except ValueError:
        raise ValueError(f"{where}: cannot read {text!r} as {annotation.__name__}") from None


def apply_overrides(configs: RunConfigs, assignments) -> RunConfigs:
    """configs with `FIELD=VALUE` or `CONFIG.FIELD=VALUE` assignments applied (CONFIG: model, train,
    data, decode, run)."""
    changes = {name: {} for name in RunConfigs.FILENAMES}
    sources = {name: [] for name in RunConfigs.FILENAMES}  # the assignments behind each config's changes
    for assignment in assignments:
        key, separator, text = assignment.partition("=")
        _require(separator, f"--set takes FIELD=VALUE, got {assignment!r}")
        owner, _, field = key.strip().rpartition(".")
        candidates = [owner] if owner else [
            name for name in RunConfigs.FILENAMES
            if field in {f.name for f in dataclasses.fields(getattr(configs, name))}]
        _require(owner in ("",) + tuple(RunConfigs.FILENAMES),
                 f"--set {assignment}: unknown config {owner!r}; expected one of {list(RunConfigs.FILENAMES)}")
        fields = {f.name: f for name in candidates for f in dataclasses.fields(getattr(configs, name))
                  if f.name == field}
        _require(candidates and field in fields, f"--set {assignment}: no config has a field {field!r}")
        if field == "vocab_size" and not owner:
            candidates = ["data"]  # the vocabulary's size, which the model's follows (below)
        _require(len(candidates) == 1, f"--set {assignment}: {field!r} is a field of {', '.join(candidates)}; "
                 f"qualify it, e.g. {candidates[0]}.{field}={text}")
        changes[candidates[0]][field] = _parse_value(text.strip(), fields[field].type, f"--set {assignment}")
        sources[candidates[0]].append(assignment)
    # model.vocab_size and data.vocab_size both name the size of the vocabulary the run trains (the
    # model's becomes the trained vocabulary's real size): setting either sets both.
    model_size, data_size = changes["model"].get("vocab_size"), changes["data"].get("vocab_size")
    _require(model_size is None or data_size is None or model_size == data_size,
             f"--set {', '.join(sources['model'] + sources['data'])}: model.vocab_size and data.vocab_size are both "
             f"the vocabulary's size; give one of them")
    for name, size in (("model", data_size), ("data", model_size)):
        if size is not None:
            changes[name]["vocab_size"] = size
    replaced = {}
    for name, values in changes.items():
        if values:
            try:
                replaced[name] = dataclasses.replace(getattr(configs, name), **values)
            except ValueError as error:  # the config's own check: say which settings led to it
                raise ValueError(f"{', '.join(sources[name])}: {error}") from None
    return dataclasses.replace(configs, **replaced)
