"""A tag dictionary: which part-of-speech tags each word may get, learned from the train trees.

    dictionary = build_tag_dictionary(corpus.trees("train"))
    dictionary.allowed("the")    # ("DT",): seen often enough, only the tags it had
    dictionary.allowed("Zorp")   # the tags of the rare words with a letter or digit: never "," or "."

A word seen at least `min_count` times in the train trees may get only the tags it had there; any
other word may get the tags that the rarer words of its shape had: words with a letter or a digit
(Unicode categories L and N), or words of symbols only. Taggers have long restricted frequent words
so (Ratnaparkhi's 1996 tagger; NLTK's and spaCy's tag dictionaries); here it matters most for
EVALB, which deletes punctuation by its tag: `and` tagged `,` or `.` tagged `NN` misaligns the whole
sentence, and it then counts as an error with no brackets scored. The Parser applies it while
decoding (Parser's tag_dictionary); the training job writes it next to the SentencePiece model.
"""
import collections
import dataclasses
import json
import pathlib
import unicodedata
from typing import Iterable, Mapping, Optional

from keras_transformer.files import write_text_atomically
from keras_transformer.parsing.trees import Tree

FILENAME = "tag_dictionary.json"
MIN_COUNT = 5


SHAPES = ("alphanumeric", "symbols")  # a letter or digit somewhere, or none
ALPHANUMERIC = r".*[\pL\pN].*"  # the same test as an RE2 pattern, for the Parser's graph


def word_shape(word: str) -> str:
    """"alphanumeric" when the word has a letter or a digit (Unicode categories L*, N*), else "symbols"."""
    return SHAPES[0] if any(unicodedata.category(char)[0] in "LN" for char in word) else SHAPES[1]


@dataclasses.dataclass(frozen=True)
class TagDictionary:
    """words: word (as the treebank writes it) -> the tags it may get; other: shape (SHAPES) -> the
    tags of any other word of that shape (none listed: every tag); min_count: how often a word was
    seen to be listed."""

    words: Mapping[str, tuple[str, ...]]
    other: Mapping[str, tuple[str, ...]]
    min_count: int = MIN_COUNT

    def allowed(self, word: str) -> tuple[str, ...]:
        """The tags `word` may get (empty: any tag)."""
        return self.words[word] if word in self.words else self.other.get(word_shape(word), ())

    def summary(self) -> dict:
        """What a parser's settings say of it."""
        return {"min_count": self.min_count, "words": len(self.words),
                "tags_of_other_words": {shape: list(tags) for shape, tags in self.other.items()}}

    def tags(self) -> set[str]:
        return set().union(*self.other.values(), *self.words.values())

    def to_json(self) -> str:
        return json.dumps({"min_count": self.min_count, "other": {shape: list(self.other.get(shape, ()))
                                                                  for shape in SHAPES},
                           "words": {word: list(tags) for word, tags in sorted(self.words.items())}},
                          ensure_ascii=False, indent=0)

    @classmethod
    def from_json(cls, text: str) -> "TagDictionary":
        values = json.loads(text)
        return cls(words={word: tuple(tags) for word, tags in values["words"].items()},
                   other={shape: tuple(values["other"][shape]) for shape in SHAPES},
                   min_count=int(values["min_count"]))


def build_tag_dictionary(trees: Iterable[Tree], min_count: int = MIN_COUNT) -> TagDictionary:
    """The dictionary of `trees` (one pass, so a streamed treebank is read once)."""
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1; got {min_count}")
    counts = collections.Counter()
    tags_of = collections.defaultdict(set)
    for tree in trees:
        for leaf in tree.preterminals():
            counts[leaf.word] += 1
            tags_of[leaf.word].add(leaf.label)
    words = {word: tuple(sorted(tags_of[word])) for word, count in counts.items() if count >= min_count}
    other = {shape: set() for shape in SHAPES}
    for word, count in counts.items():
        if count < min_count:
            other[word_shape(word)] |= tags_of[word]
    return TagDictionary(words=words, other={shape: tuple(sorted(tags)) for shape, tags in other.items()},
                         min_count=min_count)


def write_tag_dictionary(directory, dictionary: TagDictionary) -> pathlib.Path:
    """Writes directory/tag_dictionary.json (whole or not at all)."""
    return write_text_atomically(pathlib.Path(directory) / FILENAME, dictionary.to_json())


def read_tag_dictionary(directory) -> Optional[TagDictionary]:
    """directory/tag_dictionary.json, or None where there is none."""
    path = pathlib.Path(directory) / FILENAME
    if not path.is_file():
        return None
    try:
        return TagDictionary.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{path}: not a tag dictionary ({error})") from error
