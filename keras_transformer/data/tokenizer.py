"""A shared source-target SentencePiece BPE vocabulary (section 5.1), trained once per run.

The paper encodes WMT14 EN-DE with byte-pair encoding into one vocabulary of about 37,000 tokens
shared by source and target (so one embedding matrix serves encoder, decoder and the softmax). This
module trains such a model with the `sentencepiece` package on a seeded sample of the training
corpus, saves it beside the run, and tokenizes in-graph with `tensorflow_text.SentencepieceTokenizer`
from the same model bytes, so an exported SavedModel tokenizes exactly as training did.

Lossless by default: the text is not normalized (rule "identity", inner whitespace kept as is) and characters
outside the vocabulary fall back to their UTF-8 bytes, so detokenize(tokenize(s)) == s for any text
that does not start with whitespace (SentencePiece drops it) and has no U+2581 "▁" (SentencePiece's
own space mark, which comes back as a space); corpora strip surrounding whitespace for this reason.
With `lowercase` the model case-folds instead (SentencePiece's rule "nmt_nfkc_cf": NFKC, then case
folding), in its normalizer, so the in-graph tokenizer of training and of an export folds alike.
Ids are fixed: PAD_ID=0, UNK_ID=1, BOS_ID=2, EOS_ID=3; pad, bos and eos are control symbols that
detokenize to nothing.
"""
import dataclasses
import io
import json
import logging
import os
import pathlib
import random
from typing import Iterable, Optional

import sentencepiece
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.files import write_bytes_atomically, write_text_atomically

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3

MODEL_FILENAME = "sentencepiece.model"
SETTINGS_FILENAME = "sentencepiece.json"

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TokenizerSettings:
    """How the SentencePiece model is trained; written next to it and checked on reuse.

    Fields:
      vocab_size: the requested shared vocabulary size (37,000 in the base/big recipes). A corpus too
        small for it (such as `numbers`) gets a smaller vocabulary instead of an error: read the real
        size from `SubwordTokenizer.vocab_size`.
      sample_size: at most this many sentences (source and target together) are sampled from the
        training split to learn the merges.
      seed: the sample's seed.
      byte_fallback: spell characters outside the vocabulary as UTF-8 byte tokens (256 extra ids)
        instead of UNK_ID, which keeps tokenization lossless.
      character_coverage: the share of characters that get their own piece; the rest use bytes.
      corpus: the corpus name, recorded to catch a vocabulary reused for another corpus.
      user_defined_symbols: strings that are always one piece each, wherever they occur (a task's
        own tokens, such as the brackets and labels of linearized trees); empty for translation.
      lowercase: the model normalizes text with NFKC and case folding before it splits it, so
        "Ein Mann" and "ein mann" get the same pieces and detokenized pieces are lowercase.
    """

    vocab_size: int = 37_000
    sample_size: int = 2_000_000
    seed: int = 0
    byte_fallback: bool = True
    character_coverage: float = 0.9995
    corpus: str = ""
    user_defined_symbols: tuple = ()
    lowercase: bool = False

    @property
    def normalization_rule(self) -> str:
        return "nmt_nfkc_cf" if self.lowercase else "identity"

    def to_dict(self):
        """As written to sentencepiece.json (no user_defined_symbols key when there are none and no
        lowercase key when it is off, as before those fields existed)."""
        values = dataclasses.asdict(self)
        values["user_defined_symbols"] = list(self.user_defined_symbols)
        for field, default in (("user_defined_symbols", []), ("lowercase", False)):
            if values[field] == default:
                del values[field]
        return values


def sample_sentences(sentences: Iterable[str], sample_size: int, seed: int) -> list[str]:
    """A uniform sample of at most `sample_size` sentences (reservoir sampling, seeded)."""
    rng = random.Random(seed)
    sample = []
    for index, sentence in enumerate(sentences):
        if index < sample_size:
            sample.append(sentence)
        else:
            slot = rng.randint(0, index)
            if slot < sample_size:
                sample[slot] = sentence
    return sample


def train_sentencepiece(sentences: Iterable[str], settings: TokenizerSettings) -> bytes:
    """Trains the shared BPE model on a sample of `sentences`; returns the serialized model proto."""
    sample = sample_sentences(sentences, settings.sample_size, settings.seed)
    if not sample:
        raise ValueError("cannot train a SentencePiece model on an empty corpus")
    sentencepiece.set_random_generator_seed(settings.seed)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sample), model_writer=model, model_type="bpe",
        vocab_size=settings.vocab_size, hard_vocab_limit=False,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        normalization_rule_name=settings.normalization_rule, remove_extra_whitespaces=False,
        byte_fallback=settings.byte_fallback, character_coverage=settings.character_coverage,
        user_defined_symbols=list(settings.user_defined_symbols), input_sentence_size=0,
        num_threads=os.cpu_count() or 1, minloglevel=2)
    return model.getvalue()


class SubwordTokenizer(tf.Module):
    """In-graph SentencePiece tokenization from a serialized model proto.

    tokenize(texts): tf.string of any shape -> int32 ids, a RaggedTensor with one more (ragged)
      dimension; no BOS/EOS added (the pipeline adds them where the model needs them).
    detokenize(ids): int32 ids (B, T), dense or ragged -> tf.string (B,); PAD/BOS/EOS ids vanish.

    Both build the SentencePiece op inside the graph that calls them (a tf.data function, a
    tf.function, a SavedModel signature), with the model proto as a constant of that graph.
    tensorflow_text's model resource is owned by its kernel: created eagerly, it dies whenever
    TensorFlow clears its eager caches (tf.random.set_seed and keras.backend.clear_session do),
    breaking every dataset that captured it. Built in-graph it lives as long as that graph.
    """

    def __init__(self, model_proto: bytes, name: str = "subword_tokenizer"):
        super().__init__(name=name)
        processor = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        ids = (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id())
        if ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ValueError(f"SentencePiece model has pad/unk/bos/eos ids {ids}; this project needs "
                             f"{(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}")
        self.model_proto = model_proto
        self.vocab_size = processor.get_piece_size()

    @classmethod
    def from_file(cls, path: os.PathLike) -> "SubwordTokenizer":
        return cls(pathlib.Path(path).read_bytes())

    def _sentencepiece(self, dropout: float = 0.0) -> tf_text.SentencepieceTokenizer:
        # BPE-dropout: with nbest_size -1 SentencePiece samples a split, alpha being the merge dropout
        return tf_text.SentencepieceTokenizer(model=self.model_proto, out_type=tf.int32,
                                              nbest_size=-1 if dropout else 0, alpha=dropout or 1.0)

    @tf.function(reduce_retracing=True, autograph=False)
    def tokenize(self, texts, dropout: float = 0.0) -> tf.RaggedTensor:
        """(N,) strings -> (N, None) piece ids. With `dropout` > 0 each BPE merge is skipped with that
        probability (BPE-dropout, Provilkov et al., 2020), so a word is split differently at every
        call: for training batches only; SentencePiece draws from its own generator, which
        TensorFlow cannot seed."""
        return self._sentencepiece(dropout).tokenize(texts)

    @tf.function(reduce_retracing=True, autograph=False)
    def detokenize(self, ids) -> tf.Tensor:
        return self._sentencepiece().detokenize(ids)


def load_or_train_tokenizer(directory: os.PathLike, sentences: Optional[Iterable[str]],
                            settings: TokenizerSettings) -> SubwordTokenizer:
    """The run's tokenizer: `directory/sentencepiece.model` if present, else trained and saved there.

    Args:
      directory: the run directory; the model and its settings (JSON) are written there.
      sentences: training sentences, e.g. `corpus.training_sentences()`; only read when training.
      settings: how to train; a reused model must have been trained with the same settings.
    """
    directory = pathlib.Path(directory)
    model_path, settings_path = directory / MODEL_FILENAME, directory / SETTINGS_FILENAME
    if model_path.exists():
        if settings_path.exists():
            saved = json.loads(settings_path.read_text())
            if saved != settings.to_dict():
                raise ValueError(f"{model_path} was trained with {saved}, not {settings.to_dict()}"
                                 f"; use another run directory or delete the model to retrain it")
        logger.info("reusing SentencePiece model %s", model_path)
        return SubwordTokenizer.from_file(model_path)
    if sentences is None:
        raise FileNotFoundError(f"no SentencePiece model at {model_path} and no sentences to train one")
    model_proto = train_sentencepiece(sentences, settings)
    directory.mkdir(parents=True, exist_ok=True)
    # The settings first, then the model (each whole): a model on disk always has its settings.
    write_text_atomically(settings_path, json.dumps(settings.to_dict(), indent=2, sort_keys=True))
    write_bytes_atomically(model_path, model_proto)  # never leave a half-written model to be reused
    tokenizer = SubwordTokenizer(model_proto)
    logger.info("trained SentencePiece model %s: %d pieces", model_path, tokenizer.vocab_size)
    return tokenizer
