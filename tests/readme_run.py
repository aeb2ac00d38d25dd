"""The README's first command (`python -m pipelines.train_wmt --preset tiny --dataset numbers
--reverse`), run once per test session with fewer steps, in a temporary run and export directory.

tests/training/test_pipeline.py checks the run; tests/test_serving_readme.py serves its SavedModel,
as the README serves what its first command exported. The work is cached on disk under the
session's base temporary directory, as in tests/trained_tiny.py.
"""
import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]
README = REPOSITORY / "README.md"
TRAIN_STEPS = 300
CHECKPOINT_EVERY_STEPS = 50  # the tiny preset averages the last 3: steps 200, 250 and 300


@dataclasses.dataclass(frozen=True)
class ReadmeRun:
    workdir: pathlib.Path
    export_dir: pathlib.Path
    stdout: str


def readme_train_command():
    """The README's first command, after its `pip install ... &&`."""
    block = re.search(r"```bash\n(.*?)```", README.read_text(), flags=re.S).group(1)
    command = block.strip().split("&&")[-1].split()
    assert command[:3] == ["python", "-m", "pipelines.train_wmt"], block
    return command[1:]


def run_readme_command(workdir, export_dir):
    """Runs the README's first command with fewer steps; returns its stdout (asserts it succeeded)."""
    command = [sys.executable, *readme_train_command(), "--train-steps", str(TRAIN_STEPS),
               "--checkpoint-every-steps", str(CHECKPOINT_EVERY_STEPS), "--workdir", str(workdir),
               "--export-dir", str(export_dir), "--verbose", "2"]
    result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=1500)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory) -> ReadmeRun:
    root = tmp_path_factory.getbasetemp() / "readme_run"
    run = ReadmeRun(root / "runs" / "numbers-reverse-tiny", root / "exported" / "numbers-reverse-tiny",
                    stdout="")
    log = root / "stdout.txt"
    if not log.exists():
        root.mkdir(parents=True, exist_ok=True)
        stdout = run_readme_command(run.workdir, run.export_dir)
        log.write_text(stdout)
    return dataclasses.replace(run, stdout=log.read_text())
