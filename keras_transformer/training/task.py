"""What a task hands the training job besides its configs: its corpus, the Translator that turns
the model's outputs into answers, and how answers are scored. Translation is the default; parsing
(keras_transformer.parsing.task.PARSING) is the other one.
"""
import dataclasses
from typing import Callable

from keras_transformer.data import DataConfig, get_corpus
from keras_transformer.export import Translator
from keras_transformer.training.evaluation import score, validation_scores


@dataclasses.dataclass(frozen=True)
class Task:
    """Fields:
      name: used in logs.
      corpus: DataConfig -> Corpus of (source, target) text pairs.
      translator_class: Translator or a subclass whose `translate` gives the task's answers; it is
        what evaluations decode with and what is exported.
      validation_metric: (sources, answers, references) -> {name: value}, written to TensorBoard at
        each evaluation.
      test_scores: (sources, answers, references) -> a dataclass with report(name), written to
        test_scores.json and printed at the end of the job.
    """

    name: str
    corpus: Callable
    translator_class: type
    validation_metric: Callable
    test_scores: Callable


def translation_corpus(data: DataConfig):
    return get_corpus(data.dataset, reverse=data.reverse, seed=data.seed, tfds_data_dir=data.tfds_data_dir)


def translation_scores(sources, hypotheses, references):
    return score(hypotheses, references)


TRANSLATION = Task(name="translation", corpus=translation_corpus, translator_class=Translator,
                   validation_metric=validation_scores, test_scores=translation_scores)
