"""Entry points: `python -m pipelines.<name>`. Thin: parse flags, build configs, call the library.

TensorFlow leaves its oneDNN kernels off on AMD CPUs unless TF_ENABLE_ONEDNN_OPTS=1 is set before it is
imported (1.3 to 1.9 times faster training here); the entry points turn them on unless the user set
the variable. The library itself never touches the environment.

TensorFlow's C++ log is kept to fatal messages (TF_CPP_MIN_LOG_LEVEL=3, unless the user set it): a
healthy run on a machine without a GPU would otherwise print error-level lines that mean nothing
(cuInit failing for want of a CUDA driver; oneDNN falling back to Eigen for an int64 op). A real
failure still raises a Python exception with TensorFlow's message; set TF_CPP_MIN_LOG_LEVEL=0 to see
the whole log.
"""
import os

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def show_job_log():
    """Python's log on stderr as every entry point shows it: warnings from everything, and the
    library's own INFO lines (restored and saved checkpoints, the data position, the time budget)."""
    import logging
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("keras_transformer").setLevel(logging.INFO)
