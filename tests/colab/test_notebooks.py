"""The colab/ notebooks: each .ipynb holds the same code as its jupytext .py pair, its saved outputs
show the plots, and it runs top to bottom offline (tiny preset, numbers corpus) in a scratch directory.
"""
import json
import os
import subprocess
import sys

import jupytext
import nbformat
import pytest
import tensorflow as tf
from jupytext.compare import NotebookDifference, compare_notebooks

from tests.colab.notebook_runner import COLAB, NOTEBOOKS, REPOSITORY, execute_notebook, png_outputs

# train_transformer: the learning-rate schedule, the loss history, the attention heat-map;
# serve_and_query: the n-best scores.
EXPECTED_PLOTS = {"train_transformer": 3, "serve_and_query": 1}
MAX_NOTEBOOK_BYTES = 300_000
# The executed notebooks' training steps (their defaults are 300 and 200): these tests check that every
# cell runs and what it shows and writes, not what the model learns (tests/training/test_pipeline.py does).
CI_STEPS = {"KT_NOTEBOOK_STEPS": "50"}


def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_and_its_py_pair_hold_the_same_code(name):
    text, notebook = jupytext.read(COLAB / f"{name}.py"), jupytext.read(COLAB / f"{name}.ipynb")
    compare_notebooks(notebook, text, fmt="py:percent")
    assert notebook.metadata["jupytext"]["formats"] == "ipynb,py:percent"


def test_the_pair_comparison_sees_a_changed_line():
    text = jupytext.read(COLAB / "serve_and_query.py")
    notebook = jupytext.read(COLAB / "serve_and_query.ipynb")
    code_cells(notebook)[-1].source += "\nprint('only in the notebook')"
    with pytest.raises(NotebookDifference):
        compare_notebooks(notebook, text, fmt="py:percent")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_saved_notebook_was_executed_and_shows_its_plots(name):
    path = COLAB / f"{name}.ipynb"
    notebook = nbformat.read(path, as_version=4)
    cells = code_cells(notebook)
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1)), "run top to bottom once"
    assert not [output for cell in cells for output in cell.outputs if output.output_type == "error"]
    assert png_outputs(notebook) == EXPECTED_PLOTS[name]
    assert path.stat().st_size < MAX_NOTEBOOK_BYTES


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_parameters_cell_reads_the_ci_settings_from_the_environment(name):
    notebook = jupytext.read(COLAB / f"{name}.py")
    parameters = [cell for cell in code_cells(notebook) if "parameters" in cell.metadata.get("tags", [])]
    assert len(parameters) == 1
    assert "os.environ.get(\"KT_NOTEBOOK_" in parameters[0].source


def stdout_of(notebook):
    return "".join(output.get("text", "") for cell in code_cells(notebook) for output in cell.outputs
                   if output.output_type == "stream" and output.name == "stdout")


@pytest.mark.slow
def test_train_transformer_runs_offline_and_serve_and_query_serves_its_export(tmp_path):
    notebook = execute_notebook("train_transformer", tmp_path, CI_STEPS)  # raises on the first failing cell
    assert png_outputs(notebook) == EXPECTED_PLOTS["train_transformer"]
    assert (tmp_path / "exported" / "numbers-tiny" / "1" / "saved_model.pb").is_file()
    assert (tmp_path / "runs" / "numbers-tiny" / "logs").is_dir()  # TensorBoard's event files
    run = tmp_path / "runs" / "numbers-tiny"  # what keras_transformer.export.load_model_from_workdir reads
    assert {"model_config.json", "decode_config.json", "sentencepiece.model"} <= {path.name for path in run.iterdir()}
    assert tf.train.latest_checkpoint(str(run / "checkpoints"))
    output = stdout_of(notebook)
    assert "dataset numbers, preset tiny" in output
    assert "signatures: ['score', 'serving_default', 'translate_nbest']" in output

    # In the same directory (one Colab runtime), the second notebook serves the first one's export.
    output = stdout_of(execute_notebook("serve_and_query", tmp_path, CI_STEPS))
    assert "not found" not in output
    assert "serving exported/numbers-tiny/1: model 'numbers-tiny', version 1" in output


@pytest.mark.slow
def test_serve_and_query_makes_a_model_when_none_is_given_and_queries_it(tmp_path):
    """Through the runner's command line, as the README has it (another output directory)."""
    process = subprocess.run([sys.executable, "-m", "tests.colab.notebook_runner", "serve_and_query",
                              "--workdir", str(tmp_path / "work"), "--output-dir", str(tmp_path / "out")],
                             cwd=REPOSITORY, capture_output=True, text=True, timeout=900,
                             env={**os.environ, **CI_STEPS})
    assert process.returncode == 0, process.stderr[-5000:]
    assert "serve_and_query: ran in" in process.stdout
    notebook = nbformat.read(tmp_path / "out" / "serve_and_query.ipynb", as_version=4)
    assert png_outputs(notebook) == EXPECTED_PLOTS["serve_and_query"]
    assert (tmp_path / "work" / "exported" / "numbers-tiny" / "1" / "saved_model.pb").is_file()
    output = stdout_of(notebook)
    assert "exported/numbers-tiny not found: training the tiny preset for 50 steps" in output
    responses = [json.loads(line.split("-> ", 1)[1]) for line in output.splitlines() if "  -> {" in line]
    assert [sorted(response) for response in responses] == [["predictions"], ["outputs"], ["predictions"]]
    assert sorted(responses[0]["predictions"][0]) == ["scores", "translations"]
    assert len(responses[1]["outputs"]["translations"][0]) == 3  # beam_size 3
