"""benchmarks/members.py, what `benchmarks/multi30k.py --members N` trains with: the cores each member
gets, its command line, and how the members run, fail and stop together (with small Python
processes standing in for the training jobs)."""
import os
import signal
import sys
import threading
import time

import pytest

from benchmarks.members import core_shares, member_command, member_workdirs, shared_vocabulary, train_members


def test_the_cores_are_split_in_equal_shares():
    assert core_shares(2, cores={1, 0}) == [[0], [1]]
    assert core_shares(2, cores=[0, 1, 2, 3, 4]) == [[0, 1], [2, 3]]  # the remainder unused
    assert core_shares(1, cores=[0, 1]) == [[0, 1]]
    assert core_shares(3, cores=[0, 1]) == [None, None, None]  # fewer cores than members: unpinned
    with pytest.raises(ValueError, match="at least 1, got 0"):
        core_shares(0)


def test_a_members_command_sets_its_seeds_after_the_recipe(tmp_path):
    recipe = ["--minutes", "60", "--set", "run.seed=7", "--set", "model.dropout_rate=0.2"]
    command = member_command("bench.py", tmp_path / "member-1", [1], 1, recipe, run_seed=8, data_seed=1)
    assert command[:3] == [sys.executable, "bench.py", "--train-only"]
    assert command[command.index("--workdir") + 1] == str(tmp_path / "member-1")
    assert command[command.index("--threads") + 1] == "1"
    assert command[command.index("--cores") + 1:] == ["1"]
    sets = [command[i + 1] for i, flag in enumerate(command) if flag == "--set"]
    assert sets == ["run.seed=7", "model.dropout_rate=0.2", "run.seed=8", "data.seed=1"]  # the last one counts
    assert "--cores" not in member_command("bench.py", tmp_path, None, 1, recipe, 0, 0)


def _member(body):
    """A stand-in member: Python that marks its start, runs `body`, and on SIGTERM writes 'saved' and exits 1."""
    return [sys.executable, "-c", (
        "import os, pathlib, signal, sys, time\n"
        "here = pathlib.Path(os.getcwd())\n"
        "def stop(*_):\n    (here / 'saved').write_text('yes'); sys.exit(1)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "(here / 'started').write_text('yes')\n" + body)]


def _run_in(workdirs, bodies, **kwargs):
    for workdir in workdirs:
        workdir.mkdir(parents=True, exist_ok=True)
    commands = [["sh", "-c", f'cd "{workdir}" && exec "$@"', "sh", *_member(body)]  # each in its workdir
                for workdir, body in zip(workdirs, bodies)]
    return train_members(commands, workdirs, **kwargs)


def test_members_run_at_once_and_log_to_their_workdirs(tmp_path):
    workdirs = member_workdirs(tmp_path, 2)
    assert workdirs == [tmp_path / "member-0", tmp_path / "member-1"]
    # Each waits up to 30 s for the other's start, then fails: only members that run at once succeed.
    bodies = [f"print('member {i}')\n"
              "deadline = time.monotonic() + 30\n"
              f"while not (here.parent / 'member-{1 - i}' / 'started').exists():\n"
              "    time.sleep(0.05)\n"
              "    if time.monotonic() > deadline: sys.exit(2)\n"
              for i in range(2)]
    _run_in(workdirs, bodies)
    for i, workdir in enumerate(workdirs):
        assert (workdir / "train.log").read_text().strip() == f"member {i}"
        assert not (workdir / "saved").exists()


def test_a_failed_member_stops_the_others_and_is_named(tmp_path):
    workdirs = member_workdirs(tmp_path, 2)
    bodies = ["time.sleep(60)\n",
              "while not (here.parent / 'member-0' / 'started').exists(): time.sleep(0.05)\n"
              "print('bad value in line 3'); sys.exit(3)\n"]
    with pytest.raises(SystemExit) as stopped:
        _run_in(workdirs, bodies)
    message = str(stopped.value)
    assert "member 1 failed (exit code 3)" in message
    assert str(workdirs[1] / "train.log") in message and "bad value in line 3" in message
    assert (workdirs[0] / "saved").read_text() == "yes"  # member 0 got SIGTERM in its sleep: it saved and stopped


def test_sigterm_stops_every_member_after_its_save(tmp_path):
    workdirs = member_workdirs(tmp_path, 2)

    def send_sigterm_once_both_started():
        while not all((workdir / "started").exists() for workdir in workdirs):
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    sender = threading.Thread(target=send_sigterm_once_both_started, daemon=True)
    sender.start()
    with pytest.raises(SystemExit, match="stopped by SIGTERM: each member saved a checkpoint"):
        _run_in(workdirs, ["time.sleep(60)\n"] * 2)
    sender.join()
    assert all((workdir / "saved").read_text() == "yes" for workdir in workdirs)
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is put back


def test_the_members_must_share_one_vocabulary(tmp_path):
    workdirs = member_workdirs(tmp_path, 3)
    for workdir, proto in zip(workdirs, (b"one", b"one", b"two")):
        workdir.mkdir()
        (workdir / "sentencepiece.model").write_bytes(proto)
    assert shared_vocabulary(workdirs[:2]) == b"one"
    with pytest.raises(ValueError, match="member-0/sentencepiece.model and .*member-2/sentencepiece.model"):
        shared_vocabulary(workdirs)
