"""`numbers`: an offline corpus the project makes itself, English number words -> German number words.

    321 -> ("three hundred and twenty-one", "dreihunderteinundzwanzig")

German writes a number as one compound with the units before the tens ("einundzwanzig" = one-and-
twenty), so the task needs real reordering, yet a small model learns it in minutes on a CPU, and it
needs no download. The words come from the `num2words` package (lang="en", lang="de").

Splits are disjoint by the number and reproducible from the seed. Numbers are drawn without
replacement, spread evenly over the orders of magnitude (1-digit, 2-digit, ... numbers) so that
short numbers are not drowned out by the many six-digit ones; a band smaller than its share (there
are only ten 1-digit numbers) gives all it has, and the largest band makes up the rest.
"""
import functools
import random
from typing import Iterator

import num2words

from keras_transformer.data.corpora import Corpus, check_split

_ENGLISH = num2words.CONVERTER_CLASSES["en"]
_GERMAN = num2words.CONVERTER_CLASSES["de"]


@functools.lru_cache(maxsize=None)
def _english_words(number: int) -> str:
    return _ENGLISH.to_cardinal(number)


@functools.lru_cache(maxsize=None)
def _german_words(number: int) -> str:
    return _GERMAN.to_cardinal(number)


def english_words(number: int) -> str:
    """num2words(number, lang="en"), built from cached thousands and units below a million.

    Composing is ~20x faster than calling num2words for every number; it was checked to equal
    num2words for every number below 1,000,000 (and tests check a sample of it).
    """
    thousands, units = divmod(number, 1000)
    if number >= 1_000_000 or thousands == 0 or units == 0:
        return _english_words(number)
    separator = ", " if units >= 100 else " and "
    return _english_words(thousands * 1000) + separator + _english_words(units)


def german_words(number: int) -> str:
    """num2words(number, lang="de"), composed like `english_words` (German simply concatenates)."""
    thousands, units = divmod(number, 1000)
    if number >= 1_000_000 or thousands == 0 or units == 0:
        return _german_words(number)
    return _german_words(thousands * 1000) + _german_words(units)


def sample_numbers(total: int, max_number: int, seed: int) -> list[int]:
    """`total` distinct numbers in [0, max_number], spread over magnitude bands, in seeded order."""
    if total > max_number + 1:
        raise ValueError(f"cannot draw {total} distinct numbers from 0..{max_number}")
    bands, low = [], 0
    while low <= max_number:
        high = min(max(10, low * 10), max_number + 1)  # [0, 10), [10, 100), ...
        bands.append(range(low, high))
        low = high
    rng = random.Random(seed)
    quotas = [min(len(band), total // len(bands)) for band in bands]
    # The largest bands absorb what the small ones could not give.
    for index in reversed(range(len(bands))):
        extra = min(total - sum(quotas), len(bands[index]) - quotas[index])
        quotas[index] += extra
    numbers = [n for band, quota in zip(bands, quotas) for n in rng.sample(band, quota)]
    rng.shuffle(numbers)
    return numbers


class NumbersCorpus(Corpus):
    """English number words -> German number words (or the reverse), generated offline.

    Args:
      num_train, num_validation, num_test: pairs per split.
      max_number: numbers are drawn from 0..max_number.
      seed: the draw's seed; the same seed gives the same splits.
      reverse: German -> English.
    """

    def __init__(self, num_train: int = 20_000, num_validation: int = 1_000, num_test: int = 1_000,
                 max_number: int = 999_999, seed: int = 0, reverse: bool = False):
        self.name = "numbers"
        self.source_language, self.target_language = ("de", "en") if reverse else ("en", "de")
        self.max_number = max_number
        self.seed = seed
        self.reverse = reverse
        sizes = {"train": num_train, "validation": num_validation, "test": num_test}
        numbers = sample_numbers(sum(sizes.values()), max_number, seed)
        self.numbers: dict[str, list[int]] = {}
        start = 0
        for split in ("train", "validation", "test"):
            self.numbers[split] = numbers[start:start + sizes[split]]
            start += sizes[split]

    def pairs(self, split: str) -> Iterator[tuple[str, str]]:
        check_split(split)
        for number in self.numbers[split]:
            english, german = english_words(number), german_words(number)
            yield (german, english) if self.reverse else (english, german)
