"""Trees to sequences and back, the repair of malformed sequences, and the whole GUM train set."""
import pytest

from keras_transformer.data.factory import require_shared_data
from keras_transformer.parsing import TreeFormatError, linearize, parse_tree, read_treebank, rebuild, repair

TREE = "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"
WORDS = ["I", "saw", "a", "dog", "."]


def test_linearize_and_rebuild():
    tree = parse_tree(TREE)
    assert linearize(tree) == "(S (NP PRP ) (VP VBD (NP DT NN ) ) . )"
    assert rebuild(linearize(tree), WORDS) == tree
    assert rebuild("NN", ["Hello"]).to_string() == "(NN Hello)"
    assert rebuild("(NP -LRB- NN -RRB- )", ["(", "x", ")"]).to_string() == "(NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-))"


def test_rebuild_refuses_malformed_sequences():
    with pytest.raises(TreeFormatError, match="missing_words 1"):
        rebuild("(S (NP PRP ) (VP VBD (NP DT NN ) ) )", WORDS)


@pytest.mark.parametrize("sequence, expected, fixed", [
    ("(S (NP PRP ) (VP VBD (NP DT NN ) ) . )", TREE, []),
    # unbalanced: two brackets never closed, then one too many
    ("(S (NP PRP ) (VP VBD (NP DT NN . ", "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog) (. .))))",
     ["unclosed 3"]),
    ("(S (NP PRP ) ) ) (VP VBD (NP DT NN ) ) . )",
     "(S (S (NP (PRP I))) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))",
     ["unmatched_closes 2", "extra_roots 2"]),
    # a missing word joins the root with a guessed tag; an extra tag is dropped
    ("(S (NP PRP ) (VP VBD (NP DT NN ) ) )", TREE, ["missing_words 1"]),
    ("(S (NP PRP ) (VP VBD (NP DT NN NN ) ) . JJ )", "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog) (NN .))))",
     ["extra_tags 2"]),
    # empty constituents and an empty output
    ("(S (NP PRP ) (ADJP ) (VP VBD (NP DT NN ) ) . )", TREE, ["empty_constituents 1"]),
    ("", "(S (NN I) (NN saw) (NN a) (NN dog) (. .))", ["missing_words 5", "extra_roots 4", "empty True"]),
])
def test_repair_gives_a_tree_over_exactly_the_words(sequence, expected, fixed):
    tree, repairs = repair(sequence, WORDS)
    assert tree.words() == WORDS
    assert tree.to_string() == expected
    assert repairs.describe() == fixed
    assert bool(repairs) == bool(fixed)


def test_every_gum_train_tree_survives_linearization():
    root = require_shared_data("gum/train.ptb")
    count = 0
    for tree in read_treebank(root / "gum" / "train.ptb"):
        assert rebuild(linearize(tree), tree.words()) == tree, tree.to_string()
        count += 1
    assert count == 10_224
