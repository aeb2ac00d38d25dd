"""Parser: the Translator of keras_transformer.export, answering with trees. Raw tokenized sentences
in (words separated by spaces), bracketed trees out, in TensorFlow ops only, so that the SavedModel
runs in TF Serving as the translation export does.

    parser = Parser(model, sentencepiece_proto, decode_config)
    parser.parse(tf.constant(["I saw a dog ."]))["trees"]   # [b"(S (NP (PRP I)) (VP ... ) (. .))"]

Decoding is constrained so that every answer is a tree over exactly the input words: at each step
only the tokens that keep the output completable are allowed. A tag is allowed while words remain
(inside a bracket, or alone for a one-word sentence), an opening bracket while words remain, a
closing bracket when it closes something that holds a word (the root only once every word has its
tag), and EOS only after the root is closed; each of them only if the tokens it leaves to output
(the missing tags, the closing brackets, EOS) still fit in the sentence's maximum length, which is
at least the word count + 3. Then the i-th tag of the output is given the i-th word. Only the
tree tokens and EOS can be output, so decoding scores those (a hundred or so) instead of the whole
vocabulary (Transformer.decoding_step_fn's output_ids): the same answers, found faster.

Signatures:
  serving_default  inputs (B,) string -> trees (B,) string, scores (B,) float32 (beam search's)
  score            as the Translator's: log p(linearized tree | sentence)
Empty (whitespace-only) sentences give "" with score 0. Invalid UTF-8 is replaced by U+FFFD. Words
"(" and ")" (and brackets inside words) are written -LRB- and -RRB- in the trees, as the PTB does.
A source longer than the parser's max_source_length pieces is cut (the tree still covers every
word); a sentence with more than the model's max_length - 3 words is refused with an
InvalidArgumentError naming the limit (1,021 words for the parsing presets).
"""
import numpy as np
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.config import EOS_ID, PAD_ID, DecodeConfig
from keras_transformer.decoding.beam_search import gather_rows
from keras_transformer.export import Translator, _valid_utf8

FORBIDDEN, OPEN, CLOSE, TAG, END = range(5)
_WORD_MARK = "\u2581"  # SentencePiece's space mark: tree tokens are pieces "▁(NP", "▁)", "▁NN"
NEG_LOGIT = -1e9  # finite, so a row with nothing allowed (after its sentence is done) never gives NaN


def tree_symbols(tokens) -> list[str]:
    """The SentencePiece user-defined symbols that make each tree token one piece."""
    return [_WORD_MARK + token for token in sorted(set(tokens))]


def piece_classes(sentencepiece_proto: bytes, vocab_size: int) -> np.ndarray:
    """(V,) int32: the class of each piece id (FORBIDDEN, OPEN, CLOSE, TAG, END)."""
    proto = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_proto)
    user_defined = sentencepiece_model_pb2.ModelProto.SentencePiece.Type.USER_DEFINED
    classes = np.full([vocab_size], FORBIDDEN, np.int32)
    for index, piece in enumerate(proto.pieces):
        if piece.type != user_defined or not piece.piece.startswith(_WORD_MARK):
            continue
        token = piece.piece[len(_WORD_MARK):]
        classes[index] = CLOSE if token == ")" else OPEN if token.startswith("(") else TAG
    classes[EOS_ID] = END
    if not (classes == TAG).any() or not (classes == OPEN).any():
        raise ValueError("the SentencePiece model has no tree tokens (user-defined pieces such as '▁(NP', '▁)', "
                         "'▁NN'): it was not trained for parsing")
    return classes


class TreeConstraint:
    """Which tokens each of N rows may output next; see the module docstring.

    Args:
      classes: (V,) int32 piece classes.
      word_counts: (N,) int32 words of each row's sentence.
      max_lengths: (N,) int32 the longest output of each row, EOS included.
    """

    def __init__(self, classes, word_counts, max_lengths):
        self.classes = tf.constant(classes)
        self.word_counts = word_counts
        self.max_lengths = max_lengths

    def initial_state(self):
        zeros = tf.zeros_like(self.word_counts)
        return zeros, zeros, tf.cast(zeros, tf.bool), tf.cast(zeros, tf.bool)  # depth, tags, last open, started

    def update(self, state, ids):
        """The state after each row output ids (N,) (BOS at step 0 changes nothing)."""
        depth, tags, _, started = state
        kind = tf.gather(self.classes, ids)  # (N,)
        depth += tf.cast(kind == OPEN, tf.int32) - tf.cast(kind == CLOSE, tf.int32)
        tags += tf.cast(kind == TAG, tf.int32)
        return depth, tags, kind == OPEN, started | (kind == OPEN) | (kind == TAG)

    def allowed(self, state, step):
        """(N, V) bool: the tokens each row may output at position `step`."""
        depth, tags, last_open, started = state
        words = self.word_counts
        left = self.max_lengths - step - 1  # positions after this one
        missing = words - tags
        done = started & tf.equal(depth, 0)
        open_ok = ~done & (missing > 0) & (missing + depth + 2 <= left)
        tag_ok = (~done & (missing > 0) & ((depth > 0) | (~started & tf.equal(words, 1)))
                  & (missing + depth <= left))
        close_ok = (depth > 0) & ~last_open & ((depth > 1) | tf.equal(missing, 0)) & (missing + depth <= left)
        end_ok = (done & tf.equal(missing, 0)) | tf.equal(words, 0)
        by_class = tf.stack([tf.zeros_like(done), open_ok, close_ok, tag_ok, end_ok], axis=1)  # (N, 5)
        return tf.gather(by_class, self.classes, axis=1)  # (N, V)


def constrained_step_fn(step_fn, cache, constraint: TreeConstraint):
    """(step_fn', cache') for keras_transformer.decoding: step_fn's logits with what `constraint`
    forbids set to NEG_LOGIT; the constraint's state rides in the cache and follows the beams."""

    def step(ids, position, constrained_cache):
        model_cache, state = constrained_cache
        state = constraint.update(state, ids)
        logits, model_cache = step_fn(ids, position, model_cache)
        if isinstance(logits, (list, tuple)):  # vocabulary blocks of parallel groups
            logits = tf.concat(logits, axis=1)
        logits = tf.where(constraint.allowed(state, position), logits, NEG_LOGIT)  # (N, V)
        return logits, (model_cache, state)

    def reorder_cache(constrained_cache, parents):
        model_cache, state = constrained_cache
        inner = getattr(step_fn, "reorder_cache", None)
        model_cache = inner(model_cache, parents) if inner else gather_rows(model_cache, parents)
        return model_cache, gather_rows(state, parents)

    step.reorder_cache = reorder_cache
    return step, (cache, constraint.initial_state())


def escape_words(words):
    """Brackets in words as the PTB writes them: ( -> -LRB-, ) -> -RRB-."""
    return tf.strings.regex_replace(tf.strings.regex_replace(words, r"\(", "-LRB-"), r"\)", "-RRB-")


def sequences_to_trees(sequences, words):
    """Linearized trees (B,) string and the sentences' words, ragged (B, None), -> trees (B,) string.

    The i-th tag token of a sequence becomes "(TAG word_i)"; brackets stay as they are.
    """
    tokens = tf.strings.split(sequences)  # (B, None)
    flat = tokens.flat_values
    is_tag = ~tf.strings.regex_full_match(flat, r"\(.*") & tf.not_equal(flat, ")")
    rows = tokens.value_rowids()
    tag_counts = tf.cast(is_tag, tf.int64)
    index_in_row = (tf.cumsum(tag_counts) - 1
                    - tf.gather(tf.cumsum(tf.reduce_sum(tokens.with_flat_values(tag_counts), axis=1), exclusive=True),
                                rows))
    row_words = tf.gather(words.row_lengths(), rows)
    word_values = tf.concat([escape_words(words.flat_values), [""]], axis=0)  # "" for a tag without a word
    word_index = tf.where(is_tag & (index_in_row < row_words), tf.gather(words.row_starts(), rows) + index_in_row,
                          tf.size(words.flat_values, out_type=tf.int64))
    pieces = tf.where(is_tag, "(" + flat + " " + tf.gather(word_values, word_index) + ")", flat)
    trees = tf.strings.reduce_join(tokens.with_flat_values(pieces), axis=1, separator=" ")
    return tf.strings.regex_replace(trees, r" \)", ")")


class Parser(Translator):
    """Sentences in, trees out (module docstring). Arguments as Translator's; max_source_length
    defaults to the model's max_length - extra_length (the parsing presets: 1024 - 300)."""

    def __init__(self, model, sentencepiece_proto, decode_config=None, max_source_length=None,
                 max_beam_size=1, precision=None, name="parser"):
        extra_length = (decode_config or DecodeConfig()).extra_length
        if max_source_length is None:
            max_source_length = max(2, model.config.max_length - extra_length)
        super().__init__(model, sentencepiece_proto, decode_config, max_source_length=max_source_length,
                         max_beam_size=max_beam_size, precision=precision, name=name)
        classes = piece_classes(self.sentencepiece_proto, model.config.vocab_size)
        # PAD first (index 0 pads answers as id 0 does), BOS (fed at step 0), EOS and the tree tokens.
        keep = classes != FORBIDDEN
        keep[[PAD_ID, self.decode_config.bos_id, self.decode_config.eos_id]] = True
        self.output_ids = np.flatnonzero(keep).astype(np.int32)
        self.piece_classes = classes[self.output_ids]  # the class of each output index

    def settings(self):
        values = super().settings()
        values.update(task="parsing", max_words=self.max_words,
                      signatures=list(self.signatures()),
                      max_output_length=f"max(source tokens with EOS + {self.decode_config.extra_length}, words + 3), "
                                        f"at most {self.model.config.max_length}")
        del values["max_beam_size"]
        return values

    @property
    def max_words(self):
        return self.model.config.max_length - 3

    def _max_lengths(self, source_ids, is_empty, context):
        lengths = tf.maximum(super()._max_lengths(source_ids, is_empty, context), context + 3)
        return tf.where(is_empty, 1, tf.minimum(lengths, self.model.config.max_length))

    def _decoding_step(self, source_ids, beam_size, max_length, max_lengths, context):
        step_fn, cache = super()._decoding_step(source_ids, beam_size, max_length, max_lengths, context)
        constraint = TreeConstraint(self.piece_classes, tf.repeat(context, beam_size),
                                    tf.repeat(max_lengths, beam_size))
        return constrained_step_fn(step_fn, cache, constraint)

    def _parse(self, inputs):
        """(trees (B,), scores (B,), linearized trees (B,)) of raw sentences (B,)."""
        words = tf.strings.split(tf.strings.strip(_valid_utf8(inputs)))  # (B, None)
        word_counts = tf.cast(words.row_lengths(), tf.int32)
        check = tf.debugging.assert_less_equal(
            word_counts, self.max_words,
            message=f"a sentence has more words than this parser takes: at most {self.max_words}")
        with tf.control_dependencies([check]):
            source_ids, is_empty = self._source_ids(inputs)
        ids, scores = self._decode(source_ids, is_empty, self.decode_config.beam_size, self.decode_config.alpha,
                                   num_return=1, context=word_counts)
        sequences = self._sentencepiece().detokenize(ids[:, 0])
        trees = sequences_to_trees(sequences, words)
        return tf.where(is_empty, "", trees), tf.where(is_empty, 0.0, scores[:, 0]), tf.where(is_empty, "", sequences)

    translate_nbest = None  # n-best trees are not offered (and a SavedModel holds every tf.function)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def parse(self, inputs):
        trees, scores, _ = self._parse(inputs)
        return {"trees": trees, "scores": scores}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        """What the training job's evaluations read: the trees as `translations`, and the sequences."""
        trees, scores, sequences = self._parse(inputs)
        return {"translations": trees, "scores": scores, "sequences": sequences}

    def signatures(self):
        return {"serving_default": self.parse, "score": self.score}
