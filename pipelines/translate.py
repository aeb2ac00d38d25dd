"""Translate lines of text with an exported SavedModel or a run directory: stdin or a file -> stdout.

    python -m pipelines.translate --model exported/wmt14 < input.en > output.de
    python -m pipelines.translate --model runs/wmt14 --input newstest2014.en --output hyp.de \
        [--beam-size 4] [--alpha 0.6] [--mbr N [--mbr-utility bleu|chrf]] [--batch-size 64] [--checkpoint ...]

--model is a SavedModel version (a directory with saved_model.pb), an export directory of numbered
versions (the highest is used, as TF Serving does), or a run directory (model_config.json; its
averaged weights or latest checkpoint, or --checkpoint). One translation per input line, in order;
lines are batched by length, and a progress bar runs on stderr when reading a file. Without
--beam-size the model's own decoding settings apply (paper: beam 4, alpha 0.6). --mbr N (not in the
paper) answers with the minimum-Bayes-risk choice among the N best of a beam of N
(keras_transformer.decoding.mbr): the candidate that agrees most with the others, by sentence BLEU
(or chrF) weighted by their beam scores.
"""
import argparse
import dataclasses
import json
import logging
import math
import pathlib
import sys

import tensorflow as tf
from tqdm import tqdm

from keras_transformer import export
from keras_transformer.config import MAX_ALPHA
from keras_transformer.decoding import mbr
from keras_transformer.files import lines_text, split_lines, write_lines
from pipelines import show_job_log


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.translate", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, type=pathlib.Path,
                        help="SavedModel directory, export directory of versions, or run directory")
    parser.add_argument("--checkpoint", type=pathlib.Path, help="with a run directory: the checkpoint to use")
    parser.add_argument("--input", type=pathlib.Path, help="text file, one sentence per line (default: stdin)")
    parser.add_argument("--output", type=pathlib.Path, help="where translations go (default: stdout)")
    parser.add_argument("--beam-size", type=int, help="beam size (default: the model's decode config)")
    parser.add_argument("--alpha", type=float, help="length penalty exponent (default: the model's)")
    parser.add_argument("--mbr", type=int, metavar="N",
                        help="minimum Bayes risk among the N best of a beam of N (not in the paper)")
    parser.add_argument("--mbr-utility", choices=mbr.UTILITIES, default="bleu",
                        help="with --mbr: the sentence score candidates are compared with (default: bleu)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch")
    return parser, parser.parse_args(argv)


def find_saved_model(path):
    """path itself if it is a SavedModel, else its highest numbered version that is one, else None."""
    if (path / "saved_model.pb").is_file():
        return path
    versions = [int(p.name) for p in path.iterdir() if p.name.isdigit() and (p / "saved_model.pb").is_file()]
    return path / str(max(versions)) if versions else None


def saved_model_translator(path, beam_size, alpha, mbr_utility=None):
    """batch of bytes -> translations (B,) with the SavedModel at path: serving_default, or
    translate_nbest's best when a beam size or alpha is given, or with mbr_utility the MBR choice
    among its beam_size best."""
    assets = path / "assets"
    decode_config = json.loads((assets / export.DECODE_CONFIG_FILENAME).read_text())
    max_beam_size = json.loads((assets / export.TRANSLATOR_CONFIG_FILENAME).read_text())["max_beam_size"]
    if beam_size is not None and beam_size > max_beam_size:
        raise ValueError(f"{'--mbr' if mbr_utility else '--beam-size'} {beam_size} exceeds the largest beam size "
                         f"of {path}: {max_beam_size}")
    if beam_size is None and alpha is not None and decode_config["beam_size"] > max_beam_size:
        raise ValueError(f"--alpha decodes with translate_nbest, whose largest beam size ({max_beam_size}) is below "
                         f"the beam size of {path} ({decode_config['beam_size']}): give --beam-size too")
    loaded = tf.saved_model.load(str(path))
    if beam_size is None and alpha is None:
        serving_default = loaded.signatures["serving_default"]
        return lambda batch: serving_default(inputs=tf.constant(batch))["translations"]
    nbest = loaded.signatures["translate_nbest"]
    beam_size = tf.constant(decode_config["beam_size"] if beam_size is None else beam_size)
    alpha = tf.constant(decode_config["alpha"] if alpha is None else alpha, tf.float32)
    if mbr_utility is not None:
        return lambda batch: mbr_choices(nbest(inputs=tf.constant(batch), beam_size=beam_size, alpha=alpha),
                                         mbr_utility)
    return lambda batch: nbest(inputs=tf.constant(batch), beam_size=beam_size, alpha=alpha)["translations"][:, 0]


def mbr_choices(outputs, utility):
    """translate_nbest's outputs -> the MBR choice of each row (B,) string."""
    return tf.constant(mbr.choose_among_nbest(outputs, utility))


def workdir_translator(workdir, checkpoint, beam_size, alpha, mbr_utility=None):
    """batch of bytes -> translations (B,) with the run's model, decoded in this process (with
    mbr_utility: the MBR choice among the beam's beam_size best)."""
    model, sentencepiece_proto, decode_config = export.load_model_from_workdir(workdir, checkpoint)
    overrides = {key: value for key, value in (("beam_size", beam_size), ("alpha", alpha)) if value is not None}
    decode_config = dataclasses.replace(decode_config, **overrides)
    if mbr_utility is not None:
        translator = export.Translator(model, sentencepiece_proto, decode_config,
                                       max_beam_size=export.max_beam_size_for(decode_config.beam_size))
        return lambda batch: mbr_choices(translator.translate_nbest(
            tf.constant(batch), tf.constant(decode_config.beam_size), tf.constant(decode_config.alpha)), mbr_utility)
    translator = export.Translator(model, sentencepiece_proto, decode_config)
    return lambda batch: translator.translate(tf.constant(batch))["translations"]


def resolve_model(args):
    """("workdir" or "saved_model", path) for --model; raises naming the path when it is neither."""
    path = args.model
    if not path.is_dir():
        raise FileNotFoundError(f"model not found (not a directory): {path}")
    if (path / export.MODEL_CONFIG_FILENAME).is_file():
        return "workdir", path
    saved_model = find_saved_model(path)
    if saved_model is None:
        raise FileNotFoundError(f"{path} is neither a SavedModel (saved_model.pb), a directory of numbered "
                                f"SavedModel versions, nor a run directory ({export.MODEL_CONFIG_FILENAME})")
    if args.checkpoint is not None:
        raise ValueError(f"--checkpoint applies to a run directory, not to the SavedModel {saved_model}")
    return "saved_model", saved_model


def check_arguments(args):
    """Every path and number checked before anything slow runs (or stdin is read)."""
    if args.input is not None and not args.input.is_file():
        raise FileNotFoundError(f"input file not found: {args.input}")
    if args.output is not None and not args.output.parent.is_dir():
        raise FileNotFoundError(f"output directory not found: {args.output.parent}")
    if args.beam_size is not None and args.beam_size < 1:
        raise ValueError(f"--beam-size must be >= 1, got {args.beam_size}")
    if args.alpha is not None and not (math.isfinite(args.alpha) and 0 <= args.alpha <= MAX_ALPHA):
        raise ValueError(f"--alpha must be a number in [0, {MAX_ALPHA:g}] (0 ranks by log-probability; the paper's "
                         f"is 0.6), got {args.alpha}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.mbr is not None and args.mbr < 2:
        raise ValueError(f"--mbr N chooses among N >= 2 candidates, got {args.mbr}")
    if args.mbr is not None and args.beam_size not in (None, args.mbr):
        raise ValueError(f"--mbr {args.mbr} decodes with a beam of {args.mbr}; --beam-size {args.beam_size} "
                         f"says otherwise (give one of them)")
    return resolve_model(args)


def translate_lines(translate_batch, lines, batch_size, progress=False):
    """Translations of lines (bytes) in their order; batches hold lines of similar length."""
    order = sorted(range(len(lines)), key=lambda index: len(lines[index]))
    translations = [b""] * len(lines)
    with tqdm(total=len(lines), disable=not progress, unit="sentence", file=sys.stderr) as bar:
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            for index, translation in zip(indices, translate_batch([lines[i] for i in indices]).numpy()):
                translations[index] = translation
            bar.update(len(indices))
    return translations


def main(argv=None):
    parser, args = parse_args(argv)
    show_job_log()
    try:
        kind, path = check_arguments(args)
        lines = split_lines(args.input.read_bytes() if args.input else sys.stdin.buffer.read())
        beam_size, utility = (args.beam_size, None) if args.mbr is None else (args.mbr, args.mbr_utility)
        if kind == "workdir":
            translate_batch = workdir_translator(path, args.checkpoint, beam_size, args.alpha, utility)
        else:
            logging.getLogger("keras_transformer").info("translating with %s", path)
            translate_batch = saved_model_translator(path, beam_size, args.alpha, utility)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    translations = translate_lines(translate_batch, lines, args.batch_size, progress=args.input is not None)
    # Valid UTF-8 (the model's output is made so); a line break inside one becomes a space.
    translations = [translation.decode("utf-8", errors="replace") for translation in translations]
    if args.output is None:
        sys.stdout.buffer.write(lines_text(translations, "stdout").encode("utf-8"))
        sys.stdout.buffer.flush()
    else:
        write_lines(args.output, translations)


if __name__ == "__main__":
    main()
