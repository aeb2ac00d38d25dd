"""A whole training job: corpus -> vocabulary -> tf.data -> model.fit -> averaging -> test BLEU -> export.

    configs = preset_configs("tiny", dataset="numbers")
    result = train_and_evaluate("runs/numbers-tiny", configs)
    print(result.scores.report())

Restarting the same job on the same workdir resumes it from its latest checkpoint: same step,
learning rate, data position and dropout state (see checkpointing.py and data_stream.py), and the
same best checkpoints and early stopping counter (best_checkpoints.py); a finished job, or one
stopped early, only redoes the averaging and the test translation (its export is reused).
"""
import dataclasses
import hashlib
import json
import logging
import pathlib
import re
import time
from typing import Optional

import keras
import numpy as np
import sentencepiece
import tensorflow as tf

from keras_transformer.config import TrainConfig
from keras_transformer.data import DataConfig, load_or_train_tokenizer, make_corpus_dataset
from keras_transformer.data.pipeline import check_some_pair_fits
from keras_transformer.export import SENTENCEPIECE_FILENAME, Translator, export_translator
from keras_transformer.files import write_lines, write_text_atomically
from keras_transformer.precision import set_dtype_policy
from keras_transformer.schedule import cooldown_plan, paper_optimizer, schedule_cooldown
from keras_transformer.training.averaging import average_run
from keras_transformer.training.best_checkpoints import ValidationRecord, ValidationSelection, evaluation_due
from keras_transformer.training.checkpointing import (CheckpointCallback, RunCheckpoint, TrainingDiverged,
                                                      TrainingInterrupted, checkpoint_directory, sigterm_handler)
from keras_transformer.training.data_stream import DataPosition, training_stream
from keras_transformer.training.distribution import (CLUSTER_WAIT_SECONDS, CORPUS_WAIT_SECONDS, PEER_FAILURES,
                                                     WorkerLost, any_worker, check_workers_agree, describe_strategy,
                                                     is_chief, mean_over_workers, num_workers, select_strategy,
                                                     set_mixed_precision, wait_for_all_workers, worker_index,
                                                     xla_compilation_errors_name_the_flag)
from keras_transformer.training.evaluation import BeamSearchTranslator, Scores
from keras_transformer.training.run_config import RunConfigs, with_micro_batch_budget
from keras_transformer.training.summaries import StepProfiler, TrainingMonitor
from keras_transformer.training.task import TRANSLATION, Task

logger = logging.getLogger(__name__)

TEST_TRANSLATIONS = "test_translations.txt"
TEST_SCORES = "test_scores.json"
EXPORT_RECORD = "exported.json"


@dataclasses.dataclass
class RunResult:
    workdir: pathlib.Path
    step: int
    averaged_weights: Optional[pathlib.Path] = None
    scores: Optional[Scores] = None
    export_path: Optional[pathlib.Path] = None
    evaluations: list = dataclasses.field(default_factory=list)  # (step, validation values)
    stopped_early: bool = False  # the validation loss stopped improving (run.early_stopping_patience)


def fit_segments(start_step: int, train_steps: int, eval_every: int) -> list[tuple[int, int, int]]:
    """The model.fit calls from start_step to train_steps as (initial_epoch, epochs, steps_per_epoch).

    Keras epoch e covers steps (e * eval_every, (e + 1) * eval_every]. A run resumed inside an
    epoch first finishes that epoch alone, since Keras epochs all have one length; the last
    epoch may be shorter too.
    """
    segments, step = [], start_step
    while step < train_steps:
        epoch = step // eval_every
        end = min((epoch + 1) * eval_every, train_steps)
        if step % eval_every == 0 and end - step == eval_every:
            full_epochs = (train_steps - step) // eval_every
            segments.append((epoch, epoch + full_epochs, eval_every))
            step += full_epochs * eval_every
        else:
            segments.append((epoch, epoch + 1, end - step))
            step = end
    return segments


class TrainingTimeLimit(keras.callbacks.Callback):
    """Stops training once `minutes` have passed since it was made, after saving a checkpoint.

    With the schedule's Cooldown (TrainConfig.cooldown_fraction): when `cooldown_fraction` of the
    minutes are left, it moves the cooldown to start at this step and end where the steps of the
    time left are expected to end (at this process's rate since its first step; the cooldown of
    train_steps if that comes first), and it stops training once the cooldown's end is reached.
    """

    def __init__(self, run_checkpoint: RunCheckpoint, minutes: Optional[float], cooldown_fraction: float = 0.0):
        super().__init__()
        self.run_checkpoint = run_checkpoint
        self.deadline = None if minutes is None else time.monotonic() + 60.0 * minutes
        self.cooldown = schedule_cooldown(run_checkpoint.model.optimizer)
        self.cooldown_due = (None if self.deadline is None or self.cooldown is None
                             else self.deadline - 60.0 * minutes * cooldown_fraction)
        self._first = None  # (time, step) at this process's first step: the rate leaves out start-up
        self.reached = False

    def _stop(self, why):
        logger.info("%s at step %d; saved %s", why, self.run_checkpoint.step, self.run_checkpoint.save())
        self.reached = True
        self.model.stop_training = True

    def on_train_batch_end(self, batch, logs=None):
        if self.model.stop_training:
            return
        now, step = time.monotonic(), self.run_checkpoint.step
        if self._first is None:
            self._first = (now, step)
        if cooldown_ended(self.cooldown, step):  # the same step on every worker: no collective needed
            self._stop("the learning rate's cooldown ended")
            return
        if self.deadline is None:
            return
        cooling = self.cooldown is not None and step >= float(self.cooldown.start.numpy())
        due = self.cooldown_due is not None and not cooling and now >= self.cooldown_due
        reached, due = any_worker(self.model.distribute_strategy, [now >= self.deadline, due])
        if due and not reached:
            rate = (step - self._first[1]) / max(now - self._first[0], 1e-6)
            (steps_left,) = mean_over_workers(self.model.distribute_strategy, [rate * (self.deadline - now)])
            end = min(float(self.cooldown.end.numpy()), step + max(1, round(steps_left)))
            self.cooldown.set(step, end)
            logger.info("the time budget's cooldown: the learning rate falls to 0 from step %d to step %d", step, end)
        if reached:  # on every worker at once: one that stopped alone would leave the others waiting
            self._stop("the training time limit is reached")


def cooldown_ended(cooldown, step) -> bool:
    """Whether a schedule's Cooldown (or None) has reached its end: no learning rate is left."""
    return cooldown is not None and step >= float(cooldown.end.numpy())


def replan_cooldown(cooldown, saved_train: Optional[TrainConfig], train: TrainConfig) -> None:
    """A resumed run's Cooldown (or None) stays where its checkpoint left it (a time budget may have
    moved it), unless train_steps or cooldown_fraction differ from the workdir's train config
    (`saved_train`, None for a new run): the new plan is then the one of `train`."""
    if cooldown is None or saved_train is None or cooldown_plan(saved_train) == cooldown_plan(train):
        return
    start, end = cooldown_plan(train)
    if (float(cooldown.start.numpy()), float(cooldown.end.numpy())) != (start, end):
        logger.info("train_steps or cooldown_fraction changed since the last run: the learning rate's cooldown "
                    "is now from step %d to step %d", start, end)
    cooldown.set(start, end)


def saved_train_config(workdir) -> Optional[TrainConfig]:
    """The train config a run in workdir was last started with, or None (none, or one this version
    cannot read: the restored cooldown then stays as it is)."""
    path = pathlib.Path(workdir) / RunConfigs.FILENAMES["train"]
    if not path.is_file():
        return None
    try:
        return TrainConfig.from_json(path.read_text())
    except (ValueError, TypeError) as error:
        logger.warning("%s cannot be read (%s): a cooldown in the checkpoints stays as it is", path, error)
        return None


def _build_training_model(configs: RunConfigs, strategy, workdir, chief, saved_train=None, task=TRANSLATION):
    with strategy.scope():
        position = DataPosition()
        model = task.model(configs.model, workdir, training=True, accumulate_steps=configs.run.accumulate_steps,
                           data_position=position)
        model.compile(optimizer=paper_optimizer(configs.model.d_model, configs.train),
                      jit_compile=configs.run.jit_compile)
        model.prepare_for_training()
        directory = checkpoint_directory(workdir)
        # Every worker saves (saving may run collectives); only the chief's files are kept.
        scratch = None if chief else directory / f"workertemp_{worker_index(strategy)}"
        keep = max(configs.run.keep_checkpoints, configs.train.checkpoints_to_average)
        run_checkpoint = RunCheckpoint(directory, model, position, max_to_keep=keep, scratch_directory=scratch)
        run_checkpoint.restore_latest()
        replan_cooldown(schedule_cooldown(model.optimizer), saved_train, configs.train)
    return model, position, run_checkpoint


def xla_padding_advice(configs: RunConfigs) -> Optional[str]:
    """What to say when XLA compiles a treebank's steps with each side padded apart, else None: a
    sentence is much shorter than its tree, so its own boundary about doubles the batch shapes."""
    if configs.run.jit_compile and configs.data.separate_padding and configs.data.dataset.startswith("treebank:"):
        return ("--jit-compile compiles the training step once per batch shape, and data.separate_padding pads a "
                "treebank's sentences to a boundary of their own, which about doubles the shapes (GUM train: 156 "
                "against 75 an epoch); --set data.separate_padding=false keeps one shape per bucket")
    return None


def kept_best_checkpoints(configs: RunConfigs) -> int:
    """How many best checkpoints the run keeps: enough for its average when it averages the best."""
    averaged = configs.train.checkpoints_to_average if configs.train.average == "best" else 0
    return max(configs.run.keep_best_checkpoints, averaged)


def _train(model, position, run_checkpoint, configs, strategy, corpus, tokenizer, workdir, chief, verbose, task):
    """model.fit from the restored step to train_steps, or until early stopping; returns the monitor's
    evaluations and whether it stopped early."""
    run, data = configs.run, configs.data
    check_some_pair_fits(corpus.dataset("train"), tokenizer, data, corpus.name)
    validation = strategy.distribute_datasets_from_function(
        lambda context: make_corpus_dataset(corpus, "validation", tokenizer, data, training=False,
                                            input_context=context))
    validation_pairs = [pair for _, pair in zip(range(run.eval_sentences), corpus.pairs("validation"))]
    checkpoints = CheckpointCallback(run_checkpoint, run.checkpoint_every_steps, run.checkpoint_every_minutes,
                                     configs.train.train_steps)
    tensorboard = pathlib.Path(workdir) / "tensorboard"
    monitor = TrainingMonitor(tensorboard, run.log_every_steps, validation,
                              BeamSearchTranslator(model, tokenizer, configs.decode,
                                                   translator_class=task.translator(workdir)), validation_pairs,
                              sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto),
                              num_samples=run.sample_translations, write=chief, metric=task.scoring(data)[0],
                              evaluate_at=lambda step: evaluation_due(step, run.eval_every_steps,
                                                                      configs.train.train_steps))
    selection = ValidationSelection(run_checkpoint, monitor, workdir, kept_best_checkpoints(configs),
                                    run.early_stopping_patience, write=chief)
    time_limit = TrainingTimeLimit(run_checkpoint, run.max_train_minutes, configs.train.cooldown_fraction)
    profiler = StepProfiler(tensorboard / "train", run.profile_steps, write=chief)
    try:
        with sigterm_handler(checkpoints.request_termination), xla_compilation_errors_name_the_flag(run.jit_compile):
            if selection.record.evaluation_missing(run_checkpoint.step, run.eval_every_steps,
                                                   configs.train.train_steps):
                monitor.set_model(model)
                selection.set_model(model)
                selection.after_evaluation(run_checkpoint.step, monitor.evaluate())
            if cooldown_ended(time_limit.cooldown, run_checkpoint.step):
                logger.info("the learning rate's cooldown ended at step %d, before this start: nothing is left to "
                            "train (more train_steps plan a new cooldown)", run_checkpoint.step)
            # One fit call at a time: a mixed_float16 step whose gradients overflow is skipped (the
            # optimizer's step stays), so the remaining fit calls are planned again after each one.
            while (run_checkpoint.step < configs.train.train_steps and not selection.stopped
                   and not cooldown_ended(time_limit.cooldown, run_checkpoint.step)):
                initial_epoch, epochs, steps = fit_segments(run_checkpoint.step, configs.train.train_steps,
                                                            run.eval_every_steps)[0]
                start_epoch, start_segment, start_batch = position.value()
                logger.info("training from step %d, data epoch %d segment %d batch %d", run_checkpoint.step,
                            start_epoch, start_segment, start_batch)
                stream = strategy.distribute_datasets_from_function(
                    lambda context: training_stream(corpus, tokenizer, data, start_epoch=start_epoch,
                                                    start_segment=start_segment, start_batch=start_batch,
                                                    accumulate_steps=run.accumulate_steps, input_context=context))
                model.fit(stream, initial_epoch=initial_epoch, epochs=epochs, steps_per_epoch=steps,
                          callbacks=[profiler, checkpoints, time_limit, monitor, selection], verbose=verbose,
                          shuffle=False)
                if checkpoints.diverged:
                    raise TrainingDiverged(checkpoints.diverged)
                if checkpoints.interrupted:
                    raise TrainingInterrupted(
                        f"SIGTERM: saved {run_checkpoint.manager.latest_checkpoint} at step {run_checkpoint.step}"
                        f"; run the same command again to resume")
                if time_limit.reached:
                    break
            if time_limit.reached and run_checkpoint.step not in selection.record.steps():
                # Stopped by the time budget or its cooldown's end, between evaluations: the weights it
                # ends with (with a cooldown, the run's best) are evaluated too, and may join the best.
                selection.after_evaluation(run_checkpoint.step, monitor.evaluate())
    finally:
        monitor.close()
    return monitor.history, selection.stopped


# The words of an error's lines that say what happened to a peer (to pick the line a WorkerLost quotes).
PEER_TROUBLE = r"reset|unavailable|timed out|deadline|crash|heartbeat|connect|abort|cancel"
# What an InternalError says when it is a lost peer, not a device's own failure ("the launch timed
# out and was terminated" is CUDA's own; a cuBLAS or cuDNN failure names neither).
PEER_LOST = (r"connection reset|socket closed|failed to connect|\bunavailable\b|heartbeat|collective ops is aborted"
             r"|deadline exceeded|coordination service")


def _peer_failed(error: tf.errors.OpError, strategy) -> bool:
    """Whether an error of PEER_FAILURES under `strategy` means a lost worker: only with several
    workers, and an InternalError only when it says so (a GPU's own failures are InternalErrors too,
    and must reach the user as they are)."""
    if num_workers(strategy) == 1:
        return False
    return not isinstance(error, tf.errors.InternalError) or bool(re.search(PEER_LOST, error.message, re.I))


def _worker_lost(error: tf.errors.OpError, when: str, workdir) -> WorkerLost:
    """WorkerLost for a collective's or the coordination service's error under several workers, with
    the line of it that says what happened to the peer."""
    lines = [line.strip() for line in error.message.splitlines() if line.strip()]
    telling = [line for line in lines if re.search(PEER_TROUBLE, line, flags=re.I)]
    reason = (telling or lines or [""])[0][:300]
    latest = tf.train.latest_checkpoint(str(checkpoint_directory(workdir)))
    waited = ""
    if isinstance(error, tf.errors.DeadlineExceededError):
        waited = ("; if no worker died, a collective waited longer than --collective-timeout allows (a worker "
                  "that is slow at this point, or XLA compiling a new batch shape under --jit-compile): raise it")
    return WorkerLost(f"a worker of the cluster was lost {when} ({type(error).__name__}: {reason}); the last "
                      f"checkpoint is {latest}: start every worker again to resume from it{waited}")


def _run_description(configs: RunConfigs, tokenizer, strategy) -> dict:
    """What every worker of a cluster must agree on, as {field: JSON value} (distribution.check_workers_agree)."""
    description = {f"{name}.{field}": value for name in RunConfigs.FILENAMES
                   for field, value in json.loads(getattr(configs, name).to_json()).items()}
    description["replicas per worker"] = strategy.num_replicas_in_sync // num_workers(strategy)
    description["vocabulary (sha256 of sentencepiece.model)"] = hashlib.sha256(tokenizer.model_proto).hexdigest()
    return description


def evaluate_test_set(translator: BeamSearchTranslator, corpus, workdir=None, task: Task = TRANSLATION,
                      data: DataConfig = DataConfig()) -> Scores:
    """Beam-search translation of the corpus's test split, scored (as task.scoring(data) scores);
    written to workdir if given."""
    pairs = list(corpus.pairs("test"))
    hypotheses = translator.translate([s for s, _ in pairs])
    scores = task.scoring(data)[1]([s for s, _ in pairs], hypotheses, [reference for _, reference in pairs])
    if workdir is not None:
        workdir = pathlib.Path(workdir)
        write_lines(workdir / TEST_TRANSLATIONS, hypotheses)
        write_text_atomically(workdir / TEST_SCORES, json.dumps(dataclasses.asdict(scores), indent=2) + "\n")
    return scores


def load_averaged_model(configs: RunConfigs, weights_path, task: Task = TRANSLATION, workdir=None):
    """The task's model (the Transformer for translation) with the weights of weights_path; workdir
    is the run's (default: weights_path's directory), where the task's model may read its files."""
    model = task.model(configs.model, pathlib.Path(workdir or pathlib.Path(weights_path).parent))
    model.build()
    model.load_weights(str(weights_path))
    return model


def export_saved_model(translator: Translator, workdir, export_dir, step, precision="float32",
                       translator_class=Translator) -> pathlib.Path:
    """The SavedModel of `translator` (the averaged weights) as the next version in export_dir, in
    `precision` (float32, bfloat16 or float16, see keras_transformer.precision).

    workdir/exported.json records what was exported where: the step, the precision, export_dir,
    a fingerprint of the weights (sha256 of their values) and what the graph is built with (the
    decode config, the longest source and the widest beam). Running a finished job again reuses
    that version instead of exporting the same as a new one; other weights (another average of the
    same run: train.average, train.checkpoints_to_average), other decoding settings, another
    precision or another export_dir make a new version.
    """
    record_path = pathlib.Path(workdir) / EXPORT_RECORD
    export_dir = pathlib.Path(export_dir).resolve()
    record = {"step": step, "precision": precision, "export_dir": str(export_dir),
              "weights": weights_fingerprint(translator.model), "decode": translator.decode_config.to_dict(),
              "max_source_length": translator.max_source_length, "max_beam_size": translator.max_beam_size}
    if record_path.exists():
        saved = json.loads(record_path.read_text())
        if {key: saved.get(key) for key in record} == record and pathlib.Path(saved.get("path", "")).is_dir():
            logger.info("step %d is exported already: %s", step, saved["path"])
            return pathlib.Path(saved["path"])
    if precision != translator.model.dtype_policy.name:
        translator = translator_class(translator.model, translator.sentencepiece_proto, translator.decode_config,
                                      max_source_length=translator.max_source_length,
                                      max_beam_size=translator.max_beam_size, precision=precision)
    path = export_translator(translator, export_dir)
    write_text_atomically(record_path, json.dumps({**record, "path": str(path)}, indent=2) + "\n")
    return path


def weights_fingerprint(model) -> str:
    """sha256 of the values of a model's weights, in order (about a second per GB)."""
    digest = hashlib.sha256()
    for weight in model.weights:
        digest.update(np.ascontiguousarray(keras.ops.convert_to_numpy(weight)).tobytes())
    return digest.hexdigest()


CORPUS_FILES_FILENAME = "corpus_files.json"


def _check_corpus_files(workdir: pathlib.Path, corpus, chief: bool):
    """Warns when a resumed run's local corpus files differ in number, size or sampled content
    (text_files.sampled_digest) from those its start recorded (the data position then points into
    other pairs, and with stream regions other regions), naming each; the chief records the files as
    they are now. A record without digests (written before they were) compares the sizes."""
    records = corpus.file_records()
    if records is None:
        return
    path = workdir / CORPUS_FILES_FILENAME
    if path.is_file():
        recorded = json.loads(path.read_text())
        changes = []
        for split in sorted(set(recorded) | set(records)):
            before, now = recorded.get(split, []), records.get(split, [])
            if len(before) != len(now):
                changes.append(f"{split}: {len(before)} file(s) when the run started, {len(now)} now")
                continue
            for (old_file, old_size, *old_digest), (file, size, digest) in zip(before, now):
                then = f" (then {old_file})" if old_file != file else ""
                if old_size != size:
                    changes.append(f"{split}: {file} was {old_size:,} bytes{then}, now {size:,}")
                elif old_digest and old_digest[0] != digest:
                    changes.append(f"{split}: {file} has the size it had{then} ({size:,} bytes) but other "
                                   f"content (other lines, or the lines in another order)")
        if changes:
            logger.warning("the corpus files changed since this run started (%s): the run resumes at its saved "
                           "data position in the files as they are now, which holds other pairs than the ones "
                           "it stopped at; %s", path, "; ".join(changes))
    if chief:
        write_text_atomically(path, json.dumps(records, indent=1) + "\n")


def train_and_evaluate(workdir, configs: RunConfigs, *, strategy: Optional[tf.distribute.Strategy] = None,
                       export_dir=None, export_precision="float32", verbose=1,
                       task: Task = TRANSLATION, evaluate_test: bool = True) -> RunResult:
    """Runs (or resumes) the whole job described by `configs` in `workdir`; see the module docstring.

    configs.data.tokens_per_batch is replaced by the micro-batch budget derived from
    configs.train.tokens_per_batch, the number of replicas and accumulate_steps; configs.model's
    vocab_size by the trained vocabulary's size.

    The export (when export_dir is given) is in export_precision: float32, bfloat16 or float16.
    task: the corpus, answers and scores of the job (translation; keras_transformer.parsing.task.PARSING).
    evaluate_test: score the averaged weights on the test split (False for a caller that chooses
      among checkpoints on validation first and then scores the test set once itself).

    Training ends at train_steps, at run.max_train_minutes, or earlier when the validation loss has
    not improved for run.early_stopping_patience evaluations; then the checkpoints of
    configs.train.average (the last or the best by validation loss) are averaged.

    Raises TrainingDiverged (NaN loss) and TrainingInterrupted (SIGTERM, after saving).
    """
    workdir = pathlib.Path(workdir)
    keras.utils.set_random_seed(configs.run.seed)
    strategy = strategy or select_strategy()
    logger.info("training on %s", describe_strategy(strategy))
    chief = is_chief(strategy)
    configs = with_micro_batch_budget(configs, strategy.num_replicas_in_sync)
    data = configs.data
    corpus = task.corpus(data)
    saved_train = saved_train_config(workdir)  # read by every worker before the chief writes the configs
    try:
        # The corpus first (TFDS's download and preparation, the local files' check): it may take
        # hours, for which only these barriers wait, not the vocabulary's or a collective.
        if chief or not corpus.prepare_on_chief_first:
            corpus.prepare()
        wait_for_all_workers(strategy, "corpus-prepared-by-chief", CORPUS_WAIT_SECONDS)
        if not chief and corpus.prepare_on_chief_first:
            corpus.prepare()
        wait_for_all_workers(strategy, "corpus-prepared", CORPUS_WAIT_SECONDS)
        if not chief:  # the chief learns the vocabulary into the shared workdir; the others read it
            wait_for_all_workers(strategy, "vocabulary", CLUSTER_WAIT_SECONDS)
        if chief and not (workdir / SENTENCEPIECE_FILENAME).is_file():  # a new run (or one killed before this)
            workdir.mkdir(parents=True, exist_ok=True)
            task.prepare_workdir(workdir, corpus)
        tokenizer = load_or_train_tokenizer(workdir, corpus.training_sentences(),
                                            data.tokenizer_settings(corpus.name, corpus.user_defined_symbols()))
        if chief:
            wait_for_all_workers(strategy, "vocabulary", CLUSTER_WAIT_SECONDS)
        configs = dataclasses.replace(configs, model=dataclasses.replace(configs.model,
                                                                         vocab_size=tokenizer.vocab_size))
        check_workers_agree(strategy, "configs", _run_description(configs, tokenizer, strategy), CLUSTER_WAIT_SECONDS)
    except PEER_FAILURES as error:
        if not _peer_failed(error, strategy):
            raise
        raise _worker_lost(error, "before training", workdir) from error
    configs.check_resumable(workdir)
    _check_corpus_files(workdir, corpus, chief)
    if chief:
        configs.write(workdir)
    set_mixed_precision(configs.run.mixed_precision)
    advice = xla_padding_advice(configs)
    if advice:
        logger.info(advice)
    try:
        model, position, run_checkpoint = _build_training_model(configs, strategy, workdir, chief, saved_train, task)
        record = ValidationRecord.read(workdir)
        evaluations, stopped_early = [], record.patience_exhausted(configs.run.early_stopping_patience)
        try:
            check_workers_agree(strategy, "restored", {"restored checkpoint step": run_checkpoint.step,
                                                       "recorded evaluations": len(record.evaluations)},
                                CLUSTER_WAIT_SECONDS)
            if record.training_left(run_checkpoint.step, configs.train.train_steps, configs.run.eval_every_steps,
                                    configs.run.early_stopping_patience):
                evaluations, stopped_early = _train(model, position, run_checkpoint, configs, strategy, corpus,
                                                    tokenizer, workdir, chief, verbose, task)
        except PEER_FAILURES as error:
            if not _peer_failed(error, strategy):
                raise
            raise _worker_lost(error, f"at step {run_checkpoint.step}", workdir) from error
    finally:
        set_dtype_policy("float32")  # evaluation and export in full precision
    result = RunResult(workdir=workdir, step=run_checkpoint.step, evaluations=evaluations, stopped_early=stopped_early)
    if not chief:
        return result
    result.averaged_weights = average_run(workdir, configs.train.checkpoints_to_average, select=configs.train.average,
                                          build_model=lambda config: task.model(config, workdir))
    averaged = load_averaged_model(configs, result.averaged_weights, task, workdir)
    translator_class = task.translator(workdir)
    translator = BeamSearchTranslator(averaged, tokenizer, configs.decode,  # evaluated, then exported
                                      translator_class=translator_class)
    if evaluate_test:
        result.scores = evaluate_test_set(translator, corpus, workdir, task, configs.data)
    if export_dir is not None:
        result.export_path = export_saved_model(translator.translator, workdir, export_dir, result.step,
                                                precision=export_precision, translator_class=translator_class)
    return result
