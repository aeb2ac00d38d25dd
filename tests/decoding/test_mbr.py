"""MBR selection among n-best lists: expected utilities against sacreBLEU's sentence scores, worked
out here by hand, the consensus chosen over beam search's best, weights from the beam scores."""
import numpy as np
import pytest
from sacrebleu.metrics import BLEU, CHRF

from keras_transformer.decoding.mbr import choose, expected_utilities


@pytest.mark.parametrize("utility, metric", [("bleu", BLEU(effective_order=True)), ("chrf", CHRF())])
def test_expected_utilities_are_the_weighted_sentence_scores_against_the_list(utility, metric):
    candidates = ["a man rides a red bike .", "a man is riding a bike .", "a woman walks ."]
    scores = [-0.5, -0.7, -2.0]
    weights = np.exp(scores) / np.exp(scores).sum()
    expected = [sum(weight * (100.0 if other == text else metric.sentence_score(text, [other]).score)
                    for other, weight in zip(candidates, weights)) for text in candidates]
    np.testing.assert_allclose(expected_utilities(candidates, scores, utility), expected)
    uniform = [np.mean([100.0 if other == text else metric.sentence_score(text, [other]).score
                        for other in candidates]) for text in candidates]
    np.testing.assert_allclose(expected_utilities(candidates, None, utility), uniform)


def test_the_consensus_is_chosen_over_the_most_probable_outlier():
    nbest = [["the cat sits on the mat .", "a dog runs in the park .", "a dog runs in a park .",
              "the dog runs in the park ."],
             ["zwei hunde spielen .", "zwei hunde spielen im schnee .", "zwei hunde spielen im schnee ."]]
    scores = [[-1.0, -1.1, -1.2, -1.3], [-0.1, -0.3, -0.4]]
    assert choose(nbest, scores) == ["a dog runs in the park .", "zwei hunde spielen im schnee ."]
    # With nearly all the probability on the first candidate, the first is chosen.
    assert choose(nbest, [[0.0, -20.0, -20.0, -20.0], [0.0, -20.0, -20.0]]) == [nbest[0][0], nbest[1][0]]


def test_ties_go_to_the_better_ranked_and_an_empty_list_gives_empty():
    assert choose([["a b c", "a b c"], ["", "", ""]], [[-1.0, -1.0], [0.0, 0.0, 0.0]]) == ["a b c", ""]
    assert choose([["x y z", "p q r"]]) == ["x y z"]  # uniform weights, no overlap: a tie


def test_an_unknown_utility_is_refused_before_any_work():
    with pytest.raises(ValueError, match="MBR utility must be one of bleu, chrf, got 'ter'"):
        choose([["a"]], utility="ter")
