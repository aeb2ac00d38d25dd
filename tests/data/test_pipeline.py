"""The tf.data pipeline: batch format, token budget, exactly-once epochs, seeds, lengths, replicas."""
import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data.data_config import DataConfig
from keras_transformer.data.pipeline import (bucket_batch_sizes, bucket_boundaries, check_some_pair_fits,
                                             count_over_length,
                                             make_corpus_dataset, make_dataset,
                                             make_distributed_dataset, pipeline_statistics)
from keras_transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

SMALL = DataConfig(tokens_per_batch=600, max_length=64, min_bucket_length=4, seed=11)


def _rows(batch):
    """A batch as a list of (source, target_input, target_output) tuples without padding."""
    (source, target_input), target_output = batch
    source, target_input, target_output = (t.numpy() for t in (source, target_input, target_output))
    return [tuple(tuple(int(i) for i in row[row != PAD_ID]) for row in rows)
            for rows in zip(source, target_input, target_output)]


def _expected_rows(corpus, split, tokenizer):
    pairs = list(corpus.pairs(split))
    sources = tokenizer.tokenize(tf.constant([s for s, _ in pairs])).to_list()
    targets = tokenizer.tokenize(tf.constant([t for _, t in pairs])).to_list()
    return [(tuple(s) + (EOS_ID,), (BOS_ID,) + tuple(t), tuple(t) + (EOS_ID,))
            for s, t in zip(sources, targets)]


def _assert_within_budget(batches, config):
    boundaries = set(bucket_boundaries(config))
    for (source, target_input), target_output in batches:
        assert source.shape[0] == target_input.shape[0] == target_output.shape[0]
        assert target_input.shape == target_output.shape
        assert source.shape[0] * source.shape[1] <= config.tokens_per_batch
        assert target_output.shape[0] * target_output.shape[1] <= config.tokens_per_batch
        assert source.shape[1] in boundaries and target_output.shape[1] in boundaries


def test_bucket_boundaries_and_batch_sizes():
    config = DataConfig(max_length=40, min_bucket_length=8, bucket_growth=1.2, tokens_per_batch=1000)
    assert bucket_boundaries(config) == [8, 9, 10, 12, 14, 16, 19, 22, 26, 31, 37, 40]
    assert bucket_batch_sizes(config) == [125, 111, 100, 83, 71, 62, 52, 45, 38, 32, 27, 25]
    assert bucket_boundaries(dataclasses.replace(config, max_length=8)) == [8]


def test_element_format(numbers_corpus, numbers_tokenizer):
    dataset = make_corpus_dataset(numbers_corpus, "train", numbers_tokenizer, SMALL)
    (source_spec, target_input_spec), target_output_spec = dataset.element_spec
    for spec in (source_spec, target_input_spec, target_output_spec):
        assert spec.dtype == tf.int32 and spec.shape.rank == 2
    batch = next(iter(dataset))
    for source, target_input, target_output in _rows(batch):
        assert source[-1] == EOS_ID and EOS_ID not in source[:-1] and BOS_ID not in source
        assert target_input[0] == BOS_ID and target_output[-1] == EOS_ID
        assert target_input[1:] == target_output[:-1]
    # Padding is all at the end of each row.
    (source, _), _ = batch
    lengths = tf.math.count_nonzero(source, axis=1).numpy()
    assert np.all(source.numpy()[np.arange(source.shape[1]) >= lengths[:, None]] == PAD_ID)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_every_pair_exactly_once_per_epoch_within_budget(numbers_corpus, numbers_tokenizer, split):
    dataset = make_corpus_dataset(numbers_corpus, split, numbers_tokenizer, SMALL)
    expected = collections.Counter(_expected_rows(numbers_corpus, split, numbers_tokenizer))
    for _ in range(2):  # a second pass is another full epoch
        batches = list(dataset)
        _assert_within_budget(batches, SMALL)
        assert collections.Counter(row for batch in batches for row in _rows(batch)) == expected


@pytest.mark.parametrize("separate", [True, False])
def test_each_side_is_padded_to_the_boundary_of_its_longest_row(numbers_corpus, numbers_tokenizer, separate):
    """A batch's bucket is that of its longest row on either side; with separate_padding each side is
    padded to the smallest boundary holding its own longest row (a number's English words and
    its German compound differ in length, so the sides do), without it both to the bucket's boundary."""
    config = dataclasses.replace(SMALL, separate_padding=separate)
    boundaries = np.array(bucket_boundaries(config))

    def boundary(length):
        return int(boundaries[boundaries >= length][0])

    batches = list(make_corpus_dataset(numbers_corpus, "train", numbers_tokenizer, config))
    _assert_within_budget(batches, config)
    sides_differ = 0
    for batch in batches:
        (source, target_input), _ = batch
        rows = _rows(batch)
        longest_source, longest_target = max(len(row[0]) for row in rows), max(len(row[1]) for row in rows)
        bucket = boundary(max(longest_source, longest_target))
        if separate:
            assert (source.shape[1], target_input.shape[1]) == (boundary(longest_source), boundary(longest_target))
        else:
            assert source.shape[1] == target_input.shape[1] == bucket
        assert max(source.shape[1], target_input.shape[1]) == bucket
        sides_differ += source.shape[1] != target_input.shape[1]
    assert (sides_differ > 0) == separate, sides_differ


def test_same_seed_same_batches_other_seed_other_order(numbers_corpus, numbers_tokenizer):
    def epochs(config, count=2):
        dataset = make_corpus_dataset(numbers_corpus, "train", numbers_tokenizer, config)
        return [[_rows(batch) for batch in dataset] for _ in range(count)]

    first, again = epochs(SMALL), epochs(SMALL)
    assert first == again
    assert first[0] != first[1]  # reshuffled every epoch, reproducibly
    assert epochs(dataclasses.replace(SMALL, seed=12), count=1)[0] != first[0]


def test_evaluation_keeps_corpus_order_within_buckets(numbers_corpus, numbers_tokenizer):
    dataset = make_corpus_dataset(numbers_corpus, "test", numbers_tokenizer, SMALL)
    expected = _expected_rows(numbers_corpus, "test", numbers_tokenizer)
    order = {row: index for index, row in enumerate(expected)}
    for batch in dataset:
        positions = [order[row] for row in _rows(batch)]
        assert positions == sorted(positions)


def test_over_length_pairs_are_dropped_and_counted(numbers_corpus, numbers_tokenizer):
    config = dataclasses.replace(SMALL, max_length=12, tokens_per_batch=120)
    expected = _expected_rows(numbers_corpus, "validation", numbers_tokenizer)
    kept = [row for row in expected if max(len(row[0]), len(row[1])) <= 12]
    assert 0 < len(kept) < len(expected)
    pairs = numbers_corpus.dataset("validation")
    assert count_over_length(pairs, numbers_tokenizer, config) == (len(expected), len(expected) - len(kept))
    batches = list(make_dataset(pairs, numbers_tokenizer, config, training=True))
    _assert_within_budget(batches, config)
    assert collections.Counter(row for b in batches for row in _rows(b)) == collections.Counter(kept)
    statistics = pipeline_statistics(pairs, numbers_tokenizer, config)
    assert (statistics.num_pairs, statistics.num_over_length, statistics.num_examples) == (
        len(expected), len(expected) - len(kept), len(kept))
    assert "dropped" in statistics.summary()


def test_over_length_pairs_can_be_truncated(numbers_corpus, numbers_tokenizer):
    config = dataclasses.replace(SMALL, max_length=12, tokens_per_batch=120, truncate_long_pairs=True)
    expected = _expected_rows(numbers_corpus, "validation", numbers_tokenizer)
    def cut(row):  # at most 11 tokens, then EOS
        return row[:11] + (EOS_ID,) if len(row) > 12 else row

    truncated = [(cut(source), target_input[:12], cut(target_output))
                 for source, target_input, target_output in expected]
    assert truncated != expected
    batches = list(make_dataset(numbers_corpus.dataset("validation"), numbers_tokenizer, config,
                                training=False))
    _assert_within_budget(batches, config)
    assert collections.Counter(row for b in batches for row in _rows(b)) == collections.Counter(truncated)


def test_multi30k_statistics_with_a_4096_token_budget(multi30k, multi30k_tokenizer):
    config = DataConfig(tokens_per_batch=4_096, vocab_size=8_000)
    statistics = pipeline_statistics(multi30k.dataset("train"), multi30k_tokenizer, config)
    assert (statistics.num_pairs, statistics.num_over_length, statistics.num_examples) == (29_000, 0, 29_000)
    assert statistics.max_batch_source_tokens <= 4_096
    assert statistics.max_batch_target_tokens <= 4_096
    assert statistics.real_to_padded_ratio >= 0.85, statistics.summary()
    # Bucket-boundary shapes: at most two batch sizes (full and last partial) per bucket.
    assert statistics.num_shapes <= 2 * len(bucket_boundaries(config))


def test_each_replica_gets_its_own_budget(numbers_corpus, numbers_tokenizer):
    devices = [device.name for device in tf.config.list_logical_devices("CPU")][:2]
    assert len(devices) == 2, "tests/conftest.py declares 8 logical CPU devices"
    strategy = tf.distribute.MirroredStrategy(devices)
    dataset = make_distributed_dataset(strategy, numbers_corpus, "validation", numbers_tokenizer, SMALL)
    rows = []
    for (source, target_input), target_output in dataset:
        for replica_batch in zip(strategy.experimental_local_results(source),
                                 strategy.experimental_local_results(target_input),
                                 strategy.experimental_local_results(target_output)):
            replica_source, replica_input, replica_output = replica_batch
            if replica_source.shape[0] == 0:
                continue  # the epoch's last step leaves some replicas an empty batch
            _assert_within_budget([((replica_source, replica_input), replica_output)], SMALL)
            rows.extend(_rows(((replica_source, replica_input), replica_output)))
    expected = _expected_rows(numbers_corpus, "validation", numbers_tokenizer)
    assert collections.Counter(rows) == collections.Counter(expected)


def test_data_config_checks_and_json_round_trip():
    config = DataConfig(dataset="numbers", vocab_size=8_000, tokens_per_batch=4_096)
    assert DataConfig.from_json(config.to_json()) == config
    assert config.tokenizer_settings("numbers").vocab_size == 8_000
    with pytest.raises(ValueError, match="cannot hold one pair"):
        DataConfig(tokens_per_batch=100, max_length=256)
    with pytest.raises(ValueError, match="bucket_growth"):
        DataConfig(bucket_growth=0.9)
    for dropout in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"subword_dropout must be in \[0, 1\)"):
            DataConfig(subword_dropout=dropout)
    with pytest.raises(ValueError, match=r"bidirectional_epochs must be >= 0 \(0: off\), got -1"):
        DataConfig(bidirectional_epochs=-1)
    with pytest.raises(ValueError, match="bidirectional_epochs=2 reads each pair both ways, for translation"):
        DataConfig(dataset="treebank:train=t.mrg;validation=d.mrg;test=e.mrg", bidirectional_epochs=2)
    assert DataConfig(dataset="multi30k", bidirectional_epochs=2).bidirectional_epochs == 2
    with pytest.raises(ValueError, match="unknown field"):
        DataConfig.from_dict({"batch_size": 3})


def test_subword_dropout_resplits_training_pairs_only(numbers_corpus, numbers_tokenizer):
    config = dataclasses.replace(SMALL, subword_dropout=0.3)
    expected = _expected_rows(numbers_corpus, "train", numbers_tokenizer)
    texts = collections.Counter(numbers_corpus.pairs("train"))

    def detokenized(rows, column):
        return numbers_tokenizer.detokenize(tf.ragged.constant([list(row[column]) for row in rows])).numpy()

    epochs = []
    for _ in range(2):
        rows = [row for batch in make_corpus_dataset(numbers_corpus, "train", numbers_tokenizer, config)
                for row in _rows(batch)]
        # Still every pair exactly once, and its pieces spell the same text...
        pairs = zip((s.decode() for s in detokenized(rows, 0)), (t.decode() for t in detokenized(rows, 2)))
        assert collections.Counter(pairs) == texts
        # ...but split otherwise than the vocabulary's own tokenization, and anew at every epoch.
        assert len(set(rows) - set(expected)) > len(rows) // 2
        epochs.append(collections.Counter(rows))
    assert epochs[0] != epochs[1]
    # Validation and test are tokenized as the exported model does.
    validation = make_corpus_dataset(numbers_corpus, "validation", numbers_tokenizer, config)
    assert (collections.Counter(row for batch in validation for row in _rows(batch))
            == collections.Counter(_expected_rows(numbers_corpus, "validation", numbers_tokenizer)))


def test_subword_dropout_on_the_source_only(numbers_corpus, numbers_tokenizer):
    config = dataclasses.replace(SMALL, subword_dropout=0.3, subword_dropout_target=False)
    expected = _expected_rows(numbers_corpus, "train", numbers_tokenizer)
    rows = [row for batch in make_corpus_dataset(numbers_corpus, "train", numbers_tokenizer, config)
            for row in _rows(batch)]
    # The targets (decoder input and output) are split as the vocabulary splits them...
    assert (collections.Counter(row[1:] for row in rows)
            == collections.Counter(row[1:] for row in expected))
    # ...the sources are not, though they spell the same sentences.
    assert len({row[0] for row in rows} - {row[0] for row in expected}) > len(rows) // 2
    sources = numbers_tokenizer.detokenize(tf.ragged.constant([list(row[0]) for row in rows])).numpy()
    assert (collections.Counter(s.decode() for s in sources)
            == collections.Counter(s for s, _ in numbers_corpus.pairs("train")))


def test_training_refuses_a_corpus_where_no_pair_fits(numbers_corpus, numbers_tokenizer):
    """The stream drops over-length pairs; with none left it would wait for a batch for ever."""
    pairs = numbers_corpus.dataset("validation")
    check_some_pair_fits(pairs, numbers_tokenizer, dataclasses.replace(SMALL, max_length=12), "numbers")
    too_short = dataclasses.replace(SMALL, max_length=2, tokens_per_batch=120)
    assert count_over_length(pairs, numbers_tokenizer, too_short)[1] == len(list(numbers_corpus.pairs("validation")))
    with pytest.raises(ValueError, match=r"numbers: no training pair fits data.max_length=2: .* more than 1 pieces"):
        check_some_pair_fits(pairs, numbers_tokenizer, too_short, "numbers")
    check_some_pair_fits(pairs, numbers_tokenizer, dataclasses.replace(too_short, truncate_long_pairs=True), "numbers")
