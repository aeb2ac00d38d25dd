"""How often each word occurs in the train trees, for a span parser's frequency-based unknown words
(TransformerConfig.span_word_unk_alpha): in training, Kitaev and Klein (2018) read a word as UNK
with probability alpha / (alpha + its count), alpha = 1, so that the rare words, the ones most like
those training never showed, are the ones the parser learns to do without.

    write_word_counts(workdir, corpus.trees("train"))      # the training job, with the vocabulary
    table = WordCountTable(sentencepiece_proto, vocab_size, read_word_counts(workdir))
    table.lookup(pieces)   # in-graph: ragged (W, None) piece ids of W words -> (W,) int32 counts

The graph sees a word as its pieces, which BPE-dropout splits differently from one step to the
next, so a word is looked up by its pieces' texts joined, SentencePiece's space mark left out: its
text as SentencePiece normalized it, the same however it was split. The counts are kept by that
key too (word_key_counts), words that normalize alike summed.
"""
import collections
import json
import pathlib
from typing import Iterable, Mapping, Optional

import numpy as np
import sentencepiece
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.files import write_text_atomically
from keras_transformer.parsing.parser import _WORD_MARK
from keras_transformer.parsing.trees import Tree

FILENAME = "word_counts.json"


def write_word_counts(directory, trees: Iterable[Tree]) -> pathlib.Path:
    """Writes directory/word_counts.json (whole or not at all): {word: its count in the trees}."""
    counts = collections.Counter(word for tree in trees for word in tree.words())
    text = json.dumps(dict(counts.most_common()), ensure_ascii=False)
    return write_text_atomically(pathlib.Path(directory) / FILENAME, text)


def read_word_counts(directory) -> Optional[dict[str, int]]:
    """directory/word_counts.json, or None where there is none."""
    path = pathlib.Path(directory) / FILENAME
    if not path.is_file():
        return None
    try:
        counts = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(counts, dict) or not all(isinstance(n, int) and n > 0 for n in counts.values()):
            raise ValueError("not an object of positive integer counts")
    except ValueError as error:
        raise ValueError(f"{path}: not word counts ({error})") from error
    return counts


def word_key_counts(sentencepiece_proto: bytes, counts: Mapping[str, int]) -> dict[str, int]:
    """counts by each word's key: its SentencePiece pieces' texts joined, the space mark left out."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_proto)
    words = list(counts)
    keys = collections.Counter()
    for word, pieces in zip(words, processor.encode(words, out_type=str)):
        keys["".join(pieces).replace(_WORD_MARK, "")] += counts[word]
    return dict(keys)


class WordCountTable:
    """In-graph: the train split's count of each word of a batch, from its piece ids (the keys of
    word_key_counts); 0 for a word the counts do not hold."""

    def __init__(self, sentencepiece_proto: bytes, vocab_size: int, counts: Mapping[str, int]):
        pieces = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_proto).pieces
        texts = np.full([vocab_size], "", dtype=object)
        texts[:min(len(pieces), vocab_size)] = [piece.piece for piece in pieces[:vocab_size]]
        self.piece_texts = tf.constant(texts, tf.string)  # (V,)
        keys = word_key_counts(sentencepiece_proto, counts)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(list(keys), tf.string),
                                                tf.constant(list(keys.values()), tf.int32)), default_value=0)

    def keys(self, pieces: tf.RaggedTensor) -> tf.Tensor:
        """ragged (W, None) piece ids -> (W,) the words' keys."""
        joined = tf.strings.reduce_join(tf.gather(self.piece_texts, pieces), axis=1)
        return tf.strings.regex_replace(joined, _WORD_MARK, "")

    def lookup(self, pieces: tf.RaggedTensor) -> tf.Tensor:
        """ragged (W, None) piece ids -> (W,) int32 counts."""
        return self.table.lookup(self.keys(pieces))
