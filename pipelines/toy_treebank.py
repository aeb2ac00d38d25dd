"""Write a generated treebank (train.mrg, dev.mrg, test.mrg; sentences.txt to parse) for an offline run.

    python -m pipelines.toy_treebank --output data/toy-treebank [--train 2000 --dev 150 --test 150]
"""
import argparse
import pathlib

from keras_transformer.parsing.toy_treebank import SPLIT_SIZES, write_toy_treebank


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1; got {text}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.toy_treebank", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=pathlib.Path, required=True, help="directory to write the three files into")
    parser.add_argument("--seed", type=int, default=0)
    for split, size in SPLIT_SIZES.items():
        parser.add_argument(f"--{split}", type=positive, default=size, metavar="TREES",
                            help=f"trees of {split}.mrg (default {size})")
    args = parser.parse_args(argv)
    sizes = {split: getattr(args, split) for split in SPLIT_SIZES}
    for split, path in write_toy_treebank(args.output, seed=args.seed, sizes=sizes).items():
        what = f"{sizes[split]} trees" if split in sizes else "the test sentences"
        print(f"{split}: {path} ({what})")


if __name__ == "__main__":
    main()
