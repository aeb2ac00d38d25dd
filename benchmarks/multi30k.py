"""Multi30k en->de on this machine: train for a fixed time, pick a checkpoint on val, report sacreBLEU.

    python benchmarks/multi30k.py [--minutes 60] [--preset small_data] [--workdir runs/multi30k-small_data]
        [--candidates 5] [--ensembles K ...] [--beams 4 5] [--alphas 0.6 1.0 1.4] [--mbr N ...] [--max-sentences N]
        [--threads 2] [--members N] [--train-only]
        [--set FIELD=VALUE ...]

Trains `--preset` on Multi30k train (from ../shared/data or $KT_SHARED_DATA) with the project's
pipeline (`keras_transformer.training.run.train_and_evaluate`, which stops after --minutes, or
earlier at the end of a cooldown planned in steps (`--set train.train_steps=N`: a run whose steps
end before the budget trains the same on a faster machine or with more minutes) or with `--set
run.early_stopping_patience=N`), then translates val with beam search (the
paper's beam 4, alpha 0.6) using each candidate: the average of the last train.checkpoints_to_average
checkpoints, the average of the best ones by validation loss (workdir/checkpoints/best), and each
of the last and of the best --candidates checkpoints, and with --ensembles K, the ensemble of the
last K checkpoints (their next-token distributions averaged at each step, keras_transformer.ensemble).
The one with the best val BLEU is chosen, on val only; then, with it, the beam size and length
penalty (--beams x --alphas) with the best val BLEU (lowercased for a `data.lowercase` run), and
with --mbr N, the minimum-Bayes-risk choice among the N best of a beam of N at that alpha
(keras_transformer.decoding.mbr, sentence BLEU) if its val BLEU is higher still; and that is
scored on test_2016_flickr and test_2017_flickr, whose translations are written to
<workdir>/<test set>.hypotheses.de. Prints one JSON line per test set: {"task": "multi30k",
"test_set", "bleu", "signature", "chrf", "bleu_lc", "chrf_lc" (lowercased) and their signatures,
"checkpoint", "val_bleu", "candidates" (val BLEU of each), "decodings" (val BLEU of each beam and
alpha), "beam", "alpha", "mbr" (N or null), "steps", ...}, and writes <workdir>/validation.png: validation
BLEU (on the first run.eval_sentences val sentences) and validation loss at each evaluation against
training minutes (recorded with each evaluation in checkpoints/selection.json), the best
checkpoints by loss and the chosen candidate marked.
Running the same command again resumes the run in --workdir (the time budget counts again).

With --members N (not in the paper), N models of the recipe train side by side, each in its own
process on its own share of the CPU's cores (--threads divided among them) with --minutes each, in
<workdir>/member-<i> with run.seed and data.seed raised by i (other initial weights, dropout and
order of the data; one vocabulary); their logs go to <workdir>/member-<i>/train.log. Then each
member's candidates are scored on val as above, and the ensemble of the members' chosen ones
(keras_transformer.ensemble) competes with them; the beam, alpha and test follow as for one model.
SIGINT or SIGTERM stops every member after its checkpoint; the same command resumes them all.
--train-only trains and stops (what each member runs).
The README's `small` figure of 2026-11-23 trained in mixed bfloat16 (`--set
run.mixed_precision=mixed_bfloat16`), which is faster only on CPUs with bfloat16 arithmetic
(AVX512_BF16, AMX) and on GPUs/TPUs; its `small_data` figures trained in float32.
"""
import argparse
import dataclasses
import itertools
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log, log_the_job, run_main, setup_tensorflow  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--preset", default="small_data", help="model and recipe preset")
    parser.add_argument("--workdir", type=pathlib.Path, help="run directory (default runs/multi30k-<preset>)")
    parser.add_argument("--candidates", type=int, default=5,
                        help="last checkpoints and best checkpoints (by validation loss) compared with the averages")
    parser.add_argument("--ensembles", type=int, nargs="*", default=[], metavar="K",
                        help="also compare, for each K, the ensemble of the last K checkpoints "
                             "(keras_transformer.ensemble; each decoding step costs K models' steps)")
    parser.add_argument("--max-sentences", type=int,
                        help="score only the first N sentences of val and test (a quick check of the script; "
                             "reported figures use all)")
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 5],
                        help="beam sizes tried on val with the chosen checkpoint (the checkpoint is chosen at "
                             "the run's decode config: the paper's beam 4, alpha 0.6)")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0, 1.4],
                        help="length penalties tried on val with each of --beams (1.4: README, Results)")
    parser.add_argument("--mbr", type=int, nargs="*", default=[], metavar="N",
                        help="also try the MBR choice among the N best of a beam of N on val, at the chosen alpha")
    parser.add_argument("--threads", type=int, default=2, help="intra- and inter-op threads")
    parser.add_argument("--onednn", type=int, choices=(0, 1), default=1)
    parser.add_argument("--members", type=int, default=1,
                        help="train N models side by side on the CPU's cores and ensemble them (see above)")
    parser.add_argument("--train-only", action="store_true", help="train (or resume) and stop: no choice, no test")
    parser.add_argument("--cores", type=int, nargs="+", metavar="CORE",
                        help="run on these CPU cores only (Linux; --members pins each member so)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="config overrides, as for pipelines.train_wmt")
    return parser.parse_args()


def candidate_models(configs, workdir, count, ensembles=()):
    """(name, steps, model) of the averages of the last and of the best checkpoints, then of the last
    and the best `count` checkpoints (newest first, each once), then of the ensembles of the last K
    checkpoints for each K of `ensembles`; steps: the steps it is made of."""
    from keras_transformer.ensemble import TransformerEnsemble
    from keras_transformer.export import restore_checkpoint
    from keras_transformer.model import Transformer
    from keras_transformer.training.averaging import average_run, last_checkpoints
    from keras_transformer.training.best_checkpoints import best_checkpoints
    from keras_transformer.training.checkpointing import checkpoint_step
    from keras_transformer.training.run import load_averaged_model

    def best(count):
        try:
            return best_checkpoints(workdir, count)
        except FileNotFoundError as error:  # no evaluation yet: only the last checkpoints compete
            log(f"no best checkpoints: {error}")
            return []

    averaged = configs.train.checkpoints_to_average
    for select, paths in (("last", last_checkpoints(workdir, averaged)), ("best", best(averaged))):
        if paths:
            weights = average_run(workdir, averaged, workdir / f"averaged_{select}.weights.h5", select=select)
            yield f"average of the {select} {len(paths)}", [checkpoint_step(p) for p in paths], \
                load_averaged_model(configs, weights)

    def restored(path):
        model = Transformer(configs.model)
        model.build()
        restore_checkpoint(model, path)
        return model

    seen = set()
    for folder, paths in (("", last_checkpoints(workdir, count)), ("best/", best(count))):
        for path in reversed(paths):
            step = checkpoint_step(path)
            if step not in seen:
                seen.add(step)
                yield f"{folder}{pathlib.Path(path).name}", [step], restored(path)
    for size in ensembles:
        paths = last_checkpoints(workdir, size)
        if len(paths) > 1:
            yield f"ensemble of the last {len(paths)}", [checkpoint_step(p) for p in paths], \
                TransformerEnsemble([restored(path) for path in paths])


def minutes_of_steps(evaluations, steps):
    """Training minutes at `steps`, interpolated between the evaluations' (linear in the step beyond)."""
    import numpy as np

    known_steps = [e["step"] for e in evaluations]
    known_minutes = [e["train_seconds"] / 60.0 for e in evaluations]
    if not known_steps:
        return [0.0 for _ in steps]
    rate = known_minutes[-1] / known_steps[-1]
    return [float(np.interp(step, known_steps, known_minutes)) if step <= known_steps[-1] else step * rate
            for step in steps]


def plot_validation(path, runs, chosen_name, title):
    """Validation BLEU and loss of each evaluation against training minutes, for each of `runs`
    ((label, ValidationRecord, chosen steps): one run, or each member of an ensemble); the best
    checkpoints by loss and the steps of the chosen candidate (`chosen_name`) marked."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(2, 1, sharex=True, figsize=(7, 6))
    for axis, measure, label in ((axes[0], "bleu", "validation BLEU (eval_sentences)"),
                                 (axes[1], "loss", "validation loss (all of val)")):
        for run_label, record, chosen_steps in runs:
            evaluations = record.evaluations
            minutes = [e["train_seconds"] / 60.0 for e in evaluations]
            values = [e["validation"].get(measure) for e in evaluations]
            line, = axis.plot(minutes, values, "o-", markersize=3, label=f"{run_label}{label}")
            best_steps = {entry["step"] for entry in record.best}
            for marked, style, legend in ((best_steps, "s", "best by validation loss"),
                                          (set(chosen_steps), "*", f"chosen on val: {chosen_name}")):
                points = [(m, v) for m, v, e in zip(minutes, values, evaluations) if e["step"] in marked]
                if points:
                    axis.plot(*zip(*points), style, color=line.get_color(), markersize=10 if style == "*" else 7,
                              fillstyle="none", label=f"{run_label}{legend}")
            evaluated = {e["step"] for e in evaluations}
            for m in minutes_of_steps(evaluations, [s for s in chosen_steps if s not in evaluated]):
                axis.axvline(m, color=line.get_color(), alpha=0.4, linewidth=1)  # a chosen step between evaluations
        axis.set_ylabel(label)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    axes[1].set_xlabel("training minutes")
    figure.suptitle(title, fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def train(args, workdir):
    """Trains (or resumes) the run, or with --members its members side by side; returns the run
    directories to choose from (one, or the members')."""
    from keras_transformer.training.run import train_and_evaluate
    from keras_transformer.training.run_config import apply_overrides, preset_configs

    if args.members == 1:
        configs = apply_overrides(preset_configs(args.preset, "multi30k"),
                                  [f"run.max_train_minutes={args.minutes}", *args.overrides])
        train_and_evaluate(workdir, configs, verbose=2, evaluate_test=False)  # test: once, in main
        return [workdir]
    from benchmarks.members import core_shares, member_command, member_workdirs, train_members

    configs = apply_overrides(preset_configs(args.preset, "multi30k"), args.overrides)
    shares, workdirs = core_shares(args.members), member_workdirs(workdir, args.members)
    threads = max(1, args.threads // args.members)
    recipe = ["--minutes", str(args.minutes), "--preset", args.preset, "--onednn", str(args.onednn),
              *[flag for override in args.overrides for flag in ("--set", override)]]
    commands = [member_command(__file__, member, cores, threads, recipe, configs.run.seed + i, configs.data.seed + i)
                for i, (member, cores) in enumerate(zip(workdirs, shares))]
    log(f"training {args.members} members, {threads} thread(s) each, on cores "
        f"{['any' if cores is None else cores for cores in shares]}")
    train_members(commands, workdirs)
    return workdirs


def choose(candidates, val_bleu_of, tried):
    """(name, steps, model, val BLEU) of the candidate with the best val BLEU; each one's in `tried`."""
    best = None
    for name, steps, model in candidates:
        bleu = val_bleu_of(model)
        log(f"val BLEU of {name}: {bleu:.2f}")
        tried[name] = round(bleu, 2)
        if best is None or bleu > best[3]:
            best = (name, steps, model, bleu)
    return best


def choose_candidate(args, workdirs, val_bleu_of):
    """Each run's (each member's) candidates on val, then with members the ensemble of their
    choices: (name, steps, model, val BLEU) of the best, the val BLEU of each in a dict, and the
    chosen steps in each run (an ensemble's: each member's; otherwise [] in the runs not chosen).
    An ensemble's steps are its members' lists, in order."""
    from keras_transformer.ensemble import TransformerEnsemble
    from keras_transformer.training.run_config import RunConfigs

    tried, chosen = {}, []
    for i, run in enumerate(workdirs):
        prefix = f"member {i}: " if len(workdirs) > 1 else ""
        candidates = ((prefix + name, steps, model) for name, steps, model
                      in candidate_models(RunConfigs.read(run), run, args.candidates, args.ensembles))
        chosen.append(choose(candidates, val_bleu_of, tried))
    index = max(range(len(chosen)), key=lambda i: chosen[i][3])
    best = chosen[index]
    steps_by_run = [best[1] if i == index else [] for i in range(len(chosen))]
    if len(chosen) > 1:
        ensemble = (f"ensemble of the {len(chosen)} members' choices", [entry[1] for entry in chosen],
                    TransformerEnsemble([entry[2] for entry in chosen]))
        scored = choose([ensemble], val_bleu_of, tried)
        if scored[3] > best[3]:
            best, steps_by_run = scored, list(ensemble[1])
    return best, tried, steps_by_run


def main():
    args = parse_args()
    if args.cores:
        os.sched_setaffinity(0, args.cores)  # before TensorFlow sizes its thread pools
    setup_tensorflow(args)
    log_the_job()
    import time

    from keras_transformer.data import SubwordTokenizer, get_corpus, shared_data_root
    from keras_transformer.data.corpora import read_aligned_files
    from keras_transformer.files import write_lines
    from keras_transformer.training.best_checkpoints import ValidationRecord
    from keras_transformer.training.evaluation import BeamSearchTranslator, MBRTranslator, sacrebleu_scores, score
    from keras_transformer.training.run_config import RunConfigs

    folder = shared_data_root() / "multi30k"
    workdir = args.workdir or pathlib.Path("runs") / f"multi30k-{args.preset}"
    started = time.monotonic()
    workdirs = train(args, workdir)
    if args.train_only:
        return
    minutes = (time.monotonic() - started) / 60.0
    configs = RunConfigs.read(workdirs[0])
    from benchmarks.members import newest_step, shared_vocabulary
    tokenizer = SubwordTokenizer(shared_vocabulary(workdirs))

    validation = list(get_corpus("multi30k").pairs("validation"))[:args.max_sentences]

    def val_bleu_of(model, decode=configs.decode, translator_class=BeamSearchTranslator):
        """BLEU on val; lowercased for a case-folding run (data.lowercase)."""
        translations = translator_class(model, tokenizer, decode).translate([s for s, _ in validation], progress=True)
        return sacrebleu_scores(translations, [r for _, r in validation], configs.data.lowercase)["bleu"]

    (name, _, model, val_bleu), tried, chosen_steps = choose_candidate(args, workdirs, val_bleu_of)
    # Then beam and length penalty, on val too, with the chosen candidate.
    decode, mbr_size = configs.decode, None
    decodings = {f"beam {decode.beam_size}, alpha {decode.alpha:g}": round(val_bleu, 2)}
    for beam, alpha in itertools.product(args.beams, args.alphas):
        key = f"beam {beam}, alpha {alpha:g}"
        if key in decodings:
            continue
        other = dataclasses.replace(configs.decode, beam_size=beam, alpha=alpha)
        bleu = val_bleu_of(model, other)
        log(f"val BLEU of {name} at {key}: {bleu:.2f}")
        decodings[key] = round(bleu, 2)
        if bleu > val_bleu:
            decode, val_bleu = other, bleu
    for size in args.mbr:  # the chosen alpha's n-best lists, the choice among them made by MBR
        key = f"MBR among {size}, alpha {decode.alpha:g}"
        other = dataclasses.replace(decode, beam_size=size)
        bleu = val_bleu_of(model, other, MBRTranslator)
        log(f"val BLEU of {name} at {key}: {bleu:.2f}")
        decodings[key] = round(bleu, 2)
        if bleu > val_bleu:
            decode, val_bleu, mbr_size = other, bleu, size
    translator = (MBRTranslator if mbr_size else BeamSearchTranslator)(model, tokenizer, decode)
    records = [ValidationRecord.read(run) for run in workdirs]
    trained = [newest_step(run) for run in workdirs]
    stopped_early = [record.patience_exhausted(RunConfigs.read(run).run.early_stopping_patience)
                     for record, run in zip(records, workdirs)]
    labels = [f"member {i}: " for i in range(len(workdirs))] if len(workdirs) > 1 else [""]
    png = workdir / "validation.png"
    members = f", {len(workdirs)} members" if len(workdirs) > 1 else ""
    plot_validation(png, list(zip(labels, records, chosen_steps)), name,
                    f"Multi30k val, {args.preset}, {args.minutes:g}-minute budget{members}, "
                    f"{' + '.join(map(str, trained))} steps{' (stopped early)' if any(stopped_early) else ''}")

    for test_set in ("test_2016_flickr", "test_2017_flickr"):
        pairs, _ = read_aligned_files(folder / f"{test_set}.en", folder / f"{test_set}.de")
        pairs = pairs[:args.max_sentences]
        hypotheses, references = translator.translate([s for s, _ in pairs], progress=True), [r for _, r in pairs]
        scores = score(hypotheses, references)
        log(scores.report(f"{test_set} ({name}, {'MBR among' if mbr_size else 'beam'} {decode.beam_size}, "
                          f"alpha {decode.alpha:g})"))
        write_lines(workdir / f"{test_set}.hypotheses.de", hypotheses)
        # The published small-data figures (Wu et al. 2021) are lowercased BLEU: sacreBLEU's -lc beside them
        # (and chrF lowercased, the one that means something for a data.lowercase run's lowercase output).
        lowercased = sacrebleu_scores(hypotheses, references, lowercase=True)
        log(f"{test_set} ({name}): lowercased sacreBLEU {lowercased['bleu']:.2f} ({lowercased['bleu_signature']}); "
            f"lowercased chrF {lowercased['chrf']:.2f} ({lowercased['chrf_signature']})")
        emit(task="multi30k", test_set=test_set, preset=args.preset, bleu=round(scores.bleu, 2),
             signature=scores.bleu_signature, bleu_lc=round(lowercased["bleu"], 2),
             bleu_lc_signature=lowercased["bleu_signature"], chrf=round(scores.chrf, 2),
             chrf_signature=scores.chrf_signature, chrf_lc=round(lowercased["chrf"], 2),
             chrf_lc_signature=lowercased["chrf_signature"], checkpoint=name,
             val_bleu=round(val_bleu, 2), candidates=tried, decodings=decodings,
             steps=trained[0] if len(trained) == 1 else trained, members=len(workdirs),
             stopped_early=any(stopped_early), budget_minutes=args.minutes, png=str(png),
             wall_minutes_to_test=round(minutes, 1), threads=args.threads, beam=decode.beam_size,
             alpha=decode.alpha, mbr=mbr_size, sentences=len(pairs))


if __name__ == "__main__":
    sys.exit(run_main(main))
