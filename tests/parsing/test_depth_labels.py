"""One label per word: the labels of a hand-made tree, the round trip of every GUM tree, and the
TensorFlow decoding, which must build the same tree as the Python one from any labels."""
import random

import pytest

from keras_transformer.data.factory import require_shared_data
from keras_transformer.parsing import parse_tree, read_treebank
from keras_transformer.parsing.depth_labels import (WordLabel, collapse_unaries, decode, encode, to_tokens,
                                                    trees_from_labels)
from keras_transformer.parsing.trees import escape_word

TREE = "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"


def test_labels_of_a_tree():
    labels = encode(parse_tree(TREE))
    assert labels == [WordLabel("PRP", "NP", 1, "S"), WordLabel("VBD", "", 1, "VP"), WordLabel("DT", "", 1, "NP"),
                      WordLabel("NN", "", -2, "S"), WordLabel(".", "", 0, "")]
    assert to_tokens(labels) == ["NP>PRP", "+1S", "VBD", "+1VP", "DT", "+1NP", "NN", "-2S", "."]
    assert decode("I saw a dog .".split(), labels) == parse_tree(TREE)


def test_unary_chains_collapse_and_come_back():
    tree = parse_tree("(S (VP (VB Go) (ADVP (RB now))) (. !))")
    assert collapse_unaries(parse_tree("(S (VP (VB Go) (NP (NN home))))")).to_string() == (
        "(S+VP (VB Go) (NP (NN home)))")
    labels = encode(tree)
    assert labels[1] == WordLabel("RB", "ADVP", -1, "S")
    assert decode(["Go", "now", "!"], labels) == tree
    one_word = parse_tree("(S (NP (NN Hello)))")
    assert encode(one_word) == [WordLabel("NN", "S+NP")] and decode(["Hello"], encode(one_word)) == one_word


def test_any_labels_give_a_tree_over_the_words():
    words = "a b c d".split()
    tree = decode(words, [WordLabel("DT", "", -3, ""), WordLabel("NN", "", 5, "NP"), WordLabel("VB", "", -9, "VP"),
                          WordLabel("NN")])
    assert tree.words() == words
    assert tree.to_string() == "(S (DT a) (NP (NN b) (VB c)) (NN d))"
    with pytest.raises(ValueError, match="one label per word"):
        decode(words, [WordLabel("DT")])


def _tf_trees(items):
    width = max(len(words) for words, _ in items)

    def rows(values, fill):
        return [row + [fill] * (width - len(row)) for row in values]

    trees = trees_from_labels(rows([[escape_word(word) for word in words] for words, _ in items], ""),
                              *(rows([[getattr(label, field) for label in labels] for _, labels in items], fill)
                                for field, fill in (("tag", ""), ("unary", ""), ("depth_change", 0), ("lca", ""))),
                              [len(words) for words, _ in items])
    return [tree.decode() for tree in trees.numpy()]


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_every_gum_tree_comes_back_from_its_labels(split):
    trees = list(read_treebank(require_shared_data(f"gum/{split}.ptb") / "gum" / f"{split}.ptb"))
    for tree in trees:
        assert decode(tree.words(), encode(tree)) == tree, tree.to_string()


def test_tensorflow_builds_the_python_tree_from_gold_and_spoiled_labels():
    """GUM dev's labels, as they are and with depth changes and labels changed at random."""
    rng = random.Random(0)
    items = [(tree.words(), encode(tree)) for tree in read_treebank(require_shared_data("gum/dev.ptb") / "gum" / "dev.ptb")][:400]
    names = sorted({label.lca for _, labels in items for label in labels} | {""})
    spoiled = [(words, [WordLabel(label.tag, label.unary,
                                  rng.randint(-4, 4) if rng.random() < 0.3 else label.depth_change,
                                  rng.choice(names) if rng.random() < 0.2 else label.lca) for label in labels])
               for words, labels in items]
    for group in (items, spoiled):
        for start in range(0, len(group), 50):
            chunk = group[start:start + 50]
            expected = [decode([escape_word(word) for word in words], labels).to_string() for words, labels in chunk]
            assert _tf_trees(chunk) == expected
