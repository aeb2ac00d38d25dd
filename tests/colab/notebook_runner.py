"""Executes the colab/ notebooks as CI does: offline, tiny preset, numbers corpus, in a scratch directory.

    python -m tests.colab.notebook_runner                      # execute both; report errors and timings
    python -m tests.colab.notebook_runner --output-dir colab   # and write their outputs into colab/*.ipynb

`--output-dir colab` is how the committed notebooks get their outputs (the plots a reader sees on
GitHub); run `jupytext --sync colab/*.py` first if you edited the paired .py files. The written
notebooks leave out the stderr streams (TensorFlow's and SentencePiece's C++ logs, Python warnings),
which only add noise.
"""
import argparse
import contextlib
import os
import pathlib
import sys
import tempfile
import time

import jupytext
import nbformat
from nbclient import NotebookClient

REPOSITORY = pathlib.Path(__file__).resolve().parents[2]
COLAB = REPOSITORY / "colab"
NOTEBOOKS = ("train_transformer", "serve_and_query")
# What the notebooks' parameter cells read: the offline corpus, the tiny preset, no TensorBoard server.
OFFLINE_ENVIRONMENT = {"KT_NOTEBOOK_DATASET": "numbers", "KT_NOTEBOOK_PRESET": "tiny",
                       "KT_NOTEBOOK_TENSORBOARD": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
CELL_TIMEOUT_SECONDS = 600


def kernel_environment(extra=None):
    """os.environ with the offline settings, and the repository importable even if not installed."""
    environment = {**os.environ, **OFFLINE_ENVIRONMENT, **(extra or {})}
    python_path = [str(REPOSITORY)] + ([environment["PYTHONPATH"]] if environment.get("PYTHONPATH") else [])
    environment["PYTHONPATH"] = os.pathsep.join(python_path)
    return environment


def execute_notebook(name, workdir, extra_environment=None):
    """Runs colab/<name>.ipynb top to bottom with cwd workdir; returns the executed notebook.

    Raises nbclient.exceptions.CellExecutionError on the first cell that fails.
    """
    notebook = jupytext.read(COLAB / f"{name}.ipynb")
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT_SECONDS, kernel_name="python3",
                            record_timing=False, resources={"metadata": {"path": str(workdir)}})
    client.execute(env=kernel_environment(extra_environment))
    return notebook


def png_outputs(notebook):
    """The number of image/png outputs of a notebook's code cells."""
    return sum("image/png" in output.get("data", {})
               for cell in notebook.cells if cell.cell_type == "code" for output in cell.get("outputs", []))


def without_stderr(notebook):
    """The notebook with every stderr stream output removed (in place)."""
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = [output for output in cell.outputs
                            if not (output.output_type == "stream" and output.name == "stderr")]
    return notebook


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help=f"some of {', '.join(NOTEBOOKS)} (default: both)")
    parser.add_argument("--output-dir", type=pathlib.Path,
                        help="write the executed notebooks there (colab: refresh the committed outputs)")
    parser.add_argument("--workdir", type=pathlib.Path,
                        help="run every notebook in this directory, in order, so serve_and_query serves "
                             "train_transformer's export (default: a new temporary directory for each)")
    args = parser.parse_args()
    unknown = set(args.notebooks) - set(NOTEBOOKS)
    if unknown:
        parser.error(f"unknown notebooks {sorted(unknown)}; known: {', '.join(NOTEBOOKS)}")
    for name in args.notebooks or NOTEBOOKS:
        with contextlib.ExitStack() as stack:
            if args.workdir:
                args.workdir.mkdir(parents=True, exist_ok=True)
            workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix=f"{name}-"))
            start = time.monotonic()
            notebook = execute_notebook(name, workdir)
            print(f"{name}: ran in {time.monotonic() - start:.0f} s, {png_outputs(notebook)} PNG outputs")
        if args.output_dir:
            args.output_dir.mkdir(parents=True, exist_ok=True)
            nbformat.write(without_stderr(notebook), args.output_dir / f"{name}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
