"""What every benchmark shares: TensorFlow's threads and oneDNN set before it loads, best-of-N timing
with CPU accounting, and one JSON object per figure on stdout (the contract of the peer harness)."""
import argparse
import collections
import json
import os
import pathlib
import sys
import time


def base_parser(description):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--preset", default="base", help="model preset (tiny, base, big)")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--threads", type=int, default=2, help="intra- and inter-op threads")
    parser.add_argument("--runs", type=int, default=3, help="timed runs; the best is reported")
    parser.add_argument("--onednn", type=int, choices=(0, 1), default=1,
                        help="TF_ENABLE_ONEDNN_OPTS (TensorFlow leaves oneDNN off on AMD CPUs)")
    parser.add_argument("--jit-compile", action="store_true", help="compile the step with XLA")
    return parser


def setup_tensorflow(args, intra_op_threads=None):
    """Must run before tensorflow is imported. --threads inter-op threads, and as many intra-op
    threads unless intra_op_threads says otherwise."""
    intra_op_threads = intra_op_threads or args.threads
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = str(args.onednn)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["OMP_NUM_THREADS"] = str(intra_op_threads)
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    return tf


def log_the_job():
    """The training job's own log lines on stderr, as pipelines.train_wmt shows them: restored and
    saved checkpoints, the data position, the time budget and its cooldown."""
    from pipelines import show_job_log  # after setup_tensorflow: its environment defaults change nothing
    show_job_log()


def _cpu_ticks():
    with open("/proc/stat") as stat:
        values = list(map(int, stat.readline().split()[1:9]))
    return sum(values), values[3] + values[4]


def timed(fn):
    """Run fn once; (wall seconds, own CPU seconds, other processes' CPU seconds)."""
    wall, cpu, (total, idle) = time.perf_counter(), time.process_time(), _cpu_ticks()
    fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    total2, idle2 = _cpu_ticks()
    busy = ((total2 - total) - (idle2 - idle)) / os.sysconf("SC_CLK_TCK")
    return wall, cpu, max(0.0, busy - cpu)


def best_of(fn, runs=3, warmup=1):
    """Timing fields of the fastest of `runs` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    results = [timed(fn) for _ in range(runs)]
    wall, cpu, others = min(results)
    return {"seconds": round(wall, 4), "seconds_all": [round(r[0], 3) for r in results],
            "own_cpu_seconds": round(cpu, 2), "others_cpu_seconds": round(others, 2)}


def run_main(main):
    """A training benchmark's main(), as `sys.exit(run_main(main))`: a run stopped by SIGTERM, which
    saved a checkpoint (TrainingInterrupted), ends with its message and exit code 143, as the
    pipelines do, instead of a traceback; the same command resumes it."""
    try:
        return main()
    except Exception as error:
        from keras_transformer.training.checkpointing import TrainingInterrupted  # loaded by the training

        if not isinstance(error, TrainingInterrupted):
            raise
        print(error, file=sys.stderr, flush=True)
        return 143


def emit(**record):
    print(json.dumps(record), flush=True)


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


def op_seconds(xplane_path):
    """Counter {op type: seconds} of the ops' own time in a host trace: TraceMe events named
    "op name:OpType", less the op events nested in them on their thread. Function calls
    (PartitionedCall and its kin, KernelAndDeviceFunc::Run) are left out: their time is that of the
    ops they run, and waiting; XLA executables count as "XLA-compiled code"."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace.FromString(pathlib.Path(xplane_path).read_bytes())
    seconds = collections.Counter()
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {key: metadata.name for key, metadata in plane.event_metadata.items()}
        for line in plane.lines:
            enclosing = []  # [end, op type or None] of the events that enclose the current one
            for event in sorted(line.events, key=lambda event: (event.offset_ps, -event.duration_ps)):
                while enclosing and enclosing[-1][0] <= event.offset_ps:
                    enclosing.pop()
                name = names.get(event.metadata_id, "")
                op = name.rsplit(":", 1)[1] if ":" in name and not name.endswith(":") else None
                if op and ("PartitionedCall" in op or not op.isidentifier()):  # calls, "EagerLocalExecute: fn"
                    op = None
                if "::" in name:  # C++ scopes, not ops; XLA's executables run the compiled loss
                    op = "XLA-compiled code" if name.endswith("ExecuteAsyncOnStream") else None
                if op:
                    seconds[op] += event.duration_ps / 1e12
                    parent = next((item[1] for item in reversed(enclosing) if item[1]), None)
                    if parent:
                        seconds[parent] -= event.duration_ps / 1e12
                enclosing.append([event.offset_ps + event.duration_ps, op])
    return seconds


def profiled(tf, fn, directory, top=15):
    """Run fn once under TensorFlow's profiler (the trace goes to directory, for TensorBoard's
    profile tab): {"op_thread_seconds": total, "top": the `top` op types by their own time, with
    their share}, for `emit`."""
    directory = pathlib.Path(directory)
    tf.profiler.experimental.start(str(directory))
    fn()
    tf.profiler.experimental.stop()
    seconds = op_seconds(max(directory.rglob("*.xplane.pb"), key=os.path.getmtime))
    total = sum(seconds.values())
    return {"op_thread_seconds": round(total, 3),
            "top": [{"op": op, "thread_seconds": round(value, 3), "share": round(value / total, 3)}
                    for op, value in seconds.most_common(top)]}
