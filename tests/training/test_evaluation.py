"""Scoring: sacreBLEU with its signature, chrF, and the paper's tokenized compound-split BLEU."""
import pytest
import sacrebleu

from keras_transformer.training.evaluation import Scores, score, split_compounds, tokenized_bleu


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
    # Split compounds add matching n-grams around the hyphen, so the paper's way counts higher here.
    assert scores.tokenized_bleu == pytest.approx(tokenized_bleu(hypotheses, references))
    assert scores.tokenized_bleu > scores.bleu
    assert "not comparable to sacreBLEU" in scores.report()


def test_score_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="2 hypotheses for 1 references"):
        score(["a", "b"], ["a"])
