"""One training step (forward, backward, Adam) of keras_transformer at a preset and fixed shapes.

    python benchmarks/train_step.py --preset base --vocab-size 32000 --batch-size 128 \
        --source-length 32 --target-length 32 --threads 2

Prints one JSON line: {"task": "train", "seconds": ..., "target_tokens_per_second": ...}, timed as
the peer harness times (best of 3 after 1 warm-up), with dropout as in training.

--profile DIR also traces one more step with TensorFlow's profiler (DIR holds the trace, for
TensorBoard's profile tab) and prints a second JSON line, {"task": "train_profile", ...}: the
step's op time in thread-seconds by op type (each op's own time, without the ops it runs inside
it, summed over the threads that run ops), largest first, and its share of the total.
"""
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import base_parser, best_of, emit, log, profiled, setup_tensorflow  # noqa: E402


def main():
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--target-length", type=int, default=32)
    parser.add_argument("--dtype-policy", default="float32", help="float32, mixed_bfloat16 or mixed_float16")
    parser.add_argument("--profile", type=pathlib.Path, metavar="DIR", help="trace one more step into DIR")
    parser.add_argument("--top", type=int, default=15, help="op types listed with --profile")
    args = parser.parse_args()
    tf = setup_tensorflow(args)
    import keras
    import keras_transformer as kt

    keras.utils.set_random_seed(0)
    from keras_transformer.precision import set_dtype_policy
    set_dtype_policy(args.dtype_policy)
    model = kt.Transformer.from_preset(args.preset, vocab_size=args.vocab_size)
    model.compile()
    source = tf.random.uniform((args.batch_size, args.source_length), 4, args.vocab_size, tf.int32)
    target = tf.random.uniform((args.batch_size, args.target_length + 1), 4, args.vocab_size, tf.int32)
    batch = ((source, target[:, :-1]), target[:, 1:])
    step = tf.function(model.train_step, jit_compile=args.jit_compile)
    timing = best_of(lambda: float(step(batch)["loss"]), runs=args.runs)
    tokens = args.batch_size * args.target_length
    log(f"keras_transformer train step: {timing['seconds']:.2f} s, {tokens / timing['seconds']:.0f} target tok/s")
    emit(task="train", preset=args.preset, threads=args.threads, batch=args.batch_size,
         source_length=args.source_length, target_length=args.target_length, onednn=args.onednn,
         jit_compile=args.jit_compile, dtype_policy=args.dtype_policy, **timing,
         target_tokens_per_second=round(tokens / timing["seconds"], 1))
    if args.profile:
        emit(task="train_profile", preset=args.preset, dtype_policy=args.dtype_policy, trace=str(args.profile),
             **profiled(tf, lambda: float(step(batch)["loss"]), args.profile, args.top))


if __name__ == "__main__":
    main()
