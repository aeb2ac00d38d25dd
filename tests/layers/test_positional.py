import math

import numpy as np
import pytest

from keras_transformer.layers import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from keras_transformer.layers.positional import sinusoid_table
from tests.layer_checks import run_layer_checks


def test_sinusoids_follow_the_paper():
    table = sinusoid_table(60, 8)
    for pos in (0, 1, 17, 59):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert table[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_layer_checks_and_start(tmp_path):
    layer = SinusoidalPositionalEncoding(20, name="positional")
    x = np.zeros((2, 4, 8), "float32")
    out = run_layer_checks(layer, {"x": x}, (2, 4, 8), 0, tmp_path=tmp_path)
    np.testing.assert_allclose(out[0], sinusoid_table(20, 8)[:4], atol=1e-6)
    np.testing.assert_allclose(layer(x[:, :1], start=3)[0, 0], sinusoid_table(20, 8)[3], atol=1e-6)


def test_learned_layer_checks(tmp_path):
    layer = LearnedPositionalEmbedding(20, name="learned_positional")
    x = np.random.normal(size=(2, 4, 8)).astype("float32")
    run_layer_checks(layer, {"x": x}, (2, 4, 8), 20 * 8, tmp_path=tmp_path)
    np.testing.assert_allclose(layer(x) - x, np.broadcast_to(layer.get_weights()[0][:4], (2, 4, 8)), atol=1e-6)


def test_too_long_input_is_named():
    with pytest.raises(ValueError, match="exceeds max_length=5"):
        SinusoidalPositionalEncoding(5)(np.zeros((1, 6, 8), "float32"))
