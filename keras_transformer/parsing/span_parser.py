"""SpanParser: the Translator of a span parser (parsing.span_model): raw tokenized sentences in
(words separated by spaces), bracketed trees out, in TensorFlow ops only, so that its SavedModel
runs in TF Serving as the seq2seq Parser's does.

    parser = SpanParser(model, sentencepiece_proto, span_labels=SpanLabels.read(workdir))
    parser.parse(tf.constant(["I saw a dog ."]))["trees"]   # [b"(S (NP (PRP I)) (VP ... ) (. .))"]

Each word is tokenized alone (span_model.word_pieces), the model scores every span and tags every
word, and CKY (span_charts) keeps the most probable tree, whose spans over two or more words are
labelled and whose whole sentence is (for two words or more); each word gets its most probable tag
(among those the run's tag dictionary allows it, as the seq2seq Parser's).
So every answer is a tree over exactly the input words, found in one pass of the encoder: no beam
search, and no beam size or alpha (DecodeConfig's are not read).

Signatures:
  serving_default  inputs (B,) string -> trees (B,) string, scores (B,) float32
  score            source (B,) string, target (B,) string -> scores (B,) float32: the score of any
                   bracketed tree over the sentence's words (its labels and tags the parser's own),
                   written as serving_default writes trees or as a treebank does (preprocessed as
                   the training trees were: root wrapper, function tags and empty elements
                   removed), which for serving_default's own answer is the score it gave; 0 for ""
                   over an empty sentence
A tree's score is its log-probability under the model, whose spans and tags are independent given
the sentence: the sum of log p(label) over every span of the sentence (no constituent for a span
the tree does not have) and of log p(tag) over its words (the tag dictionary restricts which tags
are chosen, not the distribution they are scored by; the constituent bias chooses the tree and is
not counted). As the seq2seq Parser's `scores`, higher is more confident; the two parsers' scores
are not on one scale. Empty (whitespace-only) sentences give "" with score 0. Words are split at
any whitespace, "(" and ")" written -LRB- and -RRB- as the PTB does (as Parser). A sentence whose
pieces, with BOS and EOS, are more than the model's max_length is refused with an
InvalidArgumentError naming the limit; so is a `score` tree that is not one, one over other words
than its sentence's, or one with a label or tag the parser does not know, quoting the tree.
"""
import json
import pathlib

import numpy as np
import tensorflow as tf

from keras_transformer.export import HOST, Translator, _valid_utf8
from keras_transformer.files import write_text_atomically
from keras_transformer.parsing.parser import Parser, TagDictionaryTables, escape_words
from keras_transformer.parsing.span_charts import labelled_log_probs, read_bracketed_trees, trees_from_span_scores
from keras_transformer.parsing.span_model import piece_character_table, word_characters, word_pieces
from keras_transformer.parsing.spans import tree_spans
from keras_transformer.parsing.trees import escape_word, parse_tree
from keras_transformer.training.summaries import figure_png


def span_chart_png(words, log_odds, spans, title: str) -> bytes:
    """A PNG of span scores: row i, column j - 1 is span (i, j) (words i .. j - 1), colored by
    log_odds[i, j] (blue: a constituent, red: none); `spans` {(i, j): label} are written in their cells."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    n = len(words)
    chart = np.full((n, n), np.nan)
    rows, columns = np.triu_indices(n)
    chart[rows, columns] = log_odds[rows, columns + 1]
    size = max(3.0, 0.3 * n + 1.5)
    figure, axis = pyplot.subplots(figsize=(size + 1.0, size))
    image = axis.imshow(chart, cmap="RdBu", vmin=-10.0, vmax=10.0)
    figure.colorbar(image, ax=axis, fraction=0.04)
    for (start, end), label in spans.items():
        axis.text(end - 1, start, label, ha="center", va="center", fontsize=5)
    axis.set_xticks(range(n), [f"..{word}" for word in words], rotation=90, fontsize=6)
    axis.set_yticks(range(n), [f"{word}.." for word in words], fontsize=6)
    axis.set_title(title, fontsize=8)
    return figure_png(figure)


SPAN_PARSER_FILENAME = "span_parser.json"  # a run's chosen constituent bias


def write_constituent_bias(workdir, bias: float) -> pathlib.Path:
    """Records the constituent bias chosen on dev data for the run in workdir (its evaluations,
    export and pipelines.parse read it)."""
    path = pathlib.Path(workdir) / SPAN_PARSER_FILENAME
    write_text_atomically(path, json.dumps({"constituent_bias": float(bias)}) + "\n")
    return path


def read_constituent_bias(workdir) -> float:
    """The run's recorded constituent bias; 0 (none) where none was chosen."""
    path = pathlib.Path(workdir) / SPAN_PARSER_FILENAME
    if not path.is_file():
        return 0.0
    try:
        return float(json.loads(path.read_text())["constituent_bias"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a span parser's settings ({error})") from None


class SpanParser(Translator):
    """Sentences in, trees out (module docstring). model: a SpanParserModel; span_labels: the run's
    spans.SpanLabels (its span_labels.json); constituent_bias: spans.best_spans'. decode_config,
    max_source_length and max_beam_size are accepted as the Translator's and not used. precision as
    the Translator's: in bfloat16 or float16 the encoder computes in it, the span classifier (every
    span's vectors) in float32 as in training. tag_dictionary: a parsing.tag_dictionary.TagDictionary
    whose allowed tags each word's tag is chosen among (as the seq2seq Parser's), or None: any tag."""

    def __init__(self, model, sentencepiece_proto, decode_config=None, max_source_length=None,
                 max_beam_size=1, precision=None, span_labels=None, constituent_bias=0.0, tag_dictionary=None,
                 name="span_parser"):
        super().__init__(model, sentencepiece_proto, decode_config, max_source_length=model.config.max_length,
                         max_beam_size=1, precision=precision, name=name)
        if span_labels is None:
            raise ValueError("a SpanParser needs the run's span labels (spans.SpanLabels.read(workdir))")
        self.span_labels = span_labels
        self._piece_characters = None  # a model with character features reads each word's through this table
        if model.config.span_char_filters:
            self._piece_characters = tf.constant(piece_character_table(sentencepiece_proto, model.config.vocab_size))
        self.constituent_bias = float(constituent_bias)
        self.tag_dictionary = tag_dictionary
        if tag_dictionary is not None:
            self._tag_tables = TagDictionaryTables(tag_dictionary, list(span_labels.tags))

    def settings(self):
        values = super().settings()
        for key in ("max_beam_size", "max_output_length", "max_source_length"):
            del values[key]
        values.update(task="parsing", parser="span", constituent_bias=self.constituent_bias,
                      max_pieces=self.model.config.max_length - 2, signatures=list(self.signatures()),
                      labels=len(self.span_labels.labels), tags=len(self.span_labels.tags),
                      tag_dictionary=None if self.tag_dictionary is None else self.tag_dictionary.summary())
        return values

    def warmup_score_targets(self, sentences):
        """A tree over each warm-up sentence for `score` (a flat one: the parser's first label over
        the words, each under its first tag); None (no warm-up request) for a parser that has no
        label, which no sentence of two words or more could be scored with."""
        if len(self.span_labels.labels) < 2:
            return None
        label, tag = self.span_labels.labels[1], self.span_labels.tags[0]
        trees = []
        for sentence in sentences:
            words = [f"({tag} {escape_word(word)})" for word in sentence.split()]
            trees.append(f"({label} {' '.join(words)})" if len(words) > 1 else "".join(words))
        return trees

    def decoding(self) -> str:
        return "CKY" if not self.constituent_bias else f"CKY, constituent bias {self.constituent_bias:g}"

    def _parse(self, inputs):
        """(trees (B,), scores (B,)) of raw sentences (B,)."""
        words, sentences = Parser._words(inputs)
        log_probs, tag_log_probs, counts = self._log_probs(sentences)
        choices = tag_log_probs
        if self.tag_dictionary is not None:
            allowed = tf.gather(self._tag_tables.row_masks, self._tag_tables.word_rows(words))  # (B, N, tags)
            choices = tf.where(allowed, tag_log_probs, float("-inf"))
        tag_ids = tf.argmax(choices, axis=-1, output_type=tf.int32)
        tags = tf.gather(tag_log_probs, tag_ids, batch_dims=2)  # (B, N)
        tags = tf.reduce_sum(tf.where(tf.sequence_mask(counts, tf.shape(tags)[1]), tags, 0.0), axis=1)
        with tf.device(HOST):
            trees, spans = trees_from_span_scores(escape_words(words).to_tensor(""), log_probs, tag_ids, counts,
                                                  self.span_labels.labels, self.span_labels.tags,
                                                  self.constituent_bias)
        return trees, spans + tags

    def _log_probs(self, sentences):
        """(span log-probabilities (B, N + 1, N + 1, L), tag log-probabilities (B, N, tags), word counts (B,))
        of sentences (B,) as the model reads them (Parser._words)."""
        with tf.device(HOST):
            source_ids, starts, ends, counts, chars = self._word_pieces(sentences)
        limit = self.model.config.max_length
        check = tf.debugging.assert_less_equal(
            tf.shape(source_ids)[1], limit,
            message=f"a sentence is too long for this parser: its SentencePiece pieces with BOS and EOS are more "
                    f"than the model's max_length, {limit}")
        with tf.control_dependencies([check]):
            span_logits, tag_logits = self.model.span_scores(source_ids, starts, ends, counts, training=False,
                                                             word_chars=chars)
        return (tf.nn.log_softmax(span_logits), tf.nn.log_softmax(tf.cast(tag_logits, tf.float32)),  # every tag
                counts)

    def _word_pieces(self, sentences):
        """word_pieces' outputs and, for a model with character features, word_characters' (else None)."""
        source_ids, starts, ends, counts = word_pieces(self._sentencepiece().tokenize, sentences)
        chars = None
        if self._piece_characters is not None:
            chars = word_characters(source_ids, starts, ends, counts, self._piece_characters)
        return source_ids, starts, ends, counts, chars

    def span_chart(self, sentence: str):
        """(words, log-odds (n + 1, n + 1)) of one sentence: [i, j] is span (i, j)'s best label's
        log p less log p(no constituent), as best_spans scores it before the bias (i < j)."""
        words, sentences = Parser._words(tf.constant([sentence]))
        source_ids, starts, ends, counts, chars = self._word_pieces(sentences)
        span_logits, _ = self.model.span_scores(source_ids, starts, ends, counts, training=False, word_chars=chars)
        log_probs = tf.nn.log_softmax(span_logits[0]).numpy()
        return ([word.decode("utf-8") for word in escape_words(words).to_list()[0]],
                log_probs[:, :, 1:].max(axis=-1) - log_probs[:, :, 0])

    def evaluation_picture(self, sentence: str, answer: str):
        """(name, PNG) for the training job's TensorBoard (training.summaries): the span scores of a
        validation sentence, with the spans of its answer tree marked."""
        words, log_odds = self.span_chart(sentence)
        spans = tree_spans(parse_tree(answer)) if answer else {}
        return "span scores", span_chart_png(words, log_odds, spans, f"log p(best label) - log p(no constituent); "
                                                                     f"marked: the answer's {len(spans)} spans")

    translate_nbest = None  # n-best trees are not offered

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="source"),
                                                   tf.TensorSpec([None], tf.string, name="target")])
    def score(self, source, target):
        """log p(tree | sentence) of bracketed trees over raw sentences' words, as `parse` scores its
        answers (module docstring)."""
        with tf.device(HOST):
            sizes = tf.debugging.assert_equal(tf.size(source), tf.size(target),
                                              message="score: source and target must hold as many strings")
            with tf.control_dependencies([sizes]):
                _, sentences = Parser._words(source)
            tree_words, tag_ids, spans, label_ids = read_bracketed_trees(
                _valid_utf8(target), self.span_labels.labels, self.span_labels.tags)
            # Parser._words' sentences are the escaped words joined by spaces, as these are.
            same = tf.equal(tf.strings.reduce_join(tree_words, axis=1, separator=" "), sentences)
            check = tf.debugging.Assert(tf.reduce_all(same), [
                "score: the words of a tree are not those of its sentence (split at whitespace, brackets written "
                "-LRB- and -RRB-), e.g. the tree", tf.boolean_mask(target, ~same)[:1]])
        log_probs, tag_log_probs, counts = self._log_probs(sentences)
        index = tf.range(tf.shape(log_probs)[1])
        inside = (index[None, :, None] < index[None, None, :]) & (index[None, None, :] <= counts[:, None, None])
        with tf.control_dependencies([check]):  # the trees' words are the sentences': their spans and tags fit
            # Every span of the sentence: no constituent (0), unless it is one of the tree's.
            labels = tf.tensor_scatter_nd_update(tf.where(inside, 0, -1), spans, label_ids)  # (B, N + 1, N + 1)
            tags = tf.gather(tag_log_probs, tag_ids.to_tensor(0), batch_dims=2)  # (B, N)
            tags = tf.where(tf.sequence_mask(counts, tf.shape(tags)[1]), tags, 0.0)
            return {"scores": labelled_log_probs(log_probs, labels) + tf.reduce_sum(tags, axis=1)}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def parse(self, inputs):
        trees, scores = self._parse(inputs)
        return {"trees": trees, "scores": scores}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        """What the training job's evaluations read: the trees as `translations` (no scores, which they
        do not read: the graph then leaves their computation out)."""
        trees, _ = self._parse(inputs)
        return {"translations": trees}

    def signatures(self):
        return {"serving_default": self.parse, "score": self.score}
