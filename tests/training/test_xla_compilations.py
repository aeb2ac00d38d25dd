"""A run with --jit-compile compiles its training step once per distinct batch shape, never more.

The step is traced with relaxed shapes (Keras' reduce_retracing) and XLA compiles it for each
concrete input shape it meets; the token-budget buckets keep those shapes few (README, "Mixed
precision, XLA and TPUs"). The test counts the compilations from XLA's own dumps (XLA_FLAGS
--xla_dump_to, one `before_optimizations` module per compilation; the training step's are those that
hold the Adam update) and compares their input shapes with the batches the run's stream yields,
rebuilt from the run's written configs and vocabulary.
"""
import collections
import os
import re
import subprocess
import sys

import pytest

from keras_transformer.data import load_or_train_tokenizer
from keras_transformer.training.data_stream import training_stream
from keras_transformer.training.run_config import RunConfigs
from keras_transformer.training.task import translation_corpus
from tests.numbers_files import write_numbers_spec
from tests.training.test_resume import DEADLINE_SECONDS, REPOSITORY

# About 2.7 epochs of 900 pairs of numbers below 10,000, 3 batches an epoch: full batches and each
# epoch's last one, in 3 bucket shapes, each met more than once. (XLA compiles the whole step for each
# shape: the 2,000 pairs of numbers below a million of tests/training/test_resume.py gave 10 shapes in
# 16 steps.)
TRAIN_STEPS = 8


def _compiled_step_shapes(dump_directory):
    """The (B, L) shapes of the int32 batch inputs of each compiled training step (source, target
    input and output: one or two shapes), one sorted tuple per compilation."""
    shapes = []
    for path in sorted(dump_directory.glob("*.before_optimizations.txt")):
        text = path.read_text()
        if "ResourceApplyAdam" not in text:  # the evaluation's test step is compiled too
            continue
        entry = text[text.index("ENTRY"):]
        parameters = re.findall(r"= s32\[(\d+),(\d+)\]\{1,0\} parameter\(\d+\)", entry)
        assert parameters, f"no (B, L) int32 input in {path.name}"
        shapes.append(tuple(sorted({tuple(map(int, shape)) for shape in parameters})))
    return shapes


@pytest.mark.slow
def test_the_training_step_compiles_once_per_batch_shape(tmp_path):
    workdir, dumps = tmp_path / "workdir", tmp_path / "xla"
    (tmp_path / "corpus").mkdir()
    corpus_spec = write_numbers_spec(tmp_path / "corpus", num_train=900, max_number=9999)
    command = [sys.executable, "-m", "pipelines.train_wmt", "--preset", "tiny", "--dataset", corpus_spec,
               "--workdir", str(workdir), "--no-export", "--jit-compile", "--train-steps", str(TRAIN_STEPS),
               "--checkpoint-every-steps", str(TRAIN_STEPS), "--eval-every-steps", str(TRAIN_STEPS),
               "--verbose", "2", "--set", "eval_sentences=2", "--set", "sample_translations=1", "--set", "num_layers=1"]
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                       XLA_FLAGS=f"--xla_dump_to={dumps} --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=NONE")
    result = subprocess.run(command, cwd=REPOSITORY, env=environment, capture_output=True, text=True,
                            timeout=DEADLINE_SECONDS)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]

    configs = RunConfigs.read(workdir)
    assert configs.run.jit_compile
    corpus = translation_corpus(configs.data)
    tokenizer = load_or_train_tokenizer(workdir, [], configs.data.tokenizer_settings(corpus.name))  # the run's
    stream = training_stream(corpus, tokenizer, configs.data)
    fed = collections.Counter()
    for element in stream.take(TRAIN_STEPS):
        (source, target_input), target_output = element["batch"]
        assert target_input.shape == target_output.shape
        # (B, S) and (B, T), each side padded to its own boundary (data.separate_padding).
        fed[tuple(sorted({tuple(source.shape.as_list()), tuple(target_input.shape.as_list())}))] += 1
    assert len(fed) > 1 and max(fed.values()) > 1, f"the test needs repeated and distinct shapes: {fed}"

    compiled = _compiled_step_shapes(dumps)
    assert sorted(compiled) == sorted(fed), "one compilation per distinct shape"


def test_xla_on_a_treebank_padded_side_by_side_says_how_to_keep_one_shape_per_bucket():
    from keras_transformer.training.run import xla_padding_advice
    from keras_transformer.training.run_config import apply_overrides, preset_configs

    treebank = "treebank:train=train.mrg;validation=dev.mrg;test=test.mrg"
    advice = xla_padding_advice(apply_overrides(preset_configs("tiny", treebank), ["run.jit_compile=true"]))
    assert "--set data.separate_padding=false keeps one shape per bucket" in advice
    for dataset, overrides in ((treebank, ["run.jit_compile=true", "data.separate_padding=false"]),
                               (treebank, []), ("numbers", ["run.jit_compile=true"])):
        assert xla_padding_advice(apply_overrides(preset_configs("tiny", dataset), overrides)) is None
