# ---
# jupyter:
#   accelerator: GPU
#   jupytext:
#     formats: ipynb,py:percent
#     notebook_metadata_filter: accelerator
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
# # Train a Transformer with `keras_transformer`
#
# The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), trained with `model.fit`:
# a dataset, the paper's learning-rate schedule, training under the accelerator's distribution
# strategy with TensorBoard, beam-search translations, encoder-decoder attention of one sentence,
# and the SavedModel that TF Serving runs. Every piece comes from the `keras_transformer` package;
# this notebook defines no model code.
#
# * On Colab with network access it trains the `base` preset on WMT14 English-German (TFDS
#   downloads and prepares the corpus first, which takes a long time; pick a GPU or TPU runtime).
# * Without network access, or with `DATASET = "numbers"`, it trains the `tiny` preset on English ->
#   German number words that the package generates offline, in a few minutes on a CPU. The saved
#   outputs of this notebook come from that setting.

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
# Environment variables override them (CI runs this notebook with `KT_NOTEBOOK_DATASET=numbers`,
# `KT_NOTEBOOK_PRESET=tiny`, `KT_NOTEBOOK_TENSORBOARD=0`). `"auto"` means: WMT14 and `base` when
# TFDS is reachable, else the offline `numbers` corpus and `tiny`.

# %% tags=["parameters"]
DATASET = os.environ.get("KT_NOTEBOOK_DATASET", "auto")     # "wmt14", "numbers" or "auto"
PRESET = os.environ.get("KT_NOTEBOOK_PRESET", "auto")       # "tiny", "base", "big" or "auto"
STEPS = int(os.environ.get("KT_NOTEBOOK_STEPS", "0"))       # training steps; 0: the dataset's default
RUNS_DIR = os.environ.get("KT_NOTEBOOK_RUNS_DIR", "runs")  # the run writes runs/<dataset>-<preset>/
EXPORT_DIR = os.environ.get("KT_NOTEBOOK_EXPORT_DIR", "exported")
TENSORBOARD = os.environ.get("KT_NOTEBOOK_TENSORBOARD", "1") == "1"  # start TensorBoard inline
SEED = 0

# %%
import itertools
import pathlib
import socket

import keras
import matplotlib.pyplot as plt
import numpy as np
import sacrebleu
import sentencepiece
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the SentencePiece ops an exported SavedModel uses

import keras_transformer as kt
from keras_transformer.data import DataConfig, get_corpus, load_or_train_tokenizer, make_corpus_dataset
from keras_transformer.decoding import beam_search
from keras_transformer.export import Translator, export_translator
from keras_transformer.training.distribution import select_strategy  # train_wmt's rules: TPU, GPUs, else one device

plt.rcParams.update({"figure.dpi": 60, "figure.figsize": (6, 3)})  # small PNGs in the saved notebook
print("TensorFlow", tf.__version__, "| Keras", keras.__version__, "| keras_transformer", kt.__version__)


def tfds_reachable(timeout=3.0):
    """Whether the TFDS / WMT download servers answer at all."""
    try:
        socket.create_connection(("storage.googleapis.com", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


if DATASET == "auto":
    DATASET = "wmt14" if tfds_reachable() else "numbers"
if PRESET == "auto":
    PRESET = "base" if DATASET == "wmt14" else "tiny"
print(f"dataset {DATASET}, preset {PRESET}")

# %% [markdown]
# ## The dataset
#
# A shared SentencePiece vocabulary for source and target (section 5.1), and batches grouped by
# length under a token budget: `((source_ids (B, S), target_input_ids (B, T)), target_output_ids (B, T))`,
# token id 0 being padding.

# %%
keras.utils.set_random_seed(SEED)
if DATASET == "wmt14":
    corpus = get_corpus("wmt14")
    data_config = DataConfig(dataset="wmt14", vocab_size=32_000, tokenizer_sample_size=500_000,
                             tokens_per_batch=4_096, max_length=128)
    train_config = kt.config.TRAIN_PRESETS["base"]
    steps = STEPS or 2_000
else:
    corpus = get_corpus("numbers", num_train=4_000, num_validation=100, num_test=100, seed=SEED)
    # One bucket of 32 positions: every batch has one shape, so training traces its step once.
    data_config = DataConfig(dataset="numbers", vocab_size=400, tokens_per_batch=1_600, max_length=32,
                             min_bucket_length=32, shuffle_buffer_size=4_000, seed=SEED)
    train_config = kt.TrainConfig(train_steps=2_000, warmup_steps=200)
    steps = STEPS or 300

workdir = pathlib.Path(RUNS_DIR) / f"{DATASET}-{PRESET}"
tokenizer = load_or_train_tokenizer(workdir, corpus.training_sentences(), data_config.tokenizer_settings(corpus.name))
train_dataset = make_corpus_dataset(corpus, "train", tokenizer, data_config).repeat()
validation_dataset = make_corpus_dataset(corpus, "validation", tokenizer, data_config)
(source_ids, target_input_ids), target_output_ids = next(iter(train_dataset))
print(f"vocabulary: {tokenizer.vocab_size} pieces; first batch: source {source_ids.shape}, "
      f"target {target_input_ids.shape}")
print("a source:", tokenizer.detokenize(source_ids[:1]).numpy()[0].decode())
print("its target:", tokenizer.detokenize(target_output_ids[:1]).numpy()[0].decode())

# %% [markdown]
# ## The learning rate (section 5.3)
#
# `lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`: linear warm-up, then decay
# with the inverse square root of the step.

# %%
d_model = kt.TransformerConfig.from_preset(PRESET).d_model
schedule = kt.TransformerSchedule(d_model, train_config.warmup_steps)
schedule_steps = np.arange(max(train_config.train_steps, steps))
learning_rates = schedule(schedule_steps).numpy()
fig, ax = plt.subplots()
ax.plot(schedule_steps, learning_rates, label=f"d_model={d_model}, warmup_steps={train_config.warmup_steps}")
ax.axvspan(0, steps, color="tab:orange", alpha=0.2, label=f"this run: {steps} steps")
ax.set(xlabel="step", ylabel="learning rate", title="TransformerSchedule")
ax.legend()
plt.show()

# %% [markdown]
# ## Training under the accelerator's strategy
#
# `TPUStrategy` on a TPU runtime (Colab's, a TPU VM's or `TPU_NAME`'s), `MirroredStrategy` over the
# GPUs when there are any, otherwise the default strategy (one device): the rules of
# `python -m pipelines.train_wmt`. The model and its optimizer are created inside the strategy's
# scope; `compile()` uses the paper's Adam settings, label-smoothed loss and metrics.

# %%
strategy = select_strategy()
print(f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s)")
with strategy.scope():
    model = kt.Transformer.from_preset(PRESET, vocab_size=tokenizer.vocab_size)
    model.compile(optimizer=kt.paper_optimizer(model.config.d_model, train_config))
print(f"{PRESET}: {model.count_params():,} parameters")

# %% [markdown]
# TensorBoard shows the losses and metrics while `fit` runs (run the next cell before the
# training cell to watch it live).

# %%
# %load_ext tensorboard

# %%
log_dir = workdir / "logs"
if TENSORBOARD:  # off when run headless (CI): %tensorboard would leave a TensorBoard server running
    print(f"TensorBoard on {log_dir}")
    # %tensorboard --logdir $log_dir
else:
    print(f"TensorBoard: run `tensorboard --logdir {log_dir}`")

# %%
epochs = 10
history = model.fit(train_dataset, steps_per_epoch=max(steps // epochs, 1), epochs=epochs,
                    validation_data=validation_dataset, verbose=2,
                    callbacks=[keras.callbacks.TensorBoard(log_dir=str(log_dir), write_graph=False)])

# %%
epoch_steps = max(steps // epochs, 1) * np.arange(1, epochs + 1)
fig, ax = plt.subplots()
ax.plot(epoch_steps, history.history["loss"], marker="o", label="training")
ax.plot(epoch_steps, history.history["val_loss"], marker="o", label="validation")
ax.set(xlabel="step", ylabel="label-smoothed cross-entropy", title=f"{PRESET} on {DATASET}")
ax.legend()
plt.show()

# %% [markdown]
# ## Translating with beam search (section 6.1: beam 4, length penalty alpha 0.6)
#
# `Translator` puts the SentencePiece model, the Transformer and the beam search in one
# `tf.Module`: raw strings in, translations and their scores out. It is what gets exported below.

# %%
decode_config = kt.DecodeConfig(beam_size=4, alpha=0.6, extra_length=10 if DATASET == "numbers" else 50)
translator = Translator(model, tokenizer.model_proto, decode_config, max_beam_size=4)
test_pairs = list(itertools.islice(corpus.pairs("test"), 64))
sources = [source for source, _ in test_pairs]
references = [reference for _, reference in test_pairs]
result = translator.translate(tf.constant(sources))
hypotheses = [text.decode("utf-8") for text in result["translations"].numpy()]
for source, hypothesis, reference, score in list(zip(sources, hypotheses, references, result["scores"].numpy()))[:5]:
    print(f"{source}\n  -> {hypothesis}  (score {score:.3f})\n     reference: {reference}")
exact = sum(hypothesis == reference for hypothesis, reference in zip(hypotheses, references))
print(f"\nfirst {len(test_pairs)} test sentences: {exact} translated exactly, "
      f"BLEU {sacrebleu.corpus_bleu(hypotheses, [references]).score:.1f}, "
      f"chrF {sacrebleu.corpus_chrf(hypotheses, [references]).score:.1f}")

# %% [markdown]
# (BLEU counts word n-grams up to 4: a German number is one word, so on `numbers` BLEU stays near 0
# even when most translations are exact; chrF counts character n-grams.)
#
# The four hypotheses of the beam for one sentence, best first, and their length-penalized scores:

# %%
nbest = translator.translate_nbest(tf.constant(sources[:1]), beam_size=tf.constant(4), alpha=tf.constant(0.6))
print(sources[0])
for text, score in zip(nbest["translations"].numpy()[0], nbest["scores"].numpy()[0]):
    print(f"  {score:8.3f}  {text.decode('utf-8')}")

# %% [markdown]
# ## Encoder-decoder attention of one sentence
#
# `keras_transformer.decoding.beam_search` on the model's cached step function gives the output
# tokens; feeding them back through `Transformer.decode(..., return_attention_scores=True)` gives the
# last decoder layer's encoder-decoder attention weights (B, H, T, S), averaged here over the heads.

# %%
sentence = sources[0]
source_tokens = tokenizer.tokenize(tf.constant([sentence]))
sentence_ids = tf.concat([source_tokens, tf.fill([1, 1], kt.EOS_ID)], axis=1).to_tensor()  # (1, S)
max_lengths = tf.constant([sentence_ids.shape[1] + decode_config.extra_length])
step_fn, cache = model.decoding_step_fn(sentence_ids, beam_size=4, cache_length=int(max_lengths[0]))
best = beam_search(step_fn, cache, 1, 4, max_lengths, kt.BOS_ID, kt.EOS_ID, alpha=0.6, num_return=1)
output_ids = best["ids"][0, 0, :best["lengths"][0, 0]]  # (T,), EOS last
target_input = tf.concat([[kt.BOS_ID], output_ids[:-1]], axis=0)[None, :]  # (1, T)
memory, source_padding_mask = model.encode(sentence_ids)
_, attention = model.decode(target_input, memory, source_padding_mask, return_attention_scores=True)
weights = attention[0].numpy().mean(axis=0)  # (T, S)

pieces = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
source_pieces = [pieces.id_to_piece(int(i)) for i in sentence_ids[0]]
output_pieces = [pieces.id_to_piece(int(i)) for i in output_ids]
fig, ax = plt.subplots(figsize=(1 + 0.45 * len(source_pieces), 1 + 0.35 * len(output_pieces)))
ax.imshow(weights, cmap="viridis", vmin=0.0)
ax.set_xticks(range(len(source_pieces)), source_pieces, rotation=90)
ax.set_yticks(range(len(output_pieces)), output_pieces)
ax.set(xlabel="source", ylabel="output", title="encoder-decoder attention, mean of heads")
plt.show()

# %% [markdown]
# ## The run directory
#
# The configs as JSON and a checkpoint beside the SentencePiece model: the layout
# `keras_transformer.export.load_model_from_workdir` reads, so that
# `python -m pipelines.export --workdir runs/<dataset>-<preset>` can export this run again later.

# %%
configs = {"model_config.json": model.config, "data_config.json": data_config, "train_config.json": train_config,
           "decode_config.json": decode_config}
for filename, config in configs.items():
    (workdir / filename).write_text(config.to_json())
checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
print("checkpoint", tf.train.CheckpointManager(checkpoint, workdir / "checkpoints", max_to_keep=1).save())
print(sorted(path.name for path in workdir.iterdir()))

# %% [markdown]
# ## Export the SavedModel and call it
#
# `export_translator` writes `exported/<dataset>-<preset>/<version>/` in the layout TF Serving reads, with the
# SentencePiece model and configs as assets and warm-up requests. The exported graph needs only
# TensorFlow and tensorflow-text: see `serve_and_query.ipynb` for querying it as TF Serving would.

# %%
saved_model_dir = export_translator(translator, pathlib.Path(EXPORT_DIR) / f"{DATASET}-{PRESET}")
print("exported", saved_model_dir)
loaded = tf.saved_model.load(str(saved_model_dir))
print("signatures:", sorted(loaded.signatures))
served = loaded.signatures["serving_default"](inputs=tf.constant(sources[:3]))
for source, text, score in zip(sources, served["translations"].numpy(), served["scores"].numpy()):
    print(f"{source} -> {text.decode('utf-8')}  ({score:.3f})")
