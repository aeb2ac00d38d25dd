"""The training stream: re-entered at any position, it goes on exactly as the uninterrupted stream did.

A streamed local corpus of 600 pairs in segments of 128 pairs (5 segments an epoch, the last one
short), read over more than two epochs, restarted after every consumed batch.
"""
import collections
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import DataConfig, LocalParallelCorpus, NumbersCorpus
from keras_transformer.data.tokenizer import TokenizerSettings, load_or_train_tokenizer
from keras_transformer.training.data_stream import DataPosition, training_stream

NUM_PAIRS = 600
CONFIG = DataConfig(dataset="local", vocab_size=300, tokens_per_batch=256, max_length=64, segment_pairs=128,
                    seed=5)


@pytest.fixture(scope="module")
def corpus_and_tokenizer(tmp_path_factory):
    directory = tmp_path_factory.mktemp("stream")
    pairs = list(NumbersCorpus(num_train=NUM_PAIRS, num_validation=2, num_test=2, seed=3).pairs("train"))
    tsv = directory / "train.tsv"
    tsv.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    corpus = LocalParallelCorpus({"train": tsv})
    tokenizer = load_or_train_tokenizer(directory, corpus.training_sentences(),
                                        TokenizerSettings(vocab_size=300, corpus="stream"))
    return corpus, tokenizer


def _elements(stream, count=None, until=None):
    """The first `count` elements of `stream`, or those before position `until`, as (position, arrays)."""
    elements = []
    for element in stream:
        position = tuple(element["position"].numpy().tolist())
        if len(elements) == count or (until is not None and position >= until):
            break
        elements.append((position, [tensor.numpy() for tensor in (*element["batch"][0], element["batch"][1])]))
    return elements


def test_each_epoch_reads_every_pair_once_in_segments_and_in_another_order(corpus_and_tokenizer):
    corpus, tokenizer = corpus_and_tokenizer
    elements = _elements(training_stream(corpus, tokenizer, CONFIG), until=(2, 0, 0))
    epochs = {}
    for (epoch, segment, _), (source, _, _) in elements:
        epochs.setdefault(epoch, []).append((segment, source))
    assert sorted(epochs) == [0, 1]
    for epoch in (0, 1):
        assert sorted({segment for segment, _ in epochs[epoch]}) == [0, 1, 2, 3, 4]
        sources = [tuple(row[row > 0]) for _, source in epochs[epoch] for row in source]
        assert len(sources) == NUM_PAIRS
    first, second = ([tuple(row[row > 0]) for _, source in epochs[epoch] for row in source] for epoch in (0, 1))
    assert sorted(first) == sorted(second) and first != second
    indices = [position for position, _ in elements]
    assert indices == sorted(indices) and len(set(indices)) == len(indices)


def _restart_after(corpus, tokenizer, config, expected, cuts):
    """Restarts the stream after each of `cuts` consumed elements of `expected` (the uninterrupted
    stream's) and checks that it goes on with the same 3 batches at the same positions."""
    positions = [position for position, _ in expected]
    assert len(set(cuts)) == len(cuts) and max(cuts) + 3 <= len(expected)
    for consumed in cuts:
        position = DataPosition()
        position.record(np.array(positions[consumed - 1], np.int64))
        epoch, segment, batch = position.value()
        restarted = training_stream(corpus, tokenizer, config, start_epoch=epoch, start_segment=segment,
                                    start_batch=batch)
        for (got_position, got), (want_position, want) in zip(_elements(restarted, 3), expected[consumed:]):
            assert got_position == want_position
            for got_tensor, want_tensor in zip(got, want):
                np.testing.assert_array_equal(got_tensor, want_tensor)


def test_a_restart_at_a_recorded_position_continues_the_stream_exactly(corpus_and_tokenizer):
    corpus, tokenizer = corpus_and_tokenizer
    expected = _elements(training_stream(corpus, tokenizer, CONFIG), until=(1, 3, 5))
    positions = [position for position, _ in expected]
    # Restart after: the first batch; the last batch of segment 1 (the next is segment 2's first); a batch
    # inside the short last segment; the last batch of epoch 0; a batch inside segment 3 of epoch 1.
    _restart_after(corpus, tokenizer, CONFIG, expected,
                   [1, positions.index((0, 2, 0)), positions.index((0, 4, 1)) + 1, positions.index((1, 0, 0)),
                    positions.index((1, 3, 0)) + 2])


def _texts(tokenizer, ids):
    """(B, L) ids -> the B texts, without padding and EOS."""
    return [text.decode() for text in tokenizer.detokenize(tf.ragged.constant([list(row[row > 0][:-1])
                                                                              for row in ids])).numpy()]


# Segments of an odd number of pairs: a bidirectional epoch's segment 1 starts between a pair and its reverse.
BOTH_WAYS = dataclasses.replace(CONFIG, bidirectional_epochs=1, segment_pairs=127)


def test_bidirectional_epochs_hold_every_pair_both_ways_and_later_epochs_the_pairs_as_given(corpus_and_tokenizer):
    corpus, tokenizer = corpus_and_tokenizer
    given = collections.Counter(corpus.pairs("train"))
    epochs = {0: collections.Counter(), 1: collections.Counter()}
    for (epoch, _, _), (source, _, target) in _elements(training_stream(corpus, tokenizer, BOTH_WAYS), until=(2, 0, 0)):
        epochs[epoch].update(zip(_texts(tokenizer, source), _texts(tokenizer, target)))
    assert epochs[0] == given + collections.Counter({(target, source): n for (source, target), n in given.items()})
    assert epochs[1] == given
    # Without the option, epoch 0 holds each pair once.
    plain = _elements(training_stream(corpus, tokenizer, dataclasses.replace(BOTH_WAYS, bidirectional_epochs=0)),
                      until=(1, 0, 0))
    assert sum(len(source) for _, (source, _, _) in plain) == NUM_PAIRS


def test_a_restart_inside_or_after_the_bidirectional_epochs_continues_the_stream_exactly(corpus_and_tokenizer):
    corpus, tokenizer = corpus_and_tokenizer
    expected = _elements(training_stream(corpus, tokenizer, BOTH_WAYS), until=(1, 1, 0))
    positions = [position for position, _ in expected]
    assert max(segment for epoch, segment, _ in positions if epoch == 0) == 9  # 1,200 pairs in segments of 127
    # Restart after: segment 0 (segment 1 starts at the reverse of pair 63); a batch inside segment 5;
    # the last batch of the bidirectional epoch (the next epoch holds the pairs as given).
    _restart_after(corpus, tokenizer, BOTH_WAYS, expected,
                   [positions.index((0, 1, 0)), positions.index((0, 5, 1)) + 1, positions.index((1, 0, 0))])


def test_subword_dropout_splits_the_streamed_pairs_anew(corpus_and_tokenizer):
    corpus, tokenizer = corpus_and_tokenizer
    plain = _elements(training_stream(corpus, tokenizer, CONFIG), until=(1, 0, 0))
    # Room for any split: the longest source has 70 characters, and a split drawn at random (by
    # SentencePiece's own generator, which no seed reaches) can pass CONFIG's 64 tokens, which drops the pair.
    dropped = _elements(training_stream(corpus, tokenizer, dataclasses.replace(CONFIG, subword_dropout=0.3,
                                                                               max_length=128)),
                        until=(1, 0, 0))

    def sources(elements):
        return [tuple(row[row > 0][:-1]) for _, (source, _, _) in elements for row in source]  # without EOS

    assert len(sources(dropped)) == NUM_PAIRS  # still every pair once an epoch
    texts = tokenizer.detokenize(tf.ragged.constant([list(row) for row in sources(dropped)])).numpy()
    assert sorted(texts) == sorted(source.encode() for source, _ in corpus.pairs("train"))
    assert len(set(sources(dropped)) - set(sources(plain))) > NUM_PAIRS // 2


def test_the_stream_has_no_autotuning_model_thread(corpus_and_tokenizer):
    """Its iterator must be destroyed at once at the end of each model.fit call: with tf.data's
    autotuning model, the README's first command sat idle 36 s there (data_stream._without_autotune_model)."""
    corpus, tokenizer = corpus_and_tokenizer
    for accumulate_steps in (1, 4):
        stream = training_stream(corpus, tokenizer, CONFIG, accumulate_steps=accumulate_steps)
        assert stream.options().autotune.enabled is False


def _segment_lines(corpus, tokenizer, config, until):
    """{(epoch, segment): [line index of each source in the file]} for the stream before `until`."""
    lines = {source.encode(): index for index, (source, _) in enumerate(corpus.pairs("train"))}
    assert len(lines) == NUM_PAIRS  # every source names its line
    segments = {}
    for (epoch, segment, _), (source, _, _) in _elements(training_stream(corpus, tokenizer, config), until=until):
        rows = [list(row[row > 0][:-1]) for row in source]  # without EOS
        texts = tokenizer.detokenize(tf.ragged.constant(rows)).numpy()
        segments.setdefault((epoch, segment), []).extend(lines[text] for text in texts)
    return segments


def test_segments_mix_pairs_from_all_over_the_files(corpus_and_tokenizer):
    """600 pairs in segments of 128: 5 regions of 120 lines, read one pair from each in turn. The
    regions are arcs of the files taken as a circle, so each 120-line block of the file meets every
    segment as often as a region does."""
    corpus, tokenizer = corpus_and_tokenizer
    segments = _segment_lines(corpus, tokenizer, CONFIG, until=(2, 0, 0))
    assert sorted(segments) == [(epoch, segment) for epoch in (0, 1) for segment in range(5)]
    for (epoch, segment), lines in segments.items():
        per_region = collections.Counter(line // 120 for line in lines)
        # Round robin over 5 regions: a full segment holds 25 or 26 pairs of each, the last (88) 17 or 18.
        wanted = (25, 26) if segment < 4 else (17, 18)
        assert sorted(per_region) == [0, 1, 2, 3, 4], (epoch, segment, per_region)
        assert all(wanted[0] <= count <= wanted[1] for count in per_region.values()), (epoch, segment, per_region)
    for epoch in (0, 1):
        assert sorted(line for segment in range(5) for line in segments[epoch, segment]) == list(range(NUM_PAIRS))
    # Each region starts at a line drawn anew every epoch: segment 0 holds other pairs in epoch 1.
    assert set(segments[0, 0]) != set(segments[1, 0])


def test_one_region_reads_the_files_in_their_order(corpus_and_tokenizer):
    corpus, tokenizer = corpus_and_tokenizer
    segments = _segment_lines(corpus, tokenizer, dataclasses.replace(CONFIG, stream_regions=1), until=(1, 0, 0))
    for segment in range(5):
        assert sorted(segments[0, segment]) == list(range(128 * segment, min(NUM_PAIRS, 128 * (segment + 1))))


@pytest.mark.parametrize("num_pairs, regions", [(23, 5), (600, 5), (17, 8), (9, 2)])
def test_the_regions_round_robin_goes_on_exactly_from_any_pair(num_pairs, regions):
    """Pairs as numbers: from pair m on, the mixed order is the whole order's tail, for every m,
    with regions of unequal lengths (23 pairs in 5: 4, 5, 4, 5, 5) and a circle that wraps."""
    from keras_transformer.training.data_stream import _mixed_pairs

    def pairs_from(start):
        return tf.data.Dataset.range(num_pairs).skip(start)

    def mixed(consumed, seed):
        return [int(x) for x in _mixed_pairs(pairs_from, num_pairs, regions, tf.constant(seed, tf.int64),
                                             tf.constant(consumed, tf.int64))]

    for seed in ([1, 2], [3, 4]):
        whole = mixed(0, seed)
        assert sorted(whole) == list(range(num_pairs)) and whole != list(range(num_pairs))
        for consumed in range(1, num_pairs, 1 if num_pairs < 100 else 41):
            assert mixed(consumed, seed) == whole[consumed:], (seed, consumed)
