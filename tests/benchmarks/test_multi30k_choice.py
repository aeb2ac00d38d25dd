"""benchmarks/multi30k.py's choice on val: each run's (each member's) best candidate, the ensemble of
the members' choices against them, and the steps the plot marks in each run (with stand-in models
and val BLEU, no training)."""
import types

import pytest

import keras_transformer.ensemble
import keras_transformer.training.run_config
from benchmarks import multi30k


@pytest.fixture
def runs(monkeypatch):
    """Two runs whose candidates are named models; val BLEU is a lookup; an ensemble is a tuple."""
    candidates = {"run0": [("average of the last 5", [500, 1000], "a0"), ("ckpt-1000", [1000], "c0")],
                  "run1": [("average of the last 5", [600, 1200], "a1"), ("ckpt-1200", [1200], "c1")]}
    monkeypatch.setattr(keras_transformer.training.run_config.RunConfigs, "read", staticmethod(lambda run: run))
    monkeypatch.setattr(multi30k, "candidate_models", lambda configs, run, count, ensembles: candidates[run])
    monkeypatch.setattr(keras_transformer.ensemble, "TransformerEnsemble", lambda members: tuple(members))
    return types.SimpleNamespace(candidates=5, ensembles=())


def test_one_run_marks_its_best_candidate(runs):
    bleu = {"a0": 40.0, "c0": 41.5}
    best, tried, steps = multi30k.choose_candidate(runs, ["run0"], bleu.get)
    assert best == ("ckpt-1000", [1000], "c0", 41.5)
    assert tried == {"average of the last 5": 40.0, "ckpt-1000": 41.5}
    assert steps == [[1000]]


def test_a_member_beating_the_ensemble_is_marked_in_its_run_only(runs):
    bleu = {"a0": 40.0, "c0": 39.0, "a1": 38.0, "c1": 41.0, ("a0", "c1"): 40.5}
    best, tried, steps = multi30k.choose_candidate(runs, ["run0", "run1"], bleu.get)
    assert best == ("member 1: ckpt-1200", [1200], "c1", 41.0)
    assert tried["ensemble of the 2 members' choices"] == 40.5
    assert steps == [[], [1200]]


def test_the_ensemble_marks_each_members_choice(runs):
    bleu = {"a0": 40.0, "c0": 39.0, "a1": 38.0, "c1": 41.0, ("a0", "c1"): 42.0}
    best, _, steps = multi30k.choose_candidate(runs, ["run0", "run1"], bleu.get)
    assert best == ("ensemble of the 2 members' choices", [[500, 1000], [1200]], ("a0", "c1"), 42.0)
    assert steps == [[500, 1000], [1200]]


def test_a_tie_keeps_the_single_model(runs):
    bleu = {"a0": 41.0, "c0": 39.0, "a1": 38.0, "c1": 40.0, ("a0", "c1"): 41.0}
    best, _, steps = multi30k.choose_candidate(runs, ["run0", "run1"], bleu.get)
    assert best[0] == "member 0: average of the last 5" and steps == [[500, 1000], []]
