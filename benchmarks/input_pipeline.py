"""Throughput of the tf.data input pipeline (keras_transformer.data) on Multi30k train.

    python benchmarks/input_pipeline.py --tokens-per-batch 25000 --vocab-size 8000 --threads 2

Reads Multi30k from the shared data ($KT_SHARED_DATA, default ../shared/data), trains (or reuses,
with --workdir) a SentencePiece model, then times whole epochs of the training pipeline: shuffle,
in-graph tokenization, length filter, bucketing, padding and prefetch; nothing is cached between
epochs. Best of --runs epochs after one warm-up epoch, as the train-step benchmark times.

Prints one JSON line {"task": "input_pipeline", "tokens_per_second": ...} where tokens_per_second
counts real (non-padding) target tokens, the unit of train_step.py's target_tokens_per_second, so
the two compare directly; source and padded figures come alongside. A readable line goes to stderr.
"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import best_of, emit, log  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens-per-batch", type=int, default=25_000,
                        help="token budget per batch, source and target each (paper: 25,000)")
    parser.add_argument("--vocab-size", type=int, default=8_000, help="SentencePiece vocabulary size")
    parser.add_argument("--threads", type=int, default=2,
                        help="tf.data parallel calls and TensorFlow's intra-/inter-op threads")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3, help="timed epochs; the best is reported")
    parser.add_argument("--workdir", default=None,
                        help="where the SentencePiece model is written or reused (default: a temp dir)")
    parser.add_argument("--training-tokens-per-second", type=float, default=400.0,
                        help="the base model's training throughput on this machine, for the ratio")
    return parser.parse_args()


def main():
    args = parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from keras_transformer.data.data_config import DataConfig
    from keras_transformer.data.factory import get_corpus
    from keras_transformer.data.pipeline import make_corpus_dataset, pipeline_statistics
    from keras_transformer.data.tokenizer import load_or_train_tokenizer

    config = DataConfig(dataset="multi30k", vocab_size=args.vocab_size,
                        tokens_per_batch=args.tokens_per_batch, max_length=args.max_length,
                        num_parallel_calls=args.threads)
    corpus = get_corpus("multi30k")
    workdir = args.workdir or tempfile.mkdtemp(prefix="kt_input_pipeline_")
    tokenizer = load_or_train_tokenizer(workdir, corpus.training_sentences(),
                                        config.tokenizer_settings(corpus.name))
    # Every epoch holds every pair once, so its token counts are fixed: count them once, untimed.
    statistics = pipeline_statistics(corpus.dataset("train"), tokenizer, config)
    dataset = make_corpus_dataset(corpus, "train", tokenizer, config)

    def epoch():
        for _ in dataset:
            pass

    timing = best_of(epoch, runs=args.runs)
    seconds = timing["seconds"]
    target_rate = statistics.target_tokens / seconds
    log(f"input pipeline on Multi30k train: {target_rate:,.0f} target tok/s "
        f"({(statistics.source_tokens + statistics.target_tokens) / seconds:,.0f} source+target), "
        f"{statistics.num_batches / seconds:.1f} batches/s, "
        f"{target_rate / args.training_tokens_per_second:.0f}x the base model's training "
        f"throughput ({args.training_tokens_per_second:.0f} tok/s); {statistics.summary()}")
    emit(task="input_pipeline", corpus="multi30k/train", tokens_per_batch=args.tokens_per_batch,
         vocab_size=tokenizer.vocab_size, threads=args.threads, max_length=args.max_length,
         tokens_per_second=round(target_rate, 1),
         source_tokens_per_second=round(statistics.source_tokens / seconds, 1),
         padded_tokens_per_second=round(
             (statistics.padded_source_tokens + statistics.padded_target_tokens) / seconds, 1),
         batches_per_second=round(statistics.num_batches / seconds, 2),
         num_batches=statistics.num_batches,
         real_to_padded_ratio=round(statistics.real_to_padded_ratio, 4),
         times_training_throughput=round(target_rate / args.training_tokens_per_second, 1), **timing)


if __name__ == "__main__":
    main()
