"""The span parser with a partitioned encoder (TransformerConfig.span_partitioned, Kitaev and Klein's
content and position halves): its embeddings and character features are d_model / 2 wide and its
encoder's kernels block-diagonal; a tiny one learns the toy trees, parses with SpanParser and as a
SavedModel; the config checks its widths, and the Transformer refuses the option."""
import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.model import Transformer
from keras_transformer.parsing.evalb import evalb
from keras_transformer.parsing.span_model import SpanParserModel, span_parser_loss, word_characters, word_pieces
from keras_transformer.parsing.span_parser import SpanParser
from keras_transformer.parsing.spans import parse_from_scores
from keras_transformer.parsing.trees import parse_tree
from tests.parsing.test_span_model import depth_run, gold_arrays  # noqa: F401 (a fixture)

D = 32


def partitioned_model(tokenizer, span_labels, targets=None):
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=D, d_ff=64, num_heads=2,
                               max_length=64, dropout_rate=0.0, span_char_filters=8, span_partitioned=True)
    model = SpanParserModel(config, len(span_labels.labels), len(span_labels.tags), span_hidden=32, targets=targets)
    model.build()
    return model


def test_a_partitioned_span_parser_learns_the_toy_trees_and_parses_as_a_saved_model(depth_run, tmp_path):  # noqa: F811
    trees, _, tokenizer, span_labels, targets = depth_run
    keras.utils.set_random_seed(3)
    model = partitioned_model(tokenizer, span_labels, targets=targets)
    shapes = {w.path.split("/", 1)[-1]: tuple(w.shape) for w in model.weights}
    assert shapes["source_embedding/embeddings"] == (tokenizer.vocab_size, D // 2)
    assert shapes["char_projection/kernel"] == (8, D // 2)
    assert shapes["encoder/layer_0/self_attention/query_key_value_kernel"] == (2, D // 2, 3 * D // 2)
    assert shapes["encoder/layer_0/feed_forward/inner_kernel"] == (2, D // 2, 32)
    optimizer = keras.optimizers.Adam(3e-3)
    batches = [trees[start:start + 50] for start in range(0, len(trees), 50)]
    inputs = []
    for batch in batches:
        features = word_pieces(tokenizer.tokenize, tf.constant([" ".join(tree.words()) for tree in batch]))
        inputs.append((features, word_characters(*features, targets.piece_characters)))
    golds = [gold_arrays(batch, span_labels) for batch in batches]

    @tf.function(reduce_retracing=True)
    def step(features, chars, gold_spans, gold_tags):
        with tf.GradientTape() as tape:
            spans, tags = model.span_scores(*features, training=True, word_chars=chars)
            loss = span_parser_loss(spans, tags, gold_spans, gold_tags)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    losses = [float(step(*features, *gold)) for _ in range(40) for features, gold in zip(inputs, golds)]
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4])
    answers = []
    for (features, chars), batch in zip(inputs, batches):
        spans, tags = model.span_scores(*features, word_chars=chars)
        log_probs = tf.nn.log_softmax(spans).numpy()
        answers += [parse_from_scores(tree.words(), log_probs[row], tags[row].numpy().argmax(-1), span_labels)
                    for row, tree in enumerate(batch)]
    assert evalb(trees, answers).all.f1 > 90.0

    parser = SpanParser(model, tokenizer.model_proto, span_labels=span_labels)
    sentences = tf.constant([" ".join(tree.words()) for tree in trees[:5]] + [""])
    parsed = parser.parse(sentences)["trees"].numpy().tolist()
    assert parsed[-1] == b""
    assert [parse_tree(tree.decode()).words() for tree in parsed[:-1]] == [tree.words() for tree in trees[:5]]
    tf.saved_model.save(parser, str(tmp_path / "saved"), signatures=parser.signatures())
    served = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"](inputs=sentences)
    assert served["trees"].numpy().tolist() == parsed


def test_the_partitioned_widths_are_checked_and_the_transformer_refuses_it():
    config = TransformerConfig(vocab_size=100, num_layers=1, d_model=32, d_ff=64, num_heads=2, max_length=64)
    with pytest.raises(ValueError, match=r"span_partitioned halves d_model, d_ff, d_k and d_v: .*\{'d_ff': 63\}"):
        dataclasses.replace(config, span_partitioned=True, d_ff=63)
    with pytest.raises(ValueError, match=r"span_partitioned halves .*\{'key_dim': 5\}"):
        dataclasses.replace(config, span_partitioned=True, d_k=5)
    with pytest.raises(ValueError, match="span_partitioned must be True or False; got 1"):
        dataclasses.replace(config, span_partitioned=1)
    with pytest.raises(ValueError, match="span_partitioned=True factors a span parser's encoder"):
        Transformer(dataclasses.replace(config, span_partitioned=True))
