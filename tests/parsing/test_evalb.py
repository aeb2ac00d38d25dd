"""The EVALB scorer (COLLINS.prm) on hand-made trees whose scores are worked out by hand."""
import pytest

from keras_transformer.parsing import evalb, parse_tree

GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the) (NN cat)))) (. .))"


def score(gold, test):
    return evalb([parse_tree(gold)], [parse_tree(test) if test is not None else None])


def test_identical_trees_score_100():
    result = score(GOLD, GOLD)
    assert (result.all.recall, result.all.precision, result.f1) == (100.0, 100.0, 100.0)
    assert (result.all.gold_brackets, result.all.matched_brackets, result.all.complete_matches) == (5, 5, 1)
    assert result.all.tagging_accuracy == 100.0 and result.all.words == 6  # the period is deleted


def test_a_wrong_attachment():
    # gold brackets: S 0-6, NP 0-2, VP 2-6, PP 3-6, NP 4-6 (punctuation gone: 6 words)
    # test: S 0-6, NP 0-2, VP 2-3, PP 3-6, NP 4-6 -> 4 of 5 match each way
    test = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (PP (IN at) (NP (DT the) (NN cat))) (. .))"
    result = score(GOLD, test)
    assert result.all.matched_brackets == 4 and result.all.test_brackets == 5
    assert result.f1 == pytest.approx(80.0)


def test_function_tags_are_ignored_and_advp_equals_prt():
    gold = "(S (NP-SBJ (PRP He)) (VP (VBD gave) (PRT (RP up))))"
    test = "(S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up))))"
    result = score(gold, test)
    assert result.f1 == 100.0
    assert result.all.tagging_accuracy == pytest.approx(200 / 3)  # RB is not RP


def test_punctuation_is_deleted_by_its_own_tag():
    # The test tree tags the period NN: it keeps 7 words against 6, a length error, not scored.
    test = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the) (NN cat)))) (NN .))"
    result = score(GOLD, test)
    assert (result.all.error_sentences, result.all.gold_brackets) == (1, 0)
    assert result.errors == [(1, "Length unmatch (6|7)")]
    # A bracket over punctuation only covers nothing and is dropped; brackets differing only by
    # where a punctuation mark attaches are the same bracket.
    test = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the) (NN cat) (. .)))) (X (, ,)))"
    result = evalb([parse_tree(GOLD)], [parse_tree(test.replace(" (X (, ,))", ""))])
    assert result.f1 == 100.0
    gold = "(S (NP (NN Yes)) (FRAG (. !)))"
    assert score(gold, "(S (NP (NN Yes)) (. !))").f1 == 100.0


def test_word_mismatch_and_empty_answers():
    result = score(GOLD, GOLD.replace("cat", "hat"))
    assert result.errors == [(1, "Words unmatch (cat|hat)")]
    result = evalb([parse_tree(GOLD), parse_tree(GOLD)], [None, parse_tree(GOLD)])
    assert (result.all.skipped_sentences, result.all.valid_sentences, result.f1) == (1, 1, 100.0)


def test_corpus_scores_sum_brackets_over_sentences_and_the_length_cutoff():
    long_words = " ".join(f"(NN w{i})" for i in range(41))
    long_gold = f"(S (NP {long_words}) (VP (VB go)))"
    long_test = f"(S (NP {long_words} (VB go)))"  # NP 0-42 is wrong, VP missing: 1 of 3, 1 of 2
    result = evalb([parse_tree(GOLD), parse_tree(long_gold)], [parse_tree(GOLD), parse_tree(long_test)])
    assert (result.all.matched_brackets, result.all.gold_brackets, result.all.test_brackets) == (6, 8, 7)
    recall, precision = 600 / 8, 600 / 7
    assert result.f1 == pytest.approx(2 * recall * precision / (recall + precision))
    assert result.len40.sentences == 1 and result.len40.f1 == 100.0


def test_top_and_unlabeled_outer_brackets():
    # TOP is deleted; an unlabeled outer bracket is a bracket (labeled "") on both sides.
    assert score(f"(TOP {GOLD})", GOLD).f1 == 100.0
    result = score(f"( {GOLD})", f"( {GOLD})")
    assert result.all.gold_brackets == 6


def test_label_counts_split_the_totals_by_label_over_the_scored_sentences():
    from keras_transformer.parsing.evalb import label_counts
    wrong_attachment = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (PP (IN at) (NP (DT the) (NN cat))) (. .))"
    period_as_noun = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the) (NN cat)))) (NN .))"
    gold, test = [parse_tree(GOLD)] * 3, [parse_tree(wrong_attachment), parse_tree(period_as_noun), None]
    labels = label_counts(gold, test)  # the second is a length error, the third skipped: neither counts
    assert {label: (c.gold_brackets, c.test_brackets, c.matched_brackets) for label, c in labels.items()} == {
        "S": (1, 1, 1), "NP": (2, 2, 2), "VP": (1, 1, 0), "PP": (1, 1, 1)}
    assert (labels["VP"].recall, labels["VP"].f1, labels["NP"].f1) == (0.0, 0.0, 100.0)
    totals = evalb(gold, test).all
    assert sum(c.matched_brackets for c in labels.values()) == totals.matched_brackets == 4
    assert sum(c.gold_brackets for c in labels.values()) == totals.gold_brackets == 5


def test_with_tags_of_puts_the_gold_tags_on_the_words_and_keeps_the_brackets():
    from keras_transformer.parsing.evalb import with_tags_of
    period_as_noun = parse_tree("(S (NP (DT The) (NN dog)) (VP (VBD barked) (PP (IN at) (NP (DT the) (NN cat)))) "
                                "(NN .))")
    retagged = with_tags_of(period_as_noun, parse_tree(GOLD))
    assert retagged.to_string() == GOLD and period_as_noun.tags()[-1] == "NN"  # a copy
    assert evalb([parse_tree(GOLD)], [retagged]).f1 == 100.0
    shorter = parse_tree("(S (NP (DT The) (NN dog)) (VP (VBD barked)))")
    assert with_tags_of(shorter, parse_tree(GOLD)).to_string() == shorter.to_string()
