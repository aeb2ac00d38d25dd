"""Parse tokenized sentences (one per line, words separated by spaces) into bracketed trees, one per line.

    python -m pipelines.parse --model runs/toy-parser --input sentences.txt --output trees.txt
    python -m pipelines.parse --model exported/toy-parser < sentences.txt > trees.txt

--model is a run directory of pipelines.train_parser (its chosen.weights.h5 when
benchmarks/gum_parsing.py chose a checkpoint there, else its averaged weights, else its latest
checkpoint; or --checkpoint), a SavedModel version, or an export directory of versions (the
highest). Every answer is a tree over exactly the words of its line: the parser's decoding is
constrained to give one, and any answer that is not one is repaired; how many needed repair is
printed on stderr. An empty line gives an empty line.
"""
import argparse
import pathlib
import sys

import tensorflow as tf

from keras_transformer.files import lines_text, split_lines, write_lines
from pipelines import show_job_log
from pipelines.translate import resolve_model, translate_lines

CHOSEN_WEIGHTS = "chosen.weights.h5"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.parse", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=pathlib.Path,
                        help="run directory, SavedModel directory, or export directory of versions")
    parser.add_argument("--checkpoint", type=pathlib.Path, help="with a run directory: the checkpoint to use")
    parser.add_argument("--input", type=pathlib.Path, help="one tokenized sentence per line (default: stdin)")
    parser.add_argument("--output", type=pathlib.Path, help="where the trees go (default: stdout)")
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch")
    return parser, parser.parse_args(argv)


def workdir_parser(workdir, checkpoint):
    """batch of bytes -> trees (B,) with the run's model, decoded in this process."""
    from keras_transformer import export
    from keras_transformer.parsing.task import PARSING

    chosen = workdir / CHOSEN_WEIGHTS
    weights = chosen if checkpoint is None and chosen.is_file() else None
    model, sentencepiece_proto, decode_config = export.load_model_from_workdir(
        workdir, checkpoint, weights, build_model=lambda config: PARSING.model(config, workdir))
    parser = PARSING.translator(workdir)(model, sentencepiece_proto, decode_config)
    return lambda batch: parser.translate(tf.constant(batch))["translations"]


def saved_model_parser(path):
    serving_default = tf.saved_model.load(str(path)).signatures["serving_default"]
    return lambda batch: serving_default(inputs=tf.constant(batch))["trees"]


def checked_trees(lines, answers):
    """The answers as tree lines, each one over exactly its sentence's words (repaired if need be),
    and how many needed repair."""
    from keras_transformer.parsing.task import answer_tree

    trees, repaired = [], 0
    for line, answer in zip(lines, answers):
        tree, repairs = answer_tree(answer.decode("utf-8"), line.decode("utf-8", errors="replace"))
        repaired += repairs is not None
        trees.append("" if tree is None else tree.to_string())
    return trees, repaired


def main(argv=None):
    parser, args = parse_args(argv)
    show_job_log()
    try:
        if args.input is not None and not args.input.is_file():
            raise FileNotFoundError(f"input file not found: {args.input}")
        if args.output is not None and not args.output.parent.is_dir():
            raise FileNotFoundError(f"output directory not found: {args.output.parent}")
        if args.batch_size < 1:
            raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
        kind, path = resolve_model(args)
        lines = split_lines(args.input.read_bytes() if args.input else sys.stdin.buffer.read())
        parse_batch = workdir_parser(path, args.checkpoint) if kind == "workdir" else saved_model_parser(path)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    answers = translate_lines(parse_batch, lines, args.batch_size, progress=args.input is not None)
    trees, repaired = checked_trees(lines, answers)
    print(f"{repaired} of {len(lines)} answers needed repair", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(lines_text(trees, "stdout"))
        sys.stdout.flush()
    else:
        write_lines(args.output, trees)


if __name__ == "__main__":
    main()
