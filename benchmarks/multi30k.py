"""Multi30k en->de on this machine: train for a fixed time, pick a checkpoint on val, report sacreBLEU.

    python benchmarks/multi30k.py [--minutes 60] [--preset small] [--workdir runs/multi30k-small]
        [--threads 2] [--set FIELD=VALUE ...]

Trains `--preset` on Multi30k train (from ../shared/data or $KT_SHARED_DATA) with the project's
pipeline (`keras_transformer.training.run.train_and_evaluate`, which stops after --minutes and
averages the last checkpoints), then translates val with beam search (the paper's beam 4, alpha
0.6) using the averaged weights and each of the last --candidates checkpoints, keeps the one with
the best val BLEU, and scores it on test_2016_flickr and test_2017_flickr. Prints one JSON line per
test set: {"task": "multi30k", "test_set", "bleu", "signature", "chrf", "minutes", "steps", ...}.
Running the same command again resumes the run in --workdir (the time budget counts again).
The README's figure trains in mixed bfloat16 (`--set run.mixed_precision=mixed_bfloat16`), which is
faster only on CPUs with bfloat16 arithmetic (AVX512_BF16, AMX) and on GPUs/TPUs.
"""
import argparse
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log, setup_tensorflow  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--preset", default="small", help="model and recipe preset")
    parser.add_argument("--workdir", type=pathlib.Path, help="run directory (default runs/multi30k-<preset>)")
    parser.add_argument("--candidates", type=int, default=5, help="last checkpoints compared with the average")
    parser.add_argument("--max-sentences", type=int,
                        help="score only the first N sentences of val and test (a quick check of the script; "
                             "reported figures use all)")
    parser.add_argument("--threads", type=int, default=2, help="intra- and inter-op threads")
    parser.add_argument("--onednn", type=int, choices=(0, 1), default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="config overrides, as for pipelines.train_wmt")
    return parser.parse_args()


def candidate_models(configs, workdir, averaged_weights, count):
    """(name, model) of the averaged weights and of the last `count` checkpoints, newest first."""
    from keras_transformer.export import restore_checkpoint
    from keras_transformer.model import Transformer
    from keras_transformer.training.averaging import last_checkpoints
    from keras_transformer.training.run import load_averaged_model

    yield "averaged", load_averaged_model(configs, averaged_weights)
    for path in reversed(last_checkpoints(workdir, count)):
        model = Transformer(configs.model)
        model.build()
        restore_checkpoint(model, path)
        yield pathlib.Path(path).name, model


def main():
    args = parse_args()
    setup_tensorflow(args)
    import time

    from keras_transformer.data import SubwordTokenizer, get_corpus, shared_data_root
    from keras_transformer.data.corpora import read_aligned_files
    from keras_transformer.training.evaluation import BeamSearchTranslator, score
    from keras_transformer.training.run import train_and_evaluate
    from keras_transformer.training.run_config import RunConfigs, apply_overrides, preset_configs

    folder = shared_data_root() / "multi30k"
    workdir = args.workdir or pathlib.Path("runs") / f"multi30k-{args.preset}"
    configs = apply_overrides(preset_configs(args.preset, "multi30k"),
                              [f"run.max_train_minutes={args.minutes}", *args.overrides])
    started = time.monotonic()
    result = train_and_evaluate(workdir, configs, verbose=2)
    minutes = (time.monotonic() - started) / 60.0
    configs = RunConfigs.read(workdir)
    tokenizer = SubwordTokenizer.from_file(workdir / "sentencepiece.model")

    validation = list(get_corpus("multi30k").pairs("validation"))[:args.max_sentences]
    best = None
    for name, model in candidate_models(configs, workdir, result.averaged_weights, args.candidates):
        translator = BeamSearchTranslator(model, tokenizer, configs.decode)
        scores = score(translator.translate([s for s, _ in validation], progress=True), [r for _, r in validation])
        log(f"val BLEU of {name}: {scores.bleu:.2f}")
        if best is None or scores.bleu > best[2].bleu:
            best = (name, translator, scores)
    name, translator, validation_scores = best

    for test_set in ("test_2016_flickr", "test_2017_flickr"):
        pairs, _ = read_aligned_files(folder / f"{test_set}.en", folder / f"{test_set}.de")
        pairs = pairs[:args.max_sentences]
        scores = score(translator.translate([s for s, _ in pairs], progress=True), [r for _, r in pairs])
        log(scores.report(f"{test_set} ({name})"))
        emit(task="multi30k", test_set=test_set, preset=args.preset, bleu=round(scores.bleu, 2),
             signature=scores.bleu_signature, chrf=round(scores.chrf, 2), checkpoint=name,
             val_bleu=round(validation_scores.bleu, 2), steps=result.step, budget_minutes=args.minutes,
             wall_minutes_to_test=round(minutes, 1), threads=args.threads, beam=configs.decode.beam_size,
             sentences=len(pairs))


if __name__ == "__main__":
    main()
