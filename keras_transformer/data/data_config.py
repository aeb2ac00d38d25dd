"""DataConfig: which corpus, which vocabulary, and how the input pipeline batches it.

Defaults follow the paper where it says something (section 5.1: WMT14 en-de, a shared BPE vocabulary
of about 37,000 tokens, batches of about 25,000 source and 25,000 target tokens grouped by length);
the rest (maximum length, bucket spacing, shuffle buffer) are the usual tensor2tensor-style choices.
"""
import dataclasses
import json
from typing import Optional

from keras_transformer.config import JsonConfig
from keras_transformer.data.tokenizer import TokenizerSettings


@dataclasses.dataclass(frozen=True)
class DataConfig(JsonConfig):
    """Settings of the corpus, the SentencePiece vocabulary and the tf.data pipeline.

    Fields:
      dataset: a `get_corpus` name (wmt14, numbers, multi30k, newstest, tatoeba) or a local spec.
      reverse: translate the other way (de->en).
      tfds_data_dir: the TFDS data directory for wmt14 (None: TFDS's default).
      vocab_size: requested size of the shared source-target BPE vocabulary.
      tokenizer_sample_size: sentences sampled from train to learn the vocabulary.
      byte_fallback: unknown characters become UTF-8 byte tokens (lossless) rather than UNK.
      max_length: the longest source (tokens + EOS) or target (tokens + BOS/EOS) sequence kept.
      truncate_long_pairs: cut longer pairs down to max_length instead of dropping them.
      tokens_per_batch: the token budget of one batch on one replica, for the source and for the
        target separately: batch size * padded length never exceeds it.
      min_bucket_length, bucket_growth: bucket boundaries are min_bucket_length, then each boundary
        grows by the factor (at least by one token) up to max_length. A pair's bucket is that of its
        longer side; sequences are padded to a boundary, so the model sees few shapes per bucket
        (plus last partial batches).
      separate_padding: each side of a batch is padded to the smallest boundary that holds its own
        longest sequence (a padding choice, not the paper's or anyone's recipe: the model's results
        do not depend on it beyond float rounding). A parse tree is about 2.5 times as long as its
        sentence: padding the sentences to the trees' boundary as well made a GUM-shaped training
        step about 1.3 times as long (README, results). False: both sides to the bucket's boundary
        (S = T), the fewest shapes, for XLA (`--jit-compile` compiles the step once per shape).
      shuffle_buffer_size: pairs in the shuffle buffer of `make_dataset(training=True)`.
      segment_pairs: the training stream (training/data_stream.py) reads an epoch in segments of this
        many pairs, each permuted at random and batched on its own. A restarted run drops the
        segments before its position unread by the tokenizer, so a restart tokenizes at most one
        segment again; the last batch of each bucket in a segment may be partial. A segment of
        250,000 pairs of 37 target tokens took about 25 CPU-seconds to tokenize and batch (README, results).
      stream_regions: a training corpus of local files of more than one segment is read from up to
        this many stretches of consecutive lines at once, one pair from each in turn, cut anew
        every epoch; so every segment mixes pairs from all over the files (e.g. files concatenated
        domain after domain, or sorted ones). 1: the files' order, segment after segment. Each
        stretch starts at its line through the files' line index (training/data_stream.py).
      seed: the shuffle's seed: same seed, same batches. The vocabulary's sample has its own fixed
        seed, so runs that differ only here share it.
      split_seed: the seed of generated (`numbers`) and held-out (`tatoeba`, a local `holdout=V,T`)
        splits, apart from `seed`, so that runs of several seeds are scored on the same validation
        and test pairs. A data_config.json written before this field took its splits from `seed`,
        and reads so (`from_json`).
      num_parallel_calls: tf.data threads for tokenization; -1 lets tf.data tune it.
      subword_dropout: BPE-dropout (Provilkov et al., 2020) on training batches, as SentencePiece
        implements it: each merge is skipped with this probability and not tried again at that
        place, so words are split anew at every epoch. A pair whose pieces then pass max_length is
        dropped from that epoch only. SentencePiece draws the splits from a generator TensorFlow
        cannot seed, so two runs of one configuration (and a run and its resumption) train on
        other splits and differ as runs with other seeds do. 0 (the paper): off.
      subword_dropout_target: BPE-dropout on the target sentences too (True, as Provilkov et al.
        do by default), or on the source sentences only (False; their source-only variant): the
        decoder then learns and outputs the one split of each word that evaluation and the
        export use.
      lowercase: case-fold source and target (not in the paper; off by default). The vocabulary's
        normalizer folds them (NFKC and case folding, SentencePiece's "nmt_nfkc_cf"), so training,
        evaluation and an export's input all fold alike and every translation comes out lowercase;
        BLEU and chrF are then computed lowercased (sacreBLEU's -lc). For comparisons with results
        on lowercased corpora, such as the small-data Multi30k literature.
      bidirectional_epochs: bidirectional training (BiT, Ding et al., EMNLP 2021; not in the paper):
        the training stream's first N epochs hold every pair both ways, source -> target and
        target -> source, with no tag saying which (each epoch then twice as long), and the epochs
        after them the pairs as given. Ding et al. pretrain both ways for a third of the steps and
        train on the given direction after. For a vocabulary and embeddings shared by the two
        languages (the presets'); translation only. 0 (the paper): off.
    """

    dataset: str = "wmt14"
    reverse: bool = False
    tfds_data_dir: Optional[str] = None
    vocab_size: int = 37_000
    tokenizer_sample_size: int = 2_000_000
    byte_fallback: bool = True
    max_length: int = 256
    truncate_long_pairs: bool = False
    tokens_per_batch: int = 25_000
    min_bucket_length: int = 8
    bucket_growth: float = 1.1
    separate_padding: bool = True
    shuffle_buffer_size: int = 100_000
    segment_pairs: int = 250_000
    stream_regions: int = 8
    seed: int = 0
    split_seed: int = 0
    num_parallel_calls: int = -1
    subword_dropout: float = 0.0
    subword_dropout_target: bool = True
    lowercase: bool = False
    bidirectional_epochs: int = 0

    # For a data_config.json written before these fields existed: the values that read the data as
    # those runs did (RunConfigs.check_resumable). Not segment_pairs: the stream before it had no
    # segments, which no value reproduces, so such a run cannot resume.
    LEGACY_VALUES = {"stream_regions": 1, "subword_dropout_target": True, "subword_dropout": 0.0,
                     "lowercase": False, "bidirectional_epochs": 0}
    # Fields a resumed run may change: they shape the batches, not which pairs they hold or in what
    # order, so the data position means the same (RunConfigs.check_resumable).
    RESUMABLE_CHANGES = frozenset({"separate_padding"})

    @classmethod
    def _with_split_seed(cls, values: dict) -> dict:
        """A saved data config from before split_seed drew its splits with its seed."""
        return {"split_seed": values.get("seed", cls.seed), **values}

    @classmethod
    def with_legacy_fields(cls, values: dict) -> dict:
        """A saved data config's values with the fields added since it was written set as the code of
        its time behaved: LEGACY_VALUES, and split_seed equal to its seed."""
        return super().with_legacy_fields(cls._with_split_seed(values))

    @classmethod
    def from_json(cls, text):
        """A data_config.json as written; of a field added since it was written, only split_seed is
        filled in as it was then (its splits are the pairs the run held out)."""
        return cls.from_dict(cls._with_split_seed(json.loads(text)))

    def __post_init__(self):
        positive = ("vocab_size", "tokenizer_sample_size", "tokens_per_batch", "min_bucket_length",
                    "shuffle_buffer_size", "segment_pairs", "stream_regions")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"DataConfig.{name} must be positive, got {getattr(self, name)}")
        if self.max_length < 2:
            raise ValueError(f"DataConfig.max_length={self.max_length} leaves no room for a token "
                             f"and EOS; it must be at least 2")
        if self.tokens_per_batch < self.max_length:
            raise ValueError(f"DataConfig.tokens_per_batch={self.tokens_per_batch} cannot hold one "
                             f"pair of max_length={self.max_length}")
        if self.bucket_growth < 1.0:
            raise ValueError(f"DataConfig.bucket_growth must be >= 1, got {self.bucket_growth}")
        if not 0.0 <= self.subword_dropout < 1.0:
            raise ValueError(f"DataConfig.subword_dropout must be in [0, 1), got {self.subword_dropout}")
        if self.num_parallel_calls == 0 or self.num_parallel_calls < -1:
            raise ValueError(f"DataConfig.num_parallel_calls must be positive or -1 (autotune), "
                             f"got {self.num_parallel_calls}")
        if self.bidirectional_epochs < 0:
            raise ValueError(f"DataConfig.bidirectional_epochs must be >= 0 (0: off), got {self.bidirectional_epochs}")
        if self.bidirectional_epochs and self.dataset.startswith("treebank:"):
            raise ValueError(f"DataConfig.bidirectional_epochs={self.bidirectional_epochs} reads each pair both ways, "
                             f"for translation; a treebank's pairs ({self.dataset!r}) are a sentence and its tree, "
                             f"which do not read the other way")

    def tokenizer_settings(self, corpus_name: str, user_defined_symbols=()) -> TokenizerSettings:
        return TokenizerSettings(vocab_size=self.vocab_size, sample_size=self.tokenizer_sample_size,
                                 byte_fallback=self.byte_fallback, corpus=corpus_name,
                                 user_defined_symbols=tuple(user_defined_symbols), lowercase=self.lowercase)
