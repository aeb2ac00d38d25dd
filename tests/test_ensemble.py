"""TransformerEnsemble on the tiny model trained on `numbers` and a perturbed copy of it: its
distribution is the members' mean, its cached beam search equals a full recomputation, and it
translates, scores and exports as one model does."""
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import BOS_ID, EOS_ID, Transformer, TransformerConfig
from keras_transformer import export
from keras_transformer.data import SubwordTokenizer
from keras_transformer.decoding import beam_search
from keras_transformer.ensemble import TransformerEnsemble
from keras_transformer.precision import model_in_precision
from tests.test_export import decode_both_ways, source_ids_of
from tests.trained_tiny import DECODE_CONFIG, SENTENCES, tiny_workdir  # noqa: F401


@pytest.fixture(scope="module")
def members(tiny_workdir):
    """(the trained tiny model, a copy with noise on every weight, the SubwordTokenizer)."""
    model, sentencepiece_proto, _ = export.load_model_from_workdir(tiny_workdir)
    other = Transformer(model.config)
    other.build()
    generator = np.random.default_rng(0)
    for target, source in zip(other.weights, model.weights):
        value = source.numpy()
        target.assign(value + 0.05 * generator.standard_normal(value.shape).astype(value.dtype))
    return model, other, SubwordTokenizer(sentencepiece_proto)


def test_its_distribution_is_the_mean_of_the_members(members):
    first, second, tokenizer = members
    source_ids = source_ids_of(tokenizer, SENTENCES)
    target_ids = tf.constant([[BOS_ID, 5, 9, 12]] * len(SENTENCES))
    probabilities = [tf.nn.softmax(member((source_ids, target_ids), training=False)).numpy()
                     for member in (first, second)]
    assert np.abs(probabilities[0] - probabilities[1]).max() > 1e-3  # the members differ
    log_probs = TransformerEnsemble([first, second])((source_ids, target_ids), training=False)
    np.testing.assert_allclose(np.exp(log_probs.numpy()), (probabilities[0] + probabilities[1]) / 2,
                               rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_cached_beam_search_equals_full_recomputation(members, beam_size):
    first, second, tokenizer = members
    ensemble = TransformerEnsemble([first, second])
    cached, full = decode_both_ways(ensemble, source_ids_of(tokenizer, SENTENCES), beam_size, max_length=12)
    np.testing.assert_array_equal(cached["ids"].numpy(), full["ids"].numpy())
    np.testing.assert_allclose(cached["scores"].numpy(), full["scores"].numpy(), rtol=1e-4, atol=1e-4)


def test_one_member_decodes_as_that_member_and_groups_change_nothing(members):
    first, second, tokenizer = members
    source_ids = source_ids_of(tokenizer, SENTENCES)
    batch, max_lengths = len(SENTENCES), tf.fill([len(SENTENCES)], 12)

    def search(model, groups=1):
        step_fn, cache = model.decoding_step_fn(source_ids, 3, cache_length=12, parallel_groups=groups)
        return beam_search(step_fn, cache, batch, 3, max_lengths, BOS_ID, EOS_ID, max_length=12)

    alone, single = search(first), search(TransformerEnsemble([first]))
    np.testing.assert_array_equal(single["ids"].numpy(), alone["ids"].numpy())
    np.testing.assert_allclose(single["scores"].numpy(), alone["scores"].numpy(), rtol=1e-5, atol=1e-5)
    pair = TransformerEnsemble([first, second])
    one_group, two_groups = search(pair), search(pair, groups=2)  # logits in two vocabulary blocks
    np.testing.assert_array_equal(two_groups["ids"].numpy(), one_group["ids"].numpy())
    np.testing.assert_allclose(two_groups["scores"].numpy(), one_group["scores"].numpy(), rtol=1e-5, atol=1e-5)


def test_members_must_share_the_vocabulary_and_length(members):
    first, _, _ = members
    for field, value in (("vocab_size", first.config.vocab_size + 8), ("max_length", 64)):
        other = Transformer(TransformerConfig.from_preset("tiny", **{
            "vocab_size": first.config.vocab_size, "max_length": first.config.max_length, field: value}))
        other.build()
        with pytest.raises(ValueError, match=f"member 1 has {field}={value}, member 0 has"):
            TransformerEnsemble([first, other])
    with pytest.raises(ValueError, match="at least one member"):
        TransformerEnsemble([])


def test_its_export_translates_and_scores_as_in_python(members, tmp_path):
    first, second, tokenizer = members
    translator = export.Translator(TransformerEnsemble([first, second]), tokenizer.model_proto, DECODE_CONFIG,
                                   max_beam_size=2)
    expected = translator.translate(tf.constant(SENTENCES))
    loaded = tf.saved_model.load(str(export.export_translator(translator, tmp_path / "ensemble", version=1)))
    served = loaded.signatures["serving_default"](inputs=tf.constant(SENTENCES))
    np.testing.assert_array_equal(served["translations"].numpy(), expected["translations"].numpy())
    np.testing.assert_allclose(served["scores"].numpy(), expected["scores"].numpy(), rtol=1e-5, atol=1e-5)
    # The score signature scores with the ensemble: its translation's log-probability, before the
    # length penalty, is the search's.
    scored = loaded.signatures["score"](source=tf.constant(SENTENCES), target=served["translations"])
    penalty = ((5.0 + scored["lengths"].numpy()) / 6.0) ** DECODE_CONFIG.alpha
    np.testing.assert_allclose(scored["scores"].numpy() / penalty, served["scores"].numpy(), rtol=1e-4, atol=1e-4)


def test_in_bfloat16_every_member_is_copied_into_it(members):
    first, second, tokenizer = members
    ensemble = model_in_precision(TransformerEnsemble([first, second]), "bfloat16")
    assert isinstance(ensemble, TransformerEnsemble) and ensemble.dtype_policy.name == "bfloat16"
    assert {weight.dtype for member in ensemble.members for weight in member.weights} == {"bfloat16"}
    float32 = export.Translator(TransformerEnsemble([first, second]), tokenizer.model_proto, DECODE_CONFIG)
    bfloat16 = export.Translator(ensemble, tokenizer.model_proto, DECODE_CONFIG)
    same = (float32.translate(tf.constant(SENTENCES))["translations"].numpy()
            == bfloat16.translate(tf.constant(SENTENCES))["translations"].numpy())
    assert same.sum() >= len(SENTENCES) - 1
