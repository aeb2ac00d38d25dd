"""Where a parser's F1 is lost: EVALB's scores of parsed trees against gold ones, broken down.

    python -m pipelines.parse --model runs/gum-parsing --input dev.words --output dev.parsed
    python benchmarks/parse_errors.py --gold ../shared/data/gum/dev.ptb --parsed dev.parsed

dev.words holds the gold trees' words, one sentence per line (`--write-words dev.words` writes it
from --gold). Prints one JSON line:
- `as_parsed`: EVALB's figures (keras_transformer.parsing.evalb, COLLINS.prm's rules);
- `gold_tags`: the same trees with the gold tag put on each word and every bracket kept: what the
  parser would score if it tagged every word right. EVALB deletes punctuation by its tag and leaves
  out a sentence whose words then differ, so tags change F1 through those deletions only;
- `labels`: each label's gold, test and matched brackets, recall, precision and F1 (most frequent first);
- `lengths`: F1 of the sentences of 1-10, 11-20, 21-30, 31-40 and more than 40 words (a bin
  without sentences left out);
- `tagging`: in each of those length bins, the figures of the sentences whose answer has every gold
  tag (`every_tag_right`) and of the others (`a_tag_wrong`, no answer included): how much of the
  loss comes with tagging errors, sentence length held apart;
- `widths`: recall and precision of the brackets by the number of words they span (1 to 5, 6 or
  more, and the whole sentence), EVALB's brackets and words (punctuation deleted) of the sentences
  it scores.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log  # noqa: E402
from keras_transformer.parsing import evalb, parse_tree, read_treebank  # noqa: E402
from keras_transformer.parsing.evalb import bracket_counts_by, label_counts, with_tags_of  # noqa: E402

LENGTH_BINS = ((1, 10), (11, 20), (21, 30), (31, 40), (41, None))
WIDTH_BINS = ("1", "2", "3", "4", "5", "6+", "sentence")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gold", required=True, help="gold trees in PTB brackets (files or a directory)")
    parser.add_argument("--parsed", help="the parser's trees, one per line, in the gold trees' order")
    parser.add_argument("--write-words", help="write the gold trees' words here, one sentence per line, and stop")
    parser.add_argument("--labels", type=int, default=12, help="how many labels to list (the most frequent)")
    args = parser.parse_args(argv)
    if not args.parsed and not args.write_words:
        parser.error("give --parsed, or --write-words")
    return args


def read_parsed(path):
    """The trees of a file of one tree per line; an empty line is no answer (None)."""
    with open(path, encoding="utf-8") as lines:
        return [parse_tree(line) if line.strip() else None for line in lines]


def figures(counts):
    return {"f1": round(counts.f1, 2), "recall": round(counts.recall, 2), "precision": round(counts.precision, 2),
            "sentences": counts.sentences, "error_sentences": counts.error_sentences,
            "tagging_accuracy": round(counts.tagging_accuracy, 2)}


def length_bins(gold):
    """{bin name: indices of the gold trees of that many words}, LENGTH_BINS' bins that hold any."""
    bins = {}
    for low, high in LENGTH_BINS:
        chosen = [i for i, tree in enumerate(gold)
                  if len(tree.words()) >= low and (high is None or len(tree.words()) <= high)]
        if chosen:
            bins[f"{low}-{high}" if high else f">{low - 1}"] = chosen
    return bins


def tagging(gold, parsed, bins):
    """{bin: {"every_tag_right": figures, "a_tag_wrong": figures}} (a group without sentences left out)."""
    result = {}
    for name, chosen in bins.items():
        right = [i for i in chosen if parsed[i] is not None and parsed[i].tags() == gold[i].tags()]
        groups = {"every_tag_right": right, "a_tag_wrong": sorted(set(chosen) - set(right))}
        result[name] = {group: figures(evalb([gold[i] for i in indices], [parsed[i] for i in indices]).all)
                        for group, indices in groups.items() if indices}
    return result


def _width_bin(label, start, end, words):
    width = end - start
    return "sentence" if width == words else "6+" if width >= 6 else str(width)


def widths(gold, parsed):
    """{width bin: gold, test and matched brackets, recall, precision} over the sentences EVALB scores."""
    counts = bracket_counts_by(gold, parsed, _width_bin)
    return {name: {"gold": c.gold_brackets, "test": c.test_brackets, "matched": c.matched_brackets,
                   "recall": round(c.recall, 2), "precision": round(c.precision, 2)}
            for name, c in sorted(counts.items(), key=lambda item: WIDTH_BINS.index(item[0]))}


def main(argv=None):
    args = parse_args(argv)
    gold = list(read_treebank(args.gold))
    if args.write_words:
        with open(args.write_words, "w", encoding="utf-8") as out:
            out.writelines(" ".join(tree.words()) + "\n" for tree in gold)
        log(f"wrote the words of {len(gold)} trees to {args.write_words}")
        return
    parsed = read_parsed(args.parsed)
    if len(parsed) != len(gold):
        sys.exit(f"{args.parsed}: {len(parsed)} trees, but {args.gold} has {len(gold)}")
    retagged = [test if test is None else with_tags_of(test, tree) for test, tree in zip(parsed, gold)]
    labels = sorted(label_counts(gold, parsed).items(), key=lambda item: -item[1].gold_brackets)[:args.labels]
    bins = length_bins(gold)
    lengths = {name: figures(evalb([gold[i] for i in chosen], [parsed[i] for i in chosen]).all)
               for name, chosen in bins.items()}
    emit(task="parse_errors", gold=str(args.gold), parsed=str(args.parsed),
         as_parsed=figures(evalb(gold, parsed).all), gold_tags=figures(evalb(gold, retagged).all),
         labels={label: {"gold": c.gold_brackets, "test": c.test_brackets, "matched": c.matched_brackets,
                         "recall": round(c.recall, 2), "precision": round(c.precision, 2), "f1": round(c.f1, 2)}
                 for label, c in labels},
         lengths=lengths, tagging=tagging(gold, parsed, bins), widths=widths(gold, parsed))


if __name__ == "__main__":
    main()
