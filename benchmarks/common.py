"""What every benchmark shares: TensorFlow's threads and oneDNN set before it loads, best-of-N timing
with CPU accounting, and one JSON object per figure on stdout (the contract of the peer harness)."""
import argparse
import json
import os
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


def emit(**record):
    print(json.dumps(record), flush=True)


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)
