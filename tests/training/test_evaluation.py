"""Scoring: sacreBLEU with its signature, chrF, and the paper's tokenized compound-split BLEU."""
import json

import pytest
import sacrebleu

from keras_transformer.data import DataConfig
from keras_transformer.training.evaluation import (Scores, sacrebleu_scores, score, split_compounds, tokenized_bleu,
                                                   validation_scores)
from keras_transformer.training.run import TEST_SCORES, evaluate_test_set
from keras_transformer.training.task import TRANSLATION


@pytest.mark.parametrize("text, expected", [
    ("Die Ost-West-Beziehungen.", "Die Ost ##AT##-##AT## West ##AT##-##AT## Beziehungen ."),
    ("a-b-c", "a ##AT##-##AT## b-c"),  # one left-to-right pass, as tensor2tensor's perl substitution
    ("ein - Strich", "ein - Strich"),
    ("", ""),
])
def test_split_compounds(text, expected):
    assert split_compounds(text) == expected


def test_score_is_sacrebleu_on_detokenized_text():
    hypotheses = ["Der Hund läuft über die Wiese.", "Eine Ost-West-Verbindung."]
    references = ["Der Hund rennt über die Wiese.", "Eine Ost-West-Verbindung."]
    scores = score(hypotheses, references)
    assert isinstance(scores, Scores)
    assert scores.bleu == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert scores.chrf == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    assert scores.bleu_signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert scores.num_sentences == 2
    # The paper's way: 13a tokens, compounds split at their hyphens, then BLEU on those tokens as
    # they are. Split compounds add matching n-grams around the hyphen, so it counts higher here.
    split_hypotheses = ["Der Hund läuft über die Wiese .", "Eine Ost ##AT##-##AT## West ##AT##-##AT## Verbindung ."]
    split_references = ["Der Hund rennt über die Wiese .", "Eine Ost ##AT##-##AT## West ##AT##-##AT## Verbindung ."]
    expected = sacrebleu.corpus_bleu(split_hypotheses, [split_references], tokenize="none").score
    assert scores.tokenized_bleu == pytest.approx(expected)
    assert tokenized_bleu(hypotheses, references) == pytest.approx(expected)
    assert scores.tokenized_bleu > scores.bleu
    assert "not comparable to sacreBLEU" in scores.report()


def test_score_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        score(["a", "b"], ["a"])


def test_lowercase_scores_ignore_case_and_say_so():
    hypotheses, references = ["ein hund läuft über die ost-west-straße."], ["Ein Hund läuft über die Ost-West-Straße."]
    cased, folded = score(hypotheses, references), score(hypotheses, references, lowercase=True)
    assert folded.bleu == pytest.approx(100.0) and folded.chrf == pytest.approx(100.0)
    assert folded.tokenized_bleu == pytest.approx(100.0)
    assert cased.bleu < 50.0 and cased.chrf < 90.0 and cased.tokenized_bleu < 50.0
    assert folded.bleu_signature.startswith("nrefs:1|case:lc|") and "case:lc" in folded.chrf_signature
    assert validation_scores([], hypotheses, references, lowercase=True) == {"bleu": pytest.approx(100.0),
                                                                             "chrf": pytest.approx(100.0)}
    cased_bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert cased_bleu < 50.0 and cased.bleu == pytest.approx(cased_bleu)
    assert sacrebleu_scores(hypotheses, references) == {
        "bleu": pytest.approx(cased_bleu), "bleu_signature": cased.bleu_signature,
        "chrf": pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score),
        "chrf_signature": cased.chrf_signature}
    assert cased.bleu_signature.startswith("nrefs:1|case:mixed|")


class _Corpus:
    def pairs(self, split):
        assert split == "test"
        return iter([("A dog runs.", "Ein Hund rennt."), ("Two men.", "Zwei Männer.")])


class _LowercaseTranslator:
    def translate(self, sources):
        return ["ein hund rennt.", "zwei männer."]


@pytest.mark.parametrize("lowercase", [False, True])
def test_a_lowercased_run_is_scored_lowercased(tmp_path, lowercase):
    metric, _ = TRANSLATION.scoring(DataConfig(lowercase=lowercase))
    assert (metric([], ["ein hund rennt über die wiese."], ["Ein Hund rennt über die Wiese."])["bleu"] == pytest.approx(100.0)) == lowercase
    scores = evaluate_test_set(_LowercaseTranslator(), _Corpus(), tmp_path, TRANSLATION, DataConfig(lowercase=lowercase))
    assert (scores.bleu == pytest.approx(100.0)) == lowercase
    written = json.loads((tmp_path / TEST_SCORES).read_text())
    assert ("case:lc" in written["bleu_signature"]) == lowercase
