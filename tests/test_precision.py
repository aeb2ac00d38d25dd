"""keras_transformer.precision: reduced-precision copies of a model, the float16 range check, the
CPU's bfloat16 flags and the warning where they are missing."""
import logging

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, precision
from keras_transformer.export import Translator

# Abridged /proc/cpuinfo of the two kinds of x86 CPU, and of an Arm one.
CPUINFO_AVX2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n\nprocessor\t: 1\n"
CPUINFO_AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
CPUINFO_ZEN4 = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
CPUINFO_ARM = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


@pytest.fixture(scope="module")
def tiny_model():
    return Transformer.from_preset("tiny", vocab_size=64)


def test_an_unknown_precision_is_refused_listing_the_valid_ones(tiny_model):
    with pytest.raises(ValueError, match="'int8': expected one of float32, bfloat16, float16"):
        precision.check_precision("int8")
    with pytest.raises(ValueError, match="expected one of float32, bfloat16, float16"):
        Translator(tiny_model, b"unused", precision="mixed_bfloat16")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_copy_stores_its_weights_in_that_dtype_and_gives_float32_logits(tiny_model, dtype):
    copy = precision.model_in_precision(tiny_model, dtype)
    assert copy is not tiny_model and copy.config == tiny_model.config
    assert {weight.dtype for weight in copy.weights} == {dtype}
    assert {weight.dtype for weight in tiny_model.weights} == {"float32"}  # the original is untouched
    for original, reduced in zip(tiny_model.weights, copy.weights):
        np.testing.assert_array_equal(reduced.numpy(), tf.cast(original.value, dtype).numpy())
    source = tf.constant([[5, 6, 7, 2], [8, 9, 2, 0]])
    target = tf.constant([[1, 5, 6], [1, 8, 0]])
    logits, expected = copy((source, target)), tiny_model((source, target))
    assert logits.dtype == tf.float32
    # Random tiny weights give logits of about +-3; bfloat16 keeps 8 bits of mantissa, float16 11.
    np.testing.assert_allclose(logits, expected, atol=0.1 if dtype == "bfloat16" else 0.02)
    assert not np.allclose(logits, expected, atol=1e-6)  # it did compute in the reduced precision
    step_fn, cache = copy.decoding_step_fn(source, beam_size=2, cache_length=4)
    assert {t.dtype for t in tf.nest.flatten(cache) if t.dtype.is_floating} == {tf.as_dtype(dtype)}  # keys, values
    step_logits, _ = step_fn(tf.fill([4], 1), tf.constant(0), cache)
    assert step_logits.dtype == tf.float32


def test_a_model_already_in_the_precision_is_returned_as_it_is(tiny_model):
    assert precision.model_in_precision(tiny_model, "float32") is tiny_model
    reduced = precision.model_in_precision(tiny_model, "bfloat16")
    assert precision.model_in_precision(reduced, "bfloat16") is reduced
    back = precision.model_in_precision(reduced, "float32")
    assert {weight.dtype for weight in back.weights} == {"float32"}


def test_float16_refuses_a_weight_beyond_its_range_naming_it():
    model = Transformer.from_preset("tiny", vocab_size=64)
    bias = model.decoder.layer_1.feed_forward.inner_bias
    bias.assign(tf.tensor_scatter_nd_update(bias.value, [[3]], [70_000.0]))
    named = r"float16.*decoder/layer_1/feed_forward/inner_bias \(largest magnitude 70000\)"
    with pytest.raises(ValueError, match=named):
        precision.model_in_precision(model, "float16")
    with pytest.raises(ValueError, match="inner_bias"):
        Translator(model, b"unused", precision="float16")
    # bfloat16 has float32's range: the same model converts.
    reduced = precision.model_in_precision(model, "bfloat16")
    assert float(reduced.decoder.layer_1.feed_forward.inner_bias[3]) == pytest.approx(70_000, rel=2 ** -8)


def test_bfloat16_cpu_flags():
    assert precision.cpu_has_bfloat16(CPUINFO_AVX2) is False
    assert precision.cpu_has_bfloat16(CPUINFO_AMX) is True
    assert precision.cpu_has_bfloat16(CPUINFO_ZEN4) is True
    assert precision.cpu_has_bfloat16(CPUINFO_ARM) is True
    assert precision.cpu_has_bfloat16("no flags here") is None


def test_bfloat16_warns_once_on_a_cpu_without_bfloat16(monkeypatch, caplog):
    monkeypatch.setattr(precision, "_warned_slow", False)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.precision"):
        assert not precision.warn_if_slow_here("bfloat16", CPUINFO_AMX)
        assert not precision.warn_if_slow_here("float32", CPUINFO_AVX2)
        assert not precision.warn_if_slow_here("float16", CPUINFO_AVX2)
        assert precision.warn_if_slow_here("bfloat16", CPUINFO_AVX2)
        assert not precision.warn_if_slow_here("bfloat16", CPUINFO_AVX2)  # once per process
    assert len(caplog.records) == 1
    assert "no bfloat16 arithmetic" in caplog.text and "slower than float32" in caplog.text


def test_a_bfloat16_translator_warns_once_on_a_cpu_without_bfloat16(tiny_model, monkeypatch, caplog):
    monkeypatch.setattr(precision, "_warned_slow", False)
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo_text=None: {"avx2", "fma"})
    with caplog.at_level(logging.WARNING, logger="keras_transformer.precision"):
        Translator(tiny_model, b"unused", precision="float32")
        assert not caplog.records
        for _ in range(2):
            translator = Translator(tiny_model, b"unused", precision="bfloat16")
    assert len(caplog.records) == 1
    assert translator.settings()["precision"] == "bfloat16"
