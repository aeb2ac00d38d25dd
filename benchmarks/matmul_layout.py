"""A decoding step's float32 matrix products in the two layouts Transformer.decoding_step_fn can use.

    python benchmarks/matmul_layout.py --preset base --vocab-size 32000 --rows 128 --threads 1 [--onednn 0]

For each kernel W a decoding step multiplies by (a decoder layer's (D, 3D) self-attention
projection, (D, D) attention query or output projection, (D, d_ff) and (d_ff, D) feed-forward
kernels, and the (D, V) output projection), times x W on x (rows, D_in) in both layouts, and
in numpy for scale:
  stored       x @ W, the kernel as it is stored (D_in, D_out);
  transposed   (W^T @ x^T)^T, the kernel transposed once beforehand (D_out, D_in), what
               `transposed_kernels` does at every step (the output projection is left stored);
  numpy        x @ W in numpy (its BLAS, e.g. OpenBLAS, with --threads threads): what the CPU
               gives outside TensorFlow.
--rows is a step's rows: sentences x beam, per parallel group (64 sentences at beam 4 in 2 groups:
128); --threads 1 is a group's one intra-op thread. Prints one JSON line per kernel and layout
({"task": "matmul_layout", "kernel": "(512, 2048)", "layout": "stored", "gflops": ..., ...}): the
best of --runs timings of as many products as take about 0.2 s.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import base_parser, best_of, emit, log, setup_tensorflow  # noqa: E402


def main():
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=128, help="rows of x: sentences x beam, per group")
    args = parser.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)  # before numpy loads
    tf = setup_tensorflow(args)
    from keras_transformer.config import TransformerConfig

    config = TransformerConfig.from_preset(args.preset)
    d, d_ff = config.d_model, config.d_ff
    kernels = [(d, 3 * d), (d, d), (d, d_ff), (d_ff, d), (d, args.vocab_size)]
    layouts = {"stored": tf.function(lambda x, w, w_t: tf.matmul(x, w)),
               "transposed": tf.function(lambda x, w, w_t: tf.transpose(tf.matmul(w_t, x, transpose_b=True))),
               "numpy": lambda x, w, w_t: x @ w}
    for d_in, d_out in kernels:
        x = tf.random.normal((args.rows, d_in))
        w = tf.random.normal((d_in, d_out))
        w_t = tf.transpose(w)
        flops = 2 * args.rows * d_in * d_out
        products = max(1, int(0.2 * 50e9 / flops))  # about 0.2 s at 50 GFLOP/s
        for layout, product in layouts.items():
            operands = [operand.numpy() if layout == "numpy" else operand for operand in (x, w, w_t)]

            def run():
                for _ in range(products):
                    y = product(*operands)
                return y if layout == "numpy" else y.numpy()

            timing = best_of(run, runs=args.runs)
            gflops = flops * products / timing["seconds"] / 1e9
            log(f"({d_in}, {d_out}) {layout}: {gflops:.1f} GFLOP/s")
            emit(task="matmul_layout", kernel=f"({d_in}, {d_out})", layout=layout, rows=args.rows,
                 threads=args.threads, onednn=args.onednn, products=products, gflops=round(gflops, 1), **timing)


if __name__ == "__main__":
    main()
