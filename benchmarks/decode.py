"""Decoding (greedy or beam search) of keras_transformer at a preset, random weights, fixed shapes.

    python benchmarks/decode.py --preset base --vocab-size 32000 --batch-size 64 --source-length 25 \
        --output-length 25 --beam-size 4 --threads 2 [--no-cache] [--saved-model] [--jit-compile] \
        [--parallel-groups 2] [--dtype bfloat16] [--transposed-kernels on|off] [--profile DIR]

Every sentence decodes exactly --output-length tokens, as the peer harness forces its peers:
min_length = max_length = output length (EOS is forbidden before, and the search stops there).
Sources are --source-length tokens, the last one EOS, the others drawn uniformly. Beam search uses
alpha 0.6; --beam-size 1 is greedy decoding. Prints one JSON line, timed as the peer harness times
(best of 3 after 1 warm-up): {"task": "decode", "beam": W, "seconds": ..., "target_tokens_per_second":
batch * output_length / seconds, ...}.

  --no-cache     decode by full recomputation: at every step the decoder reruns over the whole
                 prefix (the encoder still runs once), to show what the key/value cache gains.
  --saved-model  time the decoder exported with tf.saved_model.save and loaded back from disk.
  --jit-compile  compile the decoding function with XLA.
  --parallel-groups G  decode the sentences in G groups side by side (Transformer.decoding_step_fn),
                 with --threads inter-op threads and --threads / G intra-op threads (the same
                 number of cores: on 2, one intra-op thread per group instead of two per op).
  --dtype D      float32 (default), bfloat16 or float16: the model's weights and matrix products in
                 that dtype (keras_transformer.precision.model_in_precision, what pipelines.export
                 --precision exports), in process and with --saved-model alike. bfloat16 pays off on
                 CPUs with AVX512_BF16 or AMX; elsewhere it runs, slower, after a warning.
  --profile DIR  also decode once more under TensorFlow's profiler (DIR holds the trace) and print
                 a second JSON line, {"task": "decode_profile", ...}: op time in thread-seconds by
                 op type, largest first (as benchmarks/train_step.py --profile).
  --transposed-kernels  on / off: whether a step computes x W as (W^T x^T)^T with the kernels
                 transposed once (Transformer.decoding_step_fn's transposed_kernels); auto (the
                 default) lets the library choose by the CPU.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import base_parser, best_of, emit, log, profiled, setup_tensorflow  # noqa: E402

ALPHA = 0.6
TRANSPOSED = {"auto": None, "on": True, "off": False}


def full_recomputation_step_fn(tf, model, source_ids, beam_size, cache_length):
    """(step_fn, initial_cache) like Transformer.decoding_step_fn, without the key/value cache: the
    cache is the prefix (B*W, L), and every step runs the decoder over prefix[:, :step + 1]."""
    memory, source_padding_mask = model.encode(source_ids, training=False)
    memory = tf.repeat(memory, beam_size, axis=0)  # (B*W, S, D), batch-major
    source_padding_mask = tf.repeat(source_padding_mask, beam_size, axis=0)  # (B*W, S)
    sources = tf.repeat(source_ids, beam_size, axis=0)  # (B*W, S), for a model with aligned_decoder

    def step_fn(ids, step, prefix):
        prefix = tf.where(tf.range(cache_length) == step, ids[:, None], prefix)  # (B*W, L)
        logits = model.decode(prefix[:, :step + 1], memory, source_padding_mask,
                              source_ids=sources)  # (B*W, step + 1, V)
        return logits[:, -1, :], prefix

    rows = source_ids.shape[0] * beam_size
    return step_fn, tf.zeros([rows, cache_length], tf.int32)


def make_decoder(tf, model, args):
    """A tf.function source_ids (B, S) -> (ids (B, T), lengths (B,)) of the best hypotheses."""
    from keras_transformer import BOS_ID, EOS_ID
    from keras_transformer.decoding import beam_search

    batch_size, length, beam_size = args.batch_size, args.output_length, args.beam_size

    @tf.function(input_signature=[tf.TensorSpec([batch_size, args.source_length], tf.int32)],
                 jit_compile=args.jit_compile)
    def decode(source_ids):
        if args.no_cache:
            step_fn, cache = full_recomputation_step_fn(tf, model, source_ids, beam_size, length)
        else:
            step_fn, cache = model.decoding_step_fn(source_ids, beam_size, cache_length=length,
                                                    parallel_groups=args.parallel_groups,
                                                    transposed_kernels=args.transposed)
        result = beam_search(step_fn, cache, batch_size, beam_size, tf.fill([batch_size], length), BOS_ID,
                             EOS_ID, alpha=ALPHA, max_length=length, num_return=1, min_length=length)
        return result["ids"][:, 0], result["lengths"][:, 0]

    return decode


def through_saved_model(tf, model, decode, directory):
    """The module holding decode as exported with tf.saved_model.save and loaded back (the caller
    keeps it: its variables die with it)."""
    module = tf.Module()
    module.model = model
    module.decode = decode
    tf.saved_model.save(module, directory)
    return tf.saved_model.load(directory)


def main():
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--source-length", type=int, default=25)
    parser.add_argument("--output-length", type=int, default=25)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--no-cache", action="store_true", help="decode by full recomputation")
    parser.add_argument("--saved-model", action="store_true", help="time a SavedModel loaded from disk")
    parser.add_argument("--parallel-groups", type=int, default=1,
                        help="sentence groups decoded side by side, each with threads / G intra-op threads")
    # keras_transformer.precision.PRECISIONS, which cannot be imported before TensorFlow is set up.
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                        help="dtype of the weights and matrix products (log-softmax and scores stay float32)")
    parser.add_argument("--transposed-kernels", choices=tuple(TRANSPOSED), default="auto",
                        help="compute a step's products with the kernels transposed once (default: "
                             "the library's choice for this CPU)")
    parser.add_argument("--profile", metavar="DIR", help="decode once more under the profiler, into DIR")
    parser.add_argument("--top", type=int, default=15, help="op types listed with --profile")
    args = parser.parse_args()
    if args.no_cache and args.jit_compile:
        parser.error("--no-cache decodes a prefix that grows every step, which XLA cannot compile")
    if args.parallel_groups < 1 or args.threads % args.parallel_groups:
        parser.error(f"--parallel-groups must divide --threads ({args.threads}); got {args.parallel_groups}")
    if args.no_cache and args.parallel_groups > 1:
        parser.error("--parallel-groups splits the cached decoder; --no-cache has none")
    intra_op_threads = args.threads // args.parallel_groups
    tf = setup_tensorflow(args, intra_op_threads=intra_op_threads)
    import keras
    import keras_transformer as kt
    from keras_transformer.model import transposed_here
    from keras_transformer.precision import model_in_precision, warn_if_slow_here

    transposed = TRANSPOSED[args.transposed_kernels]
    args.transposed = transposed_here() if transposed is None else transposed  # chosen once: decoded and logged
    keras.utils.set_random_seed(0)
    model = model_in_precision(kt.Transformer.from_preset(args.preset, vocab_size=args.vocab_size), args.dtype)
    warn_if_slow_here(args.dtype)
    tokens = tf.random.uniform((args.batch_size, args.source_length - 1), 4, args.vocab_size, tf.int32)
    source_ids = tf.concat([tokens, tf.fill([args.batch_size, 1], kt.EOS_ID)], axis=1)  # (B, S)
    decode = make_decoder(tf, model, args)
    with tempfile.TemporaryDirectory() as directory:
        if args.saved_model:
            loaded = through_saved_model(tf, model, decode, directory)
            decode = loaded.decode
        _, lengths = decode(source_ids)
        if not bool(tf.reduce_all(lengths == args.output_length)):
            raise AssertionError(f"output lengths {lengths.numpy()} are not all {args.output_length}")
        timing = best_of(lambda: decode(source_ids)[0].numpy(), runs=args.runs)
        profile = args.profile and profiled(tf, lambda: decode(source_ids)[0].numpy(), args.profile, args.top)
    tokens = args.batch_size * args.output_length
    log(f"keras_transformer decode, beam {args.beam_size}{', no cache' if args.no_cache else ''}"
        f"{f', {args.parallel_groups} groups' if args.parallel_groups > 1 else ''}"
        f"{', SavedModel' if args.saved_model else ''}{f', {args.dtype}' if args.dtype != 'float32' else ''}"
        f"{', kernels transposed' if args.transposed else ''}"
        f": {timing['seconds']:.2f} s, "
        f"{tokens / timing['seconds']:.0f} target tok/s")
    emit(task="decode", beam=args.beam_size, preset=args.preset, threads=args.threads, batch=args.batch_size,
         source_length=args.source_length, output_length=args.output_length, cache=not args.no_cache,
         saved_model=args.saved_model, jit_compile=args.jit_compile, onednn=args.onednn,
         parallel_groups=args.parallel_groups, dtype=args.dtype, intra_op_threads=intra_op_threads,
         transposed_kernels=args.transposed, **timing,
         target_tokens_per_second=round(tokens / timing["seconds"], 1))
    if profile:
        emit(task="decode_profile", beam=args.beam_size, preset=args.preset, parallel_groups=args.parallel_groups,
             dtype=args.dtype, transposed_kernels=args.transposed, trace=args.profile, **profile)


if __name__ == "__main__":
    main()
