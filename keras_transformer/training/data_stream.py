"""The training batches as an endless stream of epochs that a restarted run can re-enter exactly and fast.

An epoch is read in segments of config.segment_pairs consecutive pairs of the epoch's pair stream.
Segment k of epoch e is permuted at random by stateless random ops seeded with (seed, e, k), then
tokenized, bucketed and batched by `keras_transformer.data.make_dataset` on its own: a segment's
batches depend on its pairs only (its last batch of each bucket may be partial), and the order is a
pure function of (seed, e): nothing depends on how many epochs the process has seen.

The epoch's pair stream: a corpus of one segment or less is read in its own order, and so is one
whose pairs are made in Python (a treebank: each region would parse the trees before it). A larger
one of local files is cut into R = min(config.stream_regions, its segments) regions
of consecutive lines, read side by side, one pair from each region in turn, so every segment holds
pairs from all over the files, not one stretch of them: files concatenated domain after domain
(Europarl, then CommonCrawl, ...) or sorted files would otherwise give segments, and the steps
trained on them, one domain or one end of the sort at a time. The files are taken as a circle that
starts, each epoch, at a pair drawn with (seed, e), and cut there into the R regions. A region
starts reading at its first pair (`Corpus.pairs_from`: in a file with no skipped line, pair i is
line i, read from the chunk of the file's line index that holds it, text_files.line_index; in a
file with skipped lines, from the block of lines that holds it, FileCounts.pairs_block), so the
lines before it are not read.

With DataConfig.bidirectional_epochs = N > 0, the pair stream of an epoch e < N is each pair of
that order followed by its reverse (target, source), twice as many pairs, cut into segments as any;
a segment that starts at an odd pair of it starts with a reverse.

Each batch carries its position, (e, k, index of the batch in segment k), and the training step
records the position of the last batch it consumed in a DataPosition, saved with every checkpoint.
A run that restarts from a checkpoint rebuilds the stream from epoch e, skips the pairs of the k
segments before the position (each region skips the pairs of it those segments held; not read
where the line index reaches them, never tokenized), then skips the batches of segment k already consumed.
So a restart tokenizes at most one segment again, wherever the position is in the epoch, and sees
exactly the batches the uninterrupted run would have seen next.

With DataConfig.subword_dropout > 0 (BPE-dropout) the pairs and their order are still that function
of (seed, e, k), but their pieces are not: SentencePiece samples from its own generator, which
TensorFlow cannot seed. A restart then skips b batches of segment k split anew, which hold about,
not exactly, the pairs the first split had there; under several workers each worker splits the
stream its own way, so a pair may be trained on twice or not at all in an epoch. Exact replay needs
subword_dropout 0, the paper's setting.

Under MultiWorkerMirroredStrategy every worker reads the whole stream and keeps its part: element i
goes to global replica i mod R (R replicas in all, worker w holding replicas w*r .. w*r + r - 1), so
across the workers every element is consumed once, by the replica a single machine with R devices
would give it. The stream, and the position recorded, are thus a function of the run's configs and
R only, not of how the replicas are spread over machines: a 2 x 2 run equals a 1 x 4 run. The
price is that every worker tokenizes the whole stream (not 1/W of it): about 172,000 target tokens
a second on 2 CPU cores (README), against the paper's 62,500 for 8 P100s, so 2 or 3 such machines.
Sharding the sentence pairs instead would give each worker its own batches and its own epochs of
different lengths, which one (epoch, batch) position cannot describe.

Elements, for the training step (`TrainingTransformer.train_step`):
    {"batch": ((source_ids (B, S), target_input_ids (B, T)), target_output_ids (B, T)),
     "position": int64 (3,) [epoch, segment, batch index in the segment]}
or, with gradient accumulation over K micro-batches (see `pack_micro_batches`),
    {"micro_batches": {"source_ids", "target_input_ids", "target_output_ids": int32 (K, budget),
                       "shapes": int32 (K, 3) [B, S, T]},
     "position": int64 (3,) of the last micro-batch}
"""
from typing import Optional

import tensorflow as tf

from keras_transformer.data import Corpus, DataConfig, SubwordTokenizer, make_dataset
from keras_transformer.data.pipeline import scored_pieces
from keras_transformer.tracing import plain

# A position as one int64 key that orders positions: ((epoch * 2^24 + segment) * 2^24 + batch + 1).
_FIELD = 2 ** 24


class DataPosition(tf.Module):
    """Where the training stream stands: the epoch, its segment, and how many of the segment's
    batches were consumed.

    All three are int64 variables, created under the strategy's scope, written by the training step
    (the first replica's value wins; every replica writes the same) and saved in the checkpoint.
    """

    def __init__(self, name="data_position"):
        super().__init__(name=name)
        aggregation = tf.VariableAggregation.ONLY_FIRST_REPLICA
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch", aggregation=aggregation)
        self.segment = tf.Variable(0, dtype=tf.int64, trainable=False, name="segment", aggregation=aggregation)
        self.batch = tf.Variable(0, dtype=tf.int64, trainable=False, name="batch", aggregation=aggregation)

    def record(self, positions):
        """Records that the batches at `positions` (..., 3) [epoch, segment, index] were consumed.

        Under a strategy the replicas consumed different batches; the position after the step is
        after the last of them, gathered from all replicas.
        """
        keys = tf.reshape((positions[..., 0] * _FIELD + positions[..., 1]) * _FIELD + positions[..., 2] + 1, [-1])
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            keys = context.all_gather(keys, axis=0)
        key = tf.reduce_max(keys)
        self.epoch.assign(key // (_FIELD * _FIELD))
        self.segment.assign(key // _FIELD % _FIELD)
        self.batch.assign(key % _FIELD)

    def value(self):
        """(epoch, segment, consumed batches of the segment) as Python ints."""
        return int(self.epoch.numpy()), int(self.segment.numpy()), int(self.batch.numpy())


def _permuted(sources, targets, seed):
    """(N,) sources and targets in an order drawn by stateless random ops from `seed` (2,)."""
    order = tf.argsort(tf.random.stateless_uniform(tf.shape(sources), seed=seed))
    return tf.gather(sources, order), tf.gather(targets, order)


def stream_regions(num_pairs: Optional[int], config: DataConfig) -> int:
    """How many regions an epoch's pairs are read from side by side (see the module docstring)."""
    if num_pairs is None:
        return 1
    return max(1, min(config.stream_regions, -(-num_pairs // config.segment_pairs)))


def _region_progress(consumed, lengths: list[int]):
    """After `consumed` (an int64 scalar tensor, fewer than sum(lengths)) pairs of the regions'
    round robin, read one pair from each region in turn (region 0 first) while it has any:
    ((R,) pairs read from each region, the region the next pair comes from). The lengths differ by
    at most 1."""
    regions, shortest = len(lengths), min(lengths)
    longer = [length > shortest for length in lengths]
    # The longer regions' ranks among themselves (their last pairs come after all full rounds).
    ranks = [sum(longer[:region]) if longer[region] else regions for region in range(regions)]
    indices = tf.range(regions, dtype=tf.int64)
    in_rounds = tf.minimum(consumed, regions * shortest)
    read = in_rounds // regions + tf.cast(indices < in_rounds % regions, tf.int64)
    after_rounds = consumed - in_rounds  # pairs read from the longer regions' last ones
    read += tf.cast(tf.constant(ranks, tf.int64) < after_rounds, tf.int64)
    longer_regions = tf.constant([region for region in range(regions) if longer[region]] or [0], tf.int64)
    following = tf.where(consumed < regions * shortest, consumed % regions,
                         tf.gather(longer_regions, tf.minimum(after_rounds, tf.size(longer_regions, tf.int64) - 1)))
    return read, following


def _mixed_pairs(pairs_from, num_pairs: int, regions: int, seed, consumed) -> tf.data.Dataset:
    """The epoch's pairs (num_pairs of them, `pairs_from(i)` those from pair i on) as a circle that
    starts at a pair drawn with `seed` (2,), cut into `regions` stretches of consecutive pairs, read
    side by side, one pair from each in turn; from pair `consumed` (int64 scalar) of that order on.
    Each stretch skips the pairs of it already read, so none is made twice."""
    bounds = [region * num_pairs // regions for region in range(regions + 1)]
    lengths = [end - start for start, end in zip(bounds[:-1], bounds[1:])]
    rotation = tf.random.stateless_uniform([], seed=seed, minval=None, maxval=None, dtype=tf.int64)
    starts = tf.math.floormod(tf.constant(bounds[:-1], tf.int64) + tf.math.floormod(rotation, num_pairs),
                              num_pairs)
    read, following = _region_progress(consumed, lengths)
    lengths = tf.constant(lengths, tf.int64)

    def region_pairs(region):
        position = tf.math.floormod(starts[region] + read[region], num_pairs)
        left = lengths[region] - read[region]
        before_end = tf.minimum(left, num_pairs - position)  # the rest wraps around to the first pairs
        return pairs_from(position).take(before_end).concatenate(pairs_from(tf.constant(0, tf.int64))
                                                                  .take(left - before_end))

    # The round robin goes on from the region whose turn it is.
    order = tf.roll(tf.range(regions, dtype=tf.int64), shift=-tf.cast(following, tf.int32), axis=0)
    return tf.data.Dataset.from_tensor_slices(order).interleave(
        plain(region_pairs), cycle_length=regions, block_length=1, num_parallel_calls=regions, deterministic=True)


def both_ways(pairs: tf.data.Dataset, ways) -> tf.data.Dataset:
    """`pairs` of (source, target) strings with, when `ways` (an int64 scalar) is 2, each pair followed
    by its reverse, (target, source): DataConfig.bidirectional_epochs. 1: the pairs as they are."""
    def interleave(sources, targets):
        forward, backward = tf.stack([sources, targets], axis=1), tf.stack([targets, sources], axis=1)  # (n, 2)
        return tf.reshape(forward[:, :ways], [-1]), tf.reshape(backward[:, :ways], [-1])

    return pairs.batch(1024).map(plain(interleave)).unbatch()


def _epoch_batches(pairs_from, num_pairs: Optional[int], tokenizer: SubwordTokenizer,
                   config: DataConfig, epoch, first_segment, skip, scored) -> tf.data.Dataset:
    """Epoch `epoch` (an int64 scalar tensor) from batch `skip` of segment `first_segment` on: its
    batches, each with its position; scored as for make_dataset. pairs_from: Corpus.pairs_from's
    function; num_pairs: how many pairs the split holds, or None if unknown (read in its order)."""
    epoch_seed = tf.stack([tf.constant(config.seed, tf.int64), tf.cast(epoch, tf.int64)])
    # The segments before first_segment are not tokenized nor batched: their pairs are skipped.
    first_pair = first_segment * config.segment_pairs
    # In a bidirectional epoch the epoch's pairs are each of the corpus's pairs, then it reversed.
    ways = (tf.where(epoch < config.bidirectional_epochs, tf.constant(2, tf.int64), tf.constant(1, tf.int64))
            if config.bidirectional_epochs else 1)
    first_read = first_pair // ways
    regions = stream_regions(num_pairs, config)
    if regions > 1:
        # Segments fold in their index (< 2^24); the circle's start takes another stream.
        pairs = _mixed_pairs(pairs_from, num_pairs, regions,
                             tf.random.experimental.stateless_fold_in(epoch_seed, _FIELD), first_read)
    else:
        pairs = pairs_from(first_read)
    if config.bidirectional_epochs:
        pairs = both_ways(pairs, ways).skip(first_pair - first_read * ways)

    def segment_batches(segment, block):
        shuffled = tf.data.Dataset.from_tensor_slices(
            _permuted(*block, tf.random.experimental.stateless_fold_in(epoch_seed, segment)))
        batches = make_dataset(shuffled, tokenizer, config, training=False,  # every worker: all of it
                               subword_dropout=config.subword_dropout, scored=scored)
        batches = batches.enumerate().map(
            plain(lambda index, batch: {"batch": batch, "position": tf.stack([epoch, segment, index])}))
        return batches.skip(tf.where(tf.equal(segment, first_segment), skip, tf.constant(0, tf.int64)))

    segments = pairs.batch(config.segment_pairs)
    return segments.enumerate(start=first_segment).flat_map(plain(segment_batches))


def training_stream(corpus: Corpus, tokenizer: SubwordTokenizer, config: DataConfig, *, start_epoch: int = 0,
                    start_segment: int = 0, start_batch: int = 0, accumulate_steps: int = 1,
                    input_context: Optional[tf.distribute.InputContext] = None) -> tf.data.Dataset:
    """The endless stream of training elements from a DataPosition's value on; see the module doc.

    Args:
      corpus, tokenizer, config: what `make_dataset` needs; config.tokens_per_batch is the budget
        of one micro-batch on one replica.
      start_epoch, start_segment, start_batch: a DataPosition's value: the first batch read is batch
        start_batch of segment start_segment of epoch start_epoch.
      accumulate_steps: K > 1 packs K consecutive batches into one element.
      input_context: this input pipeline's share under tf.distribute: with several workers, the
        elements of this worker's replicas (see the module docstring).
    """
    pairs_from = corpus.pairs_from("train")
    num_pairs = corpus.num_pairs("train") if corpus.regions_readable else None
    scored = scored_pieces(tokenizer, corpus)
    first_epoch = tf.constant(start_epoch, tf.int64)
    first_segment, skip = tf.constant(start_segment, tf.int64), tf.constant(start_batch, tf.int64)
    zero = tf.constant(0, tf.int64)

    def epoch_fn(epoch):
        resumed = tf.equal(epoch, first_epoch)
        return _epoch_batches(pairs_from, num_pairs, tokenizer, config, epoch, tf.where(resumed, first_segment, zero),
                              tf.where(resumed, skip, zero), scored)

    stream = tf.data.Dataset.range(start_epoch, tf.int64.max).flat_map(plain(epoch_fn))
    if accumulate_steps > 1:
        stream = pack_micro_batches(stream, accumulate_steps, config.tokens_per_batch)
    if input_context is not None and input_context.num_input_pipelines > 1:
        stream = worker_share(stream, input_context.num_input_pipelines, input_context.input_pipeline_id,
                              input_context.num_replicas_in_sync // input_context.num_input_pipelines)
    return stream.prefetch(tf.data.AUTOTUNE).with_options(_without_autotune_model())


def _without_autotune_model() -> tf.data.Options:
    """tf.data options without the autotuning model's thread. With it (TF 2.21), destroying an
    iterator that has run for a while waits for that thread's next optimization round: at the end
    of every model.fit call on the stream the process sat idle, 36 s after 200 steps of the README's
    first command (51 s of training). Without it, parallel maps use one thread per core and prefetch
    tunes its own buffer (prefetch's legacy autotuning): the Multi30k stream of small_data gave
    about 170 batches a second either way, the same batches in the same order."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return options


def worker_share(stream: tf.data.Dataset, num_workers: int, worker: int, replicas_per_worker: int
                 ) -> tf.data.Dataset:
    """The elements of `stream` for the replicas of `worker`: element i goes to global replica
    i mod (num_workers * replicas_per_worker), and worker w holds replicas w * replicas_per_worker on."""
    def mine(index, _):
        return tf.equal(index // replicas_per_worker % num_workers, worker)

    return stream.enumerate().filter(plain(mine)).map(plain(lambda _, element: element))


def pack_micro_batches(stream: tf.data.Dataset, accumulate_steps: int, budget: int) -> tf.data.Dataset:
    """K consecutive batches as one element of fixed shape: each (B, S) source and (B, T) target
    flattened into a row of `budget` tokens (B * S and B * T <= budget by construction of the
    pipeline), with [B, S, T] beside them.

    The micro-batches keep their own shapes (each its own bucket) and padding costs nothing in the
    step, which reshapes row k back to (B_k, S_k) and (B_k, T_k) before running the model on it.
    Each side of a pipeline's batch has its own length (S != T with DataConfig.separate_padding).
    """
    def flatten(element):
        (source, target_input), target_output = element["batch"]
        def row(tensor):  # (B, L) -> (budget,)
            flat = tf.reshape(tensor, [-1])
            return tf.pad(flat, [[0, budget - tf.size(flat)]])
        shapes = tf.concat([tf.shape(source), tf.shape(target_output)[1:]], axis=0)  # [B, S, T]
        return {"source_ids": row(source), "target_input_ids": row(target_input),
                "target_output_ids": row(target_output), "shapes": shapes, "position": element["position"]}

    def regroup(packed):
        position = packed.pop("position")[-1]
        return {"micro_batches": packed, "position": position}

    return stream.map(plain(flatten)).batch(accumulate_steps, drop_remainder=True).map(plain(regroup))


def unpack_micro_batch(micro_batches, index):
    """Micro-batch `index` of a packed element: ((source (B, S), target input (B, T)), target output (B, T))."""
    batch_size, source_length, target_length = tf.unstack(micro_batches["shapes"][index])

    def unflatten(name, length):
        return tf.reshape(micro_batches[name][index, :batch_size * length], [batch_size, length])

    return ((unflatten("source_ids", source_length), unflatten("target_input_ids", target_length)),
            unflatten("target_output_ids", target_length))
