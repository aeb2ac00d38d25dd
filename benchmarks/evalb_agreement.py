"""keras_transformer.parsing.evalb against the EVALB program itself, on GUM test with its trees spoiled
in known ways: every figure of EVALB's summary and every sentence's line must be equal.

    python benchmarks/evalb_agreement.py --evalb EVALB/evalb --prm EVALB/COLLINS.prm [--treebank PATH]

EVALB is not a Python package. One way to build it with only the package registries at hand: the
EVALB of 2006 (Sekine & Collins, later fixes by Brooks and Ellis) ships in allennlp's wheel.

    pip download --no-deps allennlp==2.10.1 -d /tmp/evalb
    unzip -oq /tmp/evalb/allennlp-2.10.1-py3-none-any.whl 'allennlp/tools/EVALB/*' -d /tmp/evalb
    gcc -O1 -w -o /tmp/evalb/evalb /tmp/evalb/allennlp/tools/EVALB/evalb.c

Prints one JSON line per kind of spoiling: EVALB's figures, ours, and how many sentences differ.
Each kind spoils the gold trees with its own seed; `-e` lifts EVALB's limit of 10 error sentences
(it exits, without totals, at the 12th).
"""
import argparse
import copy
import os
import pathlib
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit  # noqa: E402
from keras_transformer.parsing import Tree, evalb, parse_tree, read_treebank  # noqa: E402
from keras_transformer.parsing.evalb import score_sentence  # noqa: E402

PUNCTUATION_TAGS = [",", ":", "``", "''", "."]
# EVALB's summary lines and our BracketCounts.summary() keys
SUMMARY_KEYS = {"Number of sentence": "sentences", "Number of Error sentence": "error_sentences",
                "Number of Skip  sentence": "skipped_sentences", "Bracketing Recall": "recall",
                "Bracketing Precision": "precision", "Bracketing FMeasure": "f1",
                "Complete match": "complete_match", "Tagging accuracy": "tagging_accuracy"}


def nodes(tree, parent=None):
    yield tree, parent
    for child in tree.children:
        yield from nodes(child, tree)


def drop_brackets(tree, rng):
    for node, parent in list(nodes(tree)):
        if parent is not None and not node.is_preterminal and rng.random() < 0.15 and node in parent.children:
            at = parent.children.index(node)
            parent.children[at:at + 1] = node.children


def relabel(tree, rng):
    swaps = {"ADVP": "PRT", "PRT": "ADVP", "NP": "VP"}
    for node, _ in nodes(tree):
        if not node.is_preterminal and node.label in swaps and rng.random() < 0.5:
            node.label = swaps[node.label]


def decorate_labels(tree, rng):
    """Function tags and indices, and labels EVALB deletes (TOP, punctuation, -NONE-)."""
    for node, parent in nodes(tree):
        if not node.is_preterminal and parent is not None and rng.random() < 0.2:
            node.label = rng.choice([node.label + "-SBJ", node.label + "=2", node.label + "-TMP-1", "TOP", ".",
                                     "-NONE-", "-LRB-"])


def retag(tree, rng):
    for node, _ in nodes(tree):
        if node.is_preterminal and rng.random() < 0.2:
            node.label = (rng.choice([tag for tag in PUNCTUATION_TAGS if tag != node.label])
                          if node.label in PUNCTUATION_TAGS else rng.choice(["NN", "VB", "ADVP", "PRT", "JJ-X", "DT"]))


def punctuation_tag_swap(tree, rng):
    """One word gets a punctuation tag, or a punctuation mark a word's: the lengths differ."""
    node = rng.choice([node for node, _ in nodes(tree) if node.is_preterminal])
    node.label = "NN" if node.label in PUNCTUATION_TAGS else ","


def remove_word(tree, rng):
    choices = [(node, parent) for node, parent in nodes(tree) if node.is_preterminal and parent is not None
               and len(parent.children) > 1 and node.label not in PUNCTUATION_TAGS]
    if choices:
        node, parent = rng.choice(choices)
        parent.children.remove(node)


def swap_words(tree, rng):
    leaves = [node for node, _ in nodes(tree) if node.is_preterminal and node.label not in PUNCTUATION_TAGS]
    for left, right in zip(leaves, leaves[1:]):
        if left.word != right.word:
            left.word, right.word = right.word, left.word
            return


def punctuation_only(tree, rng):
    return parse_tree("(S (. .))")


# name -> (spoil(tree, rng), how many sentences it spoils (None: all))
KINDS = {"identity": (None, None), "drop_brackets": (drop_brackets, None), "relabel": (relabel, None),
         "decorate_labels": (decorate_labels, None), "retag": (retag, None),
         "punctuation_tag_swap": (punctuation_tag_swap, 8), "remove_word": (remove_word, 8),
         "swap_words": (swap_words, 8), "punctuation_only": (punctuation_only, 8)}


def run_evalb(args, gold_lines, test_lines, directory):
    """(per-sentence fields {id: (length, status, matched, gold, test, words, tags)}, summary {(section, key): value})."""
    gold, test = directory / "gold.txt", directory / "test.txt"
    gold.write_text("\n".join(gold_lines) + "\n")
    test.write_text("\n".join(test_lines) + "\n")
    output = subprocess.run([args.evalb, "-p", args.prm, "-e", "100000", str(gold), str(test)],
                            capture_output=True, text=True, check=True).stdout
    sentences, summary, section = {}, {}, None
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 12 and fields[0].isdigit():
            values = [int(fields[i]) for i in (1, 2, 5, 6, 7, 9, 10)]
            sentences[int(fields[0])] = tuple(values)
        elif line.startswith("-- All"):
            section = "all"
        elif line.startswith("-- len"):
            section = "len40"
        elif section and "=" in line and line.split("=")[0].strip() in SUMMARY_KEYS:
            key, value = line.split("=")
            summary[(section, SUMMARY_KEYS[key.strip()])] = float(value)
    return sentences, summary


def ours_per_sentence(gold: Tree, test: Tree):
    counts, _, length = score_sentence(gold, test)
    status = 1 if counts.error_sentences else 2 if counts.skipped_sentences else 0
    return (length, status, counts.matched_brackets, counts.gold_brackets, counts.test_brackets, counts.words,
            counts.correct_tags)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evalb", required=True, help="the EVALB binary")
    parser.add_argument("--prm", required=True, help="its COLLINS.prm")
    parser.add_argument("--treebank", type=pathlib.Path,
                        default=pathlib.Path(os.environ.get("KT_SHARED_DATA", "../shared/data")) / "gum" / "test.ptb")
    args = parser.parse_args()
    golds = list(read_treebank(args.treebank))
    gold_lines = [tree.to_string() for tree in golds]
    with tempfile.TemporaryDirectory() as directory:
        for seed, (kind, (spoil, count)) in enumerate(KINDS.items()):
            rng = random.Random(seed)
            chosen = set(rng.sample(range(len(golds)), count)) if count else set(range(len(golds)))
            tests = []
            for index, gold in enumerate(golds):
                tree = copy.deepcopy(gold)
                if spoil and index in chosen:
                    tree = spoil(tree, rng) or tree
                tests.append(tree)
            sentences, summary = run_evalb(args, gold_lines, [tree.to_string() for tree in tests],
                                           pathlib.Path(directory))
            ours = evalb(golds, tests)
            ours_summary = {(section, key): round(value, 2) for section in ("all", "len40")
                            for key, value in getattr(ours, section).summary().items()
                            if (section, key) in summary}
            differing = sum(sentences.get(index + 1) != ours_per_sentence(gold, test)
                            for index, (gold, test) in enumerate(zip(golds, tests)))
            emit(kind=kind, sentences=len(golds), evalb={f"{s}.{k}": v for (s, k), v in sorted(summary.items())},
                 ours={f"{s}.{k}": v for (s, k), v in sorted(ours_summary.items())},
                 summary_equal=all(abs(ours_summary[key] - value) < 0.006 for key, value in summary.items()),
                 differing_sentences=differing)


if __name__ == "__main__":
    main()
