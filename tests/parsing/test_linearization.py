"""Trees to sequences and back, the repair of malformed sequences, and the whole GUM train set."""
import pytest

from keras_transformer.data.factory import require_shared_data
from keras_transformer.parsing import TreeFormatError, linearize, parse_tree, read_treebank, rebuild, repair
from keras_transformer.parsing.linearization import linearize_tokens, split_words

TREE = "(S (NP (PRP I)) (VP (VBD saw) (NP (DT a) (NN dog))) (. .))"
WORDS = ["I", "saw", "a", "dog", "."]


def test_linearize_and_rebuild():
    tree = parse_tree(TREE)
    assert linearize(tree) == "(S (NP PRP I ) (VP VBD saw (NP DT a NN dog ) ) . . )"
    assert linearize_tokens(tree, words=False) == "(S (NP PRP ) (VP VBD (NP DT NN ) ) . )".split()
    assert rebuild(linearize(tree), WORDS) == tree
    assert rebuild("NN Hello", ["Hello"]).to_string() == "(NN Hello)"
    assert (rebuild("(NP -LRB- -LRB- NN x -RRB- -RRB- )", ["-LRB-", "x", "-RRB-"]).to_string()
            == "(NP (-LRB- -LRB-) (NN x) (-RRB- -RRB-))")


def test_split_words_takes_the_token_after_each_tag_even_a_tag_or_a_bracket():
    assert split_words(". . , , NN NN".split()) == ([".", ",", "NN"], [".", ",", "NN"])
    assert split_words("(S NN ) )".split()) == (["(S", "NN", ")"], [")"])
    with pytest.raises(TreeFormatError, match="the last tag, 'VBD', has no word"):
        split_words("(S NN dog VBD".split())


def test_rebuild_refuses_malformed_sequences():
    with pytest.raises(TreeFormatError, match="words are not the sentence's: 'I saw a dog' against 'I saw a dog .'"):
        rebuild("(S (NP PRP I ) (VP VBD saw (NP DT a NN dog ) ) )", WORDS)
    with pytest.raises(TreeFormatError, match="not a tree over the 5 words: unmatched_closes 1"):
        rebuild("(S (NP PRP I ) (VP VBD saw (NP DT a NN dog ) ) . . ) )", WORDS)


@pytest.mark.parametrize("sequence, expected, fixed", [
    ("(S (NP PRP ) (VP VBD (NP DT NN ) ) . )", TREE, []),
    # unbalanced: 4 brackets opened and 1 closed, so 3 never closed; then 2 closed with none open
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
    """repair reads skeletons: tree tokens without the words."""
    tree, repairs = repair(sequence, WORDS)
    assert tree.words() == WORDS
    assert tree.to_string() == expected
    assert repairs.describe() == fixed
    assert bool(repairs) == bool(fixed)


def test_an_empty_sequence_over_one_word_gives_a_root_over_it():
    """As for several words: the root label over the word with its guessed tag, not a bare tag
    (which would have no bracket to score)."""
    tree, repairs = repair("", ["Yes"])
    assert tree.to_string() == "(S (NN Yes))"
    assert repairs.describe() == ["missing_words 1", "empty True"]
    assert repair("UH", ["Yes"])[0].to_string() == "(UH Yes)"  # what the model answered, kept


def test_every_gum_train_tree_survives_linearization():
    root = require_shared_data("gum/train.ptb")
    count = 0
    for tree in read_treebank(root / "gum" / "train.ptb"):
        assert rebuild(linearize(tree), tree.words()) == tree, tree.to_string()
        count += 1
    assert count == 10_224
