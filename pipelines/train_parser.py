"""Train a Transformer constituency parser (the paper's section 6.3) on PTB-style treebanks, average
its last checkpoints, print EVALB F1 on the dev and test sets, and export a SavedModel.

    python -m pipelines.train_parser --train wsj/02 ... wsj/21 --dev wsj/22 --test wsj/23 --workdir runs/wsj
    python -m pipelines.train_parser --train toy/train.mrg --dev toy/dev.mrg --test toy/test.mrg \
        --preset parsing_tiny --workdir runs/toy-parser                # offline, minutes

`--parser span` trains a span parser instead (the paper's encoder scoring every span of words, the
best tree found by CKY; README, Parsing), a deviation from the paper's seq2seq parser.

It is the job of pipelines.train_wmt with a treebank as its corpus (every flag of that job applies):
run the same command again after an interruption to resume; TensorBoard: <workdir>/tensorboard
(validation F1 at each evaluation). --train, --dev and --test each take files or directories.
"""
import argparse
import pathlib
import sys

from pipelines import __name__ as _pipelines  # noqa: F401  (sets TF's environment before it loads)
from pipelines.train_wmt import add_job_flags, averaged_description, flag_assignments, run_job
from keras_transformer.parsing.configs import PARSING_PRESETS, parsing_configs
from keras_transformer.parsing.corpus import LINEARIZATIONS, LOSSES, PARSERS
from keras_transformer.training.run_config import RunConfigs, apply_overrides


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.train_parser", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--train", nargs="+", required=True, type=pathlib.Path,
                        help="training treebank: files and/or directories (the WSJ: sections 02-21)")
    parser.add_argument("--dev", nargs="+", required=True, type=pathlib.Path,
                        help="development treebank, for the evaluations and checkpoint choice (WSJ 22)")
    parser.add_argument("--test", nargs="+", required=True, type=pathlib.Path, help="test treebank (WSJ 23)")
    parser.add_argument("--workdir", type=pathlib.Path, required=True,
                        help="run directory: configs, vocabulary, checkpoints, TensorBoard logs")
    parser.add_argument("--preset", default="parsing", choices=PARSING_PRESETS,
                        help="parsing: the paper's (4 layers, d_model 1024, beam 21, alpha 0.3); parsing_small: "
                             "trains on 2 CPU cores; parsing_tiny: tests and the offline quick run")
    parser.add_argument("--parser", default="seq2seq", choices=PARSERS,
                        help="seq2seq: the paper's Transformer, decoding linearized trees; span: its encoder scoring "
                             "every span of words and tagging every word, the best tree found by CKY (Kitaev and "
                             "Klein, 2018; not the paper's; trained on the depth linearization)")
    parser.add_argument("--linearization", default=None, choices=LINEARIZATIONS,
                        help="brackets: trees written depth first with their brackets (the paper's, after Vinyals "
                             "et al.); depth: one tag and one depth label a word (Gomez-Rodriguez and Vilares, 2018); "
                             "depth_word_first: the same with each word before its tag. Default: brackets, and "
                             "depth with --parser span")
    parser.add_argument("--loss", default="all", choices=LOSSES,
                        help="all: the loss scores every target piece (as in translation); labels: only the tree "
                             "tokens and EOS, not the pieces of the words, which decoding copies (not the paper's)")
    add_job_flags(parser)
    return parser.parse_args(argv)


def dev_scores(result, configs):
    """EVALB scores of the averaged model on the dev set."""
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.parsing.task import PARSING, parse_scores
    from keras_transformer.training.evaluation import BeamSearchTranslator
    from keras_transformer.training.run import load_averaged_model

    configs = RunConfigs.read(result.workdir)
    corpus = PARSING.corpus(configs.data)
    pairs = list(corpus.pairs("validation"))
    parser = BeamSearchTranslator(load_averaged_model(configs, result.averaged_weights, PARSING, result.workdir),
                                  SubwordTokenizer.from_file(result.workdir / "sentencepiece.model"),
                                  configs.decode, translator_class=PARSING.translator(result.workdir))
    sentences = [sentence for sentence, _ in pairs]
    return parse_scores(sentences, parser.translate(sentences), [reference for _, reference in pairs])


def main(argv=None):
    args = parse_args(argv)
    from keras_transformer.parsing.task import PARSING

    try:
        linearization = args.linearization or ("depth" if args.parser == "span" else "brackets")
        configs = apply_overrides(parsing_configs(args.preset, args.train, args.dev, args.test, linearization,
                                                  args.loss, args.parser),
                                  flag_assignments(args) + args.overrides)
        if not args.dry_run:
            PARSING.corpus(configs.data)  # reads every tree: a bad file stops here, naming its file and line
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 2
    code, result = run_job(args, configs, args.workdir, task=PARSING)
    if result is None or result.scores is None:
        return code
    decoding = "CKY" if args.parser == "span" else f"beam {configs.decode.beam_size}, alpha {configs.decode.alpha}"
    name = f"({averaged_description(configs, result)}, {decoding})"
    print(dev_scores(result, configs).report(f"dev {name}"))
    print(result.scores.report(f"test {name}"))
    if result.export_path is not None:
        print(f"SavedModel: {result.export_path}")
    return code


if __name__ == "__main__":
    sys.exit(main())
