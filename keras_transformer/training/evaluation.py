"""Translating a test set with beam search and scoring it: sacreBLEU (with its signature), chrF, and
the tokenized, compound-split BLEU that the paper's table reports.

sacreBLEU scores detokenized output against raw references with its own 13a tokenization: the
figure to compare across papers. The paper's 27.3 / 28.4 are BLEU on tokenized text with
compounds split (tensor2tensor's get_ende_bleu.sh: Moses tokenizer, then "a-b" -> "a ##AT##-##AT## b"),
usually 0.5 to 1 point higher; `tokenized_bleu` reproduces it with sacreBLEU's 13a tokenizer in
place of Moses' and is labelled as such wherever it is printed.
"""
import dataclasses
import functools
import re
from typing import Sequence

import numpy as np
import sacrebleu
import tensorflow as tf
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
from tqdm import tqdm

from keras_transformer.config import EOS_ID, DecodeConfig
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding import mbr
from keras_transformer.export import Translator, max_beam_size_for

_COMPOUND = re.compile(r"(\S)-(\S)")
_TOKENIZE_13A = Tokenizer13a()


class BeamSearchTranslator:
    """Translates lists of sentences with a model in memory, through the graph that is exported.

    It wraps `keras_transformer.export.Translator` (the SavedModel's `serving_default`: in-graph
    SentencePiece, beam search of DecodeConfig, the same source truncation), so the BLEU of an
    evaluation is the BLEU of the served model. Sentences are sorted by length and decoded
    `sentences_per_batch` at a time, then returned in their order.

    Args:
      model: a built Transformer.
      tokenizer: the run's SubwordTokenizer.
      decode_config: beam size, alpha, extra length.
      sentences_per_batch: sentences decoded together.
      translator_class: Translator, or a task's subclass of it (whose `translate` gives its answers).
      precision: None (the model as it is) or the precision of an export (keras_transformer.precision):
        a copy of the model in it translates, as that export would.
    """

    def __init__(self, model, tokenizer: SubwordTokenizer, decode_config: DecodeConfig = DecodeConfig(),
                 sentences_per_batch: int = 64, translator_class=Translator, precision=None):
        self.model = model
        self.tokenizer = tokenizer
        self.decode_config = decode_config
        self.sentences_per_batch = sentences_per_batch
        self.translator = translator_class(model, tokenizer.model_proto, decode_config, precision=precision)

    def source_ids(self, sentences: Sequence[str]) -> list[np.ndarray]:
        """Token ids + EOS of each sentence, cut as the translator cuts them."""
        tokens = self.tokenizer.tokenize(tf.constant(list(sentences), tf.string))
        limit = self.translator.max_source_length - 1
        return [np.append(row[:limit], EOS_ID).astype(np.int32) for row in tokens.numpy()]

    def translate(self, sentences: Sequence[str], progress: bool = False) -> list[str]:
        """Translations of `sentences`, in their order; a progress bar on stderr with `progress`."""
        sentences = list(sentences)
        order = np.argsort([len(sentence) for sentence in sentences], kind="stable")
        translations = [None] * len(sentences)
        starts = range(0, len(order), self.sentences_per_batch)
        for start in tqdm(starts, desc="translating", unit="batch", disable=not progress):
            chosen = order[start:start + self.sentences_per_batch]
            for i, text in zip(chosen, self._translate_batch([sentences[i] for i in chosen])):
                translations[i] = text
        return translations

    def _translate_batch(self, sentences: list[str]) -> list[str]:
        outputs = self.translator.translate(tf.constant(sentences, tf.string))
        return [text.decode("utf-8") for text in outputs["translations"].numpy()]


class MBRTranslator(BeamSearchTranslator):
    """A BeamSearchTranslator whose answer is the minimum-Bayes-risk choice (decoding.mbr) among the
    n-best list of its beam: decode_config.beam_size candidates ranked with its alpha, weighted by
    their beam scores, compared with sacreBLEU's sentence `utility` ("bleu" or "chrf"). Not in the
    paper (its answer is the beam's best); the SavedModel serves the n-best lists (translate_nbest),
    and `pipelines.translate --mbr` makes the same choice among them."""

    def __init__(self, model, tokenizer: SubwordTokenizer, decode_config: DecodeConfig = DecodeConfig(),
                 utility: str = "bleu", sentences_per_batch: int = 64, precision=None):
        mbr.sentence_metric(utility)  # the utility's name checked here
        # translate_nbest serves beams up to max_beam_size: at least the n-best list's.
        translator_class = functools.partial(Translator, max_beam_size=max_beam_size_for(decode_config.beam_size))
        super().__init__(model, tokenizer, decode_config, sentences_per_batch, translator_class, precision)
        self.utility = utility

    def _translate_batch(self, sentences: list[str]) -> list[str]:
        return mbr.choose_among_nbest(self.translator.translate_nbest(
            tf.constant(sentences, tf.string), tf.constant(self.decode_config.beam_size),
            tf.constant(self.decode_config.alpha, tf.float32)), self.utility)


@dataclasses.dataclass(frozen=True)
class Scores:
    """Corpus scores of a set of translations against one reference each."""

    bleu: float
    bleu_signature: str
    chrf: float
    chrf_signature: str
    tokenized_bleu: float
    num_sentences: int

    def report(self, name="test") -> str:
        return (f"{name}: sacreBLEU {self.bleu:.2f} ({self.bleu_signature}); chrF {self.chrf:.2f} "
                f"({self.chrf_signature}); tokenized BLEU with compound splitting (13a tokens, the "
                f"paper's way of counting, not comparable to sacreBLEU) {self.tokenized_bleu:.2f}; "
                f"{self.num_sentences} sentences")


def split_compounds(text: str) -> str:
    """13a tokens with hyphenated compounds split: "Ost-West" -> "Ost ##AT##-##AT## West".

    One left-to-right pass, as tensor2tensor's `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`
    (so "a-b-c" keeps its second hyphen, as in the paper's scoring).
    """
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", _TOKENIZE_13A(text))


def tokenized_bleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> float:
    """BLEU on 13a-tokenized, compound-split text, the way the paper's table counts."""
    metric = sacrebleu.metrics.BLEU(tokenize="none", force=True, lowercase=lowercase)
    return metric.corpus_score([split_compounds(h) for h in hypotheses],
                               [[split_compounds(r) for r in references]]).score


def sacrebleu_scores(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> dict:
    """sacreBLEU and chrF of detokenized hypotheses against raw references, with their signatures:
    {"bleu", "bleu_signature", "chrf", "chrf_signature"}; case-insensitive with `lowercase` (the
    signatures then say case:lc), for a model trained with DataConfig.lowercase."""
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    bleu, chrf = sacrebleu.metrics.BLEU(lowercase=lowercase), sacrebleu.metrics.CHRF(lowercase=lowercase)
    return {"bleu": bleu.corpus_score(hypotheses, [references]).score, "bleu_signature": str(bleu.get_signature()),
            "chrf": chrf.corpus_score(hypotheses, [references]).score, "chrf_signature": str(chrf.get_signature())}


def score(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool = False) -> Scores:
    """sacreBLEU, chrF and tokenized BLEU of detokenized hypotheses against raw references; all three
    case-insensitive with `lowercase`, see sacrebleu_scores."""
    hypotheses, references = list(hypotheses), list(references)
    return Scores(**sacrebleu_scores(hypotheses, references, lowercase),
                  tokenized_bleu=tokenized_bleu(hypotheses, references, lowercase), num_sentences=len(hypotheses))


def validation_scores(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str],
                      lowercase: bool = False) -> dict:
    """The scalars of an evaluation during training: BLEU and chrF."""
    scores = sacrebleu_scores(hypotheses, references, lowercase)
    return {"bleu": scores["bleu"], "chrf": scores["chrf"]}
