"""The Translator SavedModel on a tiny model trained on `numbers`: restoring a run, decoding equal to
reference decoders, the exported signatures equal to in-Python decoding, bad input, atomic export,
warm-up records, the bfloat16 and float16 exports of the same weights, and what a server sees (a
fresh process, saved_model_cli, the op types and their CPU kernels)."""
import json
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import BOS_ID, EOS_ID, PAD_ID, Transformer, TransformerConfig
from keras_transformer import export
from keras_transformer.config import MAX_ALPHA
from keras_transformer.data import NumbersCorpus, SubwordTokenizer
from keras_transformer.decoding import beam_search, greedy_decode
from keras_transformer.model import transposed_here
from pipelines import export as export_pipeline
from tests.op_lists import PYTHON_OPS, SENTENCEPIECE_OPS, core_op_names, list_ops  # noqa: F401
from tests.trained_tiny import DECODE_CONFIG, REFERENCE_WEIGHTS, SENTENCES, tiny_saved_model, tiny_workdir  # noqa: F401

REPOSITORY = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _seeded():
    """Replaces tests/conftest.py's for this module: its tf.random.set_seed clears TensorFlow's eager
    caches, so every test would instantiate the SavedModel's functions anew (1 to 2 s per signature).
    These tests draw no random numbers."""
    keras.config.set_dtype_policy("float32")
    yield


@pytest.fixture(scope="module")
def trained(tiny_workdir):
    """(model, SubwordTokenizer, decode config) restored from the workdir's latest checkpoint."""
    model, sentencepiece_proto, decode_config = export.load_model_from_workdir(tiny_workdir)
    return model, SubwordTokenizer(sentencepiece_proto), decode_config


@pytest.fixture(scope="module")
def loaded(tiny_saved_model):
    return tf.saved_model.load(str(tiny_saved_model))


@pytest.fixture(scope="module")
def bfloat16_saved_model(tiny_workdir, tmp_path_factory):
    """The trained weights of tiny_saved_model, exported by `python -m pipelines.export --precision
    bfloat16` (in this process)."""
    export_dir = tmp_path_factory.mktemp("bfloat16") / "tiny"
    return export_pipeline.main(["--workdir", str(tiny_workdir), "--export-dir", str(export_dir),
                                 "--precision", "bfloat16"])


@pytest.fixture(scope="module")
def float16_saved_model(trained, tmp_path_factory):
    """The same weights in float16 (translate_nbest up to beam 2 only, to export faster)."""
    model, tokenizer, decode_config = trained
    translator = export.Translator(model, tokenizer.model_proto, decode_config, max_beam_size=2, precision="float16")
    return export.export_translator(translator, tmp_path_factory.mktemp("float16") / "tiny", version=1)


@pytest.fixture(scope="module")
def loaded_bfloat16(bfloat16_saved_model):
    return tf.saved_model.load(str(bfloat16_saved_model))


def source_ids_of(tokenizer, sentences):
    """(B, S) ids with EOS, 0-padded, tokenized outside the exported graph."""
    tokens = tokenizer.tokenize(tf.constant(sentences))
    return tf.concat([tokens, tf.fill([tokens.nrows(), 1], EOS_ID)], axis=1).to_tensor(PAD_ID)


def full_recomputation_step_fn(model, source_ids, beam_size):
    """The reference: every step reruns model((source, prefix)) on the whole prefix; the cache is
    the prefix (B*W, L), which beam search reorders like any cache."""
    source = tf.repeat(source_ids, beam_size, axis=0)  # (B*W, S), batch-major as beam search wants

    def step_fn(ids, step, prefix):
        prefix = tf.where(tf.range(tf.shape(prefix)[1]) == step, ids[:, None], prefix)
        logits = model((source, prefix[:, :step + 1]), training=False)  # (B*W, step + 1, V)
        return logits[:, -1, :], prefix

    return step_fn


def decode_both_ways(model, source_ids, beam_size, max_length, alpha=0.6):
    batch_size = int(source_ids.shape[0])
    max_lengths = tf.fill([batch_size], max_length)
    cached_fn, cache = model.decoding_step_fn(source_ids, beam_size, cache_length=max_length)
    cached = beam_search(cached_fn, cache, batch_size, beam_size, max_lengths, BOS_ID, EOS_ID,
                         alpha=alpha, max_length=max_length)
    full = beam_search(full_recomputation_step_fn(model, source_ids, beam_size),
                       tf.zeros([batch_size * beam_size, max_length], tf.int32), batch_size, beam_size,
                       max_lengths, BOS_ID, EOS_ID, alpha=alpha, max_length=max_length)
    return cached, full


# Restoring a run directory.

def test_workdir_checkpoint_restores_the_trained_weights(tiny_workdir, trained):
    model = trained[0]
    reference = Transformer(model.config)
    reference.build()
    reference.load_weights(str(tiny_workdir.parent / REFERENCE_WEIGHTS))
    for restored, expected in zip(model.trainable_variables, reference.trainable_variables):
        np.testing.assert_array_equal(restored.numpy(), expected.numpy(), err_msg=restored.path)
    by_weights, _, _ = export.load_model_from_workdir(tiny_workdir,
                                                      weights=tiny_workdir.parent / REFERENCE_WEIGHTS)
    by_directory, _, _ = export.load_model_from_workdir(tiny_workdir, checkpoint=tiny_workdir / "checkpoints")
    for other in (by_weights, by_directory):
        for restored, expected in zip(other.trainable_variables, reference.trainable_variables):
            np.testing.assert_array_equal(restored.numpy(), expected.numpy())


def test_workdir_errors_name_the_path(tiny_workdir, tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nowhere")):
        export.load_model_from_workdir(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="model_config.json"):
        export.load_model_from_workdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="ckpt-99"):
        export.load_model_from_workdir(tiny_workdir, checkpoint=tiny_workdir / "checkpoints" / "ckpt-99")
    with pytest.raises(ValueError, match="not both"):
        export.load_model_from_workdir(tiny_workdir, checkpoint="a", weights="b")


# Decoding with the trained model.

def test_cached_greedy_decoding_is_the_full_models_argmax_until_eos(trained):
    model, tokenizer, _ = trained
    source_ids = source_ids_of(tokenizer, SENTENCES)
    max_length = 12
    step_fn, cache = model.decoding_step_fn(source_ids, 1, cache_length=max_length)
    greedy = greedy_decode(step_fn, cache, len(SENTENCES), tf.fill([len(SENTENCES)], max_length), BOS_ID,
                           EOS_ID, max_length=max_length)
    prefix = tf.fill([len(SENTENCES), 1], BOS_ID)
    for _ in range(max_length):
        logits = model((source_ids, prefix), training=False)[:, -1]
        prefix = tf.concat([prefix, tf.argmax(logits, -1, output_type=tf.int32)[:, None]], axis=1)
    for row, length in enumerate(greedy["lengths"].numpy()):
        np.testing.assert_array_equal(greedy["ids"][row, :length], prefix[row, 1:length + 1])
        assert length == max_length or prefix[row, length] == EOS_ID


@pytest.mark.parametrize("beam_size", [1, 4])
def test_cached_decoding_equals_full_recomputation(trained, beam_size):
    model, tokenizer, _ = trained
    source_ids = source_ids_of(tokenizer, SENTENCES)
    cached, full = decode_both_ways(model, source_ids, beam_size, max_length=12)
    np.testing.assert_array_equal(cached["ids"], full["ids"])
    np.testing.assert_array_equal(cached["lengths"], full["lengths"])
    np.testing.assert_allclose(cached["scores"], full["scores"], rtol=1e-4, atol=1e-5)
    translations = tokenizer.detokenize(cached["ids"][:, 0]).numpy()
    assert translations[0] == "einundzwanzig".encode()  # it did learn something


# The exported signatures.

def python_translate(trained, sentences, beam_size, alpha):
    """In-Python decoding of the SavedModel's recipe: max output length = source tokens with EOS
    + extra_length; returns (translations (B, W) bytes, scores (B, W))."""
    model, tokenizer, decode_config = trained
    source_ids = source_ids_of(tokenizer, sentences)
    max_lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1) + decode_config.extra_length
    max_length = int(tf.reduce_max(max_lengths))
    step_fn, cache = model.decoding_step_fn(source_ids, beam_size, cache_length=max_length)
    result = beam_search(step_fn, cache, len(sentences), beam_size, max_lengths, BOS_ID, EOS_ID,
                         alpha=alpha, max_length=max_length)
    ids = tf.reshape(result["ids"], [len(sentences) * beam_size, -1])
    texts = tokenizer.detokenize(ids).numpy().reshape(len(sentences), beam_size)
    return texts, result["scores"].numpy()


def test_saved_model_equals_in_python_decoding(trained, loaded):
    texts, scores = python_translate(trained, SENTENCES, DECODE_CONFIG.beam_size, DECODE_CONFIG.alpha)
    served = loaded.signatures["serving_default"](inputs=tf.constant(SENTENCES))
    np.testing.assert_array_equal(served["translations"].numpy(), texts[:, 0])
    np.testing.assert_allclose(served["scores"].numpy(), scores[:, 0], rtol=1e-5, atol=1e-5)

    texts, scores = python_translate(trained, SENTENCES, 3, 1.0)
    nbest = loaded.signatures["translate_nbest"](inputs=tf.constant(SENTENCES), beam_size=tf.constant(3),
                                                 alpha=tf.constant(1.0))
    np.testing.assert_array_equal(nbest["translations"].numpy(), texts)
    np.testing.assert_allclose(nbest["scores"].numpy(), scores, rtol=1e-5, atol=1e-5)


def test_score_is_the_forced_decoding_log_probability(trained, loaded):
    model, tokenizer, _ = trained
    targets = ["einundzwanzig", "dreihundertfünfundvierzig", "siebentausendzweihundert", "neunundneunzig",
               "hundertsechs"]
    scored = loaded.signatures["score"](source=tf.constant(SENTENCES), target=tf.constant(targets))
    target_tokens = tokenizer.tokenize(tf.constant(targets))
    for row, tokens in enumerate(target_tokens.numpy()):
        log_probs = tf.nn.log_softmax(model((source_ids_of(tokenizer, SENTENCES[row:row + 1]),
                                             tf.constant([[BOS_ID, *tokens]])), training=False)[0])
        expected = sum(log_probs[position, token] for position, token in enumerate([*tokens, EOS_ID]))
        np.testing.assert_allclose(scored["scores"][row], expected, rtol=1e-5, atol=1e-5)
        assert scored["lengths"][row] == len(tokens) + 1
    with pytest.raises(tf.errors.InvalidArgumentError, match="as many strings"):
        loaded.signatures["score"](source=tf.constant(SENTENCES), target=tf.constant(targets[:2]))


BAD_INPUTS = [b"", b"   \t ", "\u00a0 \u3000\u2028\x1c".encode(), " ".join(["twenty-one"] * 10_000).encode(),
              b"\xff\xfe seven \xc3\x28 \xed\xa0\x80", "🚀 ☃ 👩‍👩‍👧".encode(),
              "twenty-one Привет 你好 مرحبا שלום ñandú".encode(), b"\x00\x01", b"twenty-one"]


def assert_valid_utf8(strings):
    for value in np.ravel(strings):
        value.decode("utf-8")  # raises on invalid UTF-8


def test_bad_input_never_fails_and_keeps_one_output_per_input(loaded):
    inputs = tf.constant(BAD_INPUTS)
    served = loaded.signatures["serving_default"](inputs=inputs)
    assert served["translations"].shape == served["scores"].shape == (len(BAD_INPUTS),)
    assert_valid_utf8(served["translations"].numpy())
    # Empty after stripping (Unicode's whitespace too, as the training corpora are stripped)
    assert list(served["translations"].numpy()[:3]) == [b"", b"", b""]
    assert list(served["scores"].numpy()[:3]) == [0.0, 0.0, 0.0]
    assert np.all(np.isfinite(served["scores"].numpy()))
    assert served["translations"].numpy()[-1] == "einundzwanzig".encode()  # unharmed by its neighbours
    nbest = loaded.signatures["translate_nbest"](inputs=inputs, beam_size=tf.constant(2), alpha=tf.constant(0.6))
    assert nbest["translations"].shape == (len(BAD_INPUTS), 2)
    assert_valid_utf8(nbest["translations"].numpy())
    scored = loaded.signatures["score"](source=inputs, target=inputs)
    assert scored["scores"].shape == (len(BAD_INPUTS),)
    assert np.all(np.isfinite(scored["scores"].numpy()))


def test_long_input_is_cut_to_the_maximum_source_length(loaded, tiny_saved_model):
    settings = json.loads((tiny_saved_model / "assets" / export.TRANSLATOR_CONFIG_FILENAME).read_text())
    assert settings["max_source_length"] == 118  # min(256, tiny max_length 128 - extra_length 10)
    # Both are far longer than 117 tokens, so both are cut to the same first 117 tokens and EOS.
    long, longer = (" ".join(["twenty-one"] * words) for words in (200, 10_000))
    served = loaded.signatures["serving_default"](inputs=tf.constant([long, longer]))
    translations = served["translations"].numpy()
    assert translations[0] == translations[1]
    np.testing.assert_allclose(served["scores"][0], served["scores"][1], rtol=1e-5, atol=1e-5)


def test_empty_batch(loaded):
    empty = tf.constant([], tf.string)
    served = loaded.signatures["serving_default"](inputs=empty)
    assert served["translations"].shape == served["scores"].shape == (0,)
    nbest = loaded.signatures["translate_nbest"](inputs=empty, beam_size=tf.constant(4), alpha=tf.constant(0.6))
    assert nbest["translations"].shape == (0, 4)
    assert loaded.signatures["score"](source=empty, target=empty)["scores"].shape == (0,)


def test_nbest_beam_size_is_clamped_and_a_bad_alpha_is_refused(loaded):
    def nbest(beam_size, alpha):
        result = loaded.signatures["translate_nbest"](inputs=tf.constant(SENTENCES[:2]),
                                                      beam_size=tf.constant(beam_size), alpha=tf.constant(alpha))
        return result["translations"].numpy(), result["scores"].numpy()

    assert nbest(0, 0.6)[0].shape == nbest(-5, 0.6)[0].shape == (2, 1)
    assert nbest(1000, 0.6)[0].shape == (2, export.DEFAULT_MAX_BEAM_SIZE)
    for beam_size in range(1, export.DEFAULT_MAX_BEAM_SIZE + 1):
        translations, scores = nbest(beam_size, 0.6)
        assert translations.shape == (2, beam_size)
        assert np.all(np.diff(scores, axis=1) <= 0)  # best first
    for alpha in (-1.0, -1e-3, float("nan"), float("inf"), float("-inf"), MAX_ALPHA + 0.5, 30.0):
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"alpha must be a finite number in \[0, 10\]"):
            nbest(3, alpha)
    by_log_probability, with_penalty = nbest(3, 0.0), nbest(3, 2.0)  # both ends of the sensible range
    assert np.all(np.isfinite(by_log_probability[1])) and np.all(np.isfinite(with_penalty[1]))
    assert not np.allclose(by_log_probability[1], with_penalty[1])
    assert np.all(np.isfinite(nbest(3, MAX_ALPHA)[1]))  # the largest alpha taken


# The export itself.

def test_export_writes_assets_and_refuses_to_overwrite(tiny_saved_model, tiny_workdir):
    assets = tiny_saved_model / "assets"
    assert (assets / "sentencepiece.model").read_bytes() == (tiny_workdir / "sentencepiece.model").read_bytes()
    assert (TransformerConfig.from_json((assets / "model_config.json").read_text())
            == TransformerConfig.from_json((tiny_workdir / "model_config.json").read_text()))
    # The run's decode config, with the layout of the decoder's products as chosen for this CPU.
    assert (json.loads((assets / "decode_config.json").read_text())
            == {**DECODE_CONFIG.to_dict(), "transposed_kernels": transposed_here()})
    assert oct(tiny_saved_model.stat().st_mode & 0o777) == oct(0o755)
    assert sorted(p.name for p in tiny_saved_model.parent.iterdir()) == ["1"]  # no temporary left
    with pytest.raises(FileExistsError, match=str(tiny_saved_model)):
        export.export_translator(object(), tiny_saved_model.parent, version=1)


def test_export_traces_each_signature_once(trained, tmp_path):
    """tf.saved_model.save traces the signatures itself: a concrete function traced before the save
    would be traced again inside it (the save context is part of the tracing key), doubling the time."""
    model, tokenizer, decode_config = trained
    translator = export.Translator(model, tokenizer.model_proto, decode_config, max_beam_size=1)
    export.export_translator(translator, tmp_path / "exported", warmup_sentences=["a"])
    functions = [translator.translate, translator.translate_nbest, translator.score]
    assert [function.experimental_get_tracing_count() for function in functions] == [1, 1, 1]


class _SimulatedCrash(Exception):
    pass


@pytest.mark.parametrize("stage", ["saved_model", "warmup"])
def test_a_failed_export_leaves_nothing_behind(tmp_path, monkeypatch, stage, trained):
    """A crash half way leaves no version (TF Serving would load it) and no temporary directory."""
    model, tokenizer, decode_config = trained
    translator = export.Translator(model, tokenizer.model_proto, decode_config)
    monkeypatch.setattr(translator, "signatures", lambda: {})  # no tracing: save is simulated

    def half_written_save(obj, path, signatures=None):
        (pathlib.Path(path) / "saved_model.pb").write_bytes(b"half")  # a partial version
        (pathlib.Path(path) / "variables").mkdir()
        if stage == "saved_model":
            raise _SimulatedCrash()

    def crashing_warmup(*args):
        yield from ()
        raise _SimulatedCrash()

    monkeypatch.setattr(export.tf.saved_model, "save", half_written_save)
    monkeypatch.setattr(export, "_warmup_requests", crashing_warmup)
    export_dir = tmp_path / "exported" / "tiny"
    (export_dir / "3").mkdir(parents=True)
    with pytest.raises(_SimulatedCrash):
        export.export_translator(translator, export_dir)
    assert sorted(p.name for p in export_dir.iterdir()) == ["3"]
    assert not hasattr(translator, "asset_files")
    assert export.next_version(export_dir) == 4


@pytest.mark.parametrize("requested", [None, 5])
def test_two_exports_at_once_never_share_a_version(tmp_path, monkeypatch, requested, trained):
    """Another export renames its version into place while this one is saving: a version chosen
    here moves on to the next number, a version asked for is refused; the other one is untouched."""
    model, tokenizer, decode_config = trained
    translator = export.Translator(model, tokenizer.model_proto, decode_config)
    monkeypatch.setattr(translator, "signatures", lambda: {})  # no tracing: save is simulated
    export_dir = tmp_path / "exported" / "tiny"
    (export_dir / "4").mkdir(parents=True)
    taken = export_dir / ("5" if requested is None else str(requested))

    def save_while_another_export_lands(obj, path, signatures=None):
        (pathlib.Path(path) / "saved_model.pb").write_bytes(b"ours")
        taken.mkdir()
        (taken / "saved_model.pb").write_bytes(b"theirs")

    monkeypatch.setattr(export.tf.saved_model, "save", save_while_another_export_lands)
    monkeypatch.setattr(export, "_warmup_requests", lambda *args: iter(()))
    if requested is None:
        assert export.export_translator(translator, export_dir) == export_dir / "6"
        assert (export_dir / "6" / "saved_model.pb").read_bytes() == b"ours"
        assert sorted(p.name for p in export_dir.iterdir()) == ["4", "5", "6"]
    else:
        with pytest.raises(FileExistsError, match="written by another export meanwhile"):
            export.export_translator(translator, export_dir, version=requested)
        assert sorted(p.name for p in export_dir.iterdir()) == ["4", "5"]  # no temporary left
    assert (taken / "saved_model.pb").read_bytes() == b"theirs"


def answer_warmup_requests(saved_model, loaded, model_name):
    """Runs every warm-up request of the SavedModel directory on `loaded`, as TF Serving does when
    it loads the model; returns the signature names they asked, in their order."""
    from tensorflow_serving.apis import prediction_log_pb2

    path = saved_model / "assets.extra" / export.WARMUP_FILENAME
    signatures = []
    for record in tf.data.TFRecordDataset(str(path)).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        request = log.predict_log.request
        signatures.append(request.model_spec.signature_name)
        assert request.model_spec.name == model_name
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        outputs = loaded.signatures[request.model_spec.signature_name](**inputs)
        assert all(output.shape[0] == len(export.WARMUP_SENTENCES) for output in outputs.values())
    return signatures


def test_warmup_requests_are_prediction_logs_the_model_answers(tiny_saved_model, loaded):
    signatures = answer_warmup_requests(tiny_saved_model, loaded, "tiny")
    assert sorted(set(signatures)) == sorted(export.SIGNATURE_NAMES)


# Reduced precision: the same trained weights exported in bfloat16 and float16.

PRECISION_EXPORTS = {"float32": "tiny_saved_model", "bfloat16": "bfloat16_saved_model",
                     "float16": "float16_saved_model"}
# Each format's machine epsilon; a log-probability may be off by a few of them per token.
EPSILON = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}


def saved_weights(path):
    """{variable name: dtype} of a SavedModel's float weights, and the size of variables/ in bytes."""
    reader = tf.train.load_checkpoint(str(path / "variables" / "variables"))
    dtypes = {name: dtype for name, dtype in reader.get_variable_to_dtype_map().items()
              if dtype.is_floating}
    return dtypes, sum(file.stat().st_size for file in (path / "variables").iterdir())


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_a_reduced_precision_export_stores_its_weights_in_that_dtype_at_half_the_size(request, precision,
                                                                                      tiny_saved_model):
    path = request.getfixturevalue(PRECISION_EXPORTS[precision])
    float32_weights, float32_size = saved_weights(tiny_saved_model)
    weights, size = saved_weights(path)
    assert set(float32_weights.values()) == {tf.float32}
    assert len(weights) == len(float32_weights) > 60  # every weight of the tiny model
    assert set(weights.values()) == {tf.as_dtype(precision)}
    assert 0.45 < size / float32_size < 0.55, (size, float32_size)
    settings = json.loads((path / "assets" / export.TRANSLATOR_CONFIG_FILENAME).read_text())
    assert settings["precision"] == precision
    assert json.loads((tiny_saved_model / "assets" / export.TRANSLATOR_CONFIG_FILENAME).read_text())[
        "precision"] == "float32"


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_a_reduced_precision_export_translates_as_the_float32_one(request, precision, loaded):
    """On 100 sentences the tiny model has not seen (20 in float16, which CPUs emulate slowly): the
    same translations for nearly all, scores (float32 whatever the precision) within a few epsilons
    of the precision per token."""
    reduced = tf.saved_model.load(str(request.getfixturevalue(PRECISION_EXPORTS[precision])))
    count = 100 if precision == "bfloat16" else 20
    sources = tf.constant([source for source, _ in NumbersCorpus(100, 1, count, seed=11).pairs("test")])
    expected = loaded.signatures["serving_default"](inputs=sources)
    served = reduced.signatures["serving_default"](inputs=sources)
    assert served["scores"].dtype == tf.float32
    same = served["translations"].numpy() == expected["translations"].numpy()
    differing = zip(served["translations"].numpy()[~same], expected["translations"].numpy()[~same])
    assert same.mean() >= 0.95, list(differing)
    # Both score the float32 translations: the score signature in float32 against the reduced one.
    scored = reduced.signatures["score"](source=sources, target=expected["translations"])
    scored_expected = loaded.signatures["score"](source=sources, target=expected["translations"])
    assert scored["scores"].dtype == tf.float32
    np.testing.assert_array_equal(scored["lengths"], scored_expected["lengths"])
    tolerance = 8 * EPSILON[precision] * scored["lengths"].numpy()  # (B,), the tokens scored
    np.testing.assert_array_less(np.abs(scored["scores"] - scored_expected["scores"]), tolerance)
    # Beam scores: log-probability / lp(length) with lp >= 1, where the translations agree.
    beam_error = np.abs(served["scores"].numpy() - expected["scores"].numpy())[same]
    np.testing.assert_array_less(beam_error, tolerance[same])
    assert np.any(beam_error > 0)  # it did compute in the reduced precision


def test_evaluate_with_a_precision_translates_as_that_export(tiny_workdir, loaded_bfloat16, tmp_path):
    """`pipelines.evaluate --precision bfloat16` scores what the bfloat16 export of the same weights answers."""
    from pipelines import evaluate

    pairs = list(NumbersCorpus(100, 1, 40, seed=11).pairs("test"))
    test_file, output = tmp_path / "test.tsv", tmp_path / "hypotheses.txt"
    test_file.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    evaluate.main(["--workdir", str(tiny_workdir), "--dataset", f"test={test_file}", "--precision", "bfloat16",
                   "--output", str(output)])
    sources = tf.constant([source for source, _ in pairs])
    served = loaded_bfloat16.signatures["serving_default"](inputs=sources)["translations"].numpy()
    hypotheses = output.read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == len(pairs) == 40
    same = np.array([hypothesis == text.decode() for hypothesis, text in zip(hypotheses, served)])
    assert same.mean() >= 0.95, (same.mean(), [h for h, ok in zip(hypotheses, same) if not ok])


# What a model server sees.

def run_python(code, *args, timeout=300):
    """Runs code in a fresh interpreter (the repository on its path); returns its stdout."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY), "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                             env=env, cwd=REPOSITORY, timeout=timeout)
    assert process.returncode == 0, process.stderr[-3000:]
    return process.stdout


FRESH_PROCESS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops
loaded = tf.saved_model.load(sys.argv[1])
served = loaded.signatures["serving_default"](inputs=tf.constant(json.loads(sys.argv[2])))
print(json.dumps({"translations": [t.decode() for t in served["translations"].numpy()],
                  "scores": served["scores"].numpy().tolist(),
                  "ours": sorted(m for m in sys.modules if m.startswith("keras_transformer"))}))
"""


@pytest.mark.slow
def test_a_fresh_process_with_only_tensorflow_and_tensorflow_text_translates(tiny_saved_model, loaded):
    result = json.loads(run_python(FRESH_PROCESS, tiny_saved_model, json.dumps(SENTENCES)).splitlines()[-1])
    assert result["ours"] == []  # (tensorflow itself imports keras)
    expected = loaded.signatures["serving_default"](inputs=tf.constant(SENTENCES))
    assert result["translations"] == [t.decode() for t in expected["translations"].numpy()]
    np.testing.assert_allclose(result["scores"], expected["scores"].numpy(), rtol=1e-5, atol=1e-5)
    assert result["translations"][0] == "einundzwanzig"


# Every signature on the bad inputs, and translate_nbest with a refused alpha, as a server would run
# them, for each SavedModel given (one process: TensorFlow starts once).
FRESH_PROCESS_BAD_INPUTS = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops
inputs = tf.constant([text.encode("latin-1") for text in json.loads(sys.argv[1])])
for path in sys.argv[2:]:
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serving_default"](inputs=inputs)
    nbest = loaded.signatures["translate_nbest"](inputs=inputs, beam_size=tf.constant(2), alpha=tf.constant(0.6))
    scored = loaded.signatures["score"](source=inputs, target=inputs)
    try:
        loaded.signatures["translate_nbest"](inputs=inputs, beam_size=tf.constant(2), alpha=tf.constant(-1.0))
        refused = ""
    except tf.errors.InvalidArgumentError as error:
        refused = error.message
    print(json.dumps({"translations": [t.decode() for t in served["translations"].numpy()],
                      "scores": served["scores"].numpy().tolist(),
                      "nbest": [[t.decode() for t in row] for row in nbest["translations"].numpy()],
                      "scored": scored["scores"].numpy().tolist(),
                      "dtypes": [t.dtype.name for t in (served["scores"], nbest["scores"], scored["scores"])],
                      "refused": refused, "ours": sorted(m for m in sys.modules if m.startswith("keras_transformer"))}))
"""


@pytest.mark.slow
def test_a_fresh_process_answers_every_bad_input_in_reduced_precision(bfloat16_saved_model, float16_saved_model):
    latin1 = json.dumps([text.decode("latin-1") for text in BAD_INPUTS])  # any bytes through JSON
    lines = run_python(FRESH_PROCESS_BAD_INPUTS, latin1, bfloat16_saved_model, float16_saved_model).splitlines()
    for precision, line in zip(["bfloat16", "float16"], lines[-2:], strict=True):
        result = json.loads(line)
        assert result["ours"] == [], precision
        assert len(result["translations"]) == len(result["scored"]) == len(BAD_INPUTS)
        assert [len(row) for row in result["nbest"]] == [2] * len(BAD_INPUTS)
        assert result["translations"][:3] == ["", "", ""] and result["scores"][:3] == [0.0, 0.0, 0.0]
        assert result["translations"][-1] == "einundzwanzig", precision
        assert np.all(np.isfinite(result["scores"])) and np.all(np.isfinite(result["scored"]))
        assert result["dtypes"] == ["float32"] * 3
        assert "alpha must be a finite number in [0, 10]" in result["refused"]


@pytest.mark.slow
def test_saved_model_cli_lists_the_three_signatures_with_string_inputs(tiny_saved_model):
    process = subprocess.run(["saved_model_cli", "show", "--dir", str(tiny_saved_model), "--all"],
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    blocks = {block.split("']", 1)[0]: block for block in process.stdout.split("signature_def['")[1:]}
    assert set(export.SIGNATURE_NAMES) <= set(blocks)
    expected_inputs = {"serving_default": {"inputs"}, "translate_nbest": {"inputs"}, "score": {"source", "target"}}
    for name, string_inputs in expected_inputs.items():
        for input_name in string_inputs:
            assert f"inputs['{input_name}'] tensor_info:\n        dtype: DT_STRING" in blocks[name]


# What each precision's graph computes in: float32 for the log-softmax and scores (and everything in
# float32), the precision's own type for the weights and products.
FLOAT_TYPES = {"float32": {"DT_FLOAT"}, "bfloat16": {"DT_FLOAT", "DT_BFLOAT16"}, "float16": {"DT_FLOAT", "DT_HALF"}}


@pytest.mark.slow
def test_exported_graph_uses_only_core_tensorflow_and_sentencepiece_ops_with_cpu_kernels(
        tiny_saved_model, bfloat16_saved_model, float16_saved_model, core_op_names):  # noqa: F811
    for precision, saved_model in zip(["float32", "bfloat16", "float16"],
                                      [tiny_saved_model, bfloat16_saved_model, float16_saved_model], strict=True):
        result = list_ops(saved_model, core_op_names)
        registered = result["registered"]
        outside_core = {op for op, in_core in registered.items() if not in_core}
        assert outside_core == SENTENCEPIECE_OPS, f"{precision}: ops outside core TensorFlow: {sorted(outside_core)}"
        assert not set(registered) & PYTHON_OPS
        assert {"While", "TopKV2"} <= set(registered)  # the decoders are in the graph,
        assert {"If", "StatelessIf"} & set(registered)  # translate_nbest's choice between greedy and beam
        assert result["without_cpu_kernel"] == [], f"{precision}: nodes without a CPU kernel for their types"
        assert set(result["float_types"]) == FLOAT_TYPES[precision]
