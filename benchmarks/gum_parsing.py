"""GUM constituency parsing on this machine: train for a fixed time, choose a checkpoint on dev, score
test once with EVALB (COLLINS.prm).

    python benchmarks/gum_parsing.py --minutes 60 --workdir runs/gum-parsing [--preset parsing_small]
        [--parser seq2seq|span] [--linearization depth_word_first|depth|brackets] [--loss all|labels] [--candidates 3]
        [--choice-sentences 400] [--skip-training] [--threads 2] [--set FIELD=VALUE ...]

Trains `--preset` on GUM train (../shared/data/gum or $KT_SHARED_DATA), its trees as one label per
word, each word before its tag, unless --linearization says otherwise (depth was chosen over
brackets on GUM dev, then depth_word_first over depth: README, Parsing), with the decoder reading
the word it is at (model.aligned_decoder, chosen on GUM dev: README, Parsing; `--set
model.aligned_decoder=false` turns it off), with pipelines.train_parser's job
(keras_transformer.training.run.train_and_evaluate with the parsing task), stopping after --minutes,
without the job's own closing evaluation, so that test is decoded once only: dev F1 is computed for
the averaged weights and the last --candidates checkpoints on the first --choice-sentences dev
sentences (all of dev with 0; a beam of 21 over all 1,575 takes about as long as the training, per
candidate), the best is written to <workdir>/chosen.weights.h5
(which `python -m pipelines.parse --model <workdir>` uses), and only it parses all of dev and test.
Prints one JSON line: {"task": "gum_parsing", "dev_f1" (all of dev), "test_f1", "checkpoint", ...}
(F1 in percent, as EVALB prints it) and writes <workdir>/dev_f1.png: dev F1 against training minutes
(the evaluations during training, on the first run.eval_sentences dev sentences, and the
candidates).

With --parser span it trains the span parser (README, Parsing) on the depth linearization instead,
and parses with CKY (no beam); after the checkpoint, the constituent bias of spans.best_spans is
chosen among CONSTITUENT_BIASES on the same dev sentences and recorded in the workdir
(span_parser.json, which pipelines.parse and pipelines.export read).

Running the same command again resumes an interrupted run, for up to --minutes more; with
--skip-training it chooses and scores the run in --workdir as it stands (a run made before the tag
dictionary, parsing.tag_dictionary, first gets one from GUM train, as a new run does).
"""
import argparse
import functools
import json
import os
import pathlib
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log, log_the_job, run_main, setup_tensorflow  # noqa: E402

CHOSEN_WEIGHTS = "chosen.weights.h5"
CONSTITUENT_BIASES = (0.0, 0.5, 1.0, 1.5, 2.0)  # tried with --parser span (spans.best_spans)
# Deviations from the paper's model chosen on GUM dev (README, Parsing); --set overrides them.
MODEL_DEFAULTS = ("model.aligned_decoder=true",)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="training time budget")
    parser.add_argument("--preset", default="parsing_small", help="parsing preset")
    parser.add_argument("--workdir", type=pathlib.Path, help="run directory (default runs/gum-<preset>)")
    # --linearization and --loss are checked by keras_transformer.parsing.corpus's check_linearization
    # and check_loss in main(): that module imports TensorFlow, which must wait for --onednn.
    parser.add_argument("--linearization", default="depth_word_first",
                        help="trees as one label per word, each word before its tag (the default here: chosen "
                             "on GUM dev, README), with the tag first (depth), or as brackets "
                             "(pipelines.train_parser's default, the paper's)")
    parser.add_argument("--parser", default="seq2seq",
                        help="seq2seq (the paper's) or span (the encoder scoring every span, CKY; "
                             "pipelines.train_parser's --parser); span trains on the depth linearization")
    parser.add_argument("--loss", default="all",
                        help="what the loss scores: every target piece, or the tree tokens only (labels), "
                             "as pipelines.train_parser's --loss")
    parser.add_argument("--candidates", type=int, default=3, help="last checkpoints compared with the average")
    parser.add_argument("--choice-sentences", type=int, default=400,
                        help="dev sentences the candidates are compared on (0: all)")
    parser.add_argument("--skip-training", action="store_true",
                        help="choose and score the run in --workdir as it stands, without training it further")
    parser.add_argument("--max-sentences", type=int,
                        help="use only the first N dev and test sentences (a quick check of the script; "
                             "reported figures use all)")
    parser.add_argument("--threads", type=int, default=2, help="intra- and inter-op threads")
    parser.add_argument("--onednn", type=int, choices=(0, 1), default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                        help="config overrides, as for pipelines.train_parser")
    return parser, parser.parse_args()


def scalar_events(directory, tag):
    """(wall time, step, value) of a scalar in a TensorBoard log directory."""
    import tensorflow as tf

    events = []
    for path in sorted(pathlib.Path(directory).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == tag:
                    events.append((event.wall_time, event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(events)


def first_wall_time(workdir):
    import tensorflow as tf

    times = [event.wall_time for path in (workdir / "tensorboard").rglob("events.out.tfevents.*")
             for event in tf.compat.v1.train.summary_iterator(str(path))]
    return min(times) if times else None


def plot_dev_f1(path, during, candidates, title, dev_sentences):
    """during: [(minutes, f1)]; candidates: [(name, minutes, f1)] on dev_sentences sentences."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axis = pyplot.subplots(figsize=(6, 4))
    if during:
        axis.plot([m for m, _ in during], [f for _, f in during], "o-", label="during training (dev subset)")
    for name, minutes, f1 in candidates:
        axis.plot([minutes], [f1], "s", label=f"{name} ({dev_sentences} dev sentences)")
    axis.set_xlabel("training minutes")
    axis.set_ylabel("dev F1 (EVALB, %)")
    axis.set_title(title, fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def candidates(configs, workdir, averaged_weights, count):
    """(name, model, minutes-stamp file) of the averaged weights and the last `count` checkpoints."""
    from keras_transformer.export import restore_checkpoint
    from keras_transformer.parsing.task import PARSING
    from keras_transformer.training.averaging import last_checkpoints
    from keras_transformer.training.run import load_averaged_model

    paths = last_checkpoints(workdir, count)
    latest = last_checkpoints(workdir, 1)[-1]
    yield "averaged", load_averaged_model(configs, averaged_weights, PARSING, workdir), pathlib.Path(latest + ".index")
    for path in reversed(paths):
        model = PARSING.model(configs.model, workdir)
        model.build()
        restore_checkpoint(model, path)
        yield pathlib.Path(path).name, model, pathlib.Path(path + ".index")


def main():
    parser, args = parse_args()
    setup_tensorflow(args)
    log_the_job()
    from keras_transformer.parsing.corpus import check_linearization, check_loss, check_parser
    try:
        if args.parser == "span":
            args.linearization = "depth"
        check_linearization(args.linearization)
        check_loss(args.loss)
        check_parser(args.parser, args.linearization)
    except ValueError as error:
        parser.error(str(error))
    import time

    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.data.factory import SHARED_DATA_ENV, shared_data_root
    from keras_transformer.parsing.configs import parsing_configs
    from keras_transformer.parsing.corpus import TreebankCorpus, parse_spec
    from keras_transformer.parsing.tag_dictionary import read_tag_dictionary
    from keras_transformer.parsing.span_parser import write_constituent_bias
    from keras_transformer.parsing.task import PARSING, parse_scores
    from keras_transformer.training.evaluation import BeamSearchTranslator
    import tensorflow as tf

    from keras_transformer.training.averaging import average_run
    from keras_transformer.training.checkpointing import checkpoint_directory, checkpoint_step
    from keras_transformer.training.run import RunResult, train_and_evaluate
    from keras_transformer.training.run_config import RunConfigs, apply_overrides

    folder = shared_data_root() / "gum"
    if not (folder / "train.ptb").is_file():
        sys.exit(f"GUM not found in {folder} (set {SHARED_DATA_ENV} to the folder holding gum/)")
    workdir = args.workdir or pathlib.Path("runs") / f"gum-{args.preset}"
    # The job's closing evaluation runs on dev (its "test" split): GUM test is decoded once, below.
    configs = parsing_configs(args.preset, folder / "train.ptb", folder / "dev.ptb", folder / "dev.ptb",
                              args.linearization, args.loss, args.parser)
    configs = apply_overrides(configs, [f"run.max_train_minutes={args.minutes}", *MODEL_DEFAULTS, *args.overrides])
    started = time.monotonic()
    if args.skip_training:
        if not (workdir / "run_config.json").is_file():
            sys.exit(f"--skip-training: no run in {workdir}")
        configs = RunConfigs.read(workdir)
        if read_tag_dictionary(workdir) is None:  # a run from before the tag dictionary: as a new run has
            PARSING.prepare_workdir(workdir, TreebankCorpus({"train": folder / "train.ptb"}))
        step = checkpoint_step(tf.train.latest_checkpoint(str(checkpoint_directory(workdir))))
        result = RunResult(workdir=workdir, step=step, averaged_weights=average_run(
            workdir, configs.train.checkpoints_to_average, select=configs.train.average,
            build_model=lambda config: PARSING.model(config, workdir)))
    else:
        result = train_and_evaluate(workdir, configs, verbose=2, task=PARSING, evaluate_test=False)
    configs = RunConfigs.read(workdir)
    tokenizer = SubwordTokenizer.from_file(workdir / "sentencepiece.model")
    start = first_wall_time(workdir)

    _, linearization = parse_spec(configs.data.dataset)  # the run's
    dev = list(TreebankCorpus({"train": folder / "train.ptb", "validation": folder / "dev.ptb"},
                              linearization=linearization).pairs("validation"))[:args.max_sentences]
    choice = dev[:args.choice_sentences or None]

    def scored(parser, pairs):
        return parse_scores([s for s, _ in pairs], parser.translate([s for s, _ in pairs], progress=True),
                            [r for _, r in pairs])

    best, tried = None, []
    parser_class = PARSING.translator(workdir)  # the run's tag dictionary, read once
    for name, model, stamp in candidates(configs, workdir, result.averaged_weights, args.candidates):
        parser = BeamSearchTranslator(model, tokenizer, configs.decode, translator_class=parser_class)
        scores = scored(parser, choice)
        log(scores.report(f"dev, first {len(choice)} sentences ({name})"))
        tried.append((name, (stamp.stat().st_mtime - start) / 60.0 if start else 0.0, scores.f1))
        if best is None or scores.f1 > best[2].f1:
            best = (name, model, scores, parser)
    name, model, choice_scores, parser = best
    model.save_weights(str(workdir / CHOSEN_WEIGHTS))
    bias = None
    if args.parser == "span":  # spans.best_spans' constituent bias, chosen on the same dev sentences
        for candidate in CONSTITUENT_BIASES:
            biased = BeamSearchTranslator(model, tokenizer, configs.decode,
                                          translator_class=functools.partial(parser_class, constituent_bias=candidate))
            scores = scored(biased, choice)
            log(scores.report(f"dev, first {len(choice)} sentences ({name}, constituent bias {candidate:g})"))
            if bias is None or scores.f1 > choice_scores.f1:
                bias, choice_scores, parser = candidate, scores, biased
        write_constituent_bias(workdir, bias)  # what pipelines.parse and pipelines.export then use
        name = f"{name}, constituent bias {bias:g}"
    dev_scores = scored(parser, dev) if len(choice) < len(dev) else choice_scores
    log(dev_scores.report(f"dev ({name})"))

    test = list(TreebankCorpus({"train": folder / "train.ptb", "test": folder / "test.ptb"},
                               linearization=linearization).pairs("test"))[:args.max_sentences]
    test_scores = scored(parser, test)
    log(test_scores.report(f"test ({name})"))
    evaluations = scalar_events(workdir / "tensorboard" / "validation", "f1")
    during = [((wall - start) / 60.0, f1) for wall, _, f1 in evaluations]
    png = workdir / "dev_f1.png"
    what = "span parser" if args.parser == "span" else linearization
    plot_dev_f1(png, during, tried, f"GUM dev F1, {args.preset}, {what}, {args.minutes:g}-minute budget, "
                                    f"{result.step} steps", len(choice))
    (workdir / "gum_parsing.json").write_text(json.dumps({"checkpoint": name, "dev": dev_scores.__dict__,
                                                          "test": test_scores.__dict__}, indent=2) + "\n")
    emit(task="gum_parsing", preset=args.preset, linearization=linearization, dev_f1=round(dev_scores.f1, 2),
         test_f1=round(test_scores.f1, 2), checkpoint=name, test_recall=round(test_scores.recall, 2),
         test_precision=round(test_scores.precision, 2),
         dev_repaired=dev_scores.repaired, test_repaired=test_scores.repaired,
         dev_error_sentences=dev_scores.error_sentences, test_error_sentences=test_scores.error_sentences,
         parser=args.parser, constituent_bias=bias,
         tag_dictionary=parser_class.keywords.get("tag_dictionary") is not None,
         steps=result.step, budget_minutes=args.minutes,
         wall_minutes=round((time.monotonic() - started) / 60.0, 1), beam=configs.decode.beam_size,
         alpha=configs.decode.alpha, threads=args.threads, dev_sentences=len(dev), test_sentences=len(test),
         choice_sentences=len(choice), candidates={n: round(f1, 2) for n, _, f1 in tried},
         png=str(png))


if __name__ == "__main__":
    sys.exit(run_main(main))
