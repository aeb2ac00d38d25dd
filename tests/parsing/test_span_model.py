"""The span parser's model: word_pieces points at each word's pieces (and source_word_positions at
the same from the training stream's ids), the gold trees read from target ids (also where a word is
spelled as a tag token), the loss on them, a sentence's scores do not depend on the sentences padded
beside it, and a tiny model learns the toy treebank's trees, which spans.best_spans then rebuilds."""
import collections
import dataclasses

import keras
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.data.tokenizer import BOS_ID, EOS_ID, UNK_ID, SubwordTokenizer, TokenizerSettings, train_sentencepiece
from keras_transformer.parsing import read_treebank
from keras_transformer.parsing.evalb import evalb
from keras_transformer.parsing.corpus import TreebankCorpus
from keras_transformer.parsing.span_charts import gold_span_labels
from keras_transformer.layers.positional import positional_layer
from keras_transformer.model import Transformer
from keras_transformer.optimizers import Adam
from keras_transformer.parsing.span_model import (CHAR_IDS, WORD_CHARS, SpanParserLoss, SpanParserModel, SpanTargets,
                                                  TrainingSpanParser, piece_character_table, source_word_positions,
                                                  span_parser_loss, word_characters, word_pieces)
from keras_transformer.precision import model_in_precision, set_dtype_policy
from keras_transformer.parsing.span_parser import SpanParser, read_constituent_bias, write_constituent_bias
from keras_transformer.parsing.spans import SpanLabels, parse_from_scores, tree_spans
from keras_transformer.parsing.tag_dictionary import TagDictionary
from keras_transformer.parsing.toy_treebank import write_toy_treebank
from keras_transformer.parsing.trees import parse_tree
from keras_transformer.training.data_stream import DataPosition
from tests.training.test_distribution import _element, _ragged_elements, _union
from tests.training.test_precision import _adam_slots, _assert_same_step


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    paths = write_toy_treebank(tmp_path_factory.mktemp("toy"), sizes={"train": 200})
    trees = list(read_treebank(paths["train"]))
    proto = train_sentencepiece((" ".join(tree.words()) for tree in trees), TokenizerSettings(vocab_size=400))
    return trees, SubwordTokenizer(proto), sentencepiece.SentencePieceProcessor(model_proto=proto)


def test_word_pieces_point_at_each_words_pieces(toy):
    trees, tokenizer, processor = toy
    sentences = [" ".join(tree.words()) for tree in trees[:5]] + [""]
    source, starts, ends, counts = (t.numpy() for t in word_pieces(tokenizer.tokenize, tf.constant(sentences)))
    for row, sentence in enumerate(sentences):
        words = sentence.split()
        assert counts[row] == len(words)
        pieces = [processor.encode(word) for word in words]
        expected = [BOS_ID] + [piece for word in pieces for piece in word] + [EOS_ID]
        assert source[row, :len(expected)].tolist() == expected and not source[row, len(expected):].any()
        assert starts[row, 0] == ends[row, 0] == 0 and starts[row, len(words) + 1] == ends[row, len(words) + 1] == len(expected) - 1
        for index, word in enumerate(pieces, start=1):
            assert source[row, starts[row, index]:ends[row, index] + 1].tolist() == word


def test_a_word_of_no_pieces_reads_as_unk():
    def tokenize(words):  # as SentencePiece might for a word its normalization deletes
        pieces = {b"a": [5], "\u200b".encode(): [], b"bc": [6, 7]}
        return tf.ragged.constant([pieces[word] for word in words.numpy()], dtype=tf.int32)

    source, starts, ends, counts = (t.numpy() for t in word_pieces(tokenize, tf.constant(["a \u200b bc"])))
    assert source.tolist() == [[BOS_ID, 5, UNK_ID, 6, 7, EOS_ID]]
    assert starts.tolist() == [[0, 1, 2, 3, 5]] and ends.tolist() == [[0, 1, 2, 4, 5]] and counts.tolist() == [3]


def small_model(tokenizer, span_labels):
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=64, dropout_rate=0.0)
    model = SpanParserModel(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32)
    model.build()
    return model


def test_a_sentences_scores_do_not_depend_on_its_batch(toy):
    trees, tokenizer, _ = toy
    span_labels = SpanLabels.from_trees(trees)
    model = small_model(tokenizer, span_labels)
    short = " ".join(min(trees, key=lambda tree: len(tree.words())).words())
    long = " ".join(max(trees, key=lambda tree: len(tree.words())).words())
    alone_spans, alone_tags = model.span_scores(*word_pieces(tokenizer.tokenize, tf.constant([short])))
    spans, tags = model.span_scores(*word_pieces(tokenizer.tokenize, tf.constant([short, long])))
    n = len(short.split())
    assert spans.shape[1] == len(long.split()) + 1 and alone_spans.shape[1] == n + 1
    np.testing.assert_allclose(spans[0, :n + 1, :n + 1], alone_spans[0], atol=1e-5)
    np.testing.assert_allclose(tags[0, :n], alone_tags[0], atol=1e-5)


def gold_arrays(trees, span_labels):
    width = max(len(tree.words()) for tree in trees)
    spans = np.full((len(trees), width + 1, width + 1), -1, np.int32)
    tags = np.full((len(trees), width), -1, np.int32)
    for row, tree in enumerate(trees):
        length = len(tree.words())
        spans[row][np.triu_indices(length + 1, 1)] = 0
        gold_spans, gold_tags = span_labels.gold(tree)
        for start, end, label in gold_spans:
            spans[row, start, end] = label
        tags[row, :length] = gold_tags
    return spans, tags


def test_a_tiny_model_learns_the_toy_trees(toy):
    trees, tokenizer, _ = toy
    span_labels = SpanLabels.from_trees(trees)
    keras.utils.set_random_seed(0)
    model = small_model(tokenizer, span_labels)
    optimizer = keras.optimizers.Adam(3e-3)
    batches = [trees[start:start + 50] for start in range(0, len(trees), 50)]
    inputs = [word_pieces(tokenizer.tokenize, tf.constant([" ".join(tree.words()) for tree in batch]))
              for batch in batches]
    golds = [gold_arrays(batch, span_labels) for batch in batches]

    @tf.function(reduce_retracing=True)
    def step(features, gold_spans, gold_tags):
        with tf.GradientTape() as tape:
            spans, tags = model.span_scores(*features, training=True)
            loss = span_parser_loss(spans, tags, gold_spans, gold_tags)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    losses = [float(step(features, *gold)) for _ in range(40) for features, gold in zip(inputs, golds)]
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4])
    answers = []
    for features, batch in zip(inputs, batches):
        spans, tags = model.span_scores(*features)
        log_probs = tf.nn.log_softmax(spans).numpy()
        answers += [parse_from_scores(tree.words(), log_probs[row], tags[row].numpy().argmax(-1), span_labels)
                    for row, tree in enumerate(batch)]
    assert evalb(trees, answers).all.f1 > 90.0  # 97.7 when written; 85.9 after half the steps


@pytest.fixture(scope="module")
def depth_run(tmp_path_factory):
    """Toy trees, their (sentence, depth linearization) pairs, a vocabulary with their tree tokens,
    SpanLabels and SpanTargets, as a span parser's run has them."""
    paths = write_toy_treebank(tmp_path_factory.mktemp("toy-depth"), seed=5, sizes={"train": 200})
    corpus = TreebankCorpus({"train": paths["train"]}, linearization="depth", parser="span")
    pairs = list(corpus.pairs("train"))
    settings = TokenizerSettings(vocab_size=600, user_defined_symbols=corpus.user_defined_symbols())
    tokenizer = SubwordTokenizer(train_sentencepiece((text for pair in pairs for text in pair), settings))
    trees = list(corpus.trees("train"))
    span_labels = SpanLabels.from_trees(trees)
    return trees, pairs, tokenizer, span_labels, SpanTargets(tokenizer.model_proto, tokenizer.vocab_size, span_labels)


def stream_batch(tokenizer, pairs):
    """(source_ids (B, S) with EOS, target_output_ids (B, T) with EOS), 0-padded, as the training stream's."""
    def ids(texts):
        tokens = tokenizer.tokenize(tf.constant(texts))
        return tf.concat([tokens, tf.fill([tokens.nrows(), 1], EOS_ID)], axis=1).to_tensor()
    return ids([source for source, _ in pairs]), ids([target for _, target in pairs])


def test_source_word_positions_are_those_of_word_pieces(depth_run):
    trees, pairs, tokenizer, _, targets = depth_run
    source_ids, _ = stream_batch(tokenizer, pairs[:20])
    from_ids = source_word_positions(source_ids, targets.word_starts)
    from_text = word_pieces(tokenizer.tokenize, tf.constant([source for source, _ in pairs[:20]]))
    assert any("." in tree.words() for tree in trees[:20])
    for ours, theirs in zip(from_ids, from_text):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_gold_trees_of_target_ids(depth_run):
    trees, pairs, tokenizer, span_labels, targets = depth_run
    _, target_ids = stream_batch(tokenizer, pairs[:40])
    tags, unaries, counts, lcas, lengths = (t.numpy() for t in targets.gold(target_ids))
    # "." is a word and a tag: only the tag tokens count as tags.
    assert any(tree.words()[-1] == "." and tree.tags()[-1] == "." for tree in trees[:40])
    spans = gold_span_labels(counts, lcas, unaries, lengths).numpy()
    for row, tree in enumerate(trees[:40]):
        length = len(tree.words())
        assert lengths[row] == length
        assert [span_labels.tags[tag] for tag in tags[row, :length]] == tree.tags()
        assert (tags[row, length:] == -1).all()
        labelled = {(int(i), int(j)): span_labels.labels[spans[row, i, j]] for i, j in zip(*np.nonzero(spans[row] > 0))}
        assert labelled == tree_spans(tree), tree.to_string()


def test_the_loss_of_stream_batches_is_that_of_the_gold_arrays(depth_run):
    trees, pairs, tokenizer, span_labels, targets = depth_run
    model = small_model(tokenizer, span_labels)
    model.targets = targets
    source_ids, target_ids = stream_batch(tokenizer, pairs[:8])
    outputs = model((source_ids, target_ids))
    total, words, _ = SpanParserLoss(targets).sum_and_count(target_ids, outputs)
    assert float(words) == sum(len(tree.words()) for tree in trees[:8])
    gold_spans, gold_tags = gold_arrays(trees[:8], span_labels)
    expected = span_parser_loss(outputs[0], outputs[2], tf.gather_nd(gold_spans, outputs[1]), gold_tags)
    assert len(outputs[1]) == sum(n * (n + 1) // 2 for n in map(len, (tree.words() for tree in trees[:8])))
    np.testing.assert_allclose(float(total) / float(words), float(expected), rtol=1e-5)
    np.testing.assert_array_equal(SpanParserLoss(targets).real_tokens(target_ids).numpy().sum(axis=1),
                                  [len(tree.words()) for tree in trees[:8]])


def test_the_tag_loss_weight_scales_the_tags_cross_entropy_only(depth_run):
    """TransformerConfig.span_tag_loss_weight: the model's loss weighs the tags' summed cross-entropy
    (computed here with numpy) by it and leaves the spans' and the word count as they are; the
    Transformer refuses a weight it has no tags for."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    model = small_model(tokenizer, span_labels)
    model.targets = targets
    source_ids, target_ids = stream_batch(tokenizer, pairs[:8])
    outputs = model((source_ids, target_ids))
    _, gold_tags = gold_arrays(trees[:8], span_labels)
    logits = outputs[2].numpy().astype(np.float64)
    log_probabilities = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    rows, columns = np.nonzero(gold_tags >= 0)
    tag_sum = -log_probabilities[rows, columns, gold_tags[rows, columns]].sum()
    plain, words, _ = SpanParserLoss(targets).sum_and_count(target_ids, outputs)
    weighted_model = SpanParserModel(dataclasses.replace(model.config, span_tag_loss_weight=5.0),
                                     len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    loss = weighted_model.default_loss()
    assert loss.tag_weight == 5.0
    weighted, weighted_words, _ = loss.sum_and_count(target_ids, outputs)
    assert float(weighted_words) == float(words)
    np.testing.assert_allclose(float(weighted) - float(plain), 4 * tag_sum, rtol=1e-4)
    assert tag_sum > 1.0
    with pytest.raises(ValueError, match="span_tag_loss_weight=5.0 weighs a span parser's tag loss"):
        Transformer(dataclasses.replace(model.config, span_tag_loss_weight=5.0))
    for bad in (0.0, -1.0, float("nan"), True):
        with pytest.raises(ValueError, match="span_tag_loss_weight must be a finite number > 0"):
            dataclasses.replace(model.config, span_tag_loss_weight=bad)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_a_mixed_precision_step_of_the_span_parser_matches_the_float32_step(depth_run, policy):
    """As tests/training/test_precision.py for the Transformer: one step of TrainingSpanParser from
    the same weights on a stream batch, its loss and Adam's slots (the gradients, loss scale divided
    out) against the float32 step's; and jit_compile=True refused with the reason."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    source_ids, target_ids = stream_batch(tokenizer, pairs[:6])
    target_input = tf.pad(target_ids[:, :-1], [[0, 0], [1, 0]], constant_values=BOS_ID)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=128, dropout_rate=0.0)
    steps = {}
    try:
        for name in ("float32", policy):
            set_dtype_policy(name)
            model = TrainingSpanParser(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32,
                                       targets=targets)
            model.compile(optimizer=Adam(1e-3, beta_1=0.9, beta_2=0.98, epsilon=1e-9))
            model.prepare_for_training()
            if name == "float32":
                weights = model.get_weights()
            model.set_weights(weights)
            logs = model.train_on_batch((source_ids, target_input), target_ids, return_dict=True)
            steps[name] = (float(logs["loss"]), _adam_slots(model), model)
        with pytest.raises(ValueError, match="train it without --jit-compile"):
            model.compile(jit_compile=True)
    finally:
        set_dtype_policy("float32")
    assert steps[policy][2].compute_dtype != "float32"
    if policy == "mixed_float16":
        assert isinstance(steps[policy][2].optimizer, keras.optimizers.LossScaleOptimizer)
    _assert_same_step(steps[policy], steps["float32"], policy)


@pytest.mark.parametrize("unknown_words", [False, True])
def test_a_mirrored_step_of_the_span_parser_equals_one_device_on_the_global_batch(depth_run, unknown_words):
    """As tests/training/test_distribution.py for the Transformer: 8 replicas, each with its own stream
    batch (own shape, own words), take the step one device takes on their union (SGD at learning
    rate 1, so a loss normalized by each replica's own words instead of the global batch's shows).
    All 8 logical CPUs, as the other tests' strategies. unknown_words: with span_word_unk_alpha and
    word counts that hold none of the words, so that every replica reads every word as UNK (a
    probability of 1, no randomness) through its count table."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    if unknown_words:
        targets = SpanTargets(tokenizer.model_proto, tokenizer.vocab_size, span_labels, word_counts={"zzzz": 1})
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert len(devices) == 8, "tests/conftest.py declares 8 logical CPUs"
    batches = []
    for start, size in ((0, 1), (1, 3), (4, 2), (6, 5), (11, 1), (12, 2), (14, 4), (18, 1)):
        source_ids, target_ids = (t.numpy() for t in stream_batch(tokenizer, pairs[start:start + size]))
        batches.append(((source_ids, np.pad(target_ids[:, :-1], [[0, 0], [1, 0]], constant_values=BOS_ID)),
                        target_ids))
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=128, dropout_rate=0.0, span_word_unk_alpha=float(unknown_words))

    def one_step(strategy, dataset, initial=None, config=config):
        with strategy.scope():
            model = TrainingSpanParser(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32,
                                       targets=targets, data_position=DataPosition())
            model.compile(optimizer=keras.optimizers.SGD(1.0))
            model.prepare_for_training()
            if initial is not None:
                model.set_weights(initial)
        before = model.get_weights()
        loss = model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False).history["loss"][0]
        return loss, before, model.get_weights()

    elements = [_element(batch, [0, 0, index]) for index, batch in enumerate(batches)]
    # Reductions through one device, not collectives: TensorFlow's collective instances are per
    # process, and another test's MirroredStrategy over other shapes in this process (the suite runs
    # several files in one) makes a collective here fail ("Shape mismatch in the collective instance").
    strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=tf.distribute.ReductionToOneDevice())
    mirrored = one_step(strategy, strategy.distribute_datasets_from_function(lambda _: _ragged_elements(elements)))
    single = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"),
                      tf.data.Dataset.from_tensors(_element(_union(batches), [0, 0, 7])), initial=mirrored[1])
    assert single[0] == pytest.approx(mirrored[0], rel=1e-5)
    assert any(not np.allclose(after, before) for after, before in zip(single[2], single[1]))
    for got, want in zip(mirrored[2], single[2], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if unknown_words:  # the words were read as UNK: the step on the words themselves has another loss
        plain = one_step(tf.distribute.OneDeviceStrategy("/cpu:0"),
                         tf.data.Dataset.from_tensors(_element(_union(batches), [0, 0, 7])), initial=mirrored[1],
                         config=dataclasses.replace(config, span_word_unk_alpha=0.0))
        assert plain[0] != pytest.approx(single[0], rel=1e-3)


def test_the_constituent_bias_is_recorded_in_the_workdir(tmp_path):
    assert read_constituent_bias(tmp_path) == 0.0  # none chosen
    write_constituent_bias(tmp_path, 1.5)
    assert read_constituent_bias(tmp_path) == 1.5
    (tmp_path / "span_parser.json").write_text("[1.5]")
    with pytest.raises(ValueError, match="span_parser.json: not a span parser's settings"):
        read_constituent_bias(tmp_path)


def test_the_span_parsers_tensorboard_picture(depth_run):
    trees, pairs, tokenizer, span_labels, targets = depth_run
    parser = SpanParser(small_model(tokenizer, span_labels), tokenizer.model_proto, span_labels=span_labels)
    sentence = " ".join(trees[0].words())
    words, log_odds = parser.span_chart(sentence)
    assert words == trees[0].words() and log_odds.shape == (len(words) + 1, len(words) + 1)
    (answer,) = parser.parse(tf.constant([sentence]))["trees"].numpy()
    name, png = parser.evaluation_picture(sentence, answer.decode())
    assert name == "span scores" and png.startswith(b"\x89PNG")
    assert tf.image.decode_png(png).shape[0] > 100


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_the_span_parser_reads_the_configs_positional_encoding(kind):
    config = TransformerConfig(vocab_size=50, num_layers=1, d_model=16, d_ff=32, num_heads=2, max_length=32,
                               positional=kind)
    model = SpanParserModel(config, 4, 3, span_hidden=8)
    model.build()
    assert type(model.source_positional) is positional_layer(kind)
    assert (kind == "learned") == any("source_positional" in weight.path for weight in model.weights)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_the_span_parser_in_a_reduced_precision(depth_run, precision):
    """model_in_precision copies a span parser's model (its class, not a Transformer's): the encoder in
    the reduced precision, the span classifier in float32; the SpanParser exported so parses the
    sentences into trees over their words, most of them (an untrained model's near-ties may flip) as
    the float32 one, and its span scores are close to the float32 ones."""
    trees, _, tokenizer, span_labels, _ = depth_run
    keras.utils.set_random_seed(3)
    model = small_model(tokenizer, span_labels)
    reduced = model_in_precision(model, precision)
    assert type(reduced) is SpanParserModel and reduced.encoder.compute_dtype == precision
    assert reduced.span_output.compute_dtype == "float32" and reduced.span_bias.dtype == "float32"
    sentences = tf.constant([" ".join(tree.words()) for tree in trees[:6]] + [""])
    features = word_pieces(tokenizer.tokenize, sentences)
    spans, _ = model.span_scores(*features)
    reduced_spans, _ = reduced.span_scores(*features)
    assert reduced_spans.dtype == tf.float32
    np.testing.assert_allclose(reduced_spans.numpy(), spans.numpy(), atol=0.1)
    parsers = [SpanParser(model, tokenizer.model_proto, span_labels=span_labels, precision=name)
               for name in ("float32", precision)]
    assert parsers[1].settings()["precision"] == precision
    answers = [parser.parse(sentences)["trees"].numpy().tolist() for parser in parsers]
    assert answers[1][-1] == b"" and sum(a == b for a, b in zip(*answers)) >= 5
    assert [parse_tree(tree.decode()).words() for tree in answers[1][:-1]] == [tree.words() for tree in trees[:6]]


def test_a_span_parser_with_a_tag_dictionary_tags_every_word_as_it_allows(depth_run):
    """As the seq2seq Parser's: untrained, the tags are the random model's; with a dictionary each
    word gets one of the tags it allows (listed words theirs, other words those of their shape)."""
    trees, _, tokenizer, span_labels, _ = depth_run
    keras.utils.set_random_seed(5)
    model = small_model(tokenizer, span_labels)
    tags = list(span_labels.tags)
    words = sorted({word for tree in trees[:10] for word in tree.words()})
    dictionary = TagDictionary(words={word: (tags[index % len(tags)],) for index, word in enumerate(words[::2])},
                               other={"alphanumeric": (tags[1], tags[2]), "symbols": (tags[3],)})
    parser = SpanParser(model, tokenizer.model_proto, span_labels=span_labels, tag_dictionary=dictionary)
    assert parser.settings()["tag_dictionary"]["words"] == len(words[::2])
    sentences = [" ".join(tree.words()) for tree in trees[:10]] + ["Zorp , ½"]
    answers = [parse_tree(tree.decode()) for tree in parser.parse(tf.constant(sentences))["trees"].numpy()]
    for sentence, tree in zip(sentences, answers, strict=True):
        assert tree.words() == sentence.split()
        for word, tag in zip(tree.words(), tree.tags()):
            assert tag in dictionary.allowed(word), (word, tag, tree.to_string())
    plain = SpanParser(model, tokenizer.model_proto, span_labels=span_labels)
    unconstrained = [parse_tree(tree.decode()).tags() for tree in plain.parse(tf.constant(sentences))["trees"].numpy()]
    assert unconstrained != [tree.tags() for tree in answers]  # the random model alone tags otherwise


def test_a_span_parsers_score_is_the_log_probability_of_its_tree(depth_run):
    """`scores`: log p of the answer under the model, every span of the sentence with its label in
    the tree (none if not in it) and every word with its tag, computed here from the model's scores
    and the answer's text; with a tag dictionary too, which restricts the tags chosen, not the
    distribution they are scored by; with a constituent bias, which is not counted; 0 for "". The
    `score` signature gives each answer that score and a gold tree its own log p, as written or as a
    treebank writes it, and refuses a tree over other words, a batch of other sizes and a tree that is
    not one."""
    trees, _, tokenizer, span_labels, _ = depth_run
    keras.utils.set_random_seed(6)
    model = small_model(tokenizer, span_labels)
    sentences = [" ".join(tree.words()) for tree in trees[:6]] + [" "]
    span_logits, tag_logits = model.span_scores(*word_pieces(tokenizer.tokenize, tf.constant(sentences)))
    span_log_probs = tf.nn.log_softmax(span_logits).numpy()
    tag_log_probs = tf.nn.log_softmax(tag_logits).numpy()
    words = sorted({word for tree in trees[:6] for word in tree.words()})
    dictionary = TagDictionary(words={word: (span_labels.tags[1],) for word in words[::2]},
                               other={"alphanumeric": span_labels.tags[:3], "symbols": span_labels.tags[:3]})
    parsers = [SpanParser(model, tokenizer.model_proto, span_labels=span_labels),
               SpanParser(model, tokenizer.model_proto, span_labels=span_labels, tag_dictionary=dictionary),
               SpanParser(model, tokenizer.model_proto, span_labels=span_labels, constituent_bias=2.0)]
    outputs = [parser.parse(tf.constant(sentences)) for parser in parsers]
    assert outputs[0]["trees"].numpy().tolist() != outputs[1]["trees"].numpy().tolist()  # other tags
    assert outputs[0]["trees"].numpy().tolist() != outputs[2]["trees"].numpy().tolist()  # more spans

    def log_prob(row, tree):
        spans, length = tree_spans(tree), len(tree.words())
        return (sum(span_log_probs[row, start, end, span_labels.label_id(spans.get((start, end), ""))]
                    for end in range(1, length + 1) for start in range(end))
                + sum(tag_log_probs[row, index, span_labels.tag_id(tag)] for index, tag in enumerate(tree.tags())))

    for parser, output in zip(parsers, outputs):
        answers, scores = output["trees"].numpy(), output["scores"].numpy()
        assert answers[-1] == b"" and scores[-1] == 0.0
        for row, answer in enumerate(answers[:-1]):
            assert scores[row] == pytest.approx(log_prob(row, parse_tree(answer.decode())), rel=1e-5), (row, answer)
        # The `score` signature gives an answer the score `parse` gave it, and any other tree its own.
        np.testing.assert_allclose(parser.score(tf.constant(sentences), output["trees"])["scores"].numpy(), scores,
                                   rtol=1e-5)
    gold = [tree.to_string() for tree in trees[:6]] + [""]
    scored = parsers[1].score(tf.constant(sentences), tf.constant(gold))["scores"].numpy()
    assert scored.tolist() != outputs[1]["scores"].numpy().tolist()
    for row, tree in enumerate(trees[:6]):
        assert scored[row] == pytest.approx(log_prob(row, tree), rel=1e-5), gold[row]
    assert scored[-1] == 0.0
    # The same trees as a WSJ .mrg file writes them: an unlabeled root bracket, function tags, indices
    # and an empty element, over several lines.
    as_written = [f"( ({tree.label}-TPC-1 (NP-SBJ (-NONE- *T*-1))\n  {text[len(tree.label) + 2:]})"
                  for tree, text in zip(trees[:6], gold)] + [""]
    assert all(not tree.is_preterminal for tree in trees[:6])
    np.testing.assert_array_equal(parsers[1].score(tf.constant(sentences), tf.constant(as_written))["scores"], scored)
    for source, target, message in [(sentences[:2], gold[1::-1], "the words of a tree are not those of its sentence"),
                                     (sentences[:1], gold[:1] * 2, "source and target must hold as many strings"),
                                     (sentences[:1], [gold[0][:-1]], "not a bracketed tree")]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=f"score: {message}"):
            parsers[0].score(tf.constant(source), tf.constant(target))


def spelled(word):
    """word_characters' row for a word, written out: begin, the code points' ids (the first and last
    WORD_CHARS / 2 of a longer word), end, padding."""
    ids = [4 + ord(char) % (CHAR_IDS - 4) for char in word]
    if len(ids) > WORD_CHARS:
        ids = ids[:WORD_CHARS // 2] + ids[-(WORD_CHARS // 2):]
    return [1] + ids + [2] + [0] * (WORD_CHARS - len(ids))


def test_word_characters_spell_each_word_from_its_pieces(depth_run):
    """From raw sentences (word_pieces) and from the training stream's ids (source_word_positions)
    alike: each word's characters as written, a long word's ends, a word of byte pieces (a character
    the vocabulary lacks) as one no-text id a byte, and nothing past a sentence's words."""
    trees, pairs, tokenizer, _, targets = depth_run
    table = piece_character_table(tokenizer.model_proto, tokenizer.vocab_size)
    np.testing.assert_array_equal(table, targets.piece_characters.numpy())
    long_word = "antidisestablishmentarianism"
    sentences = [source for source, _ in pairs[:6]] + [f"the {long_word} ж .", "a"]
    from_text = word_pieces(tokenizer.tokenize, tf.constant(sentences))
    chars = word_characters(*from_text, table).numpy()
    assert chars.shape[1:] == (max(len(sentence.split()) for sentence in sentences), WORD_CHARS + 2)
    for row, sentence in enumerate(sentences):
        words = sentence.split()
        for index, word in enumerate(words):
            if word != "ж":
                assert chars[row, index].tolist() == spelled(word), word
        assert not chars[row, len(words):].any()
    pieces = tokenizer.tokenize(tf.constant(["ж"])).to_list()[0]
    assert len(pieces) == 3  # the space mark alone ("▁": no characters) and the two bytes of ж
    assert chars[6, 2].tolist() == [1, 3, 3, 2] + [0] * (WORD_CHARS - 2)
    source_ids, _ = stream_batch(tokenizer, [(sentence, "") for sentence in sentences])
    from_ids = source_word_positions(source_ids, targets.word_starts)
    np.testing.assert_array_equal(word_characters(*from_ids, targets.piece_characters).numpy(), chars)


def char_model(tokenizer, span_labels, filters=8, targets=None):
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=64, dropout_rate=0.0, span_char_filters=filters)
    model = SpanParserModel(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    model.build()
    return model


def test_a_seed_gives_a_model_with_character_features_the_others_weights(depth_run):
    """The layers a model without character features has are built first, in its order: with the
    same seed, a model with them starts from the same weights in every layer but its character
    layers, so the two compare from one start."""
    _, _, tokenizer, span_labels, _ = depth_run
    keras.utils.set_random_seed(5)
    plain = {w.path.split("/", 1)[-1]: w.numpy() for w in small_model(tokenizer, span_labels).weights}
    keras.utils.set_random_seed(5)
    with_chars = {w.path.split("/", 1)[-1]: w.numpy() for w in char_model(tokenizer, span_labels).weights}
    assert sorted(path for path in with_chars if not path.startswith("char_")) == sorted(plain)
    for path, value in plain.items():
        np.testing.assert_array_equal(with_chars[path], value, err_msg=path)


def test_character_features_reach_each_words_pieces_and_only_them(depth_run):
    """span_char_filters: a span parser without the words' characters is refused; each piece of a word
    gets the word's character vector (BOS, EOS and padding none); a sentence's scores do not depend on
    its batch; and changing one word's spelling alone (the same pieces) changes the scores."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    keras.utils.set_random_seed(11)
    model = char_model(tokenizer, span_labels)
    plain = small_model(tokenizer, span_labels)
    paths = sorted(w.path.split("/", 1)[-1] for w in model.weights)  # without the model's name
    assert [path for path in paths if not path.startswith("char_")] == sorted(
        w.path.split("/", 1)[-1] for w in plain.weights)
    assert [path for path in paths if path.startswith("char_")] == [
        "char_convolution/bias", "char_convolution/kernel", "char_embedding/embeddings", "char_projection/bias",
        "char_projection/kernel"]
    longest = max(trees[:20], key=lambda tree: len(tree.words()))
    sentences = tf.constant([" ".join(trees[0].words()), " ".join(longest.words())])
    source_ids, starts, ends, counts = features = word_pieces(tokenizer.tokenize, sentences)
    chars = word_characters(*features, targets.piece_characters)
    with pytest.raises(ValueError, match="give span_scores word_characters' word_chars"):
        model.span_scores(*features)
    additions = model.character_features(source_ids, starts, ends, chars).numpy()
    for row in range(2):
        n = int(counts[row])
        assert not additions[row, 0].any() and not additions[row, ends[row, n + 1]:].any()
        for index in range(1, n + 1):
            word = additions[row, starts[row, index]:ends[row, index] + 1]
            np.testing.assert_array_equal(word, np.broadcast_to(word[0], word.shape))
            assert np.abs(word[0]).sum() > 0
            if index > 1:
                assert not np.allclose(word[0], additions[row, starts[row, index - 1]])
    spans, tags = model.span_scores(*features, word_chars=chars)
    alone_features = word_pieces(tokenizer.tokenize, sentences[:1])
    alone_spans, alone_tags = model.span_scores(*alone_features,
                                                word_chars=word_characters(*alone_features, targets.piece_characters))
    n = int(counts[0])
    np.testing.assert_allclose(spans[0, :n + 1, :n + 1], alone_spans[0], atol=1e-5)
    np.testing.assert_allclose(tags[0, :n], alone_tags[0], atol=1e-5)
    respelled = chars.numpy().copy()
    respelled[0, 0, 1] += 1  # the first word's first character, its pieces unchanged
    other_spans, other_tags = model.span_scores(*features, word_chars=respelled)
    assert not np.allclose(other_tags[0, 0], tags[0, 0]) and not np.allclose(other_spans[0], spans[0])
    np.testing.assert_allclose(other_spans[1], spans[1], atol=1e-5)


def test_a_training_step_with_character_features_trains_them(depth_run):
    """TrainingSpanParser reads the characters from the stream's ids (SpanTargets' table): one step
    changes the character layers' weights, and its loss is the span parser loss of the model's own
    span_scores on the same sentences."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    source_ids, target_ids = stream_batch(tokenizer, pairs[:6])
    target_input = tf.pad(target_ids[:, :-1], [[0, 0], [1, 0]], constant_values=BOS_ID)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=128, dropout_rate=0.0, span_char_filters=8)
    keras.utils.set_random_seed(2)
    model = TrainingSpanParser(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    model.prepare_for_training()
    features = word_pieces(tokenizer.tokenize, tf.constant([source for source, _ in pairs[:6]]))
    spans, tags = model.span_scores(*features, word_chars=word_characters(*features, targets.piece_characters))
    gold_spans, gold_tags = gold_arrays(trees[:6], span_labels)
    expected = float(span_parser_loss(spans, tags, gold_spans, gold_tags))
    before = {w.path: w.numpy() for w in model.weights if "/char_" in w.path}
    logs = model.train_on_batch((source_ids, target_input), target_ids, return_dict=True)
    assert logs["loss"] == pytest.approx(expected, rel=1e-5)
    assert len(before) == 5 and all(not np.allclose(w.numpy(), before[w.path]) for w in model.weights
                                    if w.path in before)


def test_the_span_parser_with_character_features_parses_and_exports(depth_run, tmp_path):
    """SpanParser reads the characters itself (from its vocabulary), in float32 and in bfloat16 (the
    copy keeps the character layers), and a SavedModel of it parses as it does; the Transformer and
    a negative width are refused."""
    trees, _, tokenizer, span_labels, targets = depth_run
    keras.utils.set_random_seed(4)
    model = char_model(tokenizer, span_labels, targets=targets)
    sentences = tf.constant([" ".join(tree.words()) for tree in trees[:5]] + [""])
    parser = SpanParser(model, tokenizer.model_proto, span_labels=span_labels)
    answers = parser.parse(sentences)["trees"].numpy().tolist()
    assert answers[-1] == b""
    assert [parse_tree(tree.decode()).words() for tree in answers[:-1]] == [tree.words() for tree in trees[:5]]
    words, log_odds = parser.span_chart(" ".join(trees[0].words()))
    assert log_odds.shape == (len(words) + 1, len(words) + 1)
    reduced = model_in_precision(model, "bfloat16")
    assert reduced.char_convolution.compute_dtype == "bfloat16"
    features = word_pieces(tokenizer.tokenize, sentences)
    chars = word_characters(*features, targets.piece_characters)
    np.testing.assert_allclose(reduced.span_scores(*features, word_chars=chars)[0].numpy(),
                               model.span_scores(*features, word_chars=chars)[0].numpy(), atol=0.1)
    tf.saved_model.save(parser, str(tmp_path / "saved"), signatures=parser.signatures())
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    served = loaded.signatures["serving_default"](inputs=sentences)
    assert served["trees"].numpy().tolist() == answers
    np.testing.assert_allclose(served["scores"].numpy(), parser.parse(sentences)["scores"].numpy(), rtol=1e-6)
    gold = tf.constant([tree.to_string() for tree in trees[:5]] + [""])
    np.testing.assert_allclose(loaded.signatures["score"](source=sentences, target=gold)["scores"].numpy(),
                               parser.score(sentences, gold)["scores"].numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match="span_char_filters=8 gives a span parser character features"):
        Transformer(model.config)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="span_char_filters must be an integer >= 0"):
            dataclasses.replace(model.config, span_char_filters=bad)


def unk_model(tokenizer, span_labels, rate, filters=8, targets=None):
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=128, dropout_rate=0.0, span_char_filters=filters, span_word_unk_rate=rate)
    model = SpanParserModel(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    model.build()
    return model


def test_unknown_words_replace_whole_words_in_training_only(depth_run):
    """span_word_unk_rate: in training, each word's pieces are all UNK or all kept, at about the rate,
    BOS, EOS and padding never; other words at the next call; outside training the ids as they are;
    and the option adds no weight, so a seed gives the model the weights of one without it."""
    trees, _, tokenizer, span_labels, _ = depth_run
    keras.utils.set_random_seed(6)
    model = unk_model(tokenizer, span_labels, 0.3)
    keras.utils.set_random_seed(6)
    plain = unk_model(tokenizer, span_labels, 0.0)
    assert [w.path.split("/", 1)[-1] for w in model.weights] == [w.path.split("/", 1)[-1] for w in plain.weights]
    for mine, other in zip(model.weights, plain.weights):
        np.testing.assert_array_equal(mine.numpy(), other.numpy(), err_msg=mine.path)
    sentences = tf.constant([" ".join(tree.words()) for tree in trees[:40]])
    source_ids, starts, ends, counts = word_pieces(tokenizer.tokenize, sentences)
    assert model.unknown_words(source_ids, starts, ends, training=False) is source_ids
    assert plain.unknown_words(source_ids, starts, ends, training=True) is source_ids
    first = model.unknown_words(source_ids, starts, ends, training=True).numpy()
    second = model.unknown_words(source_ids, starts, ends, training=True).numpy()
    ids, starts, ends, counts = source_ids.numpy(), starts.numpy(), ends.numpy(), counts.numpy()
    unknown = []
    for row in range(len(ids)):
        n = counts[row]
        real = slice(1, ends[row, n] + 1)
        assert ids[row, 0] == BOS_ID and first[row, 0] == BOS_ID and first[row, ends[row, n] + 1] == EOS_ID
        np.testing.assert_array_equal(first[row, ends[row, n] + 1:], ids[row, ends[row, n] + 1:])
        assert (ids[row, real] != UNK_ID).all()
        for word in range(1, n + 1):
            pieces = slice(starts[row, word], ends[row, word] + 1)
            replaced = first[row, pieces] == UNK_ID
            assert replaced.all() or not replaced.any()
            if not replaced.any():
                np.testing.assert_array_equal(first[row, pieces], ids[row, pieces])
            unknown.append(bool(replaced.all()))
    assert len(unknown) > 300 and 0.2 < np.mean(unknown) < 0.4
    assert not np.array_equal(first, second)


def test_unknown_words_keep_their_character_features(depth_run):
    """In training, a model whose every word is UNK (a rate of almost 1, no other dropout) gives the
    word vectors of the all-UNK sentence with each word's own character features; a training step
    with the option runs, and its loss differs from the same step's without it."""
    trees, pairs, tokenizer, span_labels, targets = depth_run
    keras.utils.set_random_seed(8)
    model = unk_model(tokenizer, span_labels, 0.9999)
    sentences = tf.constant([" ".join(tree.words()) for tree in trees[:3]])
    source_ids, starts, ends, counts = features = word_pieces(tokenizer.tokenize, sentences)
    chars = word_characters(*features, targets.piece_characters)
    all_unk = tf.where((source_ids != BOS_ID) & (source_ids != EOS_ID) & (source_ids != 0), UNK_ID, source_ids)
    characters = model.character_features(source_ids, starts, ends, chars)
    expected = model._encoded_words(all_unk, starts, ends, characters, training=False)
    trained = model.word_vectors(source_ids, starts, ends, training=True, word_chars=chars)
    np.testing.assert_allclose(trained.numpy(), expected.numpy(), atol=1e-6)
    without_chars = model._encoded_words(all_unk, starts, ends, None, training=False)
    assert not np.allclose(trained.numpy(), without_chars.numpy())

    source, target = stream_batch(tokenizer, pairs[:6])
    target_input = tf.pad(target[:, :-1], [[0, 0], [1, 0]], constant_values=BOS_ID)
    losses = {}
    for rate in (0.0, 0.5):
        keras.utils.set_random_seed(2)
        config = dataclasses.replace(model.config, span_word_unk_rate=rate)
        trainer = TrainingSpanParser(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32,
                                     targets=targets)
        trainer.compile(optimizer=keras.optimizers.SGD(0.1))
        trainer.prepare_for_training()
        losses[rate] = trainer.train_on_batch((source, target_input), target, return_dict=True)["loss"]
    assert np.isfinite(losses[0.5]) and losses[0.5] != pytest.approx(losses[0.0], rel=1e-4)


def test_the_unknown_word_rate_is_checked_and_the_transformers_refuse_it():
    config = TransformerConfig(vocab_size=100, num_layers=1, d_model=32, d_ff=64, num_heads=2, max_length=64)
    for bad in (-0.1, 1.0, float("nan"), True):
        with pytest.raises(ValueError, match=r"span_word_unk_rate must be in \[0, 1\)"):
            dataclasses.replace(config, span_word_unk_rate=bad)
    with pytest.raises(ValueError, match="span_word_unk_rate=0.2 reads a span parser's training words as UNK"):
        Transformer(dataclasses.replace(config, span_word_unk_rate=0.2))


def test_frequency_based_unknown_words_follow_each_words_count(depth_run):
    """span_word_unk_alpha: in training, each word is UNK (all its pieces) with probability alpha /
    (alpha + its count), a word the counts lack always; BOS, EOS and padding never; outside training
    the ids as they are; and a model whose SpanTargets have no counts says what it needs."""
    trees, _, tokenizer, span_labels, _ = depth_run
    # Counts made up so that the toy words span the probabilities: "the" is missing (count 0).
    counts = {word: 1 if word == "dog" else 3 if word == "cat" else 1000
              for tree in trees for word in tree.words() if word != "the"}
    targets = SpanTargets(tokenizer.model_proto, tokenizer.vocab_size, span_labels, word_counts=counts)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=32, d_ff=64, num_heads=2,
                               max_length=128, dropout_rate=0.0, span_word_unk_alpha=1.0)
    keras.utils.set_random_seed(11)
    model = SpanParserModel(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    model.build()
    sentences = [" ".join(tree.words()) for tree in trees[:60]]
    source_ids, starts, ends, word_counts = word_pieces(tokenizer.tokenize, tf.constant(sentences))
    assert model.unknown_words(source_ids, starts, ends, training=False) is source_ids
    unknown = collections.defaultdict(list)
    ids, starts_np, ends_np = source_ids.numpy(), starts.numpy(), ends.numpy()
    for _ in range(40):
        drawn = model.unknown_words(source_ids, starts, ends, training=True).numpy()
        for row, sentence in enumerate(sentences):
            n = word_counts[row]
            assert drawn[row, 0] == BOS_ID and drawn[row, ends_np[row, n] + 1] == EOS_ID
            np.testing.assert_array_equal(drawn[row, ends_np[row, n] + 1:], ids[row, ends_np[row, n] + 1:])
            for word, text in enumerate(sentence.split(), start=1):
                replaced = drawn[row, starts_np[row, word]:ends_np[row, word] + 1] == UNK_ID
                assert replaced.all() or not replaced.any()
                unknown[text].append(bool(replaced.all()))
    assert np.mean(unknown["the"]) == 1.0 and len(unknown["the"]) > 300
    assert 0.4 < np.mean(unknown["dog"]) < 0.6 and len(unknown["dog"]) > 300
    assert 0.15 < np.mean(unknown["cat"]) < 0.35 and len(unknown["cat"]) > 300
    frequent = [drawn for word in counts if counts[word] == 1000 for drawn in unknown[word]]
    assert len(frequent) > 10000 and np.mean(frequent) < 0.003

    without_counts = SpanParserModel(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32,
                                     targets=SpanTargets(tokenizer.model_proto, tokenizer.vocab_size, span_labels))
    without_counts.build()
    with pytest.raises(ValueError, match="span_word_unk_alpha=1.0 reads each training word's count"):
        without_counts.unknown_words(source_ids, starts, ends, training=True)


def test_the_unknown_words_alpha_is_checked_and_the_transformers_refuse_it():
    config = TransformerConfig(vocab_size=100, num_layers=1, d_model=32, d_ff=64, num_heads=2, max_length=64)
    for bad in (-0.5, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match=r"span_word_unk_alpha must be a finite number >= 0"):
            dataclasses.replace(config, span_word_unk_alpha=bad)
    with pytest.raises(ValueError, match="span_word_unk_rate=0.1 and span_word_unk_alpha=1.0 are two ways"):
        dataclasses.replace(config, span_word_unk_alpha=1.0, span_word_unk_rate=0.1)
    with pytest.raises(ValueError, match="span_word_unk_alpha=0.5 reads a span parser's rare training words"):
        Transformer(dataclasses.replace(config, span_word_unk_alpha=0.5))
