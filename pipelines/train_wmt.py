"""Train a Transformer with the paper's recipe, average its last checkpoints, translate the test set with
beam search, score it with sacreBLEU and export it.

Not in the paper, off by default: `--average best` averages the best checkpoints by validation loss
(kept besides the latest ones in <workdir>/checkpoints/best), and `--early-stopping-patience N`
stops training once the validation loss has not improved for N evaluations.

    python -m pipelines.train_wmt --preset base                       # WMT14 en-de via TFDS, 100K steps
    python -m pipelines.train_wmt --preset tiny --dataset numbers --workdir runs/numbers-tiny   # offline

Run the same command again after an interruption (even SIGKILL) to resume from the last checkpoint.
TensorBoard: `tensorboard --logdir <workdir>/tensorboard`.
"""
import argparse
import pathlib
import re
import sys

from pipelines import show_job_log  # first: the package sets TF's environment before TF loads
from keras_transformer.config import AVERAGED_CHECKPOINTS
from keras_transformer.precision import DEFAULT_PRECISION, PRECISIONS
from keras_transformer.training.run_config import (MIXED_PRECISION_MODES, RunConfigs, apply_overrides,
                                                   preset_configs)


def _run_name(dataset, preset, reverse=False):
    name = dataset if "=" not in dataset else "local"
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}{'-reverse' if reverse else ''}-{preset}"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--preset", default="base",
                        choices=("tiny", "small", "small_data", "small_data_wu2021", "base", "big"),
                        help="model and recipe: base/big are the paper's (Table 3, sections 5-6); small learns "
                             "Multi30k in an hour on 2 CPU cores, small_data is small with dropout 0.3, steps of "
                             "2,048 tokens and a cooldown for Multi30k-sized corpora, small_data_wu2021 Wu et al.'s "
                             "(2021) recipe for them; tiny runs in minutes")
    parser.add_argument("--dataset", default="wmt14",
                        help="wmt14 (TFDS wmt14_translate/de-en), numbers (offline), multi30k, newstest, tatoeba "
                             "(from ../shared/data or $KT_SHARED_DATA), or a local spec such as "
                             "'train=a.en,a.de;validation=b.tsv;test=c.en,c.de'")
    parser.add_argument("--reverse", action="store_true",
                        help="translate the corpus the other way round (de->en for the en-de corpora)")
    parser.add_argument("--workdir", type=pathlib.Path,
                        help="run directory: configs, vocabulary, checkpoints, TensorBoard logs "
                             "(default runs/<dataset>-<preset>)")
    add_job_flags(parser)
    return parser.parse_args(argv)


def non_negative_int(text):
    """argparse type: an integer >= 0 (argparse names the flag in its error)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0 (0 turns it off), got {value}")
    return value


def add_job_flags(parser):
    """The flags of a training job besides its corpus, preset and workdir (pipelines.train_parser
    takes them too)."""
    parser.add_argument("--train-steps", type=int, help="optimizer steps (default: the preset's, 100K for base)")
    parser.add_argument("--tokens-per-batch", type=int,
                        help="tokens of one optimizer step over all replicas and accumulated micro-batches, "
                             "counted on each of source and target, padding included (the paper: ~25,000)")
    parser.add_argument("--seed", type=int, help="seed of the initialization, dropout and data order")
    parser.add_argument("--devices", help="comma-separated devices to mirror over, e.g. GPU:0,GPU:1 (default: all "
                                          "GPUs, or one device without GPUs; TF_CONFIG with several workers "
                                          "selects MultiWorkerMirroredStrategy)")
    parser.add_argument("--cpu-devices", type=int,
                        help="split the CPU into N logical devices and replicate over them (each worker's, under "
                             "a multi-worker TF_CONFIG): runs multi-replica set-ups without GPUs, no faster")
    parser.add_argument("--collective-timeout", type=float, default=120.0,
                        help="seconds a worker waits for the others in a collective before it stops with an "
                             "error (multi-worker TF_CONFIG only; 0 waits for ever)")
    parser.add_argument("--accumulate-steps", type=int,
                        help="micro-batches per optimizer step (e.g. 8 on one GPU for the paper's 8-GPU batch)")
    parser.add_argument("--mixed-precision", choices=MIXED_PRECISION_MODES,
                        help="off (default), on = mixed_float16 on GPUs and mixed_bfloat16 elsewhere, or a policy")
    parser.add_argument("--jit-compile", action=argparse.BooleanOptionalAction,
                        help="compile the training step with XLA (default off: one compilation per batch shape)")
    parser.add_argument("--max-train-minutes", type=float,
                        help="stop training after this many minutes (saving a checkpoint), then finish the job")
    parser.add_argument("--checkpoint-every-steps", type=int, help="save every N steps")
    parser.add_argument("--checkpoint-every-minutes", type=float, help="save every M minutes (the paper: 10)")
    parser.add_argument("--keep-checkpoints", type=int, help="checkpoints kept (at least the number averaged)")
    parser.add_argument("--keep-best-checkpoints", type=non_negative_int,
                        help="the best checkpoints by validation loss kept besides the latest ones (0: none)")
    parser.add_argument("--eval-every-steps", type=int,
                        help="validation loss and BLEU every N steps (a checkpoint is saved at each)")
    parser.add_argument("--early-stopping-patience", type=non_negative_int,
                        help="stop training once the validation loss has not improved for N evaluations, then "
                             "average, score and export (default 0: never, as in the paper)")
    parser.add_argument("--average", choices=AVERAGED_CHECKPOINTS,
                        help="average the last checkpoints (the paper's, default) or the best by validation loss")
    parser.add_argument("--log-every-steps", type=int, help="training scalars to TensorBoard every N steps")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any config field, e.g. --set dropout_rate=0.2 --set data.max_length=128 "
                             "(configs: model, train, data, decode, run); repeatable")
    export = parser.add_mutually_exclusive_group()
    export.add_argument("--export-dir", type=pathlib.Path,
                        help="SavedModel base directory (default exported/<run name>)")
    export.add_argument("--no-export", action="store_true",
                        help="train, average and score on the test set, but write no SavedModel")
    parser.add_argument("--export-precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                        help="dtype of the SavedModel's weights and matrix products (as pipelines.export "
                             "--precision): bfloat16 for CPUs with AVX512_BF16 or AMX, float16 for GPUs")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the run's configs (after flags and overrides) and the workdir, and exit")
    parser.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2),
                        help="Keras' console output: 0 silent, 1 progress bar, 2 one line per epoch")


def flag_assignments(args):
    """The job flags given, as --set assignments (applied before the --set overrides)."""
    flags = {"data.reverse": True if getattr(args, "reverse", False) else None, "train.train_steps": args.train_steps,
             "train.tokens_per_batch": args.tokens_per_batch,
             "run.seed": args.seed, "data.seed": args.seed, "run.accumulate_steps": args.accumulate_steps,
             "run.mixed_precision": args.mixed_precision, "run.jit_compile": args.jit_compile,
             "run.checkpoint_every_steps": args.checkpoint_every_steps,
             "run.checkpoint_every_minutes": args.checkpoint_every_minutes,
             "run.keep_checkpoints": args.keep_checkpoints, "run.eval_every_steps": args.eval_every_steps,
             "run.keep_best_checkpoints": args.keep_best_checkpoints,
             "run.early_stopping_patience": args.early_stopping_patience, "train.average": args.average,
             "run.log_every_steps": args.log_every_steps, "run.max_train_minutes": args.max_train_minutes}
    return [f"{key}={value}" for key, value in flags.items() if value is not None]


def build_configs(args):
    """The run's configs: the preset's, then the flags, then the --set overrides."""
    return apply_overrides(preset_configs(args.preset, args.dataset), flag_assignments(args) + args.overrides)


def main(argv=None):
    args = parse_args(argv)
    configs = build_configs(args)
    run_name = _run_name(args.dataset, args.preset, args.reverse)
    workdir = args.workdir or pathlib.Path("runs") / run_name
    code, result = run_job(args, configs, workdir)
    if result is not None and result.scores is not None:
        print(result.scores.report(f"test ({averaged_description(configs, result)}, beam {configs.decode.beam_size})"))
        if result.export_path is not None:
            print(f"SavedModel: {result.export_path}")
    return code


def averaged_description(configs, result):
    """E.g. "300 steps, average of the last 3 checkpoints", for the lines that print the scores."""
    stopped = ", stopped early" if result.stopped_early else ""
    count = configs.train.checkpoints_to_average
    chosen = f"the last {count}" if configs.train.average == "last" else f"the best {count} by validation loss"
    return f"{result.step} steps{stopped}, average of {chosen} checkpoints"


def run_job(args, configs, workdir, task=None):
    """Trains, averages, scores and exports (or prints the configs with --dry-run); returns (exit
    code, RunResult or None). `task`: keras_transformer.training.task's, default translation."""
    export_dir = None if args.no_export else args.export_dir or pathlib.Path("exported") / workdir.name
    if args.dry_run:
        for name in RunConfigs.FILENAMES:
            print(f"{name}: {getattr(configs, name).to_json()}")
        export = "none (--no-export)" if export_dir is None else f"{export_dir}/<version>"
        print(f"workdir: {workdir}\nexport: {export}")
        return 0, None

    show_job_log()
    from keras_transformer.training.best_checkpoints import NoBestCheckpoints
    from keras_transformer.training.checkpointing import TrainingDiverged, TrainingInterrupted
    from keras_transformer.training.distribution import (ClusterConfigError, WorkerLost, XlaCompilationError,
                                                         select_strategy)
    from keras_transformer.training.run import train_and_evaluate
    from keras_transformer.training.task import TRANSLATION

    try:
        strategy = select_strategy(args.devices.split(",") if args.devices else None, args.cpu_devices,
                                   args.collective_timeout)
        result = train_and_evaluate(workdir, configs, strategy=strategy, export_dir=export_dir,
                                    export_precision=args.export_precision, verbose=args.verbose,
                                    task=task or TRANSLATION)
    except (TrainingDiverged, XlaCompilationError, ClusterConfigError, WorkerLost, NoBestCheckpoints) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1, None
    except TrainingInterrupted as error:
        print(str(error), file=sys.stderr, flush=True)
        return 143, None
    return 0, result  # result.scores is None on a non-chief worker


if __name__ == "__main__":
    sys.exit(main())
