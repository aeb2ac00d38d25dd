"""Export a run as a SavedModel that translates raw strings, in the layout TF Serving watches.

    python -m pipelines.export --workdir runs/wmt14 [--checkpoint runs/wmt14/checkpoints/ckpt-20]
        [--weights runs/wmt14/averaged.weights.h5 | --ensemble K | --ensemble-of PATH PATH ...]
        [--export-dir exported/wmt14] [--version N]
        [--max-source-length 256] [--max-beam-size 8] [--precision float32|bfloat16|float16]
        [--parallel-groups G] [--transposed-kernels on|off]

Restores the run's model (its averaged.weights.h5 if it has one, else its latest checkpoint, unless
--checkpoint or --weights says otherwise; --ensemble K: the ensemble of its last K checkpoints, whose
next-token distributions are averaged at each step, keras_transformer.ensemble; --ensemble-of: the
ensemble of these checkpoints or weights files, of any runs that share --workdir's vocabulary, such as
the members of `benchmarks/multi30k.py --members N`), wraps it with its
SentencePiece model and decoding settings in a keras_transformer.export.Translator and writes
--export-dir/<version> (default: the next number) atomically. Prints the path of the new version. --precision bfloat16 (CPUs with AVX512_BF16
or AMX) or float16 (GPUs) stores the weights and runs the matrix products in that dtype, see
keras_transformer.precision; float32 is the default. A run of pipelines.train_parser (its
data_config.json names a treebank) is exported as a keras_transformer.parsing Parser, which answers
with trees.
"""
import argparse
import dataclasses
import json
import pathlib

from keras_transformer.export import (DEFAULT_MAX_BEAM_SIZE, export_translator, load_decode_config,
                                     load_model_from_workdir)
from keras_transformer.precision import DEFAULT_PRECISION, PRECISIONS
from pipelines import show_job_log


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.export", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=pathlib.Path, help="the run directory")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", type=pathlib.Path,
                        help="a checkpoint prefix (.../ckpt-20) or a directory of checkpoints (its latest)")
    source.add_argument("--weights", type=pathlib.Path, help="a Keras .weights.h5 file (e.g. averaged weights)")
    source.add_argument("--ensemble", type=int, metavar="K",
                        help="the ensemble of the run's last K checkpoints (a translation run; each decoding "
                             "step costs K models' steps)")
    source.add_argument("--ensemble-of", type=pathlib.Path, nargs="+", metavar="PATH",
                        help="the ensemble of these checkpoint prefixes (.../ckpt-20), checkpoint directories "
                             "(their latest), .weights.h5 files or run directories (their averaged weights, "
                             "else their latest checkpoint), each of a run (the nearest folder at or above it "
                             "with a model_config.json) with --workdir's SentencePiece model; the decoding "
                             "settings are --workdir's")
    parser.add_argument("--export-dir", type=pathlib.Path,
                        help="where the numbered versions go (default: exported/<workdir name>)")
    parser.add_argument("--version", type=int, help="version number (default: the next one)")
    parser.add_argument("--max-source-length", type=int,
                        help="sources are cut to this many tokens, EOS included (default: min(256, "
                             "model max_length - extra_length))")
    parser.add_argument("--max-beam-size", type=int, default=DEFAULT_MAX_BEAM_SIZE,
                        help="translate_nbest supports beam sizes 1..this")
    parser.add_argument("--parallel-groups", type=int,
                        help="decode each batch in this many sentence groups side by side (DecodeConfig."
                             "parallel_groups; default: the run's decode config); for a server run with "
                             "one intra-op thread per group")
    parser.add_argument("--transposed-kernels", choices=("on", "off"),
                        help="decoding steps multiply by kernels transposed once (DecodeConfig."
                             "transposed_kernels; default: the run's decode config, else the choice for "
                             "this CPU: on for AVX2 without AVX-512); for a server whose CPU differs")
    parser.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION,
                        help="dtype of the exported weights and matrix products: bfloat16 for CPUs with "
                             "AVX512_BF16 or AMX, float16 for GPUs (log-softmax and scores stay float32)")
    return parser, parser.parse_args(argv)


def run_task(workdir):
    """The task of the run in workdir: parsing for a treebank corpus, else translation."""
    data_config = pathlib.Path(workdir) / "data_config.json"
    if data_config.is_file() and json.loads(data_config.read_text()).get("dataset", "").startswith("treebank:"):
        from keras_transformer.parsing.task import PARSING
        return PARSING
    from keras_transformer.training.task import TRANSLATION
    return TRANSLATION


def translator_class(workdir):
    """Translator, or the parsing task's parser (with the run's tag dictionary or span labels) for a parsing run."""
    return run_task(workdir).translator(workdir)


def load_ensemble(workdir, count, task):
    """(TransformerEnsemble of the run's last `count` checkpoints, SentencePiece proto, DecodeConfig)."""
    from keras_transformer.training.averaging import last_checkpoints

    if task.name != "translation":
        raise ValueError(f"--ensemble exports translation runs; {workdir} is a {task.name} run")
    if count < 2:
        raise ValueError(f"--ensemble {count}: an ensemble needs at least 2 checkpoints")
    paths = last_checkpoints(workdir, count)
    if len(paths) < count:
        raise ValueError(f"--ensemble {count}: the run in {workdir} keeps only {len(paths)} "
                         f"checkpoint{'' if len(paths) == 1 else 's'}")
    return ensemble_of_paths(workdir, [pathlib.Path(path) for path in paths])


def run_directory_of(path):
    """The run directory of a checkpoint prefix, a checkpoint directory or a weights file (the nearest
    folder above it with a model config), or `path` itself if it is one."""
    from keras_transformer.export import MODEL_CONFIG_FILENAME

    path = pathlib.Path(path).absolute()
    for folder in (path, *path.parents):
        if (folder / MODEL_CONFIG_FILENAME).is_file():
            return folder
    raise FileNotFoundError(f"--ensemble-of {path}: no run directory (a folder with {MODEL_CONFIG_FILENAME}) above it")


def load_ensemble_of(workdir, paths, task):
    """(TransformerEnsemble of the models at `paths` (ensemble_of_paths), workdir's SentencePiece proto
    and DecodeConfig)."""
    if task.name != "translation":
        raise ValueError(f"--ensemble-of exports translation runs; {workdir} is a {task.name} run")
    if len(paths) < 2:
        raise ValueError(f"--ensemble-of {paths[0]}: an ensemble needs at least 2 models")
    return ensemble_of_paths(workdir, paths)


def ensemble_of_paths(workdir, paths):
    """(TransformerEnsemble of the models at `paths`, each loaded from its own run, workdir's
    SentencePiece proto and DecodeConfig); ValueError for a member whose run has another vocabulary."""
    from keras_transformer.ensemble import TransformerEnsemble
    from keras_transformer.export import SENTENCEPIECE_FILENAME

    vocabulary = pathlib.Path(workdir) / SENTENCEPIECE_FILENAME
    if not vocabulary.is_file():
        raise FileNotFoundError(f"SentencePiece model not found: {vocabulary}")
    proto, members = vocabulary.read_bytes(), []
    for path in paths:
        run = run_directory_of(path)
        weights = path if path.name.endswith(".weights.h5") else None
        checkpoint = None if weights or run == path.absolute() else path  # a run directory: its own choice
        model, sentencepiece_proto, _ = load_model_from_workdir(run, checkpoint, weights)
        if sentencepiece_proto != proto:
            raise ValueError(f"--ensemble-of {path}: its run {run} has another SentencePiece model than {vocabulary}")
        members.append(model)
    return TransformerEnsemble(members), proto, load_decode_config(workdir)


def main(argv=None):
    parser, args = parse_args(argv)
    show_job_log()
    export_dir = args.export_dir or pathlib.Path("exported") / args.workdir.resolve().name
    try:
        task = run_task(args.workdir)
        if args.ensemble is not None:
            model, sentencepiece_proto, decode_config = load_ensemble(args.workdir, args.ensemble, task)
        elif args.ensemble_of is not None:
            model, sentencepiece_proto, decode_config = load_ensemble_of(args.workdir, args.ensemble_of, task)
        else:
            model, sentencepiece_proto, decode_config = load_model_from_workdir(
                args.workdir, args.checkpoint, args.weights,
                build_model=lambda config: task.model(config, args.workdir))
        if args.parallel_groups is not None:
            decode_config = dataclasses.replace(decode_config, parallel_groups=args.parallel_groups)
        if args.transposed_kernels is not None:
            decode_config = dataclasses.replace(decode_config, transposed_kernels=args.transposed_kernels == "on")
        translator = translator_class(args.workdir)(model, sentencepiece_proto, decode_config,
                                                    max_source_length=args.max_source_length,
                                                    max_beam_size=args.max_beam_size, precision=args.precision)
        path = export_translator(translator, export_dir, version=args.version)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(path)
    return path


if __name__ == "__main__":
    main()
