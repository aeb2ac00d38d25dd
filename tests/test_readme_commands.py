"""Every command in the README runs somewhere, so the README cannot go stale.

Each shell command of the README's ```bash blocks is one of:
  - the two set-up commands: the first is run by tests/readme_run.py (with fewer steps), the second
    is .ci/run itself (checked below to be exactly that command);
  - `curl` requests and the gRPC snippet: run by tests/test_serving_readme.py;
  - `docker run` of TF Serving: no Docker engine runs on our machines, so the test checks that the
    folder it mounts is the export the first command writes, in TF Serving's NAME/VERSION layout;
  - `TF_CONFIG=... python -m pipelines.train_wmt ...`, the workers of "Several machines": run by
    tests/training/test_multi_worker.py (on free ports, with fewer steps);
  - `python -m pipelines.*`: run here, in a directory where runs/numbers-reverse-tiny and
    exported/numbers-reverse-tiny are the first command's output; the quick parsing run's two
    commands are run once by tests/readme_run.py (with fewer steps), whose output
    tests/pipelines/test_train_parser.py checks too, and only checked here.
A command of any other kind fails the test until it is given a way to run: benchmark commands
(`python benchmarks/...`) stand in the Results table, not in ```bash blocks.
"""
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from keras_transformer.parsing import parse_tree
from tests.readme_run import (README, REPOSITORY, readme_commands, readme_parser_commands,  # noqa: F401
                              readme_parser_run, readme_run)
from tests.test_serving_readme import ENGLISH_NUMBER
from tests.training.test_multi_worker import readme_worker_commands

pytestmark = pytest.mark.slow


def test_the_second_setup_command_is_what_ci_runs():
    test_command = readme_commands()[1]
    assert test_command == 'pip install -e ".[test]" && python -m pytest -q'
    assert test_command in (REPOSITORY / ".ci" / "run").read_text().splitlines()


def test_every_readme_command_has_a_runner():
    kinds = {"setup": 0, "curl": 0, "docker": 0, "pipeline": 0, "worker": 0}
    for command in readme_commands():
        if command.startswith("pip install"):
            kinds["setup"] += 1
        elif command.startswith("curl "):
            kinds["curl"] += 1
        elif command.startswith("docker run"):
            kinds["docker"] += 1
        elif command.startswith("python -m pipelines."):
            kinds["pipeline"] += 1
        elif command.startswith("TF_CONFIG=") and " python -m pipelines.train_wmt " in command:
            kinds["worker"] += 1
        else:
            pytest.fail(f"README command without a runner: {command}")
    assert kinds["setup"] == 2 and kinds["curl"] == 3 and kinds["docker"] == 1 and kinds["pipeline"] >= 3
    assert kinds["worker"] == len(readme_worker_commands()) == 2


def test_docker_serves_what_the_first_command_exports(readme_run):
    (command,) = [c for c in readme_commands() if c.startswith("docker run")]
    mount = re.search(r'-v "\$PWD/([^:"]+):/models/([^"]+)"', command)
    name = re.search(r"MODEL_NAME=(\S+)", command).group(1)
    assert mount.group(1) == f"exported/{readme_run.export_dir.name}"
    assert mount.group(2) == name == readme_run.export_dir.name
    assert (readme_run.export_dir / "1" / "saved_model.pb").is_file()  # NAME/VERSION/, as TF Serving reads
    assert re.search(r"tensorflow/serving:\d+\.\d+\.\d+$", command)


@pytest.fixture(scope="module")
def readme_directory(readme_run, readme_parser_run, tmp_path_factory):
    """A working directory laid out as after the first command and the quick parsing run, with a
    sources.txt to translate."""
    directory = tmp_path_factory.mktemp("readme_commands")
    shutil.copytree(readme_run.workdir, directory / "runs" / readme_run.workdir.name)
    shutil.copytree(readme_run.export_dir, directory / "exported" / readme_run.export_dir.name)
    shutil.copytree(readme_parser_run.directory, directory, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.stdout"))
    (directory / "sources.txt").write_text("sieben\ndreihundertzwölf\n", encoding="utf-8")
    return directory


@pytest.mark.parametrize("index", [i for i, c in enumerate(readme_commands()) if c.startswith("python -m pipelines.")])
def test_readme_pipeline_command_runs(index, readme_directory, readme_parser_run):
    command = readme_commands()[index]
    argv = [sys.executable] + shlex.split(command)[1:]
    if command in readme_parser_commands().values():  # run by readme_parser_run, with fewer steps
        if "pipelines.train_parser" in command:
            assert re.search(r"^dev .*EVALB \(COLLINS.prm\) F1 .*\ntest .*F1 .*\nSavedModel: ",
                             readme_parser_run.stdout["pipelines.train_parser"], flags=re.M)
        assert (readme_directory / "data" / "toy-treebank" / "sentences.txt").is_file()
        return
    if "--dataset" not in command and "pipelines.train_wmt" in command:
        argv.append("--dry-run")  # WMT14 cannot be downloaded here; tests/data/test_tfds_corpus.py mocks it
    if "pipelines.train_parser" in command:  # the WSJ is the LDC's
        argv.append("--dry-run")
    result = subprocess.run(argv, cwd=readme_directory, capture_output=True, text=True, timeout=900,
                            env={**os.environ, "PYTHONPATH": str(REPOSITORY)})
    assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    if "pipelines.translate" in command:
        output = pathlib.Path(readme_directory, re.search(r"--output (\S+)", command).group(1))
        translations = output.read_text(encoding="utf-8").splitlines()
        assert len(translations) == 2 and all(ENGLISH_NUMBER.fullmatch(text) for text in translations), translations
    if "pipelines.evaluate" in command:
        assert "sacreBLEU" in result.stdout and "nrefs:1|case:mixed" in result.stdout
    if "--dry-run" in argv and "pipelines.train_parser" in command:
        assert '"d_model": 1024' in result.stdout and '"beam_size": 21' in result.stdout
        assert '"extra_length": 300' in result.stdout and '"num_layers": 4' in result.stdout
    elif "--dry-run" in argv:
        assert '"train_steps": 100000' in result.stdout and '"d_model": 512' in result.stdout
    if "pipelines.parse" in command:
        output = pathlib.Path(readme_directory, re.search(r"--output (\S+)", command).group(1))
        source = pathlib.Path(readme_directory, re.search(r"--input (\S+)", command).group(1))
        sentences, trees = source.read_text().splitlines(), output.read_text().splitlines()
        assert len(trees) == len(sentences) > 0
        assert all(parse_tree(tree).words() == sentence.split() for sentence, tree in zip(sentences, trees))
    if "pipelines.export" in command:
        version = readme_directory / result.stdout.strip()  # exported/<name>/<version>
        assert version.is_dir() and int(version.name) >= 2  # beside the first command's version 1
        precision = re.search(r"--precision (\S+)", command)
        settings = json.loads((version / "assets" / "translator.json").read_text())
        assert settings["precision"] == (precision.group(1) if precision else "float32")
