# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Serve and query an exported `keras_transformer` SavedModel
#
# The SavedModel that `keras_transformer.export` writes translates raw UTF-8 strings: SentencePiece,
# the Transformer and beam search are all in its graph. This notebook loads one, inspects its
# signatures, builds the JSON request bodies that TF Serving's REST API takes, runs each through
# the loaded signature the way the server would, and compares n-best outputs and their scores.
#
# It serves `SAVED_MODEL`, by default `exported/numbers-tiny`, what `train_transformer.ipynb` exports
# offline; when that is absent it first trains the `tiny` preset on the offline `numbers` corpus for
# a few hundred steps and exports it there. The saved outputs come from that setting.

# %%
# Installs keras_transformer in a fresh Colab runtime; does nothing elsewhere or when it is installed.
import importlib.util
import os
import subprocess
import sys

IN_COLAB = importlib.util.find_spec("google.colab") is not None
# What pip installs: this repository's git URL (replace OWNER with its GitHub owner), a wheel or a path.
PACKAGE_SOURCE = os.environ.get("KT_PACKAGE_SOURCE", "git+https://github.com/OWNER/keras_transformer.git")
if IN_COLAB and importlib.util.find_spec("keras_transformer") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", PACKAGE_SOURCE], check=True)
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")  # oneDNN kernels on AMD CPUs too; set before TF loads

# %% [markdown]
# ## Parameters
#
# `SAVED_MODEL` is a model directory (`exported/<name>`, its latest version is served, as TF Serving
# does) or one version (`exported/<name>/<version>`). `SENTENCES` must be in the model's source
# language: number words for the offline model, English sentences for a WMT14 model.
# `SERVING_URL`, when set (e.g. `http://localhost:8501`), is a running TF Serving that is queried
# with the same request bodies.

# %% tags=["parameters"]
SAVED_MODEL = os.environ.get("KT_NOTEBOOK_SAVED_MODEL", "exported/numbers-tiny")
STEPS = int(os.environ.get("KT_NOTEBOOK_STEPS", "200"))  # training steps of the tiny model made if absent
SENTENCES = ["twenty-one", "three hundred and forty-five", "seven thousand, two hundred", "ninety-nine"]
SERVING_URL = os.environ.get("KT_SERVING_URL", "")
SEED = 0

# %%
import json
import pathlib
import urllib.request

import keras
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops the SavedModel uses

import keras_transformer as kt
from keras_transformer.data import DataConfig, get_corpus, load_or_train_tokenizer, make_corpus_dataset
from keras_transformer.decoding import length_penalty
from keras_transformer.export import Translator, export_translator

plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (6, 3)})  # small PNGs in the saved notebook

# %% [markdown]
# ## A SavedModel to serve

# %%
def make_tiny_export(model_dir, steps):
    """Trains the tiny preset on the offline numbers corpus and exports it as model_dir/<version>."""
    keras.utils.set_random_seed(SEED)
    corpus = get_corpus("numbers", num_train=4_000, num_validation=100, num_test=100, seed=SEED)
    data_config = DataConfig(dataset="numbers", vocab_size=400, tokens_per_batch=1_600, max_length=32,
                             min_bucket_length=32, shuffle_buffer_size=4_000, seed=SEED)
    workdir = pathlib.Path("runs") / model_dir.name
    tokenizer = load_or_train_tokenizer(workdir, corpus.training_sentences(),
                                        data_config.tokenizer_settings(corpus.name))
    model = kt.Transformer.from_preset("tiny", vocab_size=tokenizer.vocab_size)
    model.compile(optimizer=kt.paper_optimizer(model.config.d_model, kt.TrainConfig(warmup_steps=200)))
    model.fit(make_corpus_dataset(corpus, "train", tokenizer, data_config).repeat(), steps_per_epoch=steps,
              epochs=1, verbose=0)
    translator = Translator(model, tokenizer.model_proto, kt.DecodeConfig(extra_length=10))
    return export_translator(translator, model_dir)


saved_model = pathlib.Path(SAVED_MODEL)
if not saved_model.exists():
    print(f"{saved_model} not found: training the tiny preset for {STEPS} steps and exporting it there")
    saved_model = make_tiny_export(saved_model, STEPS)
elif not (saved_model / "saved_model.pb").exists():  # a model directory: its latest version
    saved_model = max((path for path in saved_model.iterdir() if path.name.isdigit()), key=lambda path: int(path.name))
model_name, version = saved_model.parent.name, saved_model.name
print(f"serving {saved_model}: model {model_name!r}, version {version}")
for path in sorted(saved_model.rglob("*")):
    if path.is_file():
        print(f"  {path.relative_to(saved_model)}  ({path.stat().st_size:,} bytes)")

# %% [markdown]
# ## Loading it and inspecting its signatures
#
# Only TensorFlow and tensorflow-text are needed to load it; `keras_transformer` is not imported by
# the graph. Each signature takes and returns named tensors: these names are the keys of the REST
# request and response.

# %%
loaded = tf.saved_model.load(str(saved_model))
for name, function in loaded.signatures.items():
    _, inputs = function.structured_input_signature
    print(name)
    for key, spec in sorted(inputs.items()):
        print(f"  input  {key:12s} {spec.dtype.name:8s} {spec.shape}")
    for key, spec in sorted(function.structured_outputs.items()):
        print(f"  output {key:12s} {spec.dtype.name:8s} {spec.shape}")
translator_settings = json.loads((saved_model / "assets" / "translator.json").read_text())
print("\ntranslator.json:", json.dumps(translator_settings, indent=1))

# %% [markdown]
# `saved_model_cli`, which comes with TensorFlow, shows the same from the command line:

# %%
# !saved_model_cli show --dir {saved_model} --tag_set serve --signature_def translate_nbest 2>/dev/null

# %% [markdown]
# ## The REST API's request bodies, answered as the server would
#
# TF Serving answers `POST /v1/models/<name>[/versions/<version>]:predict`. Its JSON body names a
# signature (`serving_default` when absent) and gives the inputs either in the row format,
# `"instances"`: one entry per sentence (a bare value when the signature has one input, otherwise
# an object of named inputs), or in the columnar format, `"inputs"`: one value per named input,
# which is the only way to pass `translate_nbest`'s scalar `beam_size` and `alpha`. The answer is
# `{"predictions": [...]}` (one object per row) or `{"outputs": {...}}` respectively.
#
# `predict` below does what the server does with such a body: it converts the JSON values to
# tensors of the signature's dtypes, calls the signature, and writes the outputs back as JSON.

# %%
def predict(loaded, body):
    """The JSON response TF Serving gives to a :predict request body (a JSON string)."""
    request = json.loads(body)
    function = loaded.signatures[request.get("signature_name", "serving_default")]
    _, specs = function.structured_input_signature
    if "instances" in request:
        rows = request["instances"]
        columns = {key: [row[key] for row in rows] for key in specs} if isinstance(rows[0], dict) \
            else {next(iter(specs)): rows}
    else:
        columns = request["inputs"] if isinstance(request["inputs"], dict) else {next(iter(specs)): request["inputs"]}
    outputs = function(**{key: tf.constant(value, specs[key].dtype) for key, value in columns.items()})
    outputs = {key: to_json(value.numpy()) for key, value in outputs.items()}
    if "instances" in request:
        return json.dumps({"predictions": [dict(zip(outputs, row)) for row in zip(*outputs.values())]},
                          ensure_ascii=False)
    return json.dumps({"outputs": outputs}, ensure_ascii=False)


def to_json(array):
    """A numpy output as JSON values: strings as UTF-8 text, floats and ints as numbers."""
    if array.dtype == object:
        return np.vectorize(lambda text: text.decode("utf-8"), otypes=[object])(array).tolist()
    return array.tolist()


requests = {
    "serving_default": {"signature_name": "serving_default", "instances": SENTENCES},
    "translate_nbest": {"signature_name": "translate_nbest",
                        "inputs": {"inputs": SENTENCES[:2], "beam_size": 3, "alpha": 0.6}},
    "score": {"signature_name": "score",
              "instances": [{"source": SENTENCES[0], "target": "einundzwanzig"},
                            {"source": SENTENCES[0], "target": "zweiundzwanzig"}]},
}
responses = {}
for name, request in requests.items():
    body = json.dumps(request, ensure_ascii=False)
    responses[name] = predict(loaded, body)
    print(f"POST /v1/models/{model_name}:predict\n  {body}\n  -> {responses[name]}\n")

# %% [markdown]
# The same requests against a real server: start TF Serving on the model directory (it serves the
# highest version and replays the warm-up requests in `assets.extra/` before answering)
#
#     docker run --rm -p 8501:8501 -v "$PWD/exported/numbers-tiny:/models/numbers-tiny" \
#         -e MODEL_NAME=numbers-tiny tensorflow/serving:2.20.0
#
# then send a body, e.g.
# `curl -d '{"instances": ["twenty-one"]}' http://localhost:8501/v1/models/numbers-tiny:predict`.
# (The 2.20 image links TF Text 2.20; the export uses only core TensorFlow ops and the three
# SentencePiece ops that TF Text 2.20 has too, so it loads there.)
# With `SERVING_URL` set, the next cell posts every request above and compares the answers.

# %%
if SERVING_URL:
    for name, request in requests.items():
        http_request = urllib.request.Request(f"{SERVING_URL}/v1/models/{model_name}:predict",
                                              data=json.dumps(request).encode("utf-8"))
        with urllib.request.urlopen(http_request, timeout=60) as answer:
            served = json.loads(answer.read())
        print(name, "server:", served, "\n  here:", json.loads(responses[name]))
else:
    print("SERVING_URL not set: no server queried")

# %% [markdown]
# ## n-best lists and their scores
#
# `translate_nbest` returns the whole beam, best first. A translation's score is its
# log-probability divided by the GNMT length penalty `((5 + length) / 6) ** alpha` (length with
# EOS); the `score` signature gives the log-probability of any target by forced decoding, so the
# two can be checked against each other. alpha = 0 ranks by log-probability alone; a larger alpha
# favours longer outputs.

# %%
beam_size, alpha = min(6, translator_settings["max_beam_size"]), 0.6  # larger beams are clamped to the maximum
nbest = loaded.signatures["translate_nbest"](inputs=tf.constant(SENTENCES), beam_size=tf.constant(beam_size),
                                             alpha=tf.constant(alpha))
translations, beam_scores = nbest["translations"].numpy(), nbest["scores"].numpy()  # (B, W)
for sentence, texts, scores in zip(SENTENCES, translations, beam_scores):
    forced = loaded.signatures["score"](source=tf.constant([sentence] * len(texts)), target=tf.constant(texts))
    penalty = length_penalty(forced["lengths"], alpha).numpy()
    print(f"{sentence}\n  {'beam score':>10s} {'log-prob':>9s} {'/ penalty':>9s}  translation")
    for text, score, log_prob, divisor in zip(texts, scores, forced["scores"].numpy(), penalty):
        print(f"  {score:10.3f} {log_prob:9.3f} {log_prob / divisor:9.3f}  {text.decode('utf-8')}")

# %%
fig, ax = plt.subplots()
for sentence, scores in zip(SENTENCES, beam_scores):
    ax.plot(np.arange(1, beam_size + 1), scores, marker="o", label=sentence)
ax.set(xlabel="rank in the beam", ylabel="beam score", title=f"n-best scores, beam {beam_size}, alpha {alpha}")
ax.legend(fontsize="small")
plt.show()

# %% [markdown]
# The best translation as the beam size and alpha change (beam 1 is greedy decoding):

# %%
for beam in sorted({1, 4, translator_settings["max_beam_size"]}):
    for alpha in (0.0, 2.0):
        result = loaded.signatures["translate_nbest"](inputs=tf.constant(SENTENCES[:2]), beam_size=tf.constant(beam),
                                                      alpha=tf.constant(alpha))
        best = [f"{text.decode('utf-8')} ({score:.3f})"
                for text, score in zip(result["translations"].numpy()[:, 0], result["scores"].numpy()[:, 0])]
        print(f"beam {beam}, alpha {alpha}: " + " | ".join(best))
