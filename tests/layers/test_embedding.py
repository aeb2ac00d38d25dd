import numpy as np

from keras_transformer.layers import TokenEmbedding
from tests.layer_checks import run_layer_checks


def test_layer_checks_and_scaling(tmp_path):
    layer = TokenEmbedding(50, 16, name="embedding")
    ids = np.random.randint(0, 50, size=(3, 7)).astype("int32")
    run_layer_checks(layer, {"ids": ids}, (3, 7, 16), 50 * 16, tmp_path=tmp_path)
    np.testing.assert_allclose(layer(ids), layer.get_weights()[0][ids] * 4.0, atol=1e-6)  # sqrt(16)


def test_logits_use_the_same_matrix():
    layer = TokenEmbedding(50, 16)
    layer.build()
    x = np.random.normal(size=(2, 3, 16)).astype("float32")
    logits = layer.logits(x)
    assert logits.dtype == "float32"
    np.testing.assert_allclose(logits, x @ layer.get_weights()[0].T, atol=1e-5)


def test_logits_from_transposed_blocks_are_the_columns_of_the_logits():
    layer = TokenEmbedding(50, 16)
    layer.build()
    x = np.random.normal(size=(2, 3, 16)).astype("float32")
    whole = layer.logits(x, layer.transposed_embeddings())
    np.testing.assert_allclose(whole, layer.logits(x), atol=1e-5)
    blocks = layer.transposed_embeddings(block_sizes=[17, 33])
    assert [block.shape for block in blocks] == [(16, 17), (16, 33)]
    parts = [layer.logits(x, block) for block in blocks]
    assert [part.shape for part in parts] == [(2, 3, 17), (2, 3, 33)]
    np.testing.assert_allclose(np.concatenate(parts, axis=-1), whole, atol=1e-6)
