"""Translate a run's test (or validation) split with beam search and score it with sacreBLEU.

    python -m pipelines.evaluate --workdir runs/wmt14-base [--split test] [--dataset SPEC]
        [--beam-size 4] [--alpha 0.6] [--precision bfloat16] [--output hypotheses.txt]
        [--checkpoint ... | --weights ...]

The model is the run's averaged weights if it has them, else its latest checkpoint (or --checkpoint
/ --weights); the corpus is the run's own (data_config.json) unless --dataset names another, e.g.
newstest to score the paper's newstest2014, or a local spec `test=hyp.en,ref.de`. Prints sacreBLEU
with its signature, chrF, and BLEU on tokenized, compound-split text (the way the paper's table
counts; labelled as such, not comparable with sacreBLEU). --precision translates as an export in
that precision (`pipelines.export --precision`) of the same weights would.
"""
import argparse
import dataclasses
import json
import pathlib

from pipelines import show_job_log  # first: the package sets TF's environment before TF loads
from keras_transformer.precision import PRECISIONS  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.evaluate", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=pathlib.Path, help="the run directory")
    parser.add_argument("--split", default="test", choices=("validation", "test"), help="the split to score")
    parser.add_argument("--dataset", help="another corpus than the run's (a get_corpus name or local spec)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint", type=pathlib.Path, help="a checkpoint prefix or directory")
    source.add_argument("--weights", type=pathlib.Path, help="a Keras .weights.h5 file")
    parser.add_argument("--beam-size", type=int, help="beam size (default: the run's decode config, paper 4)")
    parser.add_argument("--alpha", type=float, help="length penalty exponent (default: the run's, paper 0.6)")
    parser.add_argument("--precision", choices=PRECISIONS,
                        help="translate in this precision, as its export would (default: the model's, float32)")
    parser.add_argument("--output", type=pathlib.Path, help="write the translations here, one per line")
    return parser, parser.parse_args(argv)


def main(argv=None):
    parser, args = parse_args(argv)
    show_job_log()
    from keras_transformer.data import DataConfig, SubwordTokenizer
    from keras_transformer.export import load_model_from_workdir
    from keras_transformer.files import write_lines
    from keras_transformer.training.evaluation import BeamSearchTranslator, score
    from keras_transformer.training.task import translation_corpus

    try:
        model, sentencepiece_proto, decode_config = load_model_from_workdir(args.workdir, args.checkpoint,
                                                                            args.weights)
        data_path = args.workdir / "data_config.json"
        data = DataConfig.from_json(data_path.read_text()) if data_path.is_file() else None
        if args.dataset is None and data is None:
            raise FileNotFoundError(f"{data_path} not found: name the corpus with --dataset")
        corpus_config = data or DataConfig(dataset=args.dataset)  # without the run's: reverse False, seed 0
        corpus = translation_corpus(dataclasses.replace(corpus_config, dataset=args.dataset or corpus_config.dataset))
        overrides = {key: value for key, value in (("beam_size", args.beam_size), ("alpha", args.alpha))
                     if value is not None}
        decode_config = dataclasses.replace(decode_config, **overrides)
        pairs = list(corpus.pairs(args.split))
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    translator = BeamSearchTranslator(model, SubwordTokenizer(sentencepiece_proto), decode_config,
                                      precision=args.precision)
    hypotheses = translator.translate([source for source, _ in pairs], progress=True)
    scores = score(hypotheses, [reference for _, reference in pairs], lowercase=bool(data and data.lowercase))
    if args.output is not None:
        write_lines(args.output, hypotheses)
    print(scores.report(f"{corpus.name} {args.split} (beam {decode_config.beam_size}, alpha {decode_config.alpha}"
                        f"{', ' + args.precision if args.precision else ''})"))
    print(json.dumps(dataclasses.asdict(scores)))
    return scores


if __name__ == "__main__":
    main()
