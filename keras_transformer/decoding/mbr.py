"""Minimum Bayes risk (MBR) selection among a beam's n-best translations (Kumar & Byrne, 2004).

Beam search answers with the translation the model finds most probable. MBR answers with the one
that agrees most with the others: among the n-best list of a sentence, the candidate h with the
highest expected utility sum_j p(h_j) u(h, h_j) against the list itself (h included), p the model's
probabilities of the candidates renormalized over the list (softmax of their beam scores) and u
sacreBLEU's sentence BLEU or chrF. Not in the paper, which translates with beam search's best: a
named option (`benchmarks/multi30k.py --mbr`, `pipelines.translate --mbr`), run in Python on the
n-best lists that the SavedModel's `translate_nbest` returns.

    choose([["ein hund rennt .", "ein hund läuft .", "der hund läuft ."]], [[-0.2, -0.3, -0.9]])
"""
from typing import Optional, Sequence

import numpy as np
from sacrebleu.metrics import BLEU, CHRF

UTILITIES = ("bleu", "chrf")


def sentence_metric(utility: str):
    """sacreBLEU's metric for a utility's name ("bleu", "chrf"); a ValueError names the choices."""
    if utility == "bleu":
        return BLEU(effective_order=True)  # sentence BLEU, as sacreBLEU scores single sentences
    if utility == "chrf":
        return CHRF()
    raise ValueError(f"MBR utility must be one of {', '.join(UTILITIES)}, got {utility!r}")


def expected_utilities(candidates: Sequence[str], scores: Optional[Sequence[float]] = None,
                       utility: str = "bleu") -> np.ndarray:
    """(N,) the expected utility of each of one sentence's candidates against all of them, weighted
    by softmax(scores) (their beam scores), or uniformly when scores is None."""
    return _expected_utilities(candidates, scores, sentence_metric(utility))


def _expected_utilities(candidates, scores, metric) -> np.ndarray:
    count = len(candidates)
    scores = None if scores is None else np.asarray(scores, float)
    weights = np.ones(count) if scores is None or not np.isfinite(scores.max()) else np.exp(scores - scores.max())
    weights /= weights.sum()
    gains = np.full((count, count), 100.0)  # a translation agrees fully with itself
    for row, hypothesis in enumerate(candidates):
        for column, reference in enumerate(candidates):
            if row != column and hypothesis != reference:
                gains[row, column] = metric.sentence_score(hypothesis, [reference]).score
    return gains @ weights


def choose(nbest: Sequence[Sequence[str]], scores: Optional[Sequence[Sequence[float]]] = None,
           utility: str = "bleu") -> list[str]:
    """The MBR choice among each sentence's candidates (nbest[b], best first as beam search ranks
    them; scores[b] their beam scores, None for uniform weights); ties go to the better-ranked one.
    An empty source's list, all "", gives ""."""
    metric = sentence_metric(utility)  # one metric for all, and the utility's name checked before any work
    return [candidates[int(np.argmax(_expected_utilities(candidates, None if scores is None else scores[row],
                                                         metric)))]
            for row, candidates in enumerate(nbest)]


def choose_among_nbest(outputs, utility: str = "bleu") -> list[str]:
    """The MBR choice of each row of a Translator's translate_nbest outputs ("translations" (B, W)
    UTF-8 strings, "scores" (B, W) beam scores), in the SavedModel's signature or in Python."""
    nbest = [[text.decode("utf-8") for text in row] for row in outputs["translations"].numpy()]
    return choose(nbest, outputs["scores"].numpy().tolist(), utility)
