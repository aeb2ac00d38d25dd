"""Print the parameter count of every Table 3 row beside the paper's, as the README's Markdown table.

    python -m pipelines.parameter_counts [--vocab-size 37000]
"""
import argparse

from keras_transformer import Transformer
from keras_transformer.config import TABLE3_ROWS


def count_rows(vocab_size):
    """{row: (our count, the paper's count in millions or None)}, counted on built models."""
    counts = {}
    for row, (fields, paper) in TABLE3_ROWS.items():
        model = Transformer.from_preset("base", **{"vocab_size": vocab_size, **fields})
        counts[row] = (model.count_params(), paper)
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=37000)
    args = parser.parse_args()
    print("| Table 3 row | changes from base | ours (M) | paper (M) |")
    print("|---|---|---|---|")
    for row, (count, paper) in count_rows(args.vocab_size).items():
        changes = ", ".join(f"{k}={v}" for k, v in TABLE3_ROWS[row][0].items()) or "-"
        print(f"| {row} | {changes} | {count / 1e6:.1f} | {paper if paper is not None else '-'} |")


if __name__ == "__main__":
    main()
