"""What a training job pays before its first step: tracing the training step and its first call.

    python benchmarks/trace_step.py --preset tiny --vocab-size 1000 [--replicas 4] [--runs 5]

Builds a TrainingTransformer at the preset with the paper's optimizer (under MirroredStrategy over
--replicas logical CPUs when more than 1, as `--cpu-devices` does), then --runs times: wraps its
train_step (under `strategy.run`) in a new tf.function, traces it for batches of any shape, and
calls it once on a --batch-size x --length batch (the call optimizes the graph: Grappler). Prints
one JSON line: the graph's nodes, those under each top-level name scope (`adam` is the optimizer's
update), and the CPU seconds of each trace and each first call (this process's, `process_time`).
Every training process pays these (the tests' jobs too), once per replica for the trace.
"""
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import base_parser, emit, setup_tensorflow  # noqa: E402


def main():
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=1, help="logical CPUs to mirror over (1: no strategy)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--length", type=int, default=12, help="source and target tokens of the first call's batch")
    args = parser.parse_args()
    tf = setup_tensorflow(args)
    from keras_transformer.config import TRAIN_PRESETS, TransformerConfig
    from keras_transformer.schedule import paper_optimizer
    from keras_transformer.training.distribution import split_cpu
    from keras_transformer.training.training_model import TrainingTransformer

    split_cpu(args.replicas)  # as --cpu-devices does, before TensorFlow initializes

    strategy = (tf.distribute.MirroredStrategy([f"CPU:{i}" for i in range(args.replicas)]) if args.replicas > 1
                else tf.distribute.get_strategy())
    config = TransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    with strategy.scope():
        model = TrainingTransformer(config)
        model.compile(optimizer=paper_optimizer(config.d_model, TRAIN_PRESETS.get(args.preset)),
                      jit_compile=args.jit_compile)
        model.prepare_for_training()
    spec = tf.TensorSpec([None, None], tf.int32)
    ids = tf.fill([args.batch_size, args.length], 5)
    traces, first_calls = [], []
    for _ in range(args.runs):
        @tf.function(input_signature=[spec, spec, spec], jit_compile=args.jit_compile and args.replicas == 1)
        def step(source, target_input, target_output):
            return strategy.run(model.train_step, args=(((source, target_input), target_output),))

        start = time.process_time()
        concrete = step.get_concrete_function()
        traces.append(round(time.process_time() - start, 2))
        start = time.process_time()
        step(ids, ids, ids)
        first_calls.append(round(time.process_time() - start, 2))
    graph = concrete.graph.as_graph_def()  # every run's graph is the same: the last one's
    scopes = collections.Counter(node.name.split("/")[0] for node in graph.node)
    emit(task="trace_step", preset=args.preset, replicas=args.replicas, nodes=len(graph.node),
         scopes={name: count for name, count in scopes.most_common(4)},
         trace_cpu_seconds=traces, first_call_cpu_seconds=first_calls)


if __name__ == "__main__":
    main()
