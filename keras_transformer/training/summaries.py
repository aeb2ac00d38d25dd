"""TensorBoard monitoring of a training run, in workdir/tensorboard/{train,validation}.

    train/       loss, learning_rate, token_accuracy, perplexity: means over the last N steps;
                 loss_scale under mixed_float16 (it halves at each step whose gradients overflow)
    validation/  loss, token_accuracy, perplexity (the whole validation split), the task's scores
                 (bleu and chrf for translation, f1 for parsing; beam search on its first
                 sentences), translations (text: source, reference, translation), attention
                 (image: the encoder-decoder attention of the last decoder layer over the first
                 sample, one panel per head and their mean)
    train/plugins/profile/  with RunConfig.profile_steps, TensorFlow's profile of that many
                 training steps (TensorBoard's profile tab: the trace viewer, op time by type)
"""
import io
import logging
import pathlib
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.config import BOS_ID, EOS_ID
from keras_transformer.training.distribution import (CLUSTER_WAIT_SECONDS, gather_from_workers, inner_optimizer,
                                                     loss_scale, num_workers, worker_index)
from keras_transformer.training.evaluation import validation_scores

logger = logging.getLogger(__name__)

TRAIN_SCALARS = ("loss", "learning_rate", "token_accuracy", "perplexity")


def attention_heatmap_png(weights, source_pieces, target_pieces, title="") -> bytes:
    """A PNG of attention weights (H, T, S): one panel per head, then their mean.

    Rows are target positions (the token each one predicts), columns source tokens.
    """
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    weights = np.asarray(weights, np.float32)
    panels = [(f"head {h + 1}", weights[h]) for h in range(weights.shape[0])] + [("mean", weights.mean(0))]
    columns = min(4, len(panels))
    rows = -(-len(panels) // columns)
    cell = 0.28
    width = max(3.0, cell * len(source_pieces) + 1.2)
    height = max(2.5, cell * len(target_pieces) + 1.0)
    figure, axes = pyplot.subplots(rows, columns, figsize=(width * columns, height * rows), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.axis("off")
    for index, (axis, (name, panel)) in enumerate(zip(axes.flat, panels)):
        axis.imshow(panel, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axis.set_title(name, fontsize=8)
        # Tokens on the outer panels only (each column's lowest panel, the first column): the panels
        # share their axes, and making and drawing the ticks was most of the picture's time.
        if index + columns >= len(panels):
            axis.set_xticks(range(len(source_pieces)), source_pieces, rotation=90, fontsize=6)
        else:
            axis.set_xticks([])
        if index % columns == 0:
            axis.set_yticks(range(len(target_pieces)), target_pieces, fontsize=6)
        else:
            axis.set_yticks([])
    figure.suptitle(title, fontsize=9)
    return figure_png(figure)


def figure_png(figure) -> bytes:
    """A matplotlib figure as PNG bytes (laid out tightly, 90 dpi); the figure is closed."""
    from matplotlib import pyplot

    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    pyplot.close(figure)
    return buffer.getvalue()


def cross_attention(model, source_ids, output_ids):
    """Encoder-decoder attention (H, T, S) of the last decoder layer, the decoder fed [BOS] + output
    teacher-forced, for one sentence: source_ids (S,) and output_ids (T,) (its translation + EOS)."""
    source = tf.constant(np.asarray(source_ids, np.int32)[None])
    target_input = tf.constant(np.concatenate([[BOS_ID], np.asarray(output_ids, np.int32)[:-1]])[None])
    memory, source_padding_mask = model.encode(source, training=False)
    _, scores = model.decode(target_input, memory, source_padding_mask, training=False,
                             return_attention_scores=True, source_ids=source)
    return np.asarray(tf.cast(scores[0], tf.float32))


def translations_markdown(sources, references, hypotheses) -> str:
    def cell(text):
        return text.replace("|", "\\|")
    lines = ["| source | reference | translation |", "|---|---|---|"]
    lines += [f"| {cell(s)} | {cell(r)} | {cell(h)} |" for s, r, h in zip(sources, references, hypotheses)]
    return "\n".join(lines)


# The steps a job's profile skips: its first traces the step function, the next few warm up.
PROFILE_AFTER_STEPS = 5


class StepProfiler(keras.callbacks.Callback):
    """Traces `steps` training steps with TensorFlow's profiler into log_dir (workdir/tensorboard/
    train: TensorBoard shows the trace in its profile tab), from this process's PROFILE_AFTER_STEPS-th
    step on, once. A fit call that ends inside the trace ends it (a job calls fit once per stretch
    between evaluations). write=False (a cluster's other workers) traces nothing."""

    def __init__(self, log_dir, steps, write=True):
        super().__init__()
        self.log_dir = pathlib.Path(log_dir)
        self.steps = steps
        self.seen = 0  # training steps of this process
        self.traced = 0
        self.active = False
        self.done = not (steps and write)

    def on_train_batch_begin(self, batch, logs=None):
        if not self.done and not self.active and self.seen >= PROFILE_AFTER_STEPS:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            tf.profiler.experimental.start(str(self.log_dir))
            self.active = True

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.active:
            self.traced += 1
            if self.traced >= self.steps:
                self._stop()

    def on_train_end(self, logs=None):
        if self.active:
            self._stop()

    def _stop(self):
        tf.profiler.experimental.stop()
        self.active, self.done = False, True
        logger.info("profiled %d training step%s (steps %d to %d of this process) into %s: TensorBoard's "
                    "profile tab", self.traced, "" if self.traced == 1 else "s", self.seen - self.traced + 1,
                    self.seen, self.log_dir / "plugins" / "profile")


class TrainingMonitor(keras.callbacks.Callback):
    """Writes the summaries of the module docstring; evaluates at the optimizer steps `evaluate_at`
    names, or at the end of each Keras epoch without it.

    A run evaluates by optimizer step (run.py: every eval_every_steps and at train_steps), not by
    Keras epoch: under mixed_float16 a step whose gradients overflow is skipped, and its batch still
    counts in Keras' epoch, so epochs would end ever further before the steps they were planned to
    end at (evaluations, and the checkpoints saved with them, off the run's grid).

    Args:
      log_dir: workdir/tensorboard.
      log_every_steps: training scalars are written, and the training metrics reset, this often.
      validation: the validation dataset for the loss, or None.
      translator: a BeamSearchTranslator of the training model.
      validation_pairs: (source, reference) pairs translated for BLEU; the first `num_samples` are
        shown as text, the first one's attention as an image (or the translator's own picture of it:
        its `evaluation_picture(source, answer)` -> (name, PNG), where it has one, as the span parser's).
      sentencepiece: a SentencePieceProcessor to name the tokens of the attention map.
      write: False on non-chief workers (they evaluate, which needs every worker, but write nothing).
      metric: (sources, hypotheses, references) -> {name: value}; default BLEU and chrF.
      evaluate_at: step -> whether to evaluate once the training reaches that optimizer step (at
        the end of the Keras epoch that ends there, else after the batch that reaches it), or None:
        at the end of each Keras epoch.
    """

    def __init__(self, log_dir, log_every_steps, validation, translator, validation_pairs, sentencepiece,
                 num_samples=4, write=True, metric=validation_scores, evaluate_at=None):
        super().__init__()
        self.log_dir = pathlib.Path(log_dir)
        self.log_every_steps = log_every_steps
        self.validation = validation
        self.translator = translator
        self.validation_pairs = list(validation_pairs)
        self.sentencepiece = sentencepiece
        self.num_samples = num_samples
        self.write = write
        self.metric = metric
        self.evaluate_at = evaluate_at
        self.history = []  # (step, {name: value}) of each evaluation
        self._reset_pending = False
        self._logged_step = None
        self._translations = 0  # evaluations that exchanged translations with the other workers
        if write:
            self.train_writer = tf.summary.create_file_writer(str(self.log_dir / "train"))
            self.validation_writer = tf.summary.create_file_writer(str(self.log_dir / "validation"))

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs=None):
        if self.evaluate_at is not None and not (self.params or {}).get("steps"):
            raise ValueError("TrainingMonitor(evaluate_at=...) needs fit's steps_per_epoch: an evaluation due at an "
                             "epoch's last batch waits for the epoch's end, after Keras has its training means")

    def on_train_batch_begin(self, batch, logs=None):
        if self._reset_pending:  # not at the logging step itself: Keras' epoch logs keep its values
            self.model.reset_metrics()  # the next values are the means over the next interval
            self._reset_pending = False

    def on_train_batch_end(self, batch, logs=None):
        if self.model.stop_training:  # NaN or SIGTERM: leave quickly, the checkpoint is what matters
            return
        step = self._step()
        if step % self.log_every_steps == 0 and step != self._logged_step:  # a skipped step stays
            self._log_training(step, logs)
        if self.evaluate_at is not None and batch + 1 != self.params["steps"] and self._due(step):
            # Only where a skipped step moved the epoch's end: evaluated here, not at that end.
            self.evaluate()
            self._reset_pending = True  # evaluate() reset the metrics: the training means start again

    def _due(self, step):
        """Whether an evaluation at `step` is due and not made yet."""
        return (self.evaluate_at is None or self.evaluate_at(step)) and not (self.history and
                                                                              self.history[-1][0] == step)

    def _log_training(self, step, logs):
        self._logged_step = step
        values = {name: float(np.asarray(logs[name])) for name in TRAIN_SCALARS if logs and name in logs}
        values["learning_rate"] = self._learning_rate_of_last_step()
        scale = loss_scale(self.model.optimizer)
        if scale is not None:
            values["loss_scale"] = scale
        if self.write:
            with self.train_writer.as_default(step=step):
                for name, value in values.items():
                    tf.summary.scalar(name, value)
            self.train_writer.flush()
        self._reset_pending = True

    def _learning_rate_of_last_step(self):
        """The rate the last update used: the optimizer's own `learning_rate` is already the next one's."""
        optimizer = inner_optimizer(self.model.optimizer)  # a LossScaleOptimizer's own rate is 0
        schedule = optimizer._learning_rate  # the schedule or the constant that compile() was given
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return float(np.asarray(schedule(optimizer.iterations - 1)))
        return float(np.asarray(optimizer.learning_rate))

    def on_epoch_end(self, epoch, logs=None):
        if self.model.stop_training:
            return
        if self._due(self._step()):  # after Keras has the epoch's training means
            self.evaluate()

    def evaluate(self):
        """Validation loss, BLEU, samples and attention at the current step; returns the scalars."""
        step = self._step()
        values = {}
        if self.validation is not None:
            with warnings.catch_warnings():
                # Keras warns "Your input ran out of data" whenever a dataset ends, also when, as here,
                # no number of steps was asked for and the end of the split is the end of evaluation.
                warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
                metrics = self.model.evaluate(self.validation, verbose=0, return_dict=True)
            values.update({name: float(value) for name, value in metrics.items()})
        sources = [source for source, _ in self.validation_pairs]
        references = [reference for _, reference in self.validation_pairs]
        hypotheses = self._translate(sources, step)
        values.update(self.metric(sources, hypotheses, references))
        self.history.append((step, values))
        print(f"\nstep {step}: " + ", ".join(f"validation {name} {value:.4g}" for name, value in values.items())
              + f" (scores on {len(sources)} sentences, {self.translator.translator.decoding()})", flush=True)
        if self.write:
            self._write_evaluation(step, values, sources, references, hypotheses)
        return values

    def _translate(self, sources, step):
        """The translations of `sources`. On a cluster each of W workers translates every W-th sentence
        (worker w those at w, w + W, ...: a share of every length) and the workers exchange them, so
        all hold all of them, and every worker computes the same scores from them."""
        strategy = self.model.distribute_strategy
        workers = num_workers(strategy)
        if workers == 1:
            return self.translator.translate(sources)
        index = worker_index(strategy)
        share = self.translator.translate(sources[index::workers])
        logger.info("validation: worker %d of %d translated %d of the %d sentences", index, workers, len(share),
                    len(sources))
        self._translations += 1  # one key-value name for each evaluation of this process
        shares = gather_from_workers(strategy, f"translations/{step}/{self._translations}", share,
                                     CLUSTER_WAIT_SECONDS)
        hypotheses = [None] * len(sources)
        for other, translations in enumerate(shares):
            hypotheses[other::workers] = translations
        return hypotheses

    def _write_evaluation(self, step, values, sources, references, hypotheses):
        shown = slice(0, self.num_samples)
        with self.validation_writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
            tf.summary.text("translations", translations_markdown(sources[shown], references[shown],
                                                                  hypotheses[shown]))
            picture = getattr(self.translator.translator, "evaluation_picture", None)  # a task's own
            if sources and self.num_samples and picture is not None:
                name, png = picture(sources[0], hypotheses[0])
                tf.summary.image(name, tf.image.decode_png(png, channels=4)[None])
            elif sources and self.num_samples:
                source_ids = self.translator.source_ids(sources[:1])[0]
                output_ids = np.append(self.sentencepiece.encode(hypotheses[0]), EOS_ID)
                weights = cross_attention(self.model, source_ids, output_ids)
                png = attention_heatmap_png(weights, self._pieces(source_ids), self._pieces(output_ids),
                                            title=f"step {step}: encoder-decoder attention, last decoder layer")
                tf.summary.image("attention", tf.image.decode_png(png, channels=4)[None])
        self.validation_writer.flush()

    def _pieces(self, ids):
        return [self.sentencepiece.id_to_piece(int(i)) for i in ids]

    def close(self):
        if self.write:
            self.train_writer.close()
            self.validation_writer.close()
