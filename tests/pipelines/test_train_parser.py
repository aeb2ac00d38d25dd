"""python -m pipelines.train_parser on the generated toy treebank (the README's quick run, made once
per session by tests/readme_run.py), then python -m pipelines.parse with its run directory and with
its SavedModel; and bad treebanks stopping the job before training."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest
import tensorflow as tf

from keras_transformer.parsing import parse_tree
from keras_transformer.parsing.tag_dictionary import read_tag_dictionary
from keras_transformer.parsing.task import PARSING
from keras_transformer.parsing.toy_treebank import write_toy_treebank
from keras_transformer.parsing.word_counts import read_word_counts
from keras_transformer.training.run_config import RunConfigs
from pipelines import toy_treebank as toy_treebank_command
from pipelines import parse, train_parser
from tests.readme_run import PARSER_TRAIN_STEPS, readme_parser_run  # noqa: F401
from tests.op_lists import PYTHON_OPS, SENTENCEPIECE_OPS, core_op_names, list_ops  # noqa: F401
from tests.test_export import answer_warmup_requests
from tests.training.test_resume import _listed_steps, _start, _wait_for_first_checkpoint

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
SENTENCES = ["the dog saw a cat .", "", "Anna laughed ( quietly ) .", "hello"]


def run_module(module, *args, expect=0):
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    process = subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, env=env,
                             cwd=REPOSITORY, timeout=900)
    assert process.returncode == expect, process.stderr.decode()[-3000:]
    return process.stdout.decode(), process.stderr.decode()


@pytest.fixture(scope="module")
def toy_treebank(tmp_path_factory):
    return write_toy_treebank(tmp_path_factory.mktemp("toy"), sizes={"train": 300, "dev": 12, "test": 12})


def train_command(paths, workdir, export_dir, steps):
    """The job's flags; export_dir None: --no-export."""
    export = ["--no-export"] if export_dir is None else ["--export-dir", export_dir]
    return ["--train", paths["train"], "--dev", paths["dev"], "--test", paths["test"], "--preset", "parsing_tiny",
            "--workdir", workdir, *export, "--train-steps", steps, "--checkpoint-every-steps", 10, "--verbose", 0]


def parse_here(capsys, *args):
    """pipelines.parse in this process, which saves a Python and TensorFlow start-up (the README's
    parse command runs in its own, tests/test_readme_commands.py): what it printed on stderr."""
    capsys.readouterr()
    parse.main([str(arg) for arg in args])
    return capsys.readouterr().err


def parse_with_run_and_saved_model(workdir, saved_model, tmp_path, capsys):
    """pipelines.parse of SENTENCES with the run directory and with the SavedModel (the latest
    version under it, or that version): the same trees, each over its sentence's words; their files."""
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("".join(line + "\n" for line in SENTENCES))
    outputs = {}
    for name, model in (("run", workdir), ("saved_model", saved_model)):
        outputs[name] = tmp_path / f"trees-{name}.txt"
        stderr = parse_here(capsys, "--model", model, "--input", sentences, "--output", outputs[name])
        assert "0 of 4 answers needed repair" in stderr, stderr[-2000:]
        lines = outputs[name].read_text().splitlines()
        assert lines[1] == "" and len(lines) == 4
        for sentence, line in zip(SENTENCES, lines):
            if sentence:
                assert parse_tree(line).words() == sentence.replace("(", "-LRB-").replace(")", "-RRB-").split()
    assert outputs["run"].read_text() == outputs["saved_model"].read_text()
    return outputs


@pytest.mark.slow
def test_train_parser_then_parse(readme_parser_run, tmp_path, core_op_names, capsys):  # noqa: F811
    workdir, export_dir, stdout = (readme_parser_run.workdir, readme_parser_run.saved_model.parent,
                                   readme_parser_run.stdout["pipelines.train_parser"])
    treebank = readme_parser_run.directory / "data" / "toy-treebank"
    dev, test = (len((treebank / f"{split}.mrg").read_text().splitlines()) for split in ("dev", "test"))
    steps = PARSER_TRAIN_STEPS
    assert re.search(rf"^dev \({steps} steps, .*beam 4, alpha 0.3\): EVALB \(COLLINS.prm\) F1 \d+\.\d\d .* {dev} "
                     r"sentences, \d+ errors, 0 skipped; 0 answers needed repair$", stdout, flags=re.M), stdout
    assert re.search(rf"^test \({steps} steps.* {test} sentences", stdout, flags=re.M), stdout
    assert stdout.strip().splitlines()[-1].startswith("SavedModel: ")  # the job's last line
    assert readme_parser_run.saved_model.name == "1" and (readme_parser_run.saved_model / "saved_model.pb").is_file()
    scores = json.loads((workdir / "test_scores.json").read_text())
    assert scores["sentences"] == test and scores["repaired"] == 0
    assert (workdir / "tensorboard" / "validation").is_dir()
    assert json.loads((workdir / "decode_config.json").read_text())["extra_length"] == 300
    # TF Serving's binary links TF Text 2.20's kernels: only core ops and the SentencePiece ones.
    listed = list_ops(export_dir / "1", core_op_names)
    registered = listed["registered"]
    assert {op for op, in_core in registered.items() if not in_core} == SENTENCEPIECE_OPS
    assert not set(registered) & PYTHON_OPS and "While" in registered
    assert listed["without_cpu_kernel"] == [] and listed["float_types"] == ["DT_FLOAT"]

    outputs = parse_with_run_and_saved_model(workdir, export_dir, tmp_path, capsys)
    # The tag dictionary the job wrote from the train trees: both parsed with it.
    dictionary = read_tag_dictionary(workdir)
    assert dictionary.words["the"] == ("DT",) and dictionary.words["."] == (".",)
    settings = json.loads((export_dir / "1" / "assets" / "translator.json").read_text())
    assert settings["tag_dictionary"]["words"] == len(dictionary.words)
    for sentence, line in zip(SENTENCES, outputs["saved_model"].read_text().splitlines()):
        for word, tag in zip(sentence.replace("(", "-LRB-").replace(")", "-RRB-").split(), parse_tree(line).tags()
                             if sentence else []):
            allowed = dictionary.allowed(word)  # () for an unlisted word when no rare word had a tag
            assert tag in allowed or not (allowed or word in dictionary.words), (word, tag, line)


@pytest.mark.slow
def test_the_span_parser_with_character_features_trains_resumes_exports_and_parses(toy_treebank, tmp_path, capsys,
                                                                                   core_op_names):  # noqa: F811
    """model.span_char_filters through the job, with model.span_word_unk_alpha (the word counts it
    reads written with the vocabulary, read again on resuming) and a partitioned encoder
    (model.span_partitioned): trained, its character layers (and the unknown words' random state) in
    the checkpoints (stopped by SIGTERM after the first one, then resumed from the checkpoint it
    saved) and in the SavedModel (core ops and SentencePiece's only), which parses as the run
    directory does."""
    workdir, export_dir = tmp_path / "run", tmp_path / "exported"
    flags = ["--set", "model.span_char_filters=16", "--set", "model.span_word_unk_alpha=1",
             "--set", "model.span_partitioned=true", "--parser", "span"]
    command = [sys.executable, "-m", "pipelines.train_parser",
               *map(str, train_command(toy_treebank, workdir, export_dir, 30)), *flags]
    process = _start(command, tmp_path / "stopped.log")
    _wait_for_first_checkpoint(process, workdir, tmp_path / "stopped.log")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=900) == 143, (tmp_path / "stopped.log").read_text()[-3000:]
    stopped = _listed_steps(workdir)[-1]
    assert 10 <= stopped < 30 and not export_dir.exists()
    stdout, stderr = run_module(*command[2:])
    assert f"training from step {stopped}," in stderr, stderr[-2000:]
    assert re.search(r"^dev \(30 steps, .*CKY\): EVALB \(COLLINS.prm\) F1 \d+\.\d\d .* 12 sentences, \d+ errors, "
                     r"0 skipped; 0 answers needed repair$", stdout, flags=re.M), stdout
    assert re.search(r"^test \(30 steps.* 12 sentences", stdout, flags=re.M), stdout
    assert ";linearization=depth;parser=span" in (workdir / "data_config.json").read_text()
    model_config = json.loads((workdir / "model_config.json").read_text())
    assert model_config["span_char_filters"] == 16 and model_config["span_word_unk_alpha"] == 1
    assert read_word_counts(workdir)["the"] > 10
    assert model_config["span_partitioned"] is True
    saved_model = export_dir / "1"  # the resumed run's, the first export
    settings = json.loads((saved_model / "assets" / "translator.json").read_text())
    assert settings["parser"] == "span" and settings["signatures"] == ["serving_default", "score"]
    # TF Serving runs the warm-up requests as it loads the model: `score`'s are trees it can score.
    loaded = tf.saved_model.load(str(saved_model))
    assert answer_warmup_requests(saved_model, loaded, "exported") == ["serving_default", "score"]
    listed = list_ops(saved_model, core_op_names)
    registered = listed["registered"]
    assert {op for op, in_core in registered.items() if not in_core} <= SENTENCEPIECE_OPS
    assert not set(registered) & PYTHON_OPS and listed["without_cpu_kernel"] == []

    parse_with_run_and_saved_model(workdir, saved_model, tmp_path, capsys)
    # Parsing never reads the word counts; training a run that lacks them (one from before them) says so.
    (workdir / "word_counts.json").unlink()
    config = RunConfigs.read(workdir).model
    assert PARSING.model(config, workdir).targets.word_count_table is None
    with pytest.raises(FileNotFoundError, match=r"span_word_unk_alpha=1(\.0)? reads the train split's word counts, .*"
                                                r"word_counts.json, which this run \(from before them\) lacks"):
        PARSING.model(config, workdir, training=True)


@pytest.mark.parametrize("text, line, what", [
    ("(S (NP (NN a)) (VP (VB b)))\n(S (NP (NN a)) (VP (VB b))\n", 2, "never closed"),
    ("(S (NP (NN a)) (VP (VB b)))\nnot a tree\n", 2, "text outside any tree"),
    ("(S (NP (NN a)) (VP (VB b)))\n(ROOT (S (-NONE- *)))\n", 2, "no words"),
])
def test_a_bad_treebank_stops_the_job_before_training(toy_treebank, tmp_path, capsys, text, line, what):
    bad = tmp_path / "bad.mrg"
    bad.write_text(text)
    paths = dict(toy_treebank, dev=bad)
    assert train_parser.main(list(map(str, train_command(paths, tmp_path / "run", tmp_path / "x", 5)))) == 2
    stderr = capsys.readouterr().err
    assert re.search(rf"error: {re.escape(str(bad))}:{line}: .*{what}", stderr), stderr
    assert not (tmp_path / "run").exists()


def test_the_loss_flag_reaches_the_runs_corpus_spec(toy_treebank, tmp_path, capsys):
    argv = [*map(str, train_command(toy_treebank, tmp_path / "run", tmp_path / "x", 5)), "--dry-run",
            "--linearization", "depth_word_first", "--loss", "labels"]
    assert train_parser.main(argv) == 0
    assert ";linearization=depth_word_first;loss=labels" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        train_parser.main([*argv[:-1], "words"])
    assert "argument --loss: invalid choice: 'words'" in capsys.readouterr().err


def test_the_toy_treebank_command_writes_the_sizes_it_is_given(tmp_path, capsys):
    toy_treebank_command.main(["--output", str(tmp_path / "toy"), "--train", "5", "--dev", "3", "--test", "2"])
    assert [len((tmp_path / "toy" / f"{split}.mrg").read_text().splitlines()) for split in ("train", "dev", "test")] \
        == [5, 3, 2]
    assert len((tmp_path / "toy" / "sentences.txt").read_text().splitlines()) == 2
    assert "dev: " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        toy_treebank_command.main(["--output", str(tmp_path / "bad"), "--dev", "0"])
    assert "--dev: must be at least 1; got 0" in capsys.readouterr().err


@pytest.mark.parametrize("batch_size", ["0", "-1"])
def test_parse_refuses_a_batch_size_below_one(tmp_path, capsys, batch_size):
    """-1 made no batch at all: every answer empty, then "repaired" into a flat tree, exit 0."""
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("a b\n")
    with pytest.raises(SystemExit) as exit_info:
        parse.main(["--model", str(tmp_path / "no-run"), "--input", str(sentences), "--batch-size", batch_size])
    assert exit_info.value.code == 2
    assert f"error: --batch-size must be >= 1, got {batch_size}" in capsys.readouterr().err
