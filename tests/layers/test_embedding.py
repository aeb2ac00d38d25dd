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
