"""Translator: the SentencePiece model, the Transformer and the decoders in one tf.Module, exported
as a SavedModel that TF Serving runs on raw UTF-8 strings.

    model, sentencepiece_proto, decode_config = load_model_from_workdir("runs/wmt14")
    translator = Translator(model, sentencepiece_proto, decode_config)
    export_translator(translator, "exported/wmt14")          # -> exported/wmt14/<next version>/

Signatures (B sentences; every output has one row per input, also for bad input):
  serving_default   inputs (B,) string -> translations (B,) string, scores (B,) float32;
                    beam search with the decode config's beam size and alpha (paper: 4, 0.6).
  translate_nbest   inputs (B,) string, beam_size () int32, alpha () float32 -> translations (B, W)
                    string, scores (B, W) float32, best first, W = beam_size clamped to
                    [1, max_beam_size] (default 8). Two traced searches, picked with tf.cond:
                    greedy for W = 1, and one beam search whose width W is a tensor for every
                    W >= 2. alpha must be a number in [0, 10] (0 ranks by log-probability;
                    above 10 the penalty overflows float32 on long outputs); any other value
                    is refused with InvalidArgumentError.
  score             source (B,) string, target (B,) string -> scores (B,) float32, the
                    log-probability of the target (with EOS) given the source by forced decoding,
                    and lengths (B,) int32, the target tokens scored (EOS included).
Scores of translations are beam-search scores: log-probability / ((5 + length) / 6) ** alpha.

Precision (`Translator(..., precision=...)`, keras_transformer.precision): float32 (what a float32
model gives by default), bfloat16 or float16. In a reduced precision the SavedModel stores the
weights in that dtype (half the size) and runs the matrix products and attention in it; log-softmax,
beam scores and the `score` signature stay float32, and the signatures are the same.

Input handling, the same in every signature: invalid UTF-8 is replaced by U+FFFD (never an error),
surrounding ASCII whitespace is stripped (the corpora are stripped too), the source is cut to
max_source_length - 1 SentencePiece tokens before EOS is appended (default 256 tokens with EOS, at
most the model's positions minus the decode config's extra length), and a source that is empty
after stripping translates to "" with score 0. The maximum output length is the source length
(tokens with EOS) + extra_length (paper: 50), at most the model's max_length; targets given to
`score` are cut to max_length - 1 tokens. Outputs are valid UTF-8.

The export writes the configs and the SentencePiece model as assets, TF Serving warm-up requests in
assets.extra/, into a hidden temporary directory beside the version (TF Serving ignores names that
are not numbers), then renames it to exported/<name>/<version>: a version appears whole or not at
all. Only ops of core TensorFlow and three tensorflow-text SentencePiece ops are used (tests check it).
"""
import dataclasses
import errno
import functools
import json
import logging
import os
import pathlib
import shutil
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.config import EOS_ID, MAX_ALPHA, PAD_ID, DecodeConfig, TransformerConfig
from keras_transformer.data.text_files import strip_whitespace
from keras_transformer.decoding import beam_search
from keras_transformer.model import Transformer, transposed_here
from keras_transformer.precision import check_precision, model_in_precision, warn_if_slow_here

MODEL_CONFIG_FILENAME = "model_config.json"
DECODE_CONFIG_FILENAME = "decode_config.json"
SENTENCEPIECE_FILENAME = "sentencepiece.model"
TRANSLATOR_CONFIG_FILENAME = "translator.json"
AVERAGED_WEIGHTS_FILENAME = "averaged.weights.h5"
CHECKPOINTS_DIRNAME = "checkpoints"
WARMUP_FILENAME = "tf_serving_warmup_requests"
SIGNATURE_NAMES = ("serving_default", "translate_nbest", "score")
DEFAULT_MAX_SOURCE_LENGTH = 256
DEFAULT_MAX_BEAM_SIZE = 8
WARMUP_SENTENCES = ("Hello world.", "This is a warm-up request, not a real one.")

logger = logging.getLogger(__name__)


def max_beam_size_for(beam_size):
    """The max_beam_size of a Translator whose translate_nbest must serve beam_size: the default's
    widths, and beam_size where it is wider."""
    return max(int(beam_size), DEFAULT_MAX_BEAM_SIZE)


def _require_file(path, what):
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def load_model_from_workdir(workdir, checkpoint=None, weights=None, build_model=None):
    """The trained model of a run directory, its SentencePiece model and its decoding settings.

    Args:
      workdir: the run directory: model_config.json, sentencepiece.model, optional
        decode_config.json, checkpoints/ (tf.train.CheckpointManager of
        tf.train.Checkpoint(model=model, ...)) and optional averaged.weights.h5.
      checkpoint: a checkpoint prefix (".../ckpt-12") or a directory of checkpoints (its latest).
      weights: a Keras weights file (.weights.h5), e.g. averaged checkpoints.
      With neither: workdir/averaged.weights.h5 if present (the paper translates with averaged
      weights), else the latest checkpoint of workdir/checkpoints.
      build_model: TransformerConfig -> the (unbuilt) model the weights are for; default the Transformer.

    Returns (model, sentencepiece_proto bytes, DecodeConfig). Raises FileNotFoundError naming the
    missing path, ValueError if both checkpoint and weights are given or the weights do not fit.
    """
    workdir = pathlib.Path(workdir)
    if not workdir.is_dir():
        raise FileNotFoundError(f"workdir not found (not a directory): {workdir}")
    if checkpoint is not None and weights is not None:
        raise ValueError(f"give a checkpoint ({checkpoint}) or weights ({weights}), not both")
    config = TransformerConfig.from_json(_require_file(workdir / MODEL_CONFIG_FILENAME, "model config").read_text())
    sentencepiece_proto = _require_file(workdir / SENTENCEPIECE_FILENAME, "SentencePiece model").read_bytes()
    decode_config = load_decode_config(workdir)
    if checkpoint is None and weights is None and (workdir / AVERAGED_WEIGHTS_FILENAME).is_file():
        weights = workdir / AVERAGED_WEIGHTS_FILENAME
    model = (build_model or Transformer)(config)
    model.build()
    if weights is not None:
        model.load_weights(str(_require_file(pathlib.Path(weights), "weights file")))
        logger.info("loaded weights %s", weights)
    else:
        prefix = _checkpoint_prefix(pathlib.Path(checkpoint) if checkpoint else workdir / CHECKPOINTS_DIRNAME)
        restore_checkpoint(model, prefix)
        logger.info("restored checkpoint %s", prefix)
    return model, sentencepiece_proto, decode_config


def load_decode_config(workdir) -> DecodeConfig:
    """A run directory's decoding settings (decode_config.json), the defaults where it has none."""
    path = pathlib.Path(workdir) / DECODE_CONFIG_FILENAME
    return DecodeConfig.from_json(path.read_text()) if path.is_file() else DecodeConfig()


def restore_checkpoint(model, prefix):
    """Restores every weight of model from a tf.train.Checkpoint(model=model, ...) prefix.

    Other objects of the checkpoint (the optimizer, the data position) are ignored. Raises
    ValueError if a weight of the model is not in the checkpoint.
    """
    status = tf.train.Checkpoint(model=model).read(prefix).expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as error:
        raise ValueError(f"checkpoint {prefix} does not hold every weight of the model: {error}") from error


def _checkpoint_prefix(path):
    """A checkpoint prefix from a prefix or a directory (its latest checkpoint)."""
    if path.is_dir():
        latest = tf.train.latest_checkpoint(str(path))
        if latest is None:
            raise FileNotFoundError(f"no checkpoint in directory {path}")
        return latest
    if not pathlib.Path(str(path) + ".index").is_file():
        raise FileNotFoundError(f"checkpoint not found: {path} (no {path}.index)")
    return str(path)


# Where string and SentencePiece ops run (they have no GPU kernels).
HOST = "/device:CPU:0"


def _valid_utf8(texts):
    """(N,) strings with every invalid UTF-8 sequence replaced by U+FFFD; never raises."""
    return tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)


class Translator(tf.Module):
    """Raw strings in, translations out: SentencePiece (in-graph), the Transformer, beam search.

    Args:
      model: a built Transformer with its trained weights.
      sentencepiece_proto: the serialized SentencePiece model (bytes) the model was trained with.
      decode_config: DecodeConfig (beam size, alpha, extra length, BOS/EOS ids); default the paper's.
        Its transposed_kernels, if None, is chosen for this machine's CPU (Transformer.decoding_step_fn)
        and recorded in self.decode_config, as an export writes it.
      max_source_length: longest source in tokens, EOS included; longer ones are cut. Default
        min(256, model max_length - extra_length).
      max_beam_size: translate_nbest supports beam sizes 1..max_beam_size (greedy, and one traced
        search for every larger width).
      precision: float32, bfloat16 or float16 (keras_transformer.precision): the dtype of the
        weights and products of the graph; a copy of model in that precision is made if needed.
        Default None: the model as it is (its weights are read live, e.g. while it trains).
        float16 refuses a model with a weight beyond float16's range (ValueError naming it);
        bfloat16 warns once on a CPU without bfloat16 arithmetic, where it runs slower.

    The signatures are in the module docstring; they are also plain tf.functions to call from
    Python: translate(inputs), translate_nbest(inputs, beam_size, alpha), score(source, target).
    """

    def __init__(self, model, sentencepiece_proto, decode_config=None, max_source_length=None,
                 max_beam_size=DEFAULT_MAX_BEAM_SIZE, precision=None, name="translator"):
        super().__init__(name=name)
        if precision is not None:
            model = model_in_precision(model, check_precision(precision))
            warn_if_slow_here(precision)
        decode_config = decode_config or DecodeConfig()
        if decode_config.transposed_kernels is None:  # chosen for this CPU, and recorded (an export keeps it)
            decode_config = dataclasses.replace(decode_config, transposed_kernels=transposed_here())
        self.decode_config = decode_config
        positions = model.config.max_length
        if max_source_length is None:
            max_source_length = min(DEFAULT_MAX_SOURCE_LENGTH, positions - self.decode_config.extra_length)
        if not 2 <= max_source_length <= positions:
            raise ValueError(f"max_source_length={max_source_length} must be in [2, model max_length="
                             f"{positions}] (one token and EOS at least)")
        if not 1 <= max_beam_size:
            raise ValueError(f"max_beam_size must be >= 1, got {max_beam_size}")
        self.model = model
        self.sentencepiece_proto = bytes(sentencepiece_proto)
        self.max_source_length = int(max_source_length)
        self.max_beam_size = int(max_beam_size)

    def settings(self):
        """What the exported graph was built with (written as the translator.json asset)."""
        return {"max_source_length": self.max_source_length, "max_beam_size": self.max_beam_size,
                "max_output_length": f"source tokens with EOS + {self.decode_config.extra_length}, "
                                     f"at most {self.model.config.max_length}",
                "precision": self.model.dtype_policy.name, "signatures": list(SIGNATURE_NAMES)}

    def decoding(self) -> str:
        """How answers are found, for logs: "beam 4"."""
        return f"beam {self.decode_config.beam_size}"

    def warmup_score_targets(self, sentences):
        """What an export's warm-up request for `score` scores given sentences: the sentences
        themselves (any text is a target here)."""
        return list(sentences)

    # In-graph pieces. The SentencePiece op is built in each calling graph (see SubwordTokenizer).
    # Strings and SentencePiece have CPU kernels only: they are placed on the host explicitly, so that
    # on a GPU server everything between them (the model, the beam search) stays on the GPU.

    def _sentencepiece(self):
        return tf_text.SentencepieceTokenizer(model=self.sentencepiece_proto, out_type=tf.int32)

    def _tokenize(self, texts, max_tokens):
        """(B,) strings -> ragged (B, None) ids: clean UTF-8, stripped of the whitespace the training
        corpora are stripped of (Unicode's too: a no-break space alone is an empty source), at most
        max_tokens."""
        with tf.device(HOST):
            return self._sentencepiece().tokenize(strip_whitespace(_valid_utf8(texts)))[:, :max_tokens]

    def _source_ids(self, texts):
        """(B,) strings -> source_ids (B, S) int32 with EOS, 0-padded, and is_empty (B,) bool."""
        with tf.device(HOST):  # ragged ops, next to the tokenizer
            tokens = self._tokenize(texts, self.max_source_length - 1)
            eos = tf.fill([tokens.nrows(), 1], EOS_ID)
            return tf.concat([tokens, eos], axis=1).to_tensor(PAD_ID), tokens.row_lengths() == 0

    def _max_lengths(self, source_ids, is_empty, context):
        """(B,) the longest output of each sentence, EOS included: source tokens + extra_length."""
        source_lengths = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # (B,)
        max_lengths = tf.minimum(source_lengths + self.decode_config.extra_length, self.model.config.max_length)
        return tf.where(is_empty, 1, max_lengths)  # its output is replaced by ""

    # The vocabulary ids answers may hold (None: all); a subclass whose answers hold only a few
    # tokens (the parser) sets them, with PAD (0) first, so that its decoding scores only those.
    output_ids = None

    def _decoding_step(self, source_ids, beam_size, max_length, max_lengths, context):
        """The model's (step_fn, cache) for a search over indices into output_ids (or over ids);
        a task may wrap it to constrain what is output."""
        step_fn, cache = self._model_step(source_ids, beam_size, max_length)
        if self.output_ids is None:
            return step_fn, cache
        output_ids = tf.constant(self.output_ids)

        def indexed_step(indices, step, step_cache):
            return step_fn(tf.gather(output_ids, indices), step, step_cache)

        indexed_step.reorder_cache = step_fn.reorder_cache
        return indexed_step, cache

    def _model_step(self, source_ids, beam_size, max_length):
        """Transformer.decoding_step_fn: fed vocabulary ids, it scores output_ids (or every id)."""
        return self.model.decoding_step_fn(source_ids, beam_size, cache_length=max_length,
                                           parallel_groups=self.decode_config.parallel_groups,
                                           output_ids=self.output_ids,
                                           transposed_kernels=self.decode_config.transposed_kernels)

    def _search(self, source_ids, is_empty, beam_size, alpha, num_return, context=None):
        """Beam search (W = beam_size, a Python int) -> ids (B, R, T) (indices into output_ids
        if it is set), scores (B, R).

        context: whatever a subclass's _max_lengths and _decoding_step need besides the source.
        """
        batch_size = tf.shape(source_ids)[0]
        max_lengths = self._max_lengths(source_ids, is_empty, context)
        max_length = tf.maximum(tf.reduce_max(max_lengths), 1)  # an empty batch has no maximum
        step_fn, cache = self._decoding_step(source_ids, beam_size, max_length, max_lengths, context)
        bos_id, eos_id = self.decode_config.bos_id, self.decode_config.eos_id
        if self.output_ids is not None:  # the search runs over indices into output_ids
            bos_id, eos_id = (int(np.flatnonzero(self.output_ids == token)[0]) for token in (bos_id, eos_id))
        result = beam_search(step_fn, cache, batch_size, beam_size, max_lengths, bos_id, eos_id, alpha=alpha,
                             max_length=max_length, num_return=num_return)
        return result["ids"], result["scores"]

    def _decode(self, source_ids, is_empty, beam_size, alpha, num_return, context=None):
        """Beam search -> vocabulary ids (B, R, T), scores (B, R)."""
        ids, scores = self._search(source_ids, is_empty, beam_size, alpha, num_return, context)
        if self.output_ids is not None:  # index 0 is PAD, as the search pads
            return tf.gather(tf.constant(self.output_ids), ids), scores
        return ids, scores

    def _detokenize(self, ids, scores, is_empty):
        """ids (B, R, T), scores (B, R) -> translations (B, R) string, scores (B, R)."""
        shape = tf.shape(ids)
        empty = is_empty[:, None]
        with tf.device(HOST):
            texts = self._sentencepiece().detokenize(tf.reshape(ids, [-1, shape[2]]))  # EOS, PAD vanish
            texts = tf.where(empty, "", tf.reshape(_valid_utf8(texts), shape[:2]))
        return texts, tf.where(empty, 0.0, scores)

    def _alpha(self, alpha):
        """alpha, after an assertion that it is a number in [0, MAX_ALPHA] (InvalidArgumentError
        otherwise; above, the length penalty overflows float32 on long outputs)."""
        alpha = tf.cast(alpha, tf.float32)
        usable = tf.math.is_finite(alpha) & (alpha >= 0.0) & (alpha <= MAX_ALPHA)
        with tf.device(HOST):  # its message is a string
            check = tf.debugging.Assert(usable, [f"translate_nbest: alpha must be a finite number in "
                                                 f"[0, {MAX_ALPHA:g}] (0 ranks by log-probability; the paper's "
                                                 "is 0.6), got", alpha])
        with tf.control_dependencies([check]):
            return tf.identity(alpha)

    # Signatures. The decoding code builds its loops and branches with TensorFlow's own ops
    # (tf.while_loop, tf.cond, tf.where), so AutoGraph has nothing to convert: without it a
    # first trace of the tiny model's `translate` took 1.7 CPU seconds instead of 5.9, same answers.

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        source_ids, is_empty = self._source_ids(inputs)
        ids, scores = self._decode(source_ids, is_empty, self.decode_config.beam_size,
                                   self.decode_config.alpha, num_return=1)
        translations, scores = self._detokenize(ids, scores, is_empty)
        with tf.device(HOST):
            translations = translations[:, 0]
        return {"translations": translations, "scores": scores[:, 0]}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs"),
                                  tf.TensorSpec([], tf.int32, name="beam_size"),
                                  tf.TensorSpec([], tf.float32, name="alpha")])
    def translate_nbest(self, inputs, beam_size, alpha):
        source_ids, is_empty = self._source_ids(inputs)
        alpha = self._alpha(alpha)
        greedy = functools.partial(self._decode, source_ids, is_empty, 1, alpha, 1)
        if self.max_beam_size == 1:
            ids, scores = greedy()
        else:  # One trace for every width >= 2, instead of one per width: with 8, the tiny model's
            # export took 18.4-19.1 s instead of 12.2-12.4, loading it 3.2-3.7 s instead of 1.4-1.7,
            # and the first translate_nbest call (graph optimization) 8.1-10.2 s instead of 1.6-2.1.
            width = tf.clip_by_value(beam_size, 1, self.max_beam_size)
            ids, scores = tf.cond(width == 1, greedy,
                                  functools.partial(self._decode, source_ids, is_empty, width, alpha, None))
        translations, scores = self._detokenize(ids, scores, is_empty)
        return {"translations": translations, "scores": scores}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="source"),
                                  tf.TensorSpec([None], tf.string, name="target")])
    def score(self, source, target):
        with tf.device(HOST):
            tf.debugging.assert_equal(tf.size(source), tf.size(target),
                                      message="score: source and target must hold as many strings")
        source_ids, _ = self._source_ids(source)
        with tf.device(HOST):
            tokens = self._tokenize(target, self.model.config.max_length - 1)
            bos = tf.fill([tokens.nrows(), 1], self.decode_config.bos_id)
            eos = tf.fill([tokens.nrows(), 1], self.decode_config.eos_id)
            target_input = tf.concat([bos, tokens], axis=1).to_tensor(PAD_ID)  # (B, T)
            target_output = tf.concat([tokens, eos], axis=1).to_tensor(PAD_ID)  # (B, T)
        logits = tf.cast(self.model((source_ids, target_input), training=False), tf.float32)  # (B, T, V)
        log_probs = (tf.gather(logits, target_output, batch_dims=2)
                     - tf.reduce_logsumexp(logits, axis=-1))  # (B, T)
        scored = target_output != PAD_ID
        return {"scores": tf.reduce_sum(tf.where(scored, log_probs, 0.0), axis=1),
                "lengths": tf.reduce_sum(tf.cast(scored, tf.int32), axis=1)}

    def signatures(self):
        """The signature functions (tf.functions with input signatures). They are traced inside
        tf.saved_model.save: a function traced outside a save is traced again inside one (the save
        context is part of TensorFlow's tracing key), which would double the export time."""
        return {"serving_default": self.translate, "translate_nbest": self.translate_nbest, "score": self.score}


def next_version(export_dir):
    """1 + the largest numbered version under export_dir (1 if none)."""
    export_dir = pathlib.Path(export_dir)
    versions = [int(p.name) for p in export_dir.iterdir() if p.name.isdigit()] if export_dir.is_dir() else []
    return max(versions, default=0) + 1


def _warmup_requests(model_name, decode_config, sentences, score_targets):
    """PredictionLog records, one per signature (translate_nbest at beam 1 and the default beam);
    `score` scores score_targets given the sentences (no request for it if None)."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    def record(signature_name, **inputs):
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
        for key, value in inputs.items():
            request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
        return prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))

    texts = [s.encode("utf-8") for s in sentences]
    yield record("serving_default", inputs=texts)
    for beam_size in sorted({1, decode_config.beam_size}):
        yield record("translate_nbest", inputs=texts, beam_size=tf.constant(beam_size, tf.int32),
                     alpha=tf.constant(decode_config.alpha, tf.float32))
    if score_targets is not None:
        yield record("score", source=texts, target=[target.encode("utf-8") for target in score_targets])


def _write_assets(directory, translator):
    """The files that describe the export; returns {attribute name: path}."""
    files = {MODEL_CONFIG_FILENAME: translator.model.config.to_json(),
             DECODE_CONFIG_FILENAME: translator.decode_config.to_json(),
             TRANSLATOR_CONFIG_FILENAME: json.dumps(translator.settings(), indent=2, sort_keys=True)}
    paths = {}
    for filename, text in files.items():
        paths[filename] = directory / filename
        paths[filename].write_text(text)
    paths[SENTENCEPIECE_FILENAME] = directory / SENTENCEPIECE_FILENAME
    paths[SENTENCEPIECE_FILENAME].write_bytes(translator.sentencepiece_proto)
    return paths


def export_translator(translator, export_dir, version=None, warmup_sentences=WARMUP_SENTENCES):
    """Writes translator as SavedModel export_dir/<version> (default: the next number); returns its path.

    Everything is written to a hidden temporary directory in export_dir and renamed into place, so
    a version directory is complete whenever it exists; on any failure nothing is left behind.
    An existing version is never overwritten (TF Serving may be serving it): FileExistsError. Two
    exports into one directory at once each get their own number when neither names a version.
    """
    export_dir = pathlib.Path(export_dir)
    export_dir.mkdir(parents=True, exist_ok=True)
    chosen = version is None
    version = next_version(export_dir) if chosen else int(version)
    if version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version}")
    final = export_dir / str(version)
    if final.exists():
        raise FileExistsError(f"{final} already exists; TF Serving may be serving it, export another version")
    temporary = pathlib.Path(tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=export_dir))
    try:
        with tempfile.TemporaryDirectory() as staging:
            translator.asset_files = {filename.replace(".", "_"): tf.saved_model.Asset(str(path))
                                      for filename, path in _write_assets(pathlib.Path(staging), translator).items()}
            try:
                tf.saved_model.save(translator, str(temporary), signatures=translator.signatures())
            finally:
                del translator.asset_files
        warmup = temporary / "assets.extra" / WARMUP_FILENAME
        warmup.parent.mkdir()
        with tf.io.TFRecordWriter(str(warmup)) as writer:
            signatures = set(translator.signatures())
            for record in _warmup_requests(export_dir.resolve().name, translator.decode_config, warmup_sentences,
                                           translator.warmup_score_targets(warmup_sentences)):
                if record.predict_log.request.model_spec.signature_name in signatures:
                    writer.write(record.SerializeToString())
        os.chmod(temporary, 0o755)  # mkdtemp's 0700 would hide the version from a server running as another user
        final = _rename_into_place(temporary, export_dir, version, chosen)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    logger.info("exported %s", final)
    return final


def _rename_into_place(temporary, export_dir, version, chosen):
    """Renames temporary to export_dir/<version>; returns that path. When another export took the
    version meanwhile (two exports into one directory at once), a version chosen here moves on to
    the next free number; a version the caller asked for raises FileExistsError."""
    while True:
        final = export_dir / str(version)
        try:
            if final.exists():  # rename would replace an empty directory without a word
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))
            os.rename(temporary, final)  # atomic within one file system
            return final
        except OSError as error:
            if error.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            if not chosen:
                raise FileExistsError(f"{final} was written by another export meanwhile; "
                                      f"export another version") from error
            logger.warning("%s was written by another export meanwhile; trying the next version", final)
            version = max(version + 1, next_version(export_dir))
