"""Several workers on localhost: the README's two TF_CONFIG commands (2 workers x 2 logical CPUs),
worker 1 killed after the first checkpoint: the other stops, and starting both again ends with the
weights of one uninterrupted process over 4 logical CPUs (every checkpoint, before the kill and
after); each worker keeps its replicas' share of the stream; only the chief writes the run; its
checkpoints restore in a single process; bad TF_CONFIGs and workers that disagree are named before
any training.

The subprocess runs are short (STEPS steps of the tiny preset, 5 validation sentences) and share
their results through module-scoped fixtures: one cluster run is killed and resumed, which covers
what an uninterrupted one does (its checkpoints before the kill are compared too). They read the
numbers corpus from local files with 10 test sentences (the README's `--dataset numbers` has 1,000,
which a barely trained model translates to their maximum length at the end of every run).
Tolerances are those of the 8-replica test (tests/training/test_distribution.py): the runs sum the
same float32 gradients, possibly in another order.
"""
import dataclasses
import json
import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import types

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import DataConfig, NumbersCorpus, SubwordTokenizer
from keras_transformer.data.tokenizer import TokenizerSettings, train_sentencepiece
from keras_transformer.training import summaries
from keras_transformer.training.checkpointing import checkpoint_directory
from keras_transformer.training.data_stream import training_stream
from keras_transformer.training.distribution import ClusterConfigError, gather_from_workers, read_tf_config
from tests.readme_run import REPOSITORY, readme_commands
from tests.training.test_distribution import ATOL, RTOL
from tests.training.test_resume import _checkpoint, _listed_steps
from tests.training.test_resume import corpus_spec  # noqa: F401  (fixture: 2,000 / 10 / 10 numbers pairs)

STEPS = 8
CHECKPOINT_EVERY = 4
# Guards against a hung subprocess, not measures of speed.
DEADLINE_SECONDS = 900
TEST_FLAGS = ["--train-steps", str(STEPS), "--checkpoint-every-steps", str(CHECKPOINT_EVERY),
              "--eval-every-steps", str(STEPS), "--verbose", "2", "--set", "eval_sentences=5",
              "--set", "sample_translations=1", "--set", "cooldown_fraction=0.25",  # cooled from step 6
              "--set", "num_layers=1"]  # 1 + 1 layers: a third less CPU time than the preset's 2 + 2


def readme_worker_commands():
    """The README's TF_CONFIG commands, as (TF_CONFIG dict, argv after `python`)."""
    commands = []
    for line in readme_commands():
        if line.startswith("TF_CONFIG="):
            assignment, *argv = shlex.split(line)
            commands.append((json.loads(assignment.partition("=")[2]), argv[1:]))
    return commands


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _start_workers(directory, corpus, extra_flags=(), per_worker_flags=None):
    """The README's worker commands on free ports, reading the corpus spec `corpus`, writing into
    directory/workdir; logs in directory."""
    directory.mkdir(parents=True, exist_ok=True)
    commands = readme_worker_commands()
    addresses = [f"localhost:{port}" for port in _free_ports(len(commands))]
    processes = []
    for index, (tf_config, argv) in enumerate(commands):
        tf_config = dict(tf_config, cluster={"worker": addresses})
        export = [] if "--no-export" in extra_flags else ["--export-dir", str(directory / "exported")]
        flags = [*argv, *TEST_FLAGS, "--dataset", corpus, "--workdir", str(directory / "workdir"), *export,
                 *extra_flags, *(per_worker_flags or {}).get(index, [])]
        with open(directory / f"worker{index}.log", "a") as log:
            processes.append(subprocess.Popen(
                [sys.executable, *flags], cwd=REPOSITORY, stdout=log, stderr=subprocess.STDOUT,
                env=dict(os.environ, TF_CONFIG=json.dumps(tf_config), PYTHONPATH=str(REPOSITORY),
                         TF_CPP_MIN_LOG_LEVEL="2")))
    return processes


def _wait(processes, directory):
    """Waits for the workers; returns their logs."""
    for process in processes:
        process.wait(timeout=DEADLINE_SECONDS)
    return [(directory / f"worker{index}.log").read_text() for index in range(len(processes))]


def _check_exits(processes, directory):
    """Waits for the workers and asserts that each exited with 0; returns their logs."""
    logs = _wait(processes, directory)
    for process, log in zip(processes, logs):
        assert process.returncode == 0, log[-4000:]
    return logs


def _run_workers(directory, corpus, extra_flags=()):
    return _check_exits(_start_workers(directory, corpus, extra_flags), directory)


def _assert_same_checkpoint(got_workdir, expected_workdir, step):
    """Every variable of the step's checkpoints: floats within the tolerances, integers (the step,
    the data position, the dropout seed states) equal."""
    got, expected = _checkpoint(got_workdir, step), _checkpoint(expected_workdir, step)
    names = set(expected.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert names == set(got.get_variable_to_shape_map()) - {"_CHECKPOINTABLE_OBJECT_GRAPH"}
    assert any(name.startswith("data_position/") for name in names) and len(names) > 100
    for name in sorted(names):
        got_value, expected_value = np.asarray(got.get_tensor(name)), np.asarray(expected.get_tensor(name))
        if expected_value.dtype.kind == "f":
            np.testing.assert_allclose(got_value, expected_value, rtol=RTOL, atol=ATOL, err_msg=name)
        else:
            np.testing.assert_array_equal(got_value, expected_value, err_msg=name)


@dataclasses.dataclass(frozen=True)
class ClusterRun:
    """The README's two worker commands, worker 1 killed after the first checkpoint, then both again."""
    directory: pathlib.Path
    killed_chief_log: str  # the first start's
    killed_chief_returncode: int
    saved: int  # the first start's last checkpoint
    logs: list  # [chief, worker 1]: the second start's
    chief_pids: tuple  # of both starts


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory, corpus_spec):  # noqa: F811
    """The README's two worker commands: SIGKILL worker 1 once the first checkpoint is listed, then the
    same two commands again, which go on from the last checkpoint to the end, and export."""
    directory = tmp_path_factory.mktemp("two_workers")
    processes = _start_workers(directory, corpus_spec)
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not _listed_steps(directory / "workdir"):
        assert all(process.poll() is None for process in processes), (directory / "worker0.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "no checkpoint before the deadline"
        time.sleep(0.1)
    processes[1].send_signal(signal.SIGKILL)
    # TensorFlow sees the dropped connection at once, a silent worker by its missing heartbeats, and
    # the collective timeout (120 s) bounds any other wait; the deadline only guards the test.
    killed_logs = _wait(processes, directory)
    saved = _listed_steps(directory / "workdir")[-1]
    restarted = _start_workers(directory, corpus_spec)
    logs = [log[len(before):] for log, before in zip(_check_exits(restarted, directory), killed_logs)]
    return ClusterRun(directory, killed_logs[0], processes[0].returncode, saved, logs,
                      (processes[0].pid, restarted[0].pid))


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, corpus_spec):  # noqa: F811
    """The same run in one process over 4 logical CPUs (no TF_CONFIG): its workdir."""
    directory = tmp_path_factory.mktemp("one_process")
    (_, argv), _ = readme_worker_commands()
    # The later of two flags wins: this corpus, 4 logical CPUs, this workdir.
    command = [sys.executable, *argv, *TEST_FLAGS, "--dataset", corpus_spec, "--cpu-devices", "4",
               "--workdir", str(directory / "workdir"), "--no-export"]
    environment = {key: value for key, value in os.environ.items() if key != "TF_CONFIG"}
    result = subprocess.run(command, cwd=REPOSITORY, capture_output=True, text=True, timeout=DEADLINE_SECONDS,
                            env=dict(environment, PYTHONPATH=str(REPOSITORY), TF_CPP_MIN_LOG_LEVEL="2"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return directory / "workdir"


def test_the_readme_commands_are_two_workers_of_one_cluster():
    commands = readme_worker_commands()
    assert [tf_config["task"] for tf_config, _ in commands] == [{"type": "worker", "index": 0},
                                                                 {"type": "worker", "index": 1}]
    assert commands[0][0]["cluster"] == commands[1][0]["cluster"] and len(commands[0][0]["cluster"]["worker"]) == 2
    assert commands[0][1] == commands[1][1]
    assert commands[0][1][:2] == ["-m", "pipelines.train_wmt"] and "--cpu-devices" in commands[0][1]


@pytest.mark.slow
def test_two_workers_end_with_the_weights_of_one_process_over_four_devices(two_workers, one_process):
    """Every checkpoint of the cluster, the first start's and the second's, holds the weights (and
    everything else) of the uninterrupted single process at that step."""
    workdir = two_workers.directory / "workdir"
    steps = list(range(CHECKPOINT_EVERY, STEPS + 1, CHECKPOINT_EVERY))
    assert _listed_steps(workdir) == _listed_steps(one_process) == steps
    for step in steps:
        _assert_same_checkpoint(workdir, one_process, step)
    cooldown = [float(_checkpoint(workdir, STEPS).get_tensor(f"cooldown/{name}/.ATTRIBUTES/VARIABLE_VALUE"))
                for name in ("start", "end")]
    assert cooldown == [STEPS * 0.75, STEPS]
    # Each worker translated its share of the 5 validation sentences; both, from all 5, report the
    # same scores, those of the single process.
    shares = [re.findall(r"validation: worker (\d) of 2 translated (\d) of the 5 sentences", log)
              for log in two_workers.logs]
    assert shares == [[("0", "3")], [("1", "2")]], two_workers.logs[0][-3000:]
    evaluations = [re.findall(rf"^step {STEPS}: validation .*", log, re.MULTILINE) for log in two_workers.logs]
    assert len(evaluations[0]) == 1 and evaluations[0] == evaluations[1]
    scores = [{name: entry["validation"][name] for name in ("bleu", "chrf")}
              for directory in (workdir, one_process)
              for entry in json.loads((checkpoint_directory(directory) / "selection.json").read_text())["evaluations"]
              if entry["step"] == STEPS]
    assert len(scores) == 2 and scores[0] == scores[1]
    # Both workers report the loss of the whole cluster (the mean over the 4 replicas), the same.
    remaining = STEPS - two_workers.saved
    losses = [re.findall(rf"^{remaining}/{remaining} - .* - loss: (\S+)", log, re.MULTILINE)
              for log in two_workers.logs]
    assert losses[0] and losses[0] == losses[1]


@pytest.mark.slow
def test_a_killed_worker_stops_the_other_and_a_restart_resumes(two_workers):
    """The chief stops with an error saying a worker was lost (instead of waiting for ever); started
    again, both workers restore the last checkpoint."""
    chief_log = two_workers.killed_chief_log
    assert two_workers.killed_chief_returncode == 1, chief_log[-4000:]
    assert re.search(r"^error: a worker of the cluster was lost at step \d+ .*start every worker again to resume",
                     chief_log, re.MULTILINE), chief_log[-4000:]
    assert two_workers.saved < STEPS, "the kill came after the end of training; nothing to resume"
    saved, workdir = two_workers.saved, two_workers.directory / "workdir"
    restored = f"restored {checkpoint_directory(workdir)}/ckpt-{saved} (step {saved})"
    assert all(restored in log for log in two_workers.logs), two_workers.logs[0][-4000:]
    strategy = "training on LogicalCpuMultiWorkerMirroredStrategy: 2 workers, 4 replicas"
    assert strategy in chief_log and all(strategy in log for log in two_workers.logs)


@pytest.mark.slow
def test_only_the_chief_writes_the_run(two_workers):
    directory, (chief_log, worker_log) = two_workers.directory, two_workers.logs
    workdir = directory / "workdir"
    assert sorted(path.name for path in (directory / "exported").iterdir()) == ["1"]  # one export, the chief's
    assert (workdir / "averaged.weights.h5").is_file() and (workdir / "test_scores.json").is_file()
    assert re.search(r"^SavedModel: ", chief_log, re.MULTILINE) and re.search(r"^test \(", chief_log, re.MULTILINE)
    assert "SavedModel" not in worker_log and not re.search(r"^test \(", worker_log, re.MULTILINE)
    assert "averaged" not in worker_log
    for kind in ("train", "validation"):  # one writer, the chief: one event file per start (events.out.
        paths = (workdir / "tensorboard" / kind).glob("events.out.tfevents.*")  # tfevents.TIME.HOST.PID.N.v2)
        pids = [int(re.fullmatch(r".*\.(\d+)\.\d+\.v2", path.name).group(1)) for path in paths]
        assert sorted(pids) == sorted(two_workers.chief_pids), pids
    # Worker 1 saved at every checkpoint step after the restart, into its temporary folder, deleted after each save.
    scratch = checkpoint_directory(workdir) / "workertemp_1"
    assert re.findall(r"checkpointing: saved (\S+)", worker_log) == [
        f"{scratch}/ckpt-{step}" for step in range(two_workers.saved + CHECKPOINT_EVERY, STEPS + 1, CHECKPOINT_EVERY)]
    # No scratch folder is left; best/ holds the chief's links to the best checkpoint by validation loss.
    assert sorted(path.name for path in checkpoint_directory(workdir).iterdir() if path.is_dir()) == ["best"]
    assert [path.name for path in (checkpoint_directory(workdir) / "best").glob("*.index")] == [f"ckpt-{STEPS}.index"]
    assert (checkpoint_directory(workdir) / "selection.json").is_file()


@pytest.mark.slow
def test_the_checkpoints_restore_in_a_single_process(two_workers):
    """pipelines.evaluate, without TF_CONFIG, on the cluster's workdir (the chief's export is
    test_only_the_chief_writes_the_run's; pipelines.export restores the run as pipelines.evaluate does,
    by keras_transformer.export.load_model_from_workdir)."""
    directory = two_workers.directory
    environment = dict({key: value for key, value in os.environ.items() if key != "TF_CONFIG"},
                       PYTHONPATH=str(REPOSITORY), TF_CPP_MIN_LOG_LEVEL="2")
    workdir = directory / "workdir"
    evaluate = subprocess.run([sys.executable, "-m", "pipelines.evaluate", "--workdir", str(workdir),
                               "--checkpoint", str(checkpoint_directory(workdir) / f"ckpt-{STEPS}")],
                              cwd=REPOSITORY, capture_output=True, text=True, timeout=DEADLINE_SECONDS, env=environment)
    assert evaluate.returncode == 0, evaluate.stdout[-2000:] + evaluate.stderr[-3000:]
    assert "sacreBLEU" in evaluate.stdout


@pytest.mark.slow
def test_a_time_budgets_cooldown_is_the_same_on_every_worker(tmp_path, corpus_spec):  # noqa: F811
    """With 99.5% of a 10-minute budget for the cooldown (and train_steps far away), it is due after 3
    seconds, at the first steps: each worker's clock and step rate differ, but they agree on where it
    starts and ends (any_worker, mean_over_workers), and stop together, at its end (or at the
    deadline, if the rate so far was too high a guess). Had they not, one would wait for the other.
    One logical CPU a worker (the later --cpu-devices wins): TensorFlow's own MultiWorkerMirroredStrategy,
    as a cluster of one-GPU machines runs it, where the README's commands run the logical-CPU one; and
    with --jit-compile, whose whole-step compilation by Keras failed there (each replica's forward and
    backward pass is compiled apart, tests/training/test_distribution.py)."""
    logs = _run_workers(tmp_path, corpus_spec, ["--no-export", "--cpu-devices", "1", "--jit-compile", "--train-steps",
                                                "100000", "--max-train-minutes", "10", "--set",
                                                "cooldown_fraction=0.995"])
    assert all("training on MultiWorkerMirroredStrategy: 2 workers, 2 replicas" in log for log in logs), logs[0][-3000:]
    planned = [re.findall(r"the time budget's cooldown: .*", log) for log in logs]
    assert len(planned[0]) == 1 and planned[0] == planned[1], logs[0][-3000:]
    stops = [re.findall(r"(?:the learning rate's cooldown ended|the training time limit is reached) at step \d+", log)
             for log in logs]
    assert len(stops[0]) == 1 and stops[0] == stops[1], logs[0][-3000:]
    workdir = tmp_path / "workdir"
    last = _listed_steps(workdir)[-1]
    assert stops[0][0].endswith(f"at step {last}")
    start, end = [float(_checkpoint(workdir, last).get_tensor(f"cooldown/{name}/.ATTRIBUTES/VARIABLE_VALUE"))
                  for name in ("start", "end")]
    assert f"from step {start:.0f} to step {end:.0f}" in planned[0][0] and start <= last <= end
    assert stops[0][0].startswith("the learning rate's cooldown ended") == (last == end)


def test_a_cluster_evaluation_translates_a_share_and_puts_the_others_in_place(monkeypatch, tmp_path):
    """Worker 1 of 3 translates validation sentences 1, 4 and 7 of 8 and no others; the other workers'
    shares (as the coordination service would hand them over) come back into their places, under a
    new key-value name at each evaluation."""
    sources = [f"sentence {index}" for index in range(8)]
    asked = []

    class Translator:
        def translate(self, sentences):
            asked.append(list(sentences))
            return [sentence.upper() for sentence in sentences]

    names = []

    def gather(strategy, name, values, timeout_seconds):
        names.append(name)
        return [values if worker == 1 else [f"SENTENCE {index}" for index in range(worker, 8, 3)]
                for worker in range(3)]

    monkeypatch.setattr(summaries, "num_workers", lambda strategy: 3)
    monkeypatch.setattr(summaries, "worker_index", lambda strategy: 1)
    monkeypatch.setattr(summaries, "gather_from_workers", gather)
    monitor = summaries.TrainingMonitor(tmp_path, 10, None, Translator(), [], None, write=False)
    monitor.set_model(types.SimpleNamespace(distribute_strategy=None))
    for _ in range(2):
        assert monitor._translate(sources, 100) == [f"SENTENCE {index}" for index in range(8)]
    assert asked == [["sentence 1", "sentence 4", "sentence 7"]] * 2
    assert names == ["translations/100/1", "translations/100/2"]


def test_one_worker_gathers_its_own_values():
    assert gather_from_workers(tf.distribute.get_strategy(), "unused", ("a", "b"), 1.0) == [["a", "b"]]


def test_each_worker_keeps_its_replicas_share_of_the_stream():
    """2 workers x 2 replicas: worker w gets elements 4k + 2w and 4k + 2w + 1 of the one stream
    (positions show which), the two shares together are the stream, each element once."""
    corpus = NumbersCorpus(num_train=300, num_validation=5, num_test=5, seed=0)
    tokenizer = SubwordTokenizer(train_sentencepiece(corpus.training_sentences(),
                                                     TokenizerSettings(vocab_size=400, corpus="numbers")))
    config = DataConfig(dataset="numbers", vocab_size=400, tokens_per_batch=64, max_length=32,
                        shuffle_buffer_size=100)

    def positions(input_context, count):
        stream = training_stream(corpus, tokenizer, config, start_epoch=0, start_batch=3,
                                 input_context=input_context)
        return [tuple(element["position"].numpy()) for element in stream.take(count)]

    whole = positions(None, 16)
    shares = [positions(tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                                   num_replicas_in_sync=4), 8) for worker in (0, 1)]
    assert shares[0] == [whole[i] for i in range(16) if i % 4 in (0, 1)]
    assert shares[1] == [whole[i] for i in range(16) if i % 4 in (2, 3)]
    assert sorted(shares[0] + shares[1]) == sorted(whole) and len(set(whole)) == 16
    assert whole[0] == (0, 0, 3)  # a restarted stream skips the consumed batches before it is shared


@pytest.mark.parametrize("text, field", [
    ('{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}',
     "TF_CONFIG is not valid JSON"),
    ('{"cluster": {"worker": ["localhost:1", "localhost:1"]}, "task": {"type": "worker", "index": 1}}',
     "TF_CONFIG cluster.worker[1]: localhost:1 is named twice (also cluster.worker[0])"),
    ('{"cluster": {"chief": ["a:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
     "TF_CONFIG cluster.worker[0]: a:1 is named twice (also cluster.chief[0])"),
    ('{"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}',
     "TF_CONFIG cluster.worker[0]: expected \"host:port\""),
    ('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}}', "TF_CONFIG task.index:"),
    ('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "chief", "index": 0}}', "TF_CONFIG task.type:"),
    ('{"cluster": {"worker": ["a:1", "b:1"]}}', "TF_CONFIG task:"),
    ('{"cluster": {"ps": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}}',
     "TF_CONFIG cluster.ps:"),
    ('["a:1"]', "TF_CONFIG : expected a JSON object"),
])
def test_a_bad_tf_config_is_named(text, field):
    with pytest.raises(ClusterConfigError) as error:
        read_tf_config(text)
    assert str(error.value).startswith(field), str(error.value)


def test_a_good_tf_config_is_read():
    text = '{"cluster": {"chief": ["a:1"], "worker": ["b:2", "[::1]:3"]}, "task": {"type": "worker", "index": 1}}'
    assert read_tf_config(text)["task"] == {"type": "worker", "index": 1}
    assert read_tf_config("") is None


def test_train_wmt_names_a_bad_tf_config_before_anything_starts(tmp_path):
    tf_config = '{"cluster": {"worker": ["localhost:1", "localhost:1"]}, "task": {"type": "worker", "index": 0}}'
    result = subprocess.run([sys.executable, "-m", "pipelines.train_wmt", "--preset", "tiny", "--dataset", "numbers",
                             "--workdir", str(tmp_path / "workdir")], cwd=REPOSITORY, capture_output=True, text=True,
                            timeout=DEADLINE_SECONDS,
                            env=dict(os.environ, TF_CONFIG=tf_config, PYTHONPATH=str(REPOSITORY)))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "error: TF_CONFIG cluster.worker[1]: localhost:1 is named twice (also cluster.worker[0]): every task "
        "needs its own host:port")
    assert not (tmp_path / "workdir").exists()


@pytest.mark.slow
def test_workers_that_disagree_stop_before_training(tmp_path, corpus_spec):  # noqa: F811
    """Worker 1 with another --train-steps and --set dropout_rate: both workers stop with one error
    naming the fields and each worker's value; nothing is trained or saved."""
    processes = _start_workers(tmp_path, corpus_spec, ["--no-export"],
                               per_worker_flags={1: ["--train-steps", "30", "--set", "dropout_rate=0.2"]})
    logs = _wait(processes, tmp_path)
    for process, log in zip(processes, logs):
        assert process.returncode == 1, log[-4000:]
        (error,) = re.findall(r"^error: .*", log, re.MULTILINE)
        assert error.startswith("error: the workers of TF_CONFIG disagree on the run's configuration: "
                                "model.dropout_rate (0.1 on worker 0 (chief), 0.2 on worker 1); "
                                f"train.train_steps ({STEPS} on worker 0 (chief), 30 on worker 1). "), error
        assert "training from step" not in log
    assert not checkpoint_directory(tmp_path / "workdir").exists()


def test_only_an_error_that_says_a_peer_is_gone_is_a_lost_worker(monkeypatch):
    """Collectives and the coordination service report a lost peer as DeadlineExceeded, Unavailable,
    Aborted, Cancelled or an InternalError that says so; a GPU's own failures are InternalErrors
    too, and reach the user as they are."""
    from keras_transformer.training import run

    monkeypatch.setattr(run, "num_workers", lambda strategy: 2)
    lost = tf.errors.InternalError(None, None, "RPC failed\nSocket closed: Connection reset by peer")
    gpu = [tf.errors.InternalError(None, None, message) for message in (
        "Blas GEMM launch failed : a.shape=(8, 512), b.shape=(512, 512)",
        "CUDA error: the launch timed out and was terminated", "cuDNN launch failure : input shape ([8,512])")]
    assert run._peer_failed(tf.errors.DeadlineExceededError(None, None, "the collective timed out"), None)
    assert run._peer_failed(lost, None) and not any(run._peer_failed(error, None) for error in gpu)
    assert "Connection reset by peer" in str(run._worker_lost(lost, "at step 7", pathlib.Path("/nowhere")))
    assert "collective-timeout" not in str(run._worker_lost(lost, "at step 7", pathlib.Path("/nowhere")))
    timed_out = run._worker_lost(tf.errors.DeadlineExceededError(None, None, "Collective ops timed out"), "at step 7",
                                 pathlib.Path("/nowhere"))
    assert str(timed_out).endswith("a collective waited longer than --collective-timeout allows (a worker that is "
                                   "slow at this point, or XLA compiling a new batch shape under --jit-compile): "
                                   "raise it")
    monkeypatch.setattr(run, "num_workers", lambda strategy: 1)  # one worker: every error as it is
    assert not run._peer_failed(lost, None)
