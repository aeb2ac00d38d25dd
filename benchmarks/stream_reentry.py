"""What re-entering the training stream costs after a restart, at points across a WMT14-sized epoch.

    python benchmarks/stream_reentry.py --pairs 4500000 --workdir /tmp/kt_corpus_scale

Uses the synthetic aligned files and the vocabulary of benchmarks/corpus_scale.py (the first
--pairs lines of its largest corpus, written to WORKDIR/corpus-N if absent). For each position,
builds `training_stream` from it as a restarted run does and times the first batch, which is the
cost of getting there: the segments before the position are dropped as text, the batches of its
own segment before it are tokenized and skipped. Positions: the epoch's start, its middle, the
start of its last segment, and beyond the last batch of its last segment (the worst case: a whole
segment tokenized and skipped, then the next epoch's first batch). With data.stream_regions > 1 (the
default) each position also waits for the regions' readers to read the text before their starts
(`--stream-regions 1`: the files' order). `--empty-first-line` reads a copy of the corpus whose
first source line is empty (skipped by the check), as web-crawled corpora have such lines.

Before segments, a restart tokenized every pair before the position: `full_epoch_seconds_estimate`
is the epoch's pairs at the measured tokenization rate of one segment, what re-entering at the end of
an epoch used to cost. Prints one JSON line per position and one for the segment rate.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log, timed  # noqa: E402
from benchmarks.corpus_scale import _configs, learn_vocabulary, write_corpus  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000, help="pairs of the epoch (WMT14 en-de: 4.5M)")
    parser.add_argument("--workdir", default="/tmp/kt_corpus_scale")
    parser.add_argument("--segment-pairs", type=int, default=None,
                        help="DataConfig.segment_pairs (default: DataConfig's)")
    parser.add_argument("--stream-regions", type=int, default=None,
                        help="DataConfig.stream_regions (default: DataConfig's; 1: the files' order)")
    parser.add_argument("--empty-first-line", action="store_true",
                        help="read a copy of the corpus whose first source line is empty")
    return parser.parse_args()


def _with_empty_first_line(source: pathlib.Path, target: pathlib.Path):
    """A copy of the aligned files (beside them, made once) whose first source line is empty."""
    directory = source.parent / "empty-first-line"
    copies = directory / source.name, directory / target.name
    if not all(path.exists() for path in copies):
        directory.mkdir(exist_ok=True)
        for original, copy, script in ((source, copies[0], "1s/.*//"), (target, copies[1], "")):
            with open(copy.with_name(copy.name + ".tmp"), "wb") as out:
                subprocess.run(["sed", script, str(original)], stdout=out, check=True)
            copy.with_name(copy.name + ".tmp").replace(copy)
    return copies


def _prefix_corpus(workdir: pathlib.Path, num_pairs: int):
    """The first num_pairs lines of the largest corpus already written, else a new corpus."""
    directory = workdir / f"corpus-{num_pairs}"
    larger = sorted((int(path.name.split("-")[1]), path) for path in workdir.glob("corpus-*")
                    if int(path.name.split("-")[1]) > num_pairs and (path / "train.tgt").exists())
    if not (directory / "train.tgt").exists() and larger:
        directory.mkdir(parents=True, exist_ok=True)
        for name in ("train.src", "train.tgt"):
            with open(directory / (name + ".tmp"), "wb") as out:
                subprocess.run(["head", "-n", str(num_pairs), str(larger[0][1] / name)], stdout=out, check=True)
            (directory / (name + ".tmp")).replace(directory / name)
    return write_corpus(directory, num_pairs)


def main():
    args = parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import dataclasses

    from keras_transformer.data import get_corpus, load_or_train_tokenizer
    from keras_transformer.training.data_stream import training_stream

    workdir = pathlib.Path(args.workdir).resolve()
    source, target = _prefix_corpus(workdir, args.pairs)
    learn_vocabulary(workdir, (source, target))
    if args.empty_first_line:
        source, target = _with_empty_first_line(source, target)
    configs = _configs(f"train={source},{target}")
    overrides = {name: value for name, value in (("segment_pairs", args.segment_pairs),
                                                 ("stream_regions", args.stream_regions)) if value is not None}
    data = dataclasses.replace(configs.data, **overrides)
    corpus = get_corpus(data.dataset)
    started = time.perf_counter()
    num_pairs = corpus.num_pairs("train")  # the files' check, once per process
    log(f"checked {num_pairs:,} pairs in {time.perf_counter() - started:.1f} s")
    tokenizer = load_or_train_tokenizer(workdir / "vocabulary", None, data.tokenizer_settings(corpus.name))
    num_segments = -(-num_pairs // data.segment_pairs)
    last = num_segments - 1

    def first_batch(segment, batch):
        next(iter(training_stream(corpus, tokenizer, data, start_segment=segment, start_batch=batch)))

    first_batch(0, 0)  # traces the tokenizer and the pipeline once, untimed
    # The first segment whole: its tokens per pair, and how long reading, tokenizing and batching it takes.
    tokens = pairs_in_batches = 0

    def whole_segment():
        nonlocal tokens, pairs_in_batches
        for element in training_stream(corpus, tokenizer, data):
            if int(element["position"][1]) != 0:
                break
            tokens += int((element["batch"][1] > 0).numpy().sum())
            pairs_in_batches += int(element["batch"][1].shape[0])

    segment_seconds, own_cpu, others_cpu = timed(whole_segment)
    pairs_per_second = pairs_in_batches / segment_seconds
    emit(task="stream_reentry", what="one segment tokenized and batched", segment_pairs=data.segment_pairs,
         pairs=pairs_in_batches, target_tokens_per_pair=round(tokens / pairs_in_batches, 1),
         stream_regions=data.stream_regions, seconds=round(segment_seconds, 1),
         pairs_per_second=round(pairs_per_second),
         full_epoch_seconds_estimate=round(num_pairs / pairs_per_second, 1),
         own_cpu_seconds=round(own_cpu, 1), others_cpu_seconds=round(others_cpu, 1))
    positions = {"epoch start": (0, 0), "middle": (num_segments // 2, 0), "last segment's start": (last, 0),
                 "after the last batch (worst)": (last, 10 ** 6)}
    for name, (segment, batch) in positions.items():
        seconds, own_cpu, others_cpu = timed(lambda: first_batch(segment, batch))
        emit(task="stream_reentry", position=name, epoch_pairs=num_pairs, segment=segment, batch=batch,
             segment_pairs=data.segment_pairs, stream_regions=data.stream_regions,
             seconds_to_first_batch=round(seconds, 1),
             own_cpu_seconds=round(own_cpu, 1), others_cpu_seconds=round(others_cpu, 1))
        log(f"re-entry at {name} (segment {segment} of {num_segments}, batch {batch}): {seconds:.1f} s")


if __name__ == "__main__":
    main()
