"""Write a generated treebank (train.mrg, dev.mrg, test.mrg; sentences.txt to parse) for an offline run.

    python -m pipelines.toy_treebank --output data/toy-treebank
"""
import argparse
import pathlib

from keras_transformer.parsing.toy_treebank import SPLIT_SIZES, write_toy_treebank


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m pipelines.toy_treebank", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=pathlib.Path, required=True, help="directory to write the three files into")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for split, path in write_toy_treebank(args.output, seed=args.seed).items():
        what = f"{SPLIT_SIZES[split]} trees" if split in SPLIT_SIZES else "the test sentences"
        print(f"{split}: {path} ({what})")


if __name__ == "__main__":
    main()
