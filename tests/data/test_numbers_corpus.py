"""The generated `numbers` corpus: num2words words, disjoint splits, reproducible from the seed."""
import random

from num2words import num2words

from keras_transformer.data.numbers_corpus import NumbersCorpus, english_words, german_words, sample_numbers


def test_the_issue_example():
    assert english_words(321) == "three hundred and twenty-one"
    assert german_words(321) == "dreihunderteinundzwanzig"


def test_composed_words_equal_num2words():
    rng = random.Random(0)
    sample = [0, 1, 1000, 1001, 1100, 21_000, 100_001, 999_999, 1_000_000, 12_345_678]
    sample += [rng.randrange(1_000_000) for _ in range(300)]
    for number in sample:
        assert english_words(number) == num2words(number, lang="en"), number
        assert german_words(number) == num2words(number, lang="de"), number


def test_splits_are_disjoint_sized_and_match_their_numbers():
    corpus = NumbersCorpus(num_train=2_000, num_validation=200, num_test=300, seed=1)
    numbers = {split: corpus.numbers[split] for split in ("train", "validation", "test")}
    assert [len(numbers[s]) for s in ("train", "validation", "test")] == [2_000, 200, 300]
    assert len(set().union(*numbers.values())) == 2_500
    assert all(0 <= n <= 999_999 for n in numbers["train"])
    pairs = list(corpus.pairs("test"))
    assert pairs[0] == (num2words(numbers["test"][0], lang="en"), num2words(numbers["test"][0], lang="de"))
    # Disjoint numbers give disjoint sentences too: one number, one wording.
    assert not {s for s, _ in corpus.pairs("train")} & {s for s, _ in pairs}


def test_same_seed_same_splits_other_seed_other_splits():
    first = NumbersCorpus(num_train=500, num_validation=50, num_test=50, seed=5)
    again = NumbersCorpus(num_train=500, num_validation=50, num_test=50, seed=5)
    other = NumbersCorpus(num_train=500, num_validation=50, num_test=50, seed=6)
    for split in ("train", "validation", "test"):
        assert list(first.pairs(split)) == list(again.pairs(split))
        assert list(first.pairs(split)) != list(other.pairs(split))


def test_short_numbers_are_not_drowned_out():
    numbers = sample_numbers(22_000, 999_999, seed=0)
    assert len(set(numbers)) == 22_000
    assert set(range(10)) <= set(numbers)           # the 1-digit band gives all it has
    assert sum(n < 1000 for n in numbers) == 1_000  # ... and so do the 2- and 3-digit bands


def test_reverse_is_german_to_english():
    corpus = NumbersCorpus(num_train=5, num_validation=1, num_test=1, reverse=True)
    number = corpus.numbers["train"][0]
    assert next(iter(corpus.pairs("train"))) == (num2words(number, lang="de"), num2words(number, lang="en"))
    assert (corpus.source_language, corpus.target_language) == ("de", "en")
