"""Session-wide TensorFlow set-up for the tests.

Eight logical CPU devices exist for the whole session, so that tests can compare a MirroredStrategy
over 8 replicas with one device; they must be declared before TensorFlow runs its first op.
"""
import os
import resource
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# One intra-op and one inter-op thread in each test process and in the jobs they start (subprocesses
# inherit them): pytest.ini runs several test processes on the two cores, and two threads each made
# them contend. A 1024 x 1024 matrix product took 13% more CPU time on 2 intra-op threads than on 1; the
# whole suite took 1,743 CPU seconds with 2 inter-op threads and 1,618 with 1 (Zen 4, 2026-12-06).
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
# Corpus file checks are remembered here, not in the home folder (subprocesses inherit it).
os.environ.setdefault("KT_CORPUS_CHECK_CACHE", tempfile.mkdtemp(prefix="kt_corpus_checks_"))

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

NUM_LOGICAL_CPUS = 8

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)

from keras_transformer.precision import set_dtype_policy  # noqa: E402  (after the devices are set)


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state and the default dtype policy, and leaves the
    default policy behind (module-scoped fixtures of the next module are made before this runs)."""
    keras.utils.set_random_seed(1234)
    keras.config.set_dtype_policy("float32")
    yield
    set_dtype_policy("float32")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """How pytest-xdist (`--dist loadgroup`, pytest.ini) shares the tests between its processes: each
    file's tests go to one process, so that its module fixtures are made once, and the tests that use
    the README's runs (tests/readme_run.py) go to one process too, so that no process waits for the
    other to finish them. The files run in collection order: slow files first was no faster (923 s
    against 877 and 902 s in collection order on the same 2-core machine, 2026-11-24)."""
    for item in items:
        shared = {"readme_run", "readme_parser_run"} & set(item.fixturenames)
        group = "readme_run" if shared else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


def _cpu_seconds():
    """User + system CPU seconds of this process and of its waited-for children."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (resource.getrusage(resource.RUSAGE_SELF),
                                                             resource.getrusage(resource.RUSAGE_CHILDREN)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With KT_TEST_CPU_LOG=FILE, appends "CPU seconds<TAB>wall seconds<TAB>test id<TAB>pytest-xdist
    process<TAB>start (Unix time)" for each test (set-up, call and teardown, its subprocesses
    included): what a test costs the suite on a shared machine, where wall time depends on what the
    other pytest-xdist process runs meanwhile, and when it ran there (the suite's timeline)."""
    path = os.environ.get("KT_TEST_CPU_LOG")
    cpu, wall, start = _cpu_seconds(), time.monotonic(), time.time()
    yield
    if path:
        with open(path, "a") as log:
            log.write(f"{_cpu_seconds() - cpu:.1f}\t{time.monotonic() - wall:.1f}\t{item.nodeid}\t"
                      f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}\t{start:.1f}\n")
