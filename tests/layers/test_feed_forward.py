import numpy as np

from keras_transformer.layers import PositionwiseFeedForward
from tests.layer_checks import run_layer_checks


def test_layer_checks_and_formula(tmp_path):
    layer = PositionwiseFeedForward(32, name="feed_forward")
    x = np.random.normal(size=(2, 5, 8)).astype("float32")
    run_layer_checks(layer, {"x": x}, (2, 5, 8), 8 * 32 + 32 + 32 * 8 + 8, tmp_path=tmp_path)
    w1, b1, w2, b2 = layer.get_weights()
    np.testing.assert_allclose(layer(x), np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)


def test_each_position_alike():
    layer = PositionwiseFeedForward(16)
    x = np.random.normal(size=(1, 4, 8)).astype("float32")
    out = np.asarray(layer(x))
    np.testing.assert_allclose(np.asarray(layer(x[:, ::-1])), out[:, ::-1], atol=1e-6)
