"""A small English-like treebank generated from a toy grammar, for tests and the offline quick run.

    write_toy_treebank("data/toy-treebank")   # train.mrg, dev.mrg, test.mrg

Trees look like the WSJ's after a parser's preprocessing would undo them: a ROOT wrapper, function
tags (NP-SBJ, PP-LOC) and an occasional empty element, so that reading them exercises the same
preprocessing. Sentences are 3 to about 25 words: subjects and objects with determiners,
adjectives and prepositional phrases, intransitive and transitive verbs, particles, adverbs,
subordinate clauses, commas and a final period.
"""
import pathlib
import random

from keras_transformer.parsing.treebank import read_treebank

LEXICON = {
    "DT": ["the", "a", "every", "this"], "JJ": ["small", "red", "old", "quiet", "clever"],
    "NN": ["dog", "cat", "house", "garden", "teacher", "river", "book"],
    "NNS": ["dogs", "cats", "books", "teachers"], "NNP": ["Anna", "Paris", "Ben"],
    "PRP": ["she", "he", "they"], "VBD": ["saw", "found", "liked", "followed"],
    "VBD_INTRANSITIVE": ["slept", "laughed", "waited"], "RP": ["up", "out"], "RB": ["quickly", "often", "today"],
    "IN": ["in", "near", "with", "under"], "IN_SBAR": ["because", "while"],
}
SPLIT_SIZES = {"train": 2000, "dev": 150, "test": 150}


def _words(rng, tag):
    return rng.choice(LEXICON[tag])


def _noun_phrase(rng, depth, label="NP"):
    kind = rng.random()
    if kind < 0.15:
        return f"({label} (PRP {_words(rng, 'PRP')}))"
    if kind < 0.3:
        return f"({label} (NNP {_words(rng, 'NNP')}))"
    adjectives = "".join(f" (JJ {_words(rng, 'JJ')})" for _ in range(rng.choice([0, 0, 1, 2])))
    noun = rng.choice(["NN", "NN", "NNS"])
    simple = f"(NP (DT {_words(rng, 'DT')}){adjectives} ({noun} {_words(rng, noun)}))"
    if depth < 2 and rng.random() < 0.3:
        return f"({label} {simple} {_prepositional_phrase(rng, depth + 1)})"
    return simple if label == "NP" else f"({label}{simple[3:]}"


def _prepositional_phrase(rng, depth, label="PP"):
    return f"({label} (IN {_words(rng, 'IN')}) {_noun_phrase(rng, depth)})"


def _verb_phrase(rng, depth):
    kind = rng.random()
    if kind < 0.25:
        parts = [f"(VBD {_words(rng, 'VBD_INTRANSITIVE')})"]
    elif kind < 0.4:
        parts = [f"(VBD {_words(rng, 'VBD')})", f"(PRT (RP {_words(rng, 'RP')}))", _noun_phrase(rng, depth)]
    else:
        parts = [f"(VBD {_words(rng, 'VBD')})", _noun_phrase(rng, depth)]
    if rng.random() < 0.25:
        parts.append(_prepositional_phrase(rng, depth, "PP-LOC"))
    if rng.random() < 0.2:
        parts.append(f"(ADVP-TMP (RB {_words(rng, 'RB')}))")
    if depth == 0 and rng.random() < 0.15:
        parts.append(f"(SBAR-ADV (IN {_words(rng, 'IN_SBAR')}) {_clause(rng, depth + 1)})")
    return "(VP " + " ".join(parts) + ")"


def _clause(rng, depth):
    subject = _noun_phrase(rng, depth, "NP-SBJ")
    if rng.random() < 0.1:  # an empty subject, as the WSJ writes them, for preprocessing to remove
        subject = "(NP-SBJ (-NONE- *))"
    return f"(S {subject} {_verb_phrase(rng, depth)})"


def toy_tree(rng: random.Random) -> str:
    """One tree, in bracket format with a ROOT wrapper."""
    clause = _clause(rng, 0)
    if rng.random() < 0.2:
        clause = f"(S (ADVP (RB {_words(rng, 'RB')})) (, ,) {clause[3:-1]})"
    return f"(ROOT {clause[:-1]} (. .)))"


def write_toy_treebank(directory, seed: int = 0, sizes=None) -> dict:
    """Writes train.mrg, dev.mrg and test.mrg (one tree per line) into directory, and sentences.txt
    (the test trees' words, one sentence per line, to parse); returns their paths by split name
    ("sentences" for the last)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = {}
    for split, size in (sizes or SPLIT_SIZES).items():
        paths[split] = directory / f"{split}.mrg"
        paths[split].write_text("".join(toy_tree(rng) + "\n" for _ in range(size)))
    if "test" in paths:
        paths["sentences"] = directory / "sentences.txt"
        paths["sentences"].write_text("".join(" ".join(tree.words()) + "\n" for tree in read_treebank(paths["test"])))
    return paths
