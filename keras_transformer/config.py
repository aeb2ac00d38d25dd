"""Configurations: the model (TransformerConfig and its presets), training and decoding.

Defaults are the paper's (Vaswani et al., 2017, Table 3 and sections 5-6). Every deviation from the
paper is a named field, documented where it is defined. Variants come from `dataclasses.replace`:

    base = TransformerConfig.from_preset("base")
    row_b = dataclasses.replace(base, d_k=16)          # Table 3 row (B)
    row_e = dataclasses.replace(base, positional="learned")  # Table 3 row (E)
"""
import dataclasses
import json
import math
import numbers
from typing import Optional

# Special token ids, fixed across the project (the SentencePiece model is trained with these ids).
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
NUM_SPECIAL_TOKENS = 4

POSITIONAL_KINDS = ("sinusoidal", "learned")
# TransformerConfig.span_loss: the span parser's loss on its spans.
SPAN_LOSSES = ("local", "hinge")

# The largest length-penalty exponent decoding takes: the GNMT penalty ((5 + length) / 6) ** alpha
# stays finite in float32 at every length a preset allows (about 1e23 at 1,324 tokens), where at
# alpha 30 it is already inf at about 128 tokens (and every score -0.0).
MAX_ALPHA = 10.0


def _require(condition, message):
    if not condition:
        raise ValueError(message)


def _finite_real(value) -> bool:
    """A real number (int or float, not a bool), neither infinite nor NaN."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


class JsonConfig:
    """Configs are written as JSON next to checkpoints and exports, and read back from there."""

    def to_dict(self):
        return dataclasses.asdict(self)

    def to_json(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, values):
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        _require(not unknown, f"{cls.__name__}: unknown field(s) {unknown}; known fields: {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))

    @classmethod
    def with_legacy_fields(cls, values):
        """A saved config's values, with each field added since it was written set to the value that
        does what the code did then (a class's LEGACY_VALUES)."""
        return {**getattr(cls, "LEGACY_VALUES", {}), **values}


@dataclasses.dataclass(frozen=True)
class TransformerConfig(JsonConfig):
    """The model's hyper-parameters, named as in the paper (section 3, Table 3).

    Fields:
      vocab_size: V, the shared source-target vocabulary (37,000 BPE tokens for WMT14 EN-DE).
      num_layers: N, layers in each of the encoder and decoder stacks (see decoder_layers).
      d_model: width of every sub-layer output and of the embeddings.
      d_ff: inner width of the position-wise feed-forward network.
      num_heads: h, attention heads.
      d_k, d_v: per-head key/query and value widths; None means d_model / h (the paper's choice;
        Table 3 rows (A) and (B) set them explicitly).
      dropout_rate: P_drop, applied to each sub-layer output before the residual add and to the sum
        of embeddings and positional encodings.
      label_smoothing: eps_ls.
      max_length: the longest sequence (positions) the model accepts.
      layer_norm_epsilon: epsilon of every LayerNorm (the paper does not state it; 1e-6 as in the
        authors' tensor2tensor code).

    Deviations from the paper, off by default:
      positional: "sinusoidal" (the paper) or "learned" (Table 3 row (E)).
      norm_first: pre-norm, x + Sublayer(LayerNorm(x)), with a final LayerNorm on each stack; the
        paper uses post-norm, LayerNorm(x + Sublayer(x)).
      tie_embeddings: True shares one matrix between the source embedding, the target embedding
        and the pre-softmax projection (the paper, section 3.4); False gives each its own.
      attention_dropout_rate: dropout on the attention weights (the paper has none).
      relu_dropout_rate: dropout after the ReLU of the feed-forward network (the paper has none).
      word_dropout_rate: dropout of whole tokens (the paper has none): in training, each token's
        embedding vector, on the source and on the decoder's input, is zeroed with this probability
        (the others scaled by 1 / (1 - rate)) before its positional encoding is added, so the model
        learns to do without any one token. The "dropout of entire words" of Sennrich et al. (WMT
        2016, Edinburgh's systems), here of subword pieces; a regularizer of low-resource recipes.
      layer_drop_rate: LayerDrop (Fan et al., ICLR 2020, "Reducing Transformer Depth on Demand with
        Structured Dropout"; the paper has none): in training, each layer of the encoder and of the
        decoder is skipped whole, with this probability, drawn anew for every batch (and on every
        replica), its input passed on unchanged; inference runs every layer, unscaled, as fairseq's
        `--encoder-layerdrop` and `--decoder-layerdrop` do. A skipped layer costs no compute, so a
        stack of N layers trains at about the cost of N * (1 - rate) of them. A training call of the
        decoder then returns no attention weights.
      decoder_layers: layers in the decoder stack, the encoder keeping num_layers; None (the
        paper) gives both num_layers. Kasai et al. (ICLR 2021, "Deep Encoder, Shallow Decoder")
        report faster decoding at similar translation quality; on GUM parsing, 6 + 1 layers scored
        well below 3 + 3 (README, Parsing).
      aligned_decoder: the decoder's input at each target position also gets the encoder's output
        at the source piece that the target has copied last (nothing before its first copy). For a
        task whose targets copy the source's pieces in order between tokens of its own (a parser's
        words between its tree tokens), so that the decoder reads the word it is at instead of
        finding it by attention. A target token is taken for a copy when it is the source's next
        piece not copied yet (PAD, BOS and EOS never are): matched in order, so a tree token that
        is also a word (the tag "." of the word ".") counts as the copy it matches.
      aligned_next: with aligned_decoder, the decoder's input also gets a learned projection
        (d_model x d_model, no bias) of the encoder's output at the next source piece not copied
        yet (the source's EOS once all are copied): with each word before its tag,
        the word after the one it tags, which a depth label (parsing.depth_labels) is about too.
      rdrop_alpha: R-Drop (Liang et al., NeurIPS 2021, "R-Drop: Regularized Dropout for Neural
        Networks"), 0 (off, the paper) or its weight alpha > 0: each training batch goes through the
        model twice in one pass (its rows stacked twice, so the dropout masks differ), and the loss
        is the mean of the two passes' label-smoothed cross-entropies plus alpha / 2 times the mean
        over real target tokens of (KL(P1 || P2) + KL(P2 || P1)) / 2. That is half of fairseq's
        label_smoothed_cross_entropy_with_rdrop at the same alpha, so an alpha weighs the KL against
        the cross-entropy as there; it is also the training loss Keras reports. A step costs about
        twice the compute of one without it (2.4 times the time of a `small_data` step on 2 CPU
        cores, README). Needs dropout (some rate above 0): without it the two passes are the same.
      span_tag_loss_weight: the span parser's (parsing.span_model) weight of its part-of-speech
        tags' cross-entropy against its spans' in the loss; 1 (the default) adds them as they are.
        A sentence of n words has n tag terms and n (n + 1) / 2 span terms, so the tags get a small
        share of the encoder's gradient; Kitaev et al. (ACL 2019, benepar) weigh their tag loss by
        5. Only a span parser takes another value.
      span_char_filters: the span parser's character features (parsing.span_model), 0 (off) or the
        filters of its character CNN: each word's characters (its pieces' text, SentencePiece's
        normalization applied; the first and last 8 of a longer word) are embedded, convolved (width
        3, ReLU) and max-pooled, and a projection of the result is added to the embedding of each of
        the word's pieces before the encoder, so that a word the vocabulary splits (a rare one) is
        read by its spelling too: its suffix, its capitals, its digits. The character-level word
        representations of Kitaev and Klein (2018), there a character LSTM; Ma and Hovy (ACL 2016)
        tag with a CNN such as this one. Only a span parser takes another value.
      span_word_unk_rate: the span parser's unknown-word replacement (parsing.span_model), 0 (off)
        or a probability in (0, 1): in training, each word of a sentence is read by the encoder as
        UNK pieces with this probability (all of its pieces, its character features kept, since they
        come from its real pieces), so the parser learns to tag and bracket a word from its context
        and its spelling, as it must for a word that training never showed it. Kitaev and Klein
        (2018) replace a training word by UNK with probability 1 / (1 + its count); with
        SentencePiece pieces the rate here is the same for every word (span_word_unk_alpha: theirs).
        Only a span parser takes another value.
      span_word_unk_alpha: the span parser's frequency-based unknown words (parsing.span_model,
        parsing.word_counts), 0 (off) or alpha > 0: in training, each word is read as UNK pieces
        (its character features kept) with probability alpha / (alpha + its count in the train
        split), Kitaev and Klein's (2018) replacement with their alpha = 1: a word seen once is UNK
        half the time, one seen 99 times 1% of it, so the rare words, the most like those training
        never showed, are the ones the parser learns to read from their spelling and context. Not
        with span_word_unk_rate. Only a span parser takes another value.
      span_loss: the span parser's (parsing.span_model) loss on its spans: "local" (the default),
        the cross-entropy of every span's label on its own, as Teng and Zhang (2018) train theirs;
        or "hinge", the tree-level margin loss of Kitaev and Klein (2018) and Stern et al. (2017):
        per sentence, max(0, max over trees T of [s(T) + Hamming(T, gold)] - s(gold)), where s(T)
        sums its labelled spans' scores (each a label's logit minus the no-constituent logit) and
        the Hamming loss counts the spans whose label (no constituent included) differs from the
        gold tree's; the maximizing tree comes from the CKY the parser decodes with, run on the
        logits plus 1 for every wrong label. The tags keep their cross-entropy either way; parsing
        reads the same scores (CKY compares logit differences, which a softmax leaves as they are).
        Only a span parser takes another value.
      span_partitioned: the span parser's encoder factored into content and position, as Kitaev
        and Klein (ACL 2018) factor theirs: False (the default, the paper's encoder) or True. Its
        input is the pieces' embeddings (with the character features) in the first d_model / 2
        and the positional encoding in the other half, side by side instead of added; every
        layer's attention and feed-forward network treat the two halves with their own weights
        (block-diagonal kernels, layers.attention.MultiHeadAttention's partitions), so position
        mixes with content only through the attention weights, each head's dot products summing
        those of its content and position shares (d_k / 2 each). Half the multiply-adds of the
        encoder's projections and FFNs at the same d_model. d_model, d_ff, d_k and d_v must be
        even. Only a span parser takes another value.
    """

    # For a model_config.json written before these fields existed: the values that build the model
    # those runs built (each field's default, which has never changed), so that such a run resumes
    # (RunConfigs.check_resumable). A field added later goes here too (tests/training/test_run_config.py).
    LEGACY_VALUES = {"word_dropout_rate": 0.0, "layer_drop_rate": 0.0, "decoder_layers": None,
                     "aligned_decoder": False, "aligned_next": False, "rdrop_alpha": 0.0,
                     "span_tag_loss_weight": 1.0, "span_char_filters": 0, "span_word_unk_rate": 0.0,
                     "span_loss": "local", "span_partitioned": False, "span_word_unk_alpha": 0.0}

    vocab_size: int = 37000
    num_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    d_k: Optional[int] = None
    d_v: Optional[int] = None
    dropout_rate: float = 0.1
    label_smoothing: float = 0.1
    max_length: int = 1024
    layer_norm_epsilon: float = 1e-6
    positional: str = "sinusoidal"
    norm_first: bool = False
    tie_embeddings: bool = True
    attention_dropout_rate: float = 0.0
    relu_dropout_rate: float = 0.0
    word_dropout_rate: float = 0.0
    layer_drop_rate: float = 0.0
    decoder_layers: Optional[int] = None
    aligned_decoder: bool = False
    aligned_next: bool = False
    rdrop_alpha: float = 0.0
    span_tag_loss_weight: float = 1.0
    span_char_filters: int = 0
    span_word_unk_rate: float = 0.0
    span_word_unk_alpha: float = 0.0
    span_loss: str = "local"
    span_partitioned: bool = False

    def __post_init__(self):
        for name in ("vocab_size", "num_layers", "d_model", "d_ff", "num_heads", "max_length"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value > 0,
                     f"TransformerConfig.{name} must be a positive integer; got {value!r}")
        _require(self.vocab_size > NUM_SPECIAL_TOKENS,
                 f"TransformerConfig.vocab_size={self.vocab_size} leaves no room for real tokens: it must "
                 f"be larger than the {NUM_SPECIAL_TOKENS} special tokens (pad, unk, bos, eos)")
        if self.d_k is None or self.d_v is None:
            _require(self.d_model % self.num_heads == 0,
                     f"TransformerConfig: d_model={self.d_model} is not divisible by num_heads="
                     f"{self.num_heads}; choose divisible values or set d_k and d_v explicitly")
        for name in ("d_k", "d_v", "decoder_layers"):
            value = getattr(self, name)
            _require(value is None or (isinstance(value, int) and value > 0),
                     f"TransformerConfig.{name} must be None or a positive integer; got {value!r}")
        for name in ("dropout_rate", "label_smoothing", "attention_dropout_rate", "relu_dropout_rate",
                     "word_dropout_rate", "span_word_unk_rate", "layer_drop_rate"):
            value = getattr(self, name)
            _require(0.0 <= value < 1.0, f"TransformerConfig.{name} must be in [0, 1); got {value!r}")
        _require(isinstance(self.rdrop_alpha, (int, float)) and math.isfinite(self.rdrop_alpha)
                 and self.rdrop_alpha >= 0,
                 f"TransformerConfig.rdrop_alpha must be a finite number >= 0 (0: off); got {self.rdrop_alpha!r}")
        _require(self.rdrop_alpha == 0 or max(self.dropout_rate, self.attention_dropout_rate,
                                               self.relu_dropout_rate, self.word_dropout_rate,
                                               self.layer_drop_rate) > 0,
                 f"TransformerConfig.rdrop_alpha={self.rdrop_alpha} compares two dropout passes of each "
                 "batch, but every dropout rate is 0, so the passes are the same: set dropout_rate "
                 "(or rdrop_alpha=0)")
        alpha = self.span_word_unk_alpha
        _require(_finite_real(alpha) and alpha >= 0,
                 f"TransformerConfig.span_word_unk_alpha must be a finite number >= 0 (0: off); got {alpha!r}")
        _require(not (alpha and self.span_word_unk_rate),
                 f"TransformerConfig: span_word_unk_rate={self.span_word_unk_rate} and span_word_unk_alpha={alpha} "
                 "are two ways of drawing a span parser's unknown words: set one of them")
        weight = self.span_tag_loss_weight
        _require(_finite_real(weight) and weight > 0,
                 f"TransformerConfig.span_tag_loss_weight must be a finite number > 0; got {weight!r}")
        filters = self.span_char_filters
        _require(isinstance(filters, int) and not isinstance(filters, bool) and filters >= 0,
                 f"TransformerConfig.span_char_filters must be an integer >= 0 (0: off); got {filters!r}")
        _require(self.span_loss in SPAN_LOSSES,
                 f"TransformerConfig.span_loss must be one of {SPAN_LOSSES}; got {self.span_loss!r}")
        _require(isinstance(self.span_partitioned, bool),
                 f"TransformerConfig.span_partitioned must be True or False; got {self.span_partitioned!r}")
        if self.span_partitioned:
            odd = {name: getattr(self, name) for name in ("d_model", "d_ff", "key_dim", "value_dim")
                   if getattr(self, name) % 2}
            _require(not odd, f"TransformerConfig.span_partitioned halves d_model, d_ff, d_k and d_v: they must be "
                              f"even; got {odd}")
        _require(self.aligned_decoder or not self.aligned_next,
                 "TransformerConfig.aligned_next reads the source piece after the aligned one: it needs "
                 "aligned_decoder=True")
        _require(self.positional in POSITIONAL_KINDS,
                 f"TransformerConfig.positional must be one of {POSITIONAL_KINDS}; got {self.positional!r}")

    @property
    def num_decoder_layers(self):
        """decoder_layers, resolved."""
        return self.decoder_layers if self.decoder_layers is not None else self.num_layers

    @property
    def key_dim(self):
        """d_k, resolved."""
        return self.d_k if self.d_k is not None else self.d_model // self.num_heads

    @property
    def value_dim(self):
        """d_v, resolved."""
        return self.d_v if self.d_v is not None else self.d_model // self.num_heads

    @classmethod
    def from_preset(cls, name, **overrides):
        """A preset (`tiny`, `small`, `base`, `big`) with some fields replaced."""
        _require(name in PRESETS, f"unknown preset {name!r}; known presets: {sorted(PRESETS)}")
        return dataclasses.replace(PRESETS[name], **overrides)


PRESETS = {
    # Table 3, first row, and "Transformer (big)".
    "base": TransformerConfig(),
    "big": TransformerConfig(d_model=1024, d_ff=4096, num_heads=16, dropout_rate=0.3),
    # A small-data model (Multi30k-sized corpora) that learns within an hour on 2 CPU cores.
    "small": TransformerConfig(vocab_size=8000, num_layers=3, d_model=256, d_ff=1024, num_heads=4),
    # Multi30k-sized corpora (about 30k pairs) in an hour on 2 CPU cores: `small` with dropout 0.3
    # (and a cooldown, TRAIN_PRESETS), chosen on Multi30k val (README, Results) over
    # `small_data_wu2021` and `small`.
    "small_data": TransformerConfig(vocab_size=8000, num_layers=3, d_model=256, d_ff=1024, num_heads=4,
                                    dropout_rate=0.3),
    # The text-only Transformer of Wu et al. (ACL 2021, "Good for Misconceived Reasons") for
    # Multi30k: 4 + 4 layers, d_model 128, FFN 256, 4 heads, dropout 0.3.
    "small_data_wu2021": TransformerConfig(vocab_size=8000, num_layers=4, d_model=128, d_ff=256, num_heads=4,
                                           dropout_rate=0.3),
    # Small enough to train in seconds on a CPU: for tests and the offline quick start.
    "tiny": TransformerConfig(vocab_size=1000, num_layers=2, d_model=64, d_ff=128, num_heads=4,
                              max_length=256),
    # English constituency parsing (section 6.3): 4 layers, d_model 1024, the rest as base; 16K
    # tokens (WSJ only). Output trees are long: 1024 positions hold a 300-word sentence's tree.
    "parsing": TransformerConfig(vocab_size=16000, num_layers=4, d_model=1024),
    # Parsing a GUM-sized treebank on 2 CPU cores within an hour, with dropout 0.3 (chosen on GUM dev
    # over the base model's 0.1, README); and a tiny one for tests.
    "parsing_small": TransformerConfig(vocab_size=8000, num_layers=3, d_model=256, d_ff=1024, num_heads=4,
                                       dropout_rate=0.3),
    "parsing_tiny": TransformerConfig(vocab_size=1000, num_layers=2, d_model=64, d_ff=128, num_heads=4,
                                      max_length=512),
}

# Table 3 of the paper: each row's changes from base, and the paper's parameter count (millions;
# None where the paper prints none). The README's table and tests/test_config.py are built from it.
TABLE3_ROWS = {
    "base": ({}, 65),
    "A: h=1": (dict(num_heads=1, d_k=512, d_v=512), None),
    "A: h=4": (dict(num_heads=4, d_k=128, d_v=128), None),
    "A: h=16": (dict(num_heads=16, d_k=32, d_v=32), None),
    "A: h=32": (dict(num_heads=32, d_k=16, d_v=16), None),
    "B: d_k=16": (dict(d_k=16), 58),
    "B: d_k=32": (dict(d_k=32), 60),
    "C: N=2": (dict(num_layers=2), 36),
    "C: N=4": (dict(num_layers=4), 50),
    "C: N=8": (dict(num_layers=8), 80),
    "C: d_model=256": (dict(d_model=256, d_k=32, d_v=32), 28),
    "C: d_model=1024": (dict(d_model=1024, d_k=128, d_v=128), 168),
    "C: d_ff=1024": (dict(d_ff=1024), 53),
    "C: d_ff=4096": (dict(d_ff=4096), 90),
    "D: P_drop=0.0": (dict(dropout_rate=0.0), None),
    "D: P_drop=0.2": (dict(dropout_rate=0.2), None),
    "D: eps_ls=0.0": (dict(label_smoothing=0.0), None),
    "D: eps_ls=0.2": (dict(label_smoothing=0.2), None),
    "E: learned positions": (dict(positional="learned"), None),
    "big": (dict(d_model=1024, d_ff=4096, num_heads=16, dropout_rate=0.3), 213),
}


# Which checkpoints the final model averages: the last ones (the paper's) or the best by validation loss.
AVERAGED_CHECKPOINTS = ("last", "best")


@dataclasses.dataclass(frozen=True)
class TrainConfig(JsonConfig):
    """Training settings (section 5): Adam with the paper's betas and the warm-up schedule.

    checkpoints_to_average and average (section 6.1): the final model is the average of
    checkpoints_to_average checkpoints, the last ones ("last", the paper's) or the best ones by
    validation loss ("best", kept by RunConfig.keep_best_checkpoints; not in the paper).

    peak_learning_rate (not in the paper; None: the paper's d_model^-0.5 * warmup_steps^-0.5):
    the schedule keeps the paper's shape, scaled so that its peak, at warmup_steps, is this value
    (fairseq's inverse_sqrt schedule with --lr).

    cooldown_fraction (not in the paper; 0: the paper's schedule): over the last fraction of the
    run the learning rate falls linearly to 0, as in warm-up, stable, decay schedules. The run is
    train_steps long, or shorter when RunConfig.max_train_minutes stops it first: the cooldown then
    starts with that fraction of the minutes left and ends where the steps are expected to end.
    A model trained with a fixed budget gets its best weights at the end of it, not a model still
    learning at a high rate.
    """

    train_steps: int = 100_000
    warmup_steps: int = 4000
    adam_beta_1: float = 0.9
    adam_beta_2: float = 0.98
    adam_epsilon: float = 1e-9
    tokens_per_batch: int = 25_000
    checkpoints_to_average: int = 5
    average: str = "last"
    peak_learning_rate: Optional[float] = None
    cooldown_fraction: float = 0.0

    def __post_init__(self):
        _require(isinstance(self.cooldown_fraction, (int, float)) and 0 <= self.cooldown_fraction < 1,
                 f"TrainConfig.cooldown_fraction must be a number in [0, 1); got {self.cooldown_fraction!r}")
        _require(self.peak_learning_rate is None or (isinstance(self.peak_learning_rate, (int, float))
                                                     and 0 < self.peak_learning_rate < 1),
                 f"TrainConfig.peak_learning_rate must be None (the paper's) or a number in (0, 1); "
                 f"got {self.peak_learning_rate!r}")
        for name in ("train_steps", "warmup_steps", "tokens_per_batch", "checkpoints_to_average"):
            value = getattr(self, name)
            _require(isinstance(value, int) and value > 0,
                     f"TrainConfig.{name} must be a positive integer; got {value!r}")
        _require(self.average in AVERAGED_CHECKPOINTS,
                 f"TrainConfig.average must be one of {AVERAGED_CHECKPOINTS}; got {self.average!r}")


TRAIN_PRESETS = {
    "base": TrainConfig(),
    "big": TrainConfig(train_steps=300_000, checkpoints_to_average=20),
    "small": TrainConfig(train_steps=20_000, warmup_steps=1000, tokens_per_batch=4096, checkpoints_to_average=5),
    # Steps of 2,048 tokens, and the learning rate cooled down to 0 over the last quarter of the run
    # (of train_steps, or of the time budget that ends it first): each chosen on Multi30k val
    # (README, Results).
    "small_data": TrainConfig(train_steps=40_000, warmup_steps=1000, tokens_per_batch=2048, checkpoints_to_average=5,
                              cooldown_fraction=0.25),
    # Wu et al.'s recipe: 8,000 updates of 2 x 4,096 tokens (2 GPUs), 2,000 warm-up steps to a peak
    # of 0.005, the last 10 checkpoints averaged.
    "small_data_wu2021": TrainConfig(train_steps=8000, warmup_steps=2000, tokens_per_batch=8192,
                                     peak_learning_rate=0.005, checkpoints_to_average=10),
    "tiny": TrainConfig(train_steps=1000, warmup_steps=400, tokens_per_batch=4096, checkpoints_to_average=3),
    "parsing": TrainConfig(),
    # small_data's two changes (steps of 2,048 tokens, the learning rate cooled down to 0 over the
    # last quarter of the run): 2.1 dev F1 above the paper's schedule on GUM in 60 minutes (README).
    "parsing_small": TrainConfig(train_steps=20_000, warmup_steps=1000, tokens_per_batch=2048,
                                 checkpoints_to_average=5, cooldown_fraction=0.25),
    "parsing_tiny": TrainConfig(train_steps=600, warmup_steps=200, tokens_per_batch=2048, checkpoints_to_average=3),
}


@dataclasses.dataclass(frozen=True)
class DecodeConfig(JsonConfig):
    """Decoding settings (section 6.1): beam 4, length penalty alpha 0.6, max length input + 50.

    parallel_groups (not in the paper; 1 by default; the results do not depend on it): decode the
    sentences of a batch in this many groups side by side, see Transformer.decoding_step_fn. It
    pays off with one core's worth of intra-op threads per group, e.g. on 2 cores with 2 groups,
    TF Serving run with --tensorflow_intra_op_parallelism=1 --tensorflow_inter_op_parallelism=2.

    transposed_kernels (not in the paper; the results do not depend on it beyond float rounding):
    True or False pins how a decoding step lays out its matrix products, see
    Transformer.decoding_step_fn; None (the default) chooses by the CPU that traces the decoder.
    An export keeps the choice made when it was written.
    """

    beam_size: int = 4
    alpha: float = 0.6
    extra_length: int = 50
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    parallel_groups: int = 1
    transposed_kernels: Optional[bool] = None

    def __post_init__(self):
        _require(isinstance(self.beam_size, int) and self.beam_size >= 1,
                 f"DecodeConfig.beam_size must be an integer >= 1; got {self.beam_size!r}")
        _require(_finite_real(self.alpha) and 0 <= self.alpha <= MAX_ALPHA,
                 f"DecodeConfig.alpha must be a number in [0, {MAX_ALPHA:g}]; got {self.alpha!r}")
        _require(self.extra_length >= 1, f"DecodeConfig.extra_length must be >= 1; got {self.extra_length!r}")
        _require(isinstance(self.parallel_groups, int) and self.parallel_groups >= 1,
                 f"DecodeConfig.parallel_groups must be an integer >= 1; got {self.parallel_groups!r}")
        _require(self.transposed_kernels in (None, True, False),
                 f"DecodeConfig.transposed_kernels must be true, false or null; got {self.transposed_kernels!r}")
