"""WMT14 English-German (the paper's training data, section 5.1) through tensorflow-datasets.

`wmt14_translate/de-en` holds about 4.5M pairs in train, newstest2013 as validation and newstest2014
as test, each example a dict {"de": ..., "en": ...}. The direction is a setting: en->de by default,
as in the paper.
"""
from typing import Iterator, Optional

import tensorflow as tf

from keras_transformer.data.corpora import Corpus, check_split
from keras_transformer.data.text_files import strip_whitespace
from keras_transformer.tracing import plain

WMT14_EN_DE = "wmt14_translate/de-en"


class TfdsTranslationCorpus(Corpus):
    """A TFDS translation dataset whose examples are dicts of language code -> sentence.

    Args:
      dataset_name: the TFDS name with config, e.g. "wmt14_translate/de-en".
      source_language, target_language: the dict keys of the source and target sides.
      data_dir: the TFDS data directory (None: TFDS's default, ~/tensorflow_datasets).
      download: let TFDS download and prepare the data if it is not in data_dir yet.
    """

    def __init__(self, dataset_name: str = WMT14_EN_DE, source_language: str = "en",
                 target_language: str = "de", data_dir: Optional[str] = None,
                 download: bool = True):
        self.name = dataset_name.split("/")[0]
        self.dataset_name = dataset_name
        self.source_language = source_language
        self.target_language = target_language
        self.data_dir = data_dir
        self.download = download

    prepare_on_chief_first = True

    def prepare(self) -> None:
        """Downloads and prepares the dataset in data_dir if it is not there yet (with download=True;
        WMT14's takes an hour or more); tfds.load does it too, but not before a cluster's barrier."""
        if self.download:
            import tensorflow_datasets as tfds

            tfds.builder(self.dataset_name, data_dir=self.data_dir).download_and_prepare()

    def _load(self, split: str) -> tf.data.Dataset:
        import tensorflow_datasets as tfds  # slow to import; only this source needs it

        check_split(split)
        return tfds.load(self.dataset_name, split=split, data_dir=self.data_dir,
                         download=self.download, shuffle_files=False)

    def dataset(self, split: str) -> tf.data.Dataset:
        source, target = self.source_language, self.target_language
        # As for local files: surrounding whitespace stripped, pairs with an empty side skipped.
        pairs = self._load(split).map(
            plain(lambda example: (strip_whitespace(example[source]), strip_whitespace(example[target]))),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return pairs.filter(plain(lambda source_text, target_text: tf.logical_and(
            tf.strings.length(source_text) > 0, tf.strings.length(target_text) > 0)))

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        for source, target in self.dataset(split).as_numpy_iterator():
            yield source.decode("utf-8"), target.decode("utf-8")


def wmt14_corpus(data_dir: Optional[str] = None, reverse: bool = False,
                 download: bool = True) -> TfdsTranslationCorpus:
    """WMT14 en->de (de->en with reverse=True) from TFDS."""
    source, target = ("de", "en") if reverse else ("en", "de")
    return TfdsTranslationCorpus(WMT14_EN_DE, source, target, data_dir=data_dir, download=download)
