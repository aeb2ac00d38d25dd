"""What a task hands the training job besides its configs: its corpus, the Translator that turns
the model's outputs into answers, and how answers are scored. Translation is the default; parsing
(keras_transformer.parsing.task.PARSING) is the other one.
"""
import dataclasses
import functools
from typing import Callable

from keras_transformer.data import DataConfig, get_corpus
from keras_transformer.export import Translator
from keras_transformer.training.evaluation import score, validation_scores


def transformer_model(config, workdir, training=False, **training_options):
    """Task.model of translation: the Transformer (TrainingTransformer to train)."""
    from keras_transformer.model import Transformer
    from keras_transformer.training.training_model import TrainingTransformer

    return TrainingTransformer(config, **training_options) if training else Transformer(config)


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
      Both take `lowercase=True` too (case-insensitive scores) if the task's corpus function accepts
      DataConfig.lowercase; one that does not must refuse it.
      prepare_workdir: (workdir, corpus) -> None, run once when the run's vocabulary is learned:
        writes what the translator needs besides the model and the vocabulary.
      translator_options: workdir -> keyword arguments of translator_class, read from what
        prepare_workdir wrote.
      model: (TransformerConfig, workdir, training) -> the run's keras model, unbuilt (with
        training=True, the keyword arguments of training_model.StreamTraining too: a model that
        trains on the training stream): the Transformer's, or another model.TokenLossModel of
        the task (parsing's span parser), which may read what prepare_workdir wrote.
    """

    name: str
    corpus: Callable
    translator_class: type
    validation_metric: Callable
    test_scores: Callable
    prepare_workdir: Callable = lambda workdir, corpus: None
    translator_options: Callable = lambda workdir: {}
    model: Callable = transformer_model

    def translator(self, workdir):
        """translator_class with the options of the run in workdir."""
        return functools.partial(self.translator_class, **self.translator_options(workdir))

    def scoring(self, data: DataConfig):
        """(validation_metric, test_scores) for a run with these data settings: case-insensitive
        where the run case-folds its text (DataConfig.lowercase)."""
        if not data.lowercase:
            return self.validation_metric, self.test_scores
        return (functools.partial(self.validation_metric, lowercase=True),
                functools.partial(self.test_scores, lowercase=True))


def translation_corpus(data: DataConfig):
    return get_corpus(data.dataset, reverse=data.reverse, seed=data.split_seed, tfds_data_dir=data.tfds_data_dir)


def translation_scores(sources, hypotheses, references, lowercase=False):
    return score(hypotheses, references, lowercase)


TRANSLATION = Task(name="translation", corpus=translation_corpus, translator_class=Translator,
                   validation_metric=validation_scores, test_scores=translation_scores)
