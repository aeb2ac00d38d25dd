"""benchmarks/common.py's run_main: how a training benchmark (multi30k.py, gum_parsing.py) ends when
SIGTERM stops its training."""
import pytest

from benchmarks.common import run_main
from keras_transformer.training.checkpointing import TrainingInterrupted


def test_a_run_stopped_by_sigterm_ends_with_its_message_and_143(capsys):
    message = "SIGTERM: saved runs/r/checkpoints/ckpt-250 at step 250; run the same command again to resume"

    def main():
        raise TrainingInterrupted(message)

    assert run_main(main) == 143
    assert capsys.readouterr().err == message + "\n"


def test_other_errors_and_results_pass_through():
    assert run_main(lambda: None) is None

    def main():
        raise ValueError("a bad flag")

    with pytest.raises(ValueError, match="a bad flag"):
        run_main(main)
