"""The tf.data input pipeline: sentence pairs -> token-budget batches the Transformer trains on.

    read (source, target) strings -> [shard] -> shuffle (seeded, train only)
    -> tokenize in-graph (SentencePiece) -> drop or truncate pairs over max_length
    -> source = tokens + [EOS]; decoder input = [BOS] + tokens; decoder target = tokens + [EOS]
    -> group by length into buckets -> batch by a token budget, padded to the bucket boundary
    -> ((source_ids (B, S), target_input_ids (B, T)), target_output_ids (B, T)), int32, 0 = PAD
    -> prefetch

Section 5.1: "Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000
target tokens." Here a pair's bucket is chosen by the longer of its two sides, and a bucket's batch
size is tokens_per_batch // L for its boundary L. Each side of a batch is padded to the smallest
boundary that holds its own longest sequence (DataConfig.separate_padding; so S, T <= L and B * S and
B * T never exceed the budget), or with separate_padding off both to L (S = T = L). Padding to a
boundary rather than to the longest sequence in the batch keeps the number of distinct shapes small
(a few per bucket, plus the partial batch that ends each bucket), which XLA needs.
"""
import dataclasses
from typing import Optional

import numpy as np
import sentencepiece
import tensorflow as tf

from keras_transformer.data.corpora import Corpus
from keras_transformer.data.data_config import DataConfig
from keras_transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer
from keras_transformer.tracing import plain

# Pairs are tokenized, filtered and given their specials this many at a time, with one op per chunk
# instead of one per pair: per-element tf.data work costs microseconds per op, and it adds up.
CHUNK_SIZE = 512


def bucket_boundaries(config: DataConfig) -> list[int]:
    """Inclusive upper lengths of the buckets, ending at max_length: e.g. 8, 9, ..., 17, 18, 19, 20, 22,
    24, ..., 256 for the defaults (growth 1.1, at least one token per step)."""
    boundaries, length = [], config.min_bucket_length
    while length < config.max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * config.bucket_growth))
    boundaries.append(config.max_length)
    return boundaries


def bucket_batch_sizes(config: DataConfig) -> list[int]:
    """Batch size of each bucket: as many sequences of the boundary length as the budget holds."""
    return [config.tokens_per_batch // boundary for boundary in bucket_boundaries(config)]


def _tokenize_chunk(tokenizer: SubwordTokenizer, sources, targets, subword_dropout: float = 0.0,
                    target_dropout: bool = True):
    """(N,) strings, (N,) strings -> (N, None) ragged source tokens, (N, None) ragged target tokens;
    BPE-dropout on the targets too with target_dropout."""
    return (tokenizer.tokenize(sources, subword_dropout),
            tokenizer.tokenize(targets, subword_dropout if target_dropout else 0.0))


def scored_pieces(tokenizer: SubwordTokenizer, corpus: Corpus) -> Optional[np.ndarray]:
    """(V,) bool, the target pieces the loss scores: EOS and `corpus.scored_target_symbols()`; None
    when the corpus scores every piece."""
    symbols = corpus.scored_target_symbols()
    if symbols is None:
        return None
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    ids = [processor.piece_to_id(symbol) for symbol in symbols]
    missing = [symbol for symbol, index in zip(symbols, ids) if processor.id_to_piece(index) != symbol]
    if missing:
        raise ValueError(f"{corpus.name}: the vocabulary has no single piece for the scored target symbols "
                         f"{missing[:5]}{' ...' if len(missing) > 5 else ''}: it was not trained on this corpus")
    scored = np.zeros([tokenizer.vocab_size], bool)
    scored[ids + [EOS_ID]] = True
    return scored


def _encode_chunk(tokenizer: SubwordTokenizer, config: DataConfig, sources, targets, subword_dropout=0.0,
                  scored=None):
    """A chunk of string pairs -> dense (source, target input, target output) rows and bucket ids.

    Rows are padded to the chunk's longest row only; batching pads them to the bucket boundary.
    scored: `scored_pieces`, or None; the target output's other pieces become PAD, which the loss skips.
    """
    source, target = _tokenize_chunk(tokenizer, sources, targets, subword_dropout,
                                     config.subword_dropout_target)  # (N, None) each
    max_tokens = config.max_length - 1  # room for EOS (source, target output) or BOS (target input)
    if config.truncate_long_pairs:
        source, target = source[:, :max_tokens], target[:, :max_tokens]
    else:
        keep = tf.logical_and(source.row_lengths() <= max_tokens, target.row_lengths() <= max_tokens)
        source, target = tf.ragged.boolean_mask(source, keep), tf.ragged.boolean_mask(target, keep)
    num_rows = source.nrows()
    eos, bos = tf.fill([num_rows, 1], EOS_ID), tf.fill([num_rows, 1], BOS_ID)
    source = tf.concat([source, eos], axis=1)                 # (N, S)
    target_input = tf.concat([bos, target], axis=1)           # (N, T) decoder input, shifted right
    target_output = tf.concat([target, eos], axis=1)          # (N, T) decoder target
    if scored is not None:
        target_output = tf.ragged.map_flat_values(
            lambda ids: tf.where(tf.gather(tf.constant(scored), ids), ids, PAD_ID), target_output)
    length = tf.maximum(source.row_lengths(), target_input.row_lengths())
    boundaries = tf.constant(bucket_boundaries(config), tf.int64)
    bucket = tf.searchsorted(boundaries, length, side="left", out_type=tf.int64)  # (N,) first >= length
    return (source.to_tensor(PAD_ID), target_input.to_tensor(PAD_ID),
            target_output.to_tensor(PAD_ID), bucket)


def _bucket_and_batch(rows: tf.data.Dataset, config: DataConfig) -> tf.data.Dataset:
    """Rows -> batches of one bucket each: B = tokens_per_batch // L rows, each side padded to the
    smallest boundary that holds its longest row (to L itself without config.separate_padding)."""
    boundaries = tf.constant(bucket_boundaries(config), tf.int32)
    batch_sizes = tf.constant(bucket_batch_sizes(config), tf.int64)

    def batch_bucket(bucket, window):
        boundary = tf.gather(boundaries, bucket)

        def padded_length(tensor):  # the boundary that holds the longest row of (B, N)
            if not config.separate_padding:
                return boundary
            # At most L: the batch's bucket is that of its longest row on either side.
            longest = tf.reduce_max(tf.reduce_sum(tf.cast(tensor != PAD_ID, tf.int32), axis=1))
            return tf.gather(boundaries, tf.searchsorted(boundaries, longest[None])[0])

        def pad_to_boundary(*tensors):  # each (B, longest row in its chunk)
            def fit(tensor, length):
                tensor = tensor[:, :length]  # only padding lies beyond the length
                return tf.pad(tensor, [[0, 0], [0, length - tf.shape(tensor)[1]]])
            source, target_input, target_output, _ = tensors
            # target_input holds every target row's length (BOS, tokens); target_output may have
            # PAD where the loss skips a piece.
            source_length, target_length = padded_length(source), padded_length(target_input)
            return ((fit(source, source_length), fit(target_input, target_length)),
                    fit(target_output, target_length))

        return window.padded_batch(tf.gather(batch_sizes, bucket),
                                   padding_values=(PAD_ID, PAD_ID, PAD_ID, tf.constant(0, tf.int64))
                                   ).map(plain(pad_to_boundary))

    return rows.group_by_window(key_func=plain(lambda *row: row[3]), reduce_func=plain(batch_bucket),
                                window_size_func=plain(lambda bucket: tf.gather(batch_sizes, bucket)))


def make_dataset(pairs: tf.data.Dataset, tokenizer: SubwordTokenizer, config: DataConfig, *,
                 training: bool, input_context: Optional[tf.distribute.InputContext] = None,
                 subword_dropout: Optional[float] = None, scored: Optional[np.ndarray] = None
                 ) -> tf.data.Dataset:
    """Batches of ((source_ids (B, S), target_input_ids (B, T)), target_output_ids (B, T)).

    Args:
      pairs: (source, target) scalar tf.string pairs, e.g. `corpus.dataset("train")`.
      tokenizer: the run's shared SentencePiece tokenizer.
      config: the pipeline's settings.
      training: shuffle (seeded, reshuffled every epoch); evaluation keeps the corpus order
        within each bucket.
      input_context: under tf.distribute, this input pipeline's share: it reads every
        num_input_pipelines-th pair, and its batches (each within the budget) go to its replicas.
      subword_dropout: BPE-dropout while tokenizing (the targets only with
        config.subword_dropout_target); None: config.subword_dropout when training, else 0
        (evaluation always tokenizes as the exported model does).
      scored: (V,) bool, the target pieces the loss scores (`scored_pieces`); the others are PAD in
        target_output_ids (target_input_ids keeps them). None: all.
    One pass over the result is one epoch: every kept pair exactly once.
    """
    if input_context is not None and input_context.num_input_pipelines > 1:
        pairs = pairs.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if training:
        pairs = pairs.shuffle(config.shuffle_buffer_size, seed=config.seed,
                              reshuffle_each_iteration=True)
    if subword_dropout is None:
        subword_dropout = config.subword_dropout if training else 0.0

    def encode(sources, targets):
        return _encode_chunk(tokenizer, config, sources, targets, subword_dropout, scored)

    rows = (pairs.batch(CHUNK_SIZE)
            .map(plain(encode), num_parallel_calls=config.num_parallel_calls, deterministic=True)
            .unbatch())
    return _bucket_and_batch(rows, config).prefetch(tf.data.AUTOTUNE)


def make_corpus_dataset(corpus: Corpus, split: str, tokenizer: SubwordTokenizer,
                        config: DataConfig, *, training: Optional[bool] = None,
                        input_context: Optional[tf.distribute.InputContext] = None
                        ) -> tf.data.Dataset:
    """`make_dataset` over a corpus split; training defaults to split == "train"."""
    training = split == "train" if training is None else training
    return make_dataset(corpus.dataset(split), tokenizer, config, training=training,
                        input_context=input_context, scored=scored_pieces(tokenizer, corpus))


def make_distributed_dataset(strategy: tf.distribute.Strategy, corpus: Corpus, split: str,
                             tokenizer: SubwordTokenizer, config: DataConfig, *,
                             training: Optional[bool] = None) -> tf.distribute.DistributedDataset:
    """Per-replica batches under `strategy`: every replica gets its own tokens_per_batch budget.

    Each input pipeline (one per worker) reads its shard of the corpus and batches it with the full
    per-replica budget; the strategy deals those batches out to the worker's replicas, so a global
    step covers num_replicas * tokens_per_batch tokens, as 8 GPUs x 25,000 did in the paper.
    """
    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_corpus_dataset(corpus, split, tokenizer, config, training=training,
                                   input_context=input_context)

    return strategy.distribute_datasets_from_function(dataset_fn)


@dataclasses.dataclass(frozen=True)
class PipelineStatistics:
    """What one epoch of the pipeline holds. Ratios compare real tokens to padded tokens."""

    num_pairs: int             # pairs read from the corpus split
    num_over_length: int       # of which longer than max_length: dropped (or truncated)
    num_batches: int
    num_examples: int          # pairs in the batches
    source_tokens: int         # real (non-PAD) tokens, including EOS
    target_tokens: int         # real tokens of the decoder targets, including EOS
    padded_source_tokens: int  # sum over batches of B * S
    padded_target_tokens: int  # sum over batches of B * T
    max_batch_source_tokens: int
    max_batch_target_tokens: int
    num_shapes: int            # distinct (B, S, T) batch shapes
    truncated: bool            # whether over-length pairs were truncated rather than dropped

    @property
    def real_to_padded_ratio(self) -> float:
        return ((self.source_tokens + self.target_tokens)
                / max(1, self.padded_source_tokens + self.padded_target_tokens))

    def summary(self) -> str:
        action = "truncated" if self.truncated else "dropped"
        return (f"{self.num_pairs} pairs, {self.num_over_length} over max length ({action}); "
                f"{self.num_batches} batches, {self.num_shapes} shapes; real/padded tokens "
                f"{self.real_to_padded_ratio:.3f} (source {self.source_tokens}/"
                f"{self.padded_source_tokens}, target {self.target_tokens}/"
                f"{self.padded_target_tokens}); largest batch {self.max_batch_source_tokens} source "
                f"and {self.max_batch_target_tokens} target padded tokens")


def count_over_length(pairs: tf.data.Dataset, tokenizer: SubwordTokenizer, config: DataConfig
                      ) -> tuple[int, int]:
    """(number of pairs, number longer than max_length) of `pairs`, tokenized as the pipeline does."""
    max_tokens = config.max_length - 1

    def count_chunk(sources, targets):
        source, target = _tokenize_chunk(tokenizer, sources, targets)
        over = tf.maximum(source.row_lengths(), target.row_lengths()) > max_tokens
        return tf.stack([tf.size(over, tf.int64), tf.math.count_nonzero(over, dtype=tf.int64)])

    counts = (pairs.batch(CHUNK_SIZE)
              .map(plain(count_chunk), num_parallel_calls=config.num_parallel_calls)
              .reduce(np.zeros(2, np.int64), plain(lambda total, chunk_counts: total + chunk_counts)))
    num_pairs, num_over = counts.numpy().tolist()
    return num_pairs, num_over


def check_some_pair_fits(pairs: tf.data.Dataset, tokenizer: SubwordTokenizer, config: DataConfig, name: str):
    """Raises ValueError if no pair of `pairs` fits config.max_length (pairs are dropped, not
    truncated): training would otherwise wait for a batch for ever. Reads up to the first chunk
    that holds a pair that fits, usually the first one."""
    if config.truncate_long_pairs:
        return
    max_tokens = config.max_length - 1

    def fits(sources, targets):
        source, target = _tokenize_chunk(tokenizer, sources, targets)
        return tf.reduce_any(tf.maximum(source.row_lengths(), target.row_lengths()) <= max_tokens)

    found = pairs.batch(CHUNK_SIZE).map(plain(fits)).filter(plain(lambda fit: fit)).take(1)
    if not list(found):
        raise ValueError(f"{name}: no training pair fits data.max_length={config.max_length}: every one has a "
                         f"source or target of more than {max_tokens} pieces, and such pairs are dropped. Raise "
                         f"data.max_length, or set data.truncate_long_pairs=true to cut them. (Lines end at \\n "
                         f"only: a file whose lines end in a lone \\r reads as one line.)")


def pipeline_statistics(pairs: tf.data.Dataset, tokenizer: SubwordTokenizer, config: DataConfig,
                        *, training: bool = True) -> PipelineStatistics:
    """Runs one epoch of the pipeline over `pairs` and counts pairs, batches and tokens."""
    num_pairs, num_over = count_over_length(pairs, tokenizer, config)
    rows = []  # per batch: B, S, T, real source tokens, real target tokens
    for (source, _), target_output in make_dataset(pairs, tokenizer, config, training=training):
        rows.append((*source.shape, target_output.shape[1], int(tf.math.count_nonzero(source)),
                     int(tf.math.count_nonzero(target_output))))
    sizes = np.array(rows, np.int64).reshape(-1, 5)
    batch, source_length, target_length, real_source, real_target = sizes.T
    padded_source, padded_target = batch * source_length, batch * target_length
    return PipelineStatistics(
        num_pairs=num_pairs, num_over_length=num_over, num_batches=len(rows),
        num_examples=int(batch.sum()), source_tokens=int(real_source.sum()),
        target_tokens=int(real_target.sum()), padded_source_tokens=int(padded_source.sum()),
        padded_target_tokens=int(padded_target.sum()),
        max_batch_source_tokens=int(padded_source.max(initial=0)),
        max_batch_target_tokens=int(padded_target.max(initial=0)),
        num_shapes=len({tuple(row[:3]) for row in rows}), truncated=config.truncate_long_pairs)
