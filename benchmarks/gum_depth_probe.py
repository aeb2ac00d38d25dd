"""A probe, not a product: GUM parsing with one label per word (parsing.depth_labels) instead of
brackets, trained and decoded as a plain translation (no constrained decoding), to see whether the
linearization is worth building into the Parser. Chooses on dev only and scores test once, as
benchmarks/gum_parsing.py does, and prints one JSON line.

    python benchmarks/gum_depth_probe.py --minutes 60 --workdir runs/gum-depth [--preset parsing_small]

The target of a sentence is, word by word, the word's tag (with its unary chain, "NP>PRP"), the word
itself, and (but for the last word) its depth change with the common ancestor's label ("+1S"):

    I saw a dog .  ->  NP>PRP I +1S VBD saw +1VP DT a +1NP NN dog -2S . .

An answer is read back position by position; what is missing or malformed is replaced (a guessed
tag, a depth change of 0) and counted as a repair. Every answer is then a tree over the words.
"""
import argparse
import dataclasses
import json
import os
import pathlib
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.common import emit, log, log_the_job, setup_tensorflow  # noqa: E402
from benchmarks.gum_parsing import candidates, first_wall_time, plot_dev_f1, scalar_events  # noqa: E402

_DEPTH_TOKEN = re.compile(r"^([+-]\d+)(\S+)$")


def target_tokens(tree):
    from keras_transformer.parsing.depth_labels import encode, to_tokens

    words, tokens = tree.words(), to_tokens(encode(tree))
    out = []
    for i, word in enumerate(words):
        out += [tokens[2 * i], word] + ([tokens[2 * i + 1]] if i + 1 < len(words) else [])
    return out


def read_answer(answer, words, tag_tokens=None):
    """(labels, repaired) of an answer's text for `words`; tag_tokens None: any token in a tag's
    place is taken as one (the references)."""
    from keras_transformer.parsing.depth_labels import WordLabel
    from keras_transformer.parsing.linearization import guess_tag

    tokens, position, labels, repaired = answer.split(), 0, [], False

    def next_is(kind):
        if position >= len(tokens):
            return False
        token = tokens[position]
        if kind == "depth":
            return bool(_DEPTH_TOKEN.match(token))
        return token in tag_tokens if tag_tokens is not None else not _DEPTH_TOKEN.match(token)

    for i, word in enumerate(words):
        unary, tag = "", guess_tag(word)
        if next_is("tag"):
            unary, _, tag = tokens[position].rpartition(">")
            position += 1
        else:
            repaired = True
        if position < len(tokens) and (tokens[position] == word or not next_is("depth")):
            repaired |= tokens[position] != word
            position += 1  # the word
        else:
            repaired = True
        change, lca = 0, ""
        if i + 1 < len(words):
            if next_is("depth"):
                match = _DEPTH_TOKEN.match(tokens[position])
                change, lca = int(match.group(1)), match.group(2)
                position += 1
            else:
                repaired = True
        labels.append(WordLabel(tag, unary, change, lca))
    return labels, repaired or position != len(tokens)


@dataclasses.dataclass(frozen=True)
class ProbeScores:
    f1: float
    recall: float
    precision: float
    tagging_accuracy: float
    sentences: int
    error_sentences: int
    repaired: int

    def report(self, name="test"):
        return (f"{name}: EVALB F1 {self.f1:.2f} (recall {self.recall:.2f}, precision {self.precision:.2f}), "
                f"tagging {self.tagging_accuracy:.2f}; {self.sentences} sentences, {self.error_sentences} errors, "
                f"{self.repaired} answers repaired")


def make_task(tag_tokens_of):
    from keras_transformer.export import Translator
    from keras_transformer.parsing.corpus import TreebankCorpus, corpus_from_spec
    from keras_transformer.parsing.depth_labels import decode
    from keras_transformer.parsing.evalb import evalb
    from keras_transformer.parsing.parser import tree_symbols
    from keras_transformer.training.task import Task

    class DepthCorpus(TreebankCorpus):
        target_language = "depth labels"

        def pairs(self, split):
            for tree in self.trees(split):
                yield " ".join(tree.words()), " ".join(target_tokens(tree))

        def user_defined_symbols(self):
            if self._symbols is None:
                tokens = {token for tree in self.trees("train") for i, token in enumerate(target_tokens(tree))
                          if i % 3 != 1}
                self._symbols = tuple(tree_symbols(tokens))
            return self._symbols

    corpus_cache = {}

    def corpus(data):
        if data.dataset not in corpus_cache:
            corpus_cache[data.dataset] = DepthCorpus(corpus_from_spec(data.dataset).files)
        return corpus_cache[data.dataset]

    def scores(sentences, answers, references):
        tag_tokens = tag_tokens_of()
        golds, tests, repaired = [], [], 0
        for sentence, answer, reference in zip(sentences, answers, references, strict=True):
            words = sentence.split()
            gold, _ = read_answer(reference, words)
            golds.append(decode(words, gold))
            labels, fixed = read_answer(answer, words, tag_tokens)
            repaired += fixed
            tests.append(decode(words, labels))
        counts = evalb(golds, tests).all
        return ProbeScores(counts.f1, counts.recall, counts.precision, counts.tagging_accuracy, counts.sentences,
                           counts.error_sentences, repaired)

    def metric(sentences, answers, references):
        result = scores(sentences, answers, references)
        return {"f1": result.f1, "repaired": float(result.repaired)}

    return Task(name="depth-label parsing", corpus=corpus, translator_class=Translator, validation_metric=metric,
                test_scores=scores), corpus


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--preset", default="parsing_small")
    parser.add_argument("--workdir", type=pathlib.Path, required=True)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--choice-sentences", type=int, default=200)
    parser.add_argument("--max-sentences", type=int)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--onednn", type=int, choices=(0, 1), default=1)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    setup_tensorflow(args)
    log_the_job()

    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.data.factory import shared_data_root
    from keras_transformer.parsing.configs import parsing_configs
    from keras_transformer.training.evaluation import BeamSearchTranslator
    from keras_transformer.training.run import train_and_evaluate
    from keras_transformer.training.run_config import RunConfigs, apply_overrides

    folder = shared_data_root() / "gum"
    tag_tokens = set()
    task, corpus_of = make_task(lambda: tag_tokens)
    configs = parsing_configs(args.preset, folder / "train.ptb", folder / "dev.ptb", folder / "dev.ptb")
    configs = apply_overrides(configs, [f"run.max_train_minutes={args.minutes}", *args.overrides])
    corpus = corpus_of(configs.data)
    tag_tokens.update(token for _, target in corpus.pairs("train") for i, token in enumerate(target.split())
                      if i % 3 == 0)
    started = time.monotonic()
    result = train_and_evaluate(args.workdir, configs, verbose=2, task=task, evaluate_test=False)
    configs = RunConfigs.read(args.workdir)
    tokenizer = SubwordTokenizer.from_file(args.workdir / "sentencepiece.model")
    start = first_wall_time(args.workdir)

    dev = list(corpus.pairs("validation"))[:args.max_sentences]
    choice = dev[:args.choice_sentences or None]

    def scored(translator, pairs):
        return task.test_scores([s for s, _ in pairs], translator.translate([s for s, _ in pairs], progress=True),
                                [r for _, r in pairs])

    best, tried = None, []
    for name, model, stamp in candidates(configs, args.workdir, result.averaged_weights, args.candidates):
        translator = BeamSearchTranslator(model, tokenizer, configs.decode)
        choice_scores = scored(translator, choice)
        log(choice_scores.report(f"dev, first {len(choice)} sentences ({name})"))
        tried.append((name, (stamp.stat().st_mtime - start) / 60.0 if start else 0.0, choice_scores.f1))
        if best is None or choice_scores.f1 > best[2].f1:
            best = (name, model, choice_scores, translator)
    name, model, choice_scores, translator = best
    dev_scores = scored(translator, dev) if len(choice) < len(dev) else choice_scores
    log(dev_scores.report(f"dev ({name})"))
    test_corpus = type(corpus)({"train": folder / "train.ptb", "test": folder / "test.ptb"})
    test_scores = scored(translator, list(test_corpus.pairs("test"))[:args.max_sentences])
    log(test_scores.report(f"test ({name})"))
    during = [((wall - start) / 60.0, f1) for wall, _, f1 in scalar_events(args.workdir / "tensorboard" / "validation",
                                                                          "f1")]
    png = args.workdir / "dev_f1.png"
    plot_dev_f1(png, during, tried, f"GUM dev F1, depth labels, {args.preset}, {result.step} steps", len(choice))
    emit(task="gum_depth_probe", preset=args.preset, dev_f1=round(dev_scores.f1, 2), test_f1=round(test_scores.f1, 2),
         checkpoint=name, dev=dataclasses.asdict(dev_scores), test=dataclasses.asdict(test_scores), steps=result.step,
         budget_minutes=args.minutes, wall_minutes=round((time.monotonic() - started) / 60.0, 1),
         candidates={n: round(f1, 2) for n, _, f1 in tried}, png=str(png))


if __name__ == "__main__":
    main()
