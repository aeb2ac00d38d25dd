"""The README's first command (`python -m pipelines.train_wmt --preset tiny --dataset numbers
--reverse`), run once per test session with fewer steps, in a temporary run and export directory.

tests/training/test_pipeline.py checks the run; tests/test_serving_readme.py serves its SavedModel,
as the README serves what its first command exported. The README's quick parsing run (the toy
treebank and the parser trained on it) is made once too, for tests/test_readme_commands.py and
tests/pipelines/test_train_parser.py. The work is cached on disk under the
session's base temporary directory, as in tests/trained_tiny.py (once for all pytest-xdist workers).
"""
import dataclasses
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from tests.trained_tiny import once_per_session

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"
TRAIN_STEPS = 200
CHECKPOINT_EVERY_STEPS = 25  # the tiny preset averages the last 3: steps 150, 175 and 200
PROFILE_STEPS = 2  # RunConfig.profile_steps: a user's run with the profiler on prints nothing alarming either


@dataclasses.dataclass(frozen=True)
class ReadmeRun:
    workdir: pathlib.Path
    export_dir: pathlib.Path
    stdout: str
    stderr: str


def readme_train_command():
    """The README's first command, after its `pip install ... &&`."""
    block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    command = block.strip().split("&&")[-1].split()
    assert command[:3] == ["python", "-m", "pipelines.train_wmt"], block
    return command[1:]


def run_readme_command(workdir, export_dir):
    """Runs the README's first command with fewer steps and a profile of PROFILE_STEPS of them, in
    the environment a user has (no TF_CPP_MIN_LOG_LEVEL of the test session's); returns (stdout,
    stderr) (asserts it succeeded)."""
    command = [sys.executable, *readme_train_command(), "--train-steps", str(TRAIN_STEPS),
               "--checkpoint-every-steps", str(CHECKPOINT_EVERY_STEPS), "--workdir", str(workdir),
               "--export-dir", str(export_dir), "--verbose", "2", "--set", f"profile_steps={PROFILE_STEPS}"]
    environment = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=1500,
                            env=environment)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout, result.stderr


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory) -> ReadmeRun:
    def run_and_keep_its_output(root):
        root.mkdir(parents=True, exist_ok=True)
        stdout, stderr = run_readme_command(root / "runs" / "numbers-reverse-tiny",
                                            root / "exported" / "numbers-reverse-tiny")
        (root / "stderr.txt").write_text(stderr)
        (root / "stdout.txt").write_text(stdout)

    root = once_per_session(tmp_path_factory, "readme_run", run_and_keep_its_output)
    return ReadmeRun(root / "runs" / "numbers-reverse-tiny", root / "exported" / "numbers-reverse-tiny",
                     stdout=(root / "stdout.txt").read_text(), stderr=(root / "stderr.txt").read_text())


def readme_commands():
    """Shell commands of the README's bash blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        commands += [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return commands


PARSER_TRAIN_STEPS = 20
# Fewer steps, and 12 dev and test trees instead of 150: an untrained parser's answers are long.
PARSER_FLAGS = {"pipelines.toy_treebank": ["--dev", "12", "--test", "12"],
                "pipelines.train_parser": ["--train-steps", str(PARSER_TRAIN_STEPS), "--checkpoint-every-steps", "10"]}


def readme_parser_commands():
    """The README's offline quick parsing run (the toy treebank, then the parser trained on it), not
    the WSJ recipe: {module: command}."""
    return {command.split()[2]: command for command in readme_commands()
            if command.startswith(("python -m pipelines.toy_treebank", "python -m pipelines.train_parser"))
            and "/wsj/" not in command}


@dataclasses.dataclass(frozen=True)
class ReadmeParserRun:
    directory: pathlib.Path  # where the commands ran: data/toy-treebank, runs/toy-parser, exported/...
    stdout: dict  # {module: what it printed}

    @property
    def workdir(self) -> pathlib.Path:
        return self.directory / re.search(r"--workdir (\S+)", readme_parser_commands()["pipelines.train_parser"]).group(1)

    @property
    def saved_model(self) -> pathlib.Path:
        return self.directory / re.search(r"^SavedModel: (.*)$", self.stdout["pipelines.train_parser"],
                                          flags=re.M).group(1)


@pytest.fixture(scope="session")
def readme_parser_run(tmp_path_factory) -> ReadmeParserRun:
    """The README's quick parsing run, with PARSER_FLAGS, once per session (for
    tests/test_readme_commands.py and tests/pipelines/test_train_parser.py)."""
    commands = readme_parser_commands()
    assert list(commands) == ["pipelines.toy_treebank", "pipelines.train_parser"], commands

    def run_both(root):
        root.mkdir(parents=True, exist_ok=True)
        for module, command in commands.items():
            result = subprocess.run([sys.executable, *shlex.split(command)[1:], *PARSER_FLAGS.get(module, [])],
                                    cwd=root, capture_output=True, text=True, timeout=1500,
                                    env={**os.environ, "PYTHONPATH": str(REPOSITORY)})
            assert result.returncode == 0, f"{command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            (root / f"{module}.stdout").write_text(result.stdout)

    root = once_per_session(tmp_path_factory, "readme_parser_run", run_both)
    return ReadmeParserRun(root, {module: (root / f"{module}.stdout").read_text() for module in commands})
