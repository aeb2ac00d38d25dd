"""`python -m pipelines.train_wmt` end to end on the offline corpus: the README's first command with
fewer steps, its SavedModel, its TensorBoard summaries, and a second run of the finished job.

The run translates German number words into English (`--reverse`): German writes a number below a
million as one word, so English -> German outputs are single tokens that BLEU cannot score.
"""
import re

import pytest
import sacrebleu
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.data import NumbersCorpus
from keras_transformer.export import Translator
from tests.readme_run import (CHECKPOINT_EVERY_STEPS, PROFILE_STEPS, TRAIN_STEPS, readme_run,  # noqa: F401
                              run_readme_command)

TEST_PAIRS = 200

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(readme_run):
    return readme_run.workdir, readme_run.export_dir, readme_run.stdout


def test_the_run_ends_with_a_savedmodel_and_says_where(finished_run):
    workdir, export_dir, stdout = finished_run
    last_line = stdout.strip().splitlines()[-1]
    assert last_line == f"SavedModel: {export_dir / '1'}"
    assert (export_dir / "1" / "saved_model.pb").is_file()
    assert re.search(rf"test \({TRAIN_STEPS} steps, average of the last 3 checkpoints, beam 4\): sacreBLEU [\d.]+ "
                     r"\(nrefs:1\|case:mixed\|eff:no\|tok:13a\|smooth:exp\|version:[\d.]+\)", stdout), stdout
    for name in ("model", "train", "data", "decode", "run"):
        assert (workdir / f"{name}_config.json").is_file()
    assert (workdir / "averaged.weights.h5").is_file()


def _bleu(translate, pairs):
    hypotheses = [text.decode("utf-8") for text in translate([source for source, _ in pairs])]
    return sacrebleu.corpus_bleu(hypotheses, [[reference for _, reference in pairs]]).score


def test_the_savedmodel_translates_far_better_than_an_untrained_model(finished_run):
    workdir, export_dir, _ = finished_run
    pairs = list(NumbersCorpus(seed=0, reverse=True).pairs("test"))[:TEST_PAIRS]
    served = tf.saved_model.load(str(export_dir / "1")).signatures["serving_default"]
    trained_bleu = _bleu(lambda batch: served(inputs=tf.constant(batch))["translations"].numpy(), pairs)

    untrained = Transformer(TransformerConfig.from_json((workdir / "model_config.json").read_text()))
    untrained.build()
    translator = Translator(untrained, (workdir / "sentencepiece.model").read_bytes())
    untrained_bleu = _bleu(lambda batch: translator.translate(tf.constant(batch))["translations"].numpy(), pairs)

    assert untrained_bleu < 5.0
    assert trained_bleu > untrained_bleu + 40.0, (trained_bleu, untrained_bleu)


def _tags_by_plugin(directory):
    """{plugin name: {tag: [values]}} of the TF2 summaries in an event directory."""
    accumulator = EventAccumulator(str(directory), size_guidance={"tensors": 0})
    accumulator.Reload()
    tags = {}
    for tag in accumulator.Tags()["tensors"]:
        events = accumulator.Tensors(tag)
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        tags.setdefault(plugin, {})[tag] = [(event.step, tf.make_ndarray(event.tensor_proto)) for event in events]
    return tags


def test_tensorboard_holds_scalars_translations_and_an_attention_image(finished_run):
    workdir, _, _ = finished_run
    train = _tags_by_plugin(workdir / "tensorboard" / "train")
    assert set(train["scalars"]) == {"loss", "learning_rate", "token_accuracy", "perplexity"}
    steps = [step for step, _ in train["scalars"]["loss"]]
    assert steps == list(range(20, TRAIN_STEPS + 1, 20))  # tiny logs every 20 steps
    learning_rates = dict(train["scalars"]["learning_rate"])
    # d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) with the tiny preset's d_model 64, warm-up 400.
    assert learning_rates[200] == pytest.approx(64 ** -0.5 * 200 * 400 ** -1.5, rel=1e-5)
    losses = [float(value) for _, value in train["scalars"]["loss"]]
    assert losses[-1] < 0.7 * losses[0]

    validation = _tags_by_plugin(workdir / "tensorboard" / "validation")
    scalars = validation["scalars"]
    assert {"loss", "token_accuracy", "perplexity", "bleu", "chrf"} <= set(scalars)
    assert [step for step, _ in scalars["bleu"]] == [200]  # the tiny preset's eval_every_steps, the run's end
    assert float(scalars["bleu"][-1][1]) > 40.0
    (_, table), = validation["text"]["translations"][-1:]
    assert "| source | reference | translation |" in table.item().decode("utf-8")
    _, image = validation["images"]["attention"][-1]
    width, height, png = image[0], image[1], image[2]  # TensorBoard's image summary: [w, h, png bytes]
    assert int(width) > 100 and int(height) > 100
    assert png.startswith(b"\x89PNG")


def test_tensorboard_holds_the_profile_of_the_steps_asked_for(readme_run):
    """--set profile_steps=2: TensorFlow's trace of steps 6 and 7, where TensorBoard's profile tab
    reads it (train/plugins/profile/<session>/), with the training step's ops, its backward pass's too."""
    traces = list((readme_run.workdir / "tensorboard" / "train" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert len(traces) == 1, traces
    space = xplane_pb2.XSpace.FromString(traces[0].read_bytes())
    names = {metadata.name for plane in space.planes for metadata in plane.event_metadata.values()}
    assert any("multi_step_on_iterator" in name for name in names), sorted(names)[:50]  # Keras's training step
    assert any("gradient_tape/training_transformer" in name for name in names)  # its backward pass, op by op
    assert f"profiled {PROFILE_STEPS} training steps (steps 6 to 7 of this process)" in readme_run.stderr


def test_running_the_finished_job_again_reuses_its_export(finished_run):
    workdir, export_dir, _ = finished_run
    stdout, _ = run_readme_command(workdir, export_dir)
    assert stdout.strip().splitlines()[-1] == f"SavedModel: {export_dir / '1'}"
    assert sorted(path.name for path in export_dir.iterdir() if not path.name.startswith(".")) == ["1"]
    assert "Epoch" not in stdout  # nothing left to train
    kept = sorted(int(p.name[5:-6]) for p in (workdir / "checkpoints").glob("ckpt-*.index"))
    assert kept == list(range(100, TRAIN_STEPS + 1, CHECKPOINT_EVERY_STEPS))  # the tiny preset keeps 5


# What a user would take for a problem: a Python warning (file:line: SomeWarning: ...), a warning or
# error of Python's logging (ours: "WARNING name: ...", TensorFlow's: "WARNING:tensorflow:..."), an
# error-level line of TensorFlow's C++ log ("E0000 ...").
ALARMING_LINE = re.compile(r"^(\S+:\d+: \w*Warning: |(WARNING|ERROR|CRITICAL)( \S+|:\w+):|E\d{4} )")


def test_a_healthy_run_prints_no_warning_and_no_error_line(readme_run):
    lines = (readme_run.stdout + readme_run.stderr).splitlines()
    assert any(line.startswith("INFO keras_transformer") for line in lines)  # stderr was captured
    assert [line for line in lines if ALARMING_LINE.search(line)] == []


@pytest.mark.parametrize("line", [
    "/x/keras/src/trainers/epoch_iterator.py:164: UserWarning: Your input ran out of data; interrupting",
    "WARNING keras_transformer.training.averaging: averaging 2 checkpoints",
    "WARNING:tensorflow:5 out of the last 5 calls to <function> triggered tf.function retracing.",
    "E0000 00:00:1795537254.739030    3768 cuda_platform.cc:52] failed call to cuInit",
    "ERROR keras_transformer: something failed",
])
def test_the_check_sees_each_kind_of_alarming_line(line):
    assert ALARMING_LINE.search(line)
