"""Average the last or the best checkpoints of a run into one weights file (section 6.1 of the paper:
the base model averages the last 5 checkpoints, the big one the last 20).

    python -m pipelines.average_checkpoints --workdir runs/wmt14-base [--count 5] [--select last|best]
        [--output PATH]

Writes workdir/averaged.weights.h5 (or --output), which `python -m pipelines.export`,
`python -m pipelines.evaluate` and `python -m pipelines.translate` use when it exists. Without
--count and --select, the run's own train_config.json says how many (checkpoints_to_average) and
which (average). `--select best` averages the best checkpoints by validation loss, which the run
keeps in workdir/checkpoints/best (keras_transformer/training/best_checkpoints.py).
"""
import argparse
import json
import pathlib

from pipelines import show_job_log  # first: the package sets TF's environment before TF loads
from keras_transformer.config import AVERAGED_CHECKPOINTS


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.average_checkpoints",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=pathlib.Path, help="the run directory")
    parser.add_argument("--count", type=int, help="how many of the last checkpoints to average "
                                                  "(default: the run's checkpoints_to_average)")
    parser.add_argument("--select", choices=AVERAGED_CHECKPOINTS,
                        help="the last checkpoints or the best by validation loss (default: the run's average)")
    parser.add_argument("--output", type=pathlib.Path, help="weights file (default: workdir/averaged.weights.h5)")
    return parser, parser.parse_args(argv)


def main(argv=None):
    parser, args = parse_args(argv)
    show_job_log()
    from keras_transformer.training.averaging import average_run
    from pipelines.export import run_task

    count, select = args.count, args.select
    if count is None or select is None:
        train_config = args.workdir / "train_config.json"
        if not train_config.is_file():
            parser.exit(2, f"{parser.prog}: error: {train_config} not found; give --count and --select\n")
        saved = json.loads(train_config.read_text())
        count = saved["checkpoints_to_average"] if count is None else count
        select = saved.get("average", "last") if select is None else select
    if count < 1:
        parser.exit(2, f"{parser.prog}: error: --count must be at least 1, got {count}\n")
    try:
        task = run_task(args.workdir)
        path = average_run(args.workdir, count, args.output, select=select,
                           build_model=lambda config: task.model(config, args.workdir))
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(path)
    return path


if __name__ == "__main__":
    main()
