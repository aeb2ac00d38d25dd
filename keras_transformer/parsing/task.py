"""Parsing as a task of the training job (keras_transformer.training.task): a treebank corpus, the
Parser as translator, and EVALB's F1 as the score.

Every answer is checked to be a tree over exactly the sentence's words; one that is not (which the
Parser's constrained decoding should never give) is repaired and counted.
"""
import dataclasses
import pathlib
from typing import Optional, Sequence

from keras_transformer.data import DataConfig
from keras_transformer.export import SENTENCEPIECE_FILENAME
from keras_transformer.parsing.corpus import SPEC_PREFIX, corpus_from_spec, gold_tree, parse_spec_options
from keras_transformer.parsing.evalb import CUTOFF_LENGTH, evalb
from keras_transformer.parsing.linearization import Repairs, repair
from keras_transformer.parsing.parser import Parser
from keras_transformer.parsing.span_model import SpanParserModel, SpanTargets, TrainingSpanParser
from keras_transformer.parsing.span_parser import SpanParser, read_constituent_bias
from keras_transformer.parsing.spans import SPAN_LABELS_FILENAME, SpanLabels
from keras_transformer.parsing.tag_dictionary import build_tag_dictionary, read_tag_dictionary, write_tag_dictionary
from keras_transformer.parsing.trees import Tree, TreeFormatError, escape_word, parse_tree, tokenize_brackets
from keras_transformer.parsing.word_counts import FILENAME as WORD_COUNTS_FILENAME
from keras_transformer.parsing.word_counts import read_word_counts, write_word_counts
from keras_transformer.training.run_config import RunConfigs
from keras_transformer.training.task import Task, transformer_model


def sequence_of_tree_text(text: str) -> str:
    """The linearization that a (possibly malformed) tree text spells: (TAG word) -> TAG."""
    tokens, out, position = tokenize_brackets(text), [], 0
    while position < len(tokens):
        token = tokens[position]
        if (token == "(" and position + 3 < len(tokens) and tokens[position + 1] not in "()"
                and tokens[position + 2] not in "()" and tokens[position + 3] == ")"):
            out.append(tokens[position + 1])
            position += 4
            continue
        if token == "(" and position + 1 < len(tokens) and tokens[position + 1] not in "()":
            out.append("(" + tokens[position + 1])
            position += 2
            continue
        if token == ")":
            out.append(")")
        position += 1
    return " ".join(out)


def answer_tree(text: str, sentence: str) -> tuple[Optional[Tree], Optional[Repairs]]:
    """(tree, None) when `text` is a tree over exactly the words of `sentence`, else (the repaired
    tree, what was repaired); (None, None) for an empty sentence."""
    words = [escape_word(word) for word in sentence.split()]
    if not words:
        return None, None
    try:
        tree = parse_tree(text)
        if tree.words() == words:
            return tree, None
    except TreeFormatError:
        pass
    tree, repairs = repair(sequence_of_tree_text(text), words)
    if not repairs:  # a tree with a tag per word, but other words in its leaves
        repairs.other_words = True
    return tree, repairs


@dataclasses.dataclass(frozen=True)
class ParseScores:
    """EVALB's figures (percent) of a set of answers, and how many answers needed repair."""

    f1: float
    recall: float
    precision: float
    complete_match: float
    tagging_accuracy: float
    f1_len40: float
    sentences: int
    error_sentences: int
    skipped_sentences: int
    repaired: int

    def report(self, name="test") -> str:
        return (f"{name}: EVALB (COLLINS.prm) F1 {self.f1:.2f} (recall {self.recall:.2f}, precision "
                f"{self.precision:.2f}; len<={CUTOFF_LENGTH} F1 {self.f1_len40:.2f}), complete match "
                f"{self.complete_match:.2f}, tagging accuracy {self.tagging_accuracy:.2f}; {self.sentences} sentences, "
                f"{self.error_sentences} errors, {self.skipped_sentences} skipped; "
                f"{self.repaired} answers needed repair")


def parse_scores(sentences: Sequence[str], answers: Sequence[str], references: Sequence[str]) -> ParseScores:
    """Scores of answer trees (text) against the linearized gold trees of the same sentences."""
    golds, tests, repaired = [], [], 0
    for sentence, answer, reference in zip(sentences, answers, references, strict=True):
        golds.append(gold_tree(sentence, reference))
        tree, repairs = answer_tree(answer, sentence)
        repaired += repairs is not None
        tests.append(tree)
    result = evalb(golds, tests)
    counts = result.all
    return ParseScores(f1=counts.f1, recall=counts.recall, precision=counts.precision,
                       complete_match=counts.complete_match, tagging_accuracy=counts.tagging_accuracy,
                       f1_len40=result.len40.f1, sentences=counts.sentences, error_sentences=counts.error_sentences,
                       skipped_sentences=counts.skipped_sentences, repaired=repaired)


def validation_f1(sentences, answers, references) -> dict:
    scores = parse_scores(sentences, answers, references)
    return {"f1": scores.f1, "repaired": float(scores.repaired)}


def parsing_corpus(data):
    if data.lowercase:
        raise ValueError("data.lowercase is for translation: a parse keeps its sentence's words as "
                         "they are, case included")
    return corpus_from_spec(data.dataset)


def write_parsing_files(workdir, corpus):
    """The train split's tag dictionary, which the Parser decodes with, its span labels, which a
    span parser's model and SpanParser read, and its word counts, which a span parser's training
    with frequency-based unknown words reads (TransformerConfig.span_word_unk_alpha)."""
    write_tag_dictionary(workdir, build_tag_dictionary(corpus.trees("train")))
    SpanLabels.from_trees(corpus.trees("train")).write(workdir)
    write_word_counts(workdir, corpus.trees("train"))


def run_options(workdir) -> dict:
    """The treebank options (linearization, loss, parser) of the run in workdir; the defaults for a
    workdir without a data config."""
    data_config = pathlib.Path(workdir) / RunConfigs.FILENAMES["data"]
    if not data_config.is_file():
        return parse_spec_options(SPEC_PREFIX)[1]
    return parse_spec_options(DataConfig.from_json(data_config.read_text()).dataset)[1]


def parser_options(workdir):
    """The parser's tag dictionary, where the run has one (delete the file to parse without); the
    order of word and tag of the run's linearization, or a span parser's span labels and constituent
    bias (0 unless one was chosen: benchmarks/gum_parsing.py)."""
    options = run_options(workdir)
    if options["parser"] == "span":
        return {"span_labels": _span_labels(workdir), "constituent_bias": read_constituent_bias(workdir),
                "tag_dictionary": read_tag_dictionary(workdir)}
    return {"tag_dictionary": read_tag_dictionary(workdir),
            "word_first": options["linearization"] == "depth_word_first"}


def _span_labels(workdir) -> SpanLabels:
    span_labels = SpanLabels.read(workdir)
    if span_labels is None:
        raise FileNotFoundError(f"span labels not found: {pathlib.Path(workdir) / SPAN_LABELS_FILENAME}")
    return span_labels


def parser(model, sentencepiece_proto, decode_config=None, **options):
    """PARSING's translator: a SpanParser for a span parser's model, else the seq2seq Parser."""
    if isinstance(model, SpanParserModel):
        return SpanParser(model, sentencepiece_proto, decode_config, **options)
    return Parser(model, sentencepiece_proto, decode_config, **options)


def parsing_model(config, workdir, training=False, **training_options):
    """PARSING's model (Task.model): the Transformer, or for a span parser's run a SpanParserModel
    with the run's span labels and vocabulary (and, to train with span_word_unk_alpha, word counts)."""
    if run_options(workdir)["parser"] != "span":
        return transformer_model(config, workdir, training, **training_options)
    span_labels = _span_labels(workdir)
    proto = (pathlib.Path(workdir) / SENTENCEPIECE_FILENAME).read_bytes()
    word_counts = None
    if training and config.span_word_unk_alpha:
        word_counts = read_word_counts(workdir)
        if word_counts is None:
            raise FileNotFoundError(f"span_word_unk_alpha={config.span_word_unk_alpha} reads the train split's word "
                                    f"counts, {pathlib.Path(workdir) / WORD_COUNTS_FILENAME}, which this run (from "
                                    "before them) lacks: start a new run in another workdir")
    model_class = TrainingSpanParser if training else SpanParserModel
    return model_class(config, len(span_labels.labels), len(span_labels.tags),
                       targets=SpanTargets(proto, config.vocab_size, span_labels, word_counts), **training_options)


PARSING = Task(name="parsing", corpus=parsing_corpus, translator_class=parser, validation_metric=validation_f1,
               test_scores=parse_scores, prepare_workdir=write_parsing_files, translator_options=parser_options,
               model=parsing_model)
