import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_readme_quickstart_trains_and_translates(tmp_path):
    """The README's first command, shortened: it trains, evaluates and prints translations."""
    result = subprocess.run([sys.executable, "-m", "pipelines.quickstart", "--workdir", str(tmp_path),
                             "--steps", "100"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = float(re.search(r"validation: token accuracy ([0-9.]+)", result.stdout).group(1))
    assert accuracy > 0.3  # an untrained model is near 1 / vocabulary size
    assert result.stdout.count("(reference: ") == 5
    assert (tmp_path / "sentencepiece.model").exists()
