"""Memory, start-up time and input throughput of training on local corpora of 0.1M to 10M pairs.

    python benchmarks/corpus_scale.py --pairs 100000 1000000 10000000 --workdir /tmp/kt_corpus_scale

For each size, writes synthetic line-aligned files (WORKDIR/corpus-N/train.{src,tgt}, about 150
bytes a pair; reused when present), learns one SentencePiece vocabulary on a sample (once, shared
by every size, untimed), then runs a fresh training process (the `tiny` preset, as in
`train_wmt --preset tiny --dataset train=...`) to step 10 and measures:

    peak_rss_mb                  VmHWM of the training process at step 10
    seconds_to_first_step        from the start of the job (corpus, vocabulary reused, model, stream)
                                 to the end of the first training step; includes the files' check,
                                 which each size runs twice: the first time (file_check "first") and
                                 again, when the check is remembered ("remembered")
    input_tokens_per_second      real target tokens per second of the training stream alone (batches
                                 after a warm-up, the same count at every size)
    input_tokens_per_cpu_second  the same tokens per CPU-second of the process: what the pipeline
                                 costs, whatever the other processes on the machine take

Prints one JSON line per size (and a readable line on stderr). The goals of issue 18: peak RSS at
10M no more than 300 MB above 0.1M, first step within 2 minutes at 10M, and tokens/s within 10% of
the 0.1M figure. Measured, never run as a test; the files can reach gigabytes: keep --workdir out of
the repository.
"""
import argparse
import dataclasses
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log, timed  # noqa: E402

PRESET = "tiny"
VOCABULARY_SAMPLE_PAIRS = 100_000
LINES_PER_CHUNK = 100_000


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--workdir", default="/tmp/kt_corpus_scale",
                        help="where the corpora, the vocabulary and the runs go (never the repository)")
    parser.add_argument("--steps", type=int, default=10, help="training steps of each run")
    parser.add_argument("--pipeline-batches", type=int, default=400,
                        help="timed batches of the input-pipeline measure (after as many warm-up batches / 4)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


def _words(rng, count, letters="abcdefghijklmnopqrstuvwxyz"):
    lengths = rng.integers(2, 11, size=count)
    return ["".join(rng.choice(list(letters), size=length)) for length in lengths]


def write_corpus(directory: pathlib.Path, num_pairs: int) -> tuple[pathlib.Path, pathlib.Path]:
    """Synthetic aligned files: Zipf-distributed pseudo-words, 4 to 20 a sentence; the target is a
    word-by-word substitution of the source. Seeded by chunk, so a smaller corpus is a prefix of a
    larger one. Written under a temporary name, so an interrupted run never leaves a short file."""
    import numpy as np

    source_path, target_path = directory / "train.src", directory / "train.tgt"
    if source_path.exists() and target_path.exists():
        return source_path, target_path
    directory.mkdir(parents=True, exist_ok=True)
    vocabulary_rng = np.random.default_rng(0)
    source_words = np.array(_words(vocabulary_rng, 20_000))
    target_words = np.array(_words(vocabulary_rng, 20_000, "abcdefghijklmnopqrstuvwxyzäöüß"))
    frequencies = 1.0 / np.arange(1, len(source_words) + 1)  # Zipf's law
    frequencies /= frequencies.sum()
    started = time.perf_counter()
    temporary_source, temporary_target = (path.with_name(path.name + ".tmp") for path in (source_path, target_path))
    with (open(temporary_source, "w", encoding="utf-8") as sources,
          open(temporary_target, "w", encoding="utf-8") as targets):
        for chunk_start in range(0, num_pairs, LINES_PER_CHUNK):
            rng = np.random.default_rng([1, chunk_start])
            count = min(LINES_PER_CHUNK, num_pairs - chunk_start)
            lengths = rng.integers(4, 21, size=count)
            ids = rng.choice(len(source_words), size=int(lengths.sum()), p=frequencies)
            ends = np.cumsum(lengths)
            source_text, target_text = source_words[ids], target_words[ids]
            sources.write("".join(" ".join(source_text[end - length:end]) + "\n"
                                  for end, length in zip(ends, lengths)))
            targets.write("".join(" ".join(target_text[end - length:end]) + "\n"
                                  for end, length in zip(ends, lengths)))
    temporary_source.replace(source_path)
    temporary_target.replace(target_path)
    log(f"wrote {num_pairs:,} pairs ({(source_path.stat().st_size + target_path.stat().st_size) / 1e6:,.0f} MB) "
        f"in {time.perf_counter() - started:.0f} s")
    return source_path, target_path


def _configs(spec):
    from keras_transformer.training.run_config import preset_configs, with_micro_batch_budget
    return with_micro_batch_budget(preset_configs(PRESET, dataset=spec), num_replicas=1)


def learn_vocabulary(workdir: pathlib.Path, first_corpus: tuple) -> pathlib.Path:
    """One SentencePiece model for every size (the spec names differ, the settings do not)."""
    from keras_transformer.data import LocalParallelCorpus, load_or_train_tokenizer

    directory = workdir / "vocabulary"
    if not (directory / "sentencepiece.model").exists():
        corpus = LocalParallelCorpus({"train": first_corpus})
        sentences = (side for _, pair in zip(range(VOCABULARY_SAMPLE_PAIRS), corpus.pairs("train")) for side in pair)
        configs = _configs(f"train={first_corpus[0]},{first_corpus[1]}")
        load_or_train_tokenizer(directory, sentences, configs.data.tokenizer_settings(corpus.name))
    return directory


def _memory_mb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise KeyError(field)


def run_child(args, num_pairs):
    """One training process: corpus, reused vocabulary, model, stream, `steps` steps; then the stream's
    throughput. Prints its figures as one JSON line."""
    started = time.perf_counter()
    import keras
    import tensorflow as tf

    from keras_transformer.data import get_corpus, load_or_train_tokenizer
    from keras_transformer.schedule import paper_optimizer
    from keras_transformer.training.data_stream import DataPosition, training_stream
    from keras_transformer.training.training_model import TrainingTransformer
    imported = time.perf_counter()

    workdir = pathlib.Path(args.workdir)
    source, target = workdir / f"corpus-{num_pairs}" / "train.src", workdir / f"corpus-{num_pairs}" / "train.tgt"
    configs = _configs(f"train={source},{target}")
    corpus = get_corpus(configs.data.dataset)
    tokenizer = load_or_train_tokenizer(workdir / "vocabulary", None, configs.data.tokenizer_settings(corpus.name))
    model_config = dataclasses.replace(configs.model, vocab_size=tokenizer.vocab_size)
    model = TrainingTransformer(model_config, data_position=DataPosition())
    model.compile(optimizer=paper_optimizer(model_config.d_model, configs.train))
    model.prepare_for_training()
    marks = {}

    class Marks(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                marks["first_step"] = time.perf_counter()
            if batch == args.steps - 1:
                marks["peak_rss_mb"], marks["rss_mb"] = _memory_mb("VmHWM"), _memory_mb("VmRSS")

    model.fit(training_stream(corpus, tokenizer, configs.data), epochs=1, steps_per_epoch=args.steps,
              callbacks=[Marks()], verbose=0, shuffle=False)

    warmup = max(1, args.pipeline_batches // 4)
    batches = iter(training_stream(corpus, tokenizer, configs.data))
    for _ in range(warmup):
        next(batches)
    tokens = 0

    def read_batches():
        nonlocal tokens
        for _ in range(args.pipeline_batches):
            tokens += int(tf.math.count_nonzero(next(batches)["batch"][1]))

    seconds, own_cpu, others_cpu = timed(read_batches)
    print(json.dumps({
        "pairs": num_pairs, "corpus_mb": round((source.stat().st_size + target.stat().st_size) / 1e6, 1),
        "peak_rss_mb": round(marks["peak_rss_mb"], 1), "rss_mb_at_last_step": round(marks["rss_mb"], 1),
        "seconds_to_first_step": round(marks["first_step"] - imported, 2),
        "import_seconds": round(imported - started, 2),
        "input_tokens_per_second": round(tokens / seconds, 1),
        "input_tokens_per_cpu_second": round(tokens / own_cpu, 1),
        "pipeline_batches": args.pipeline_batches, "pipeline_target_tokens": tokens,
        "pipeline_seconds": round(seconds, 2), "own_cpu_seconds": round(own_cpu, 1),
        "others_cpu_seconds": round(others_cpu, 1)}),
        flush=True)


def main():
    args = parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    if args.child is not None:
        run_child(args, args.child)
        return
    workdir = pathlib.Path(args.workdir).resolve()
    if pathlib.Path(__file__).resolve().parents[1] in workdir.parents:
        raise SystemExit(f"--workdir {workdir} is inside the repository; the corpora are gigabytes")
    corpora = {num_pairs: write_corpus(workdir / f"corpus-{num_pairs}", num_pairs) for num_pairs in args.pairs}
    learn_vocabulary(workdir, corpora[min(args.pairs)])
    results = []
    for num_pairs in args.pairs:
        # First with no remembered file check (the files are read once to check them), then again.
        checks = workdir / f"checks-{num_pairs}"
        shutil.rmtree(checks, ignore_errors=True)
        for file_check in ("first", "remembered"):
            command = [sys.executable, os.path.abspath(__file__), "--child", str(num_pairs), "--workdir",
                       str(workdir), "--steps", str(args.steps), "--pipeline-batches", str(args.pipeline_batches)]
            output = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True,
                                    env=dict(os.environ, KT_CORPUS_CHECK_CACHE=str(checks))).stdout
            record = dict(json.loads(output.strip().splitlines()[-1]), file_check=file_check)
            emit(task="corpus_scale", preset=PRESET, steps=args.steps, **record)
            log(f"{num_pairs:>11,} pairs ({record['corpus_mb']:,.0f} MB, file check {file_check}): peak RSS "
                f"{record['peak_rss_mb']:,.0f} MB, first step after {record['seconds_to_first_step']:.1f} s, "
                f"input {record['input_tokens_per_second']:,.0f} target tok/s")
        results.append(record)
    smallest = results[0]
    for record in results[1:]:
        growth = record["peak_rss_mb"] - smallest["peak_rss_mb"]
        log(f"{record['pairs']:,} vs {smallest['pairs']:,}: RSS +{growth:.0f} MB "
            f"(goal <= 300), tok/s x{record['input_tokens_per_second'] / smallest['input_tokens_per_second']:.3f} "
            f"(goal >= 0.9; per CPU-second x"
            f"{record['input_tokens_per_cpu_second'] / smallest['input_tokens_per_cpu_second']:.3f}), "
            f"first step {record['seconds_to_first_step']:.1f} s (goal <= 120)")


if __name__ == "__main__":
    main()
