"""Several models of one recipe trained side by side, each in its own process on its own CPU cores:
what `benchmarks/multi30k.py --members N` runs before it ensembles them. Not in the paper.

Each member is the same script with `--train-only`, its own workdir, its share of the cores
(`--cores`, pinned with os.sched_setaffinity before TensorFlow loads) and seeds raised by its
index. On 2 cores, two 1-thread processes make about 1.18 times the steps of one 2-thread process
(README, Results): a member gets about 59% of a single model's steps.
"""
import os
import pathlib
import signal
import subprocess
import sys
import time

from benchmarks.common import log


def core_shares(members, cores=None):
    """Each member's cores: `cores` (default: those this process may run on) in `members` equal
    shares, the remainder unused; None for every member when there are fewer cores than members."""
    if members < 1:
        raise ValueError(f"--members must be at least 1, got {members}")
    cores = sorted(os.sched_getaffinity(0) if cores is None else cores)
    share = len(cores) // members
    if share == 0:
        return [None] * members
    return [cores[i * share:(i + 1) * share] for i in range(members)]


def member_workdirs(workdir, members):
    return [pathlib.Path(workdir) / f"member-{i}" for i in range(members)]


def member_command(script, workdir, cores, threads, arguments, run_seed, data_seed):
    """The command line of one member: `script --train-only` in `workdir` with `arguments` (the
    recipe's flags and --set overrides), on `cores` (None: unpinned) with `threads` threads, and
    its seeds set after the recipe's overrides."""
    command = [sys.executable, str(script), "--train-only", "--workdir", str(workdir), "--threads", str(threads),
               *arguments, "--set", f"run.seed={run_seed}", "--set", f"data.seed={data_seed}"]
    if cores is not None:
        command += ["--cores", *map(str, cores)]
    return command


def newest_step(workdir):
    """The step of a run's newest checkpoint; 0 before its first."""
    from keras_transformer.training.averaging import last_checkpoints
    from keras_transformer.training.checkpointing import checkpoint_step
    try:
        return checkpoint_step(last_checkpoints(workdir, 1)[0])
    except FileNotFoundError:
        return 0


def _tail(path, lines=15):
    try:
        text = pathlib.Path(path).read_text(errors="replace").replace("\r", "\n")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def train_members(commands, workdirs, poll_seconds=60.0):
    """Runs the members' `commands` at once, each logging to its workdir's train.log, and waits for
    all of them, logging each one's newest checkpoint step every `poll_seconds`.

    SIGINT or SIGTERM is passed on to every member as SIGTERM (each saves a checkpoint and stops;
    the same command resumes them), then SystemExit. A member that fails stops the others the same
    way; SystemExit names it, its exit code and its log, with the log's last lines."""
    processes, logs = [], []
    for command, workdir in zip(commands, workdirs):
        workdir.mkdir(parents=True, exist_ok=True)
        logs.append(workdir / "train.log")
        with open(logs[-1], "ab") as out:
            # A session of its own: a terminal's Ctrl-C reaches the parent only, which stops each member cleanly.
            processes.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        log(f"member {len(processes) - 1}: pid {processes[-1].pid}, log {logs[-1]}")
    stopping = []

    def stop(signum=None, frame=None):
        if not stopping:
            stopping.append(signal.Signals(signum).name if signum else "a failed member")
            for process in processes:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed, last_report = None, time.monotonic()
        while any(process.poll() is None for process in processes):
            time.sleep(1.0)
            if failed is None and not stopping:
                failed = next((i for i, process in enumerate(processes) if process.poll() not in (None, 0)), None)
                if failed is not None:
                    stop()
            if time.monotonic() - last_report >= poll_seconds:
                last_report = time.monotonic()
                log("members' newest checkpoints: " + ", ".join(
                    f"{i}: step {newest_step(workdir)}" for i, workdir in enumerate(workdirs)))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stopping and failed is None:
        raise SystemExit(f"stopped by {stopping[0]}: each member saved a checkpoint; the same command resumes them")
    if failed is None:  # one that failed after the last look, when the others had finished
        failed = next((i for i, process in enumerate(processes) if process.returncode != 0), None)
    if failed is not None:
        others = "; the others were stopped after a checkpoint" if stopping else ""
        raise SystemExit(f"member {failed} failed (exit code {processes[failed].returncode}){others}. Its log, "
                         f"{logs[failed]}, ends:\n{_tail(logs[failed])}")


def shared_vocabulary(workdirs):
    """The members' one sentencepiece.model (bytes); ValueError naming two that differ."""
    models = [(workdir / "sentencepiece.model", (workdir / "sentencepiece.model").read_bytes()) for workdir in workdirs]
    for path, proto in models[1:]:
        if proto != models[0][1]:
            raise ValueError(f"the members' vocabularies differ ({models[0][0]} and {path}): an ensemble needs one; "
                             "data.seed must not change the vocabulary's sample")
    return models[0][1]
