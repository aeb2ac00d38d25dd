"""A span-based parser's model: the paper's encoder over a sentence's SentencePiece pieces, a vector
per word, a score for every span of words and label, and a part-of-speech tag per word.

After Kitaev and Klein (2018, "Constituency Parsing with a Self-Attentive Encoder"), whose encoder
is the paper's, with a span classifier in place of the decoder; a deviation from the paper's
seq2seq parser (section 6.3), for small treebanks. `spans.best_spans` (Python) and
`span_charts.best_tree_labels` (TensorFlow ops, what parsing.span_parser.SpanParser exports) turn
its scores into the most probable tree.

It trains through the training job like the Transformer (TrainingSpanParser: model.TokenLossModel's
steps, training_model.StreamTraining's stream), on the "depth" linearization's pairs: the source ids
say where each word begins (the pieces with SentencePiece's space mark, source_word_positions), the
target ids hold each word's tag and the tree as depth labels (SpanTargets), from which the step
derives the gold label of every span (span_charts.gold_span_labels); SpanParserLoss is per word.

Words (B, N) become vectors with two sentinels, BOS at 0 and EOS at n + 1: word w's vector is a
projection of the encoder's outputs at its first and last piece. A span (i, j), covering words i
.. j - 1 (fenceposts, 0 <= i < j <= n), is represented as Kitaev and Klein do, from the two halves
f, b of the word vectors: [f_j - f_i ; b_{i+1} - b_{j+1}] (with the sentinels at 0 and n + 1, so
f_j is word j's, 1-based). Its label scores are Dense(L)(ReLU(LayerNorm(W [...] + c))). W times the
difference is the difference of W times each fencepost, so the first layer runs per word, not per
span: P_k = W_f f_k - W_b b_{k+1}, and the span's hidden vector is P_j - P_i + c. The rest runs on
the spans of the sentences only (span_positions: n (n + 1) / 2 a sentence of n words), not on the
(N + 1)^2 cells of a padded chart.
"""
import keras
import numpy as np
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.config import SPAN_LOSSES, TransformerConfig
from keras_transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from keras_transformer.layers.dropout import dropout_mask, replica_seed
from keras_transformer.layers.embedding import TokenEmbedding
from keras_transformer.layers.encoder import LayerNormalization
from keras_transformer.model import TokenLossModel
from keras_transformer.parsing.depth_labels import DEPTH_TOKEN, UNARY_MARK
from keras_transformer.parsing.parser import _WORD_MARK, DEPTH, TAG, piece_classes, word_start_pieces
from keras_transformer.parsing.span_charts import best_tree_of_label_scores, gold_span_labels
from keras_transformer.parsing.word_counts import WordCountTable
from keras_transformer.training.training_model import StreamTraining


def word_pieces(tokenize, sentences):
    """In-graph: sentences (B,) strings of words separated by spaces -> (source_ids (B, S) with BOS
    and EOS, word_starts (B, N + 2), word_ends (B, N + 2), word_counts (B,)).

    tokenize: (W,) word strings -> ragged (W, None) piece ids (SubwordTokenizer.tokenize). Each word
    is tokenized alone, so its pieces are the ones it has at the start of a sentence. word_starts
    and word_ends hold the position of each word's first and last piece in source_ids, with BOS
    (position 0) and EOS (position 1 + the pieces) as words 0 and n + 1; padding words read 0.
    A word SentencePiece gives no piece gets UNK.
    """
    words = tf.strings.split(sentences)  # (B, None)
    pieces = tokenize(words.flat_values)  # (W, None)
    # A word that SentencePiece turns into no piece (characters its normalization deletes) reads as
    # UNK: each word is padded with UNK and keeps at least one piece.
    word_lengths = tf.maximum(tf.cast(pieces.row_lengths(), tf.int32), 1)  # (W,)
    padded = tf.pad(pieces.to_tensor(default_value=UNK_ID), [[0, 0], [0, 1]], constant_values=UNK_ID)
    flat_pieces = tf.RaggedTensor.from_tensor(padded, lengths=word_lengths).flat_values
    sentence_lengths = tf.math.unsorted_segment_sum(word_lengths, words.value_rowids(), words.nrows())  # (B,)
    batch = tf.cast(words.nrows(), tf.int32)
    sentinel = tf.ones([batch, 1], tf.int32)
    source = tf.concat([tf.RaggedTensor.from_tensor(sentinel * BOS_ID),
                        tf.RaggedTensor.from_row_lengths(flat_pieces, tf.cast(sentence_lengths, tf.int64)),
                        tf.RaggedTensor.from_tensor(sentinel * EOS_ID)], axis=1)  # (B, None)
    # Word w's last piece sits at 1 (BOS) + the pieces of words before it in its sentence + its own - 1.
    offsets = tf.cumsum(sentence_lengths, exclusive=True)  # (B,)
    ends = tf.cumsum(word_lengths) - tf.gather(offsets, words.value_rowids())  # (W,)
    starts = ends - word_lengths + 1
    eos = tf.RaggedTensor.from_tensor(sentence_lengths[:, None] + 1)
    bos = tf.RaggedTensor.from_tensor(tf.zeros([batch, 1], tf.int32))

    def positions(flat):
        return tf.concat([bos, words.with_flat_values(flat), eos], axis=1).to_tensor()

    return source.to_tensor(), positions(starts), positions(ends), tf.cast(words.row_lengths(), tf.int32)


# Character features (TransformerConfig.span_char_filters). Character ids: 0 padding, 1 a word's
# start, 2 its end, 3 a piece with no text of its own (a byte of byte fallback, UNK), 4 + the code
# point modulo CHAR_IDS - 4 (hashed: no character vocabulary to keep; the code points a vocabulary
# for European text holds seldom share an id).
CHAR_IDS = 1024
_WORD_BEGIN, _WORD_END, _NO_TEXT, _FIRST_CHAR = 1, 2, 3, 4
PIECE_CHARS = 16  # the characters kept of a piece (the first ones); longer pieces are rare
WORD_CHARS = 16  # the characters kept of a word: a longer one keeps its first and last WORD_CHARS / 2
CHAR_EMBEDDING = 32  # width of a character's embedding
CHAR_WIDTH = 3  # the convolution's width, in characters


def piece_character_table(sentencepiece_proto: bytes, vocab_size: int) -> np.ndarray:
    """(V, PIECE_CHARS) int32: the character ids of each piece's text (SentencePiece's space mark
    left out), 0-padded; _NO_TEXT for a piece that stands for no text of its own (bytes, UNK, the
    control pieces). Training (SpanTargets) and parsing (SpanParser) read a word's characters from
    its pieces through this table, so both see the same ones."""
    proto = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_proto)
    kinds = sentencepiece_model_pb2.ModelProto.SentencePiece.Type
    table = np.zeros([vocab_size, PIECE_CHARS], np.int32)
    table[:, 0] = _NO_TEXT
    for index, piece in enumerate(proto.pieces[:vocab_size]):
        if piece.type not in (kinds.NORMAL, kinds.USER_DEFINED):
            continue
        text = piece.piece.replace(_WORD_MARK, "")[:PIECE_CHARS]
        table[index] = 0
        table[index, :len(text)] = [_FIRST_CHAR + ord(char) % (CHAR_IDS - _FIRST_CHAR) for char in text]
    return table


def word_piece_ids(source_ids, word_starts, word_ends, word_counts):
    """In-graph: word_pieces' (or source_word_positions') outputs -> (ragged (W, None) int32: the
    piece ids of each word of the batch, sentence by sentence; is_word (B, N) bool: where they are)."""
    source_ids = tf.cast(source_ids, tf.int32)
    batch, length = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    is_word = tf.sequence_mask(word_counts, tf.shape(word_starts)[1] - 2)  # (B, N)
    starts, ends = tf.boolean_mask(word_starts[:, 1:-1], is_word), tf.boolean_mask(word_ends[:, 1:-1], is_word)
    rows = tf.boolean_mask(tf.broadcast_to(tf.range(batch)[:, None], tf.shape(is_word)), is_word)  # (W,)
    positions = tf.ragged.range(starts, ends + 1)  # (W, None): each word's pieces
    flat = tf.reshape(source_ids, [-1])
    pieces = tf.gather(flat, positions.flat_values + tf.gather(rows, positions.value_rowids()) * length)
    return positions.with_flat_values(pieces), is_word


def word_characters(source_ids, word_starts, word_ends, word_counts, table):
    """In-graph: word_pieces' (or source_word_positions') outputs and piece_character_table's table
    -> (B, N, WORD_CHARS + 2) int32, each word's character ids: _WORD_BEGIN, the characters of its
    pieces in order (the first and last WORD_CHARS / 2 of a longer word), _WORD_END, 0-padded; rows
    past a sentence's words are 0."""
    pieces, is_word = word_piece_ids(source_ids, word_starts, word_ends, word_counts)
    batch, width = tf.shape(is_word)[0], tf.shape(is_word)[1]
    piece_chars = tf.RaggedTensor.from_tensor(tf.gather(table, pieces.flat_values), padding=0)  # (P, None)
    chars = tf.RaggedTensor.from_row_lengths(piece_chars, pieces.row_lengths()).merge_dims(1, 2)  # (W, None)
    counts = tf.cast(chars.row_lengths(), tf.int32)[:, None]  # (W, 1)
    dense = chars.to_tensor(0)
    dense = tf.pad(dense, [[0, 0], [0, tf.maximum(WORD_CHARS - tf.shape(dense)[1], 0)]])  # (W, >= WORD_CHARS)
    kept = tf.range(WORD_CHARS)[None, :]  # (1, WORD_CHARS)
    half = WORD_CHARS // 2
    picked = tf.where((kept < half) | (counts <= WORD_CHARS), kept, counts - WORD_CHARS + kept)
    kept_chars = tf.where(kept < tf.minimum(counts, WORD_CHARS), tf.gather(dense, picked, batch_dims=1), 0)
    columns = tf.range(WORD_CHARS + 2)[None, :]
    marked = tf.pad(kept_chars, [[0, 0], [1, 1]])
    marked = tf.where(columns == tf.minimum(counts, WORD_CHARS) + 1, _WORD_END, marked)
    marked = tf.where(columns == 0, _WORD_BEGIN, marked)
    return tf.scatter_nd(tf.cast(tf.where(is_word), tf.int32), marked, tf.stack([batch, width, WORD_CHARS + 2]))


def source_word_positions(source_ids, word_starts_table):
    """In-graph, from the training stream's source ids (B, S) (pieces, EOS, padding) and the
    vocabulary's word-start table (V,) bool: what word_pieces gives for raw sentences, (source_ids
    (B, S + 1) with BOS first, word_starts (B, N + 2), word_ends (B, N + 2), word_counts (B,)). A
    word begins at each piece with SentencePiece's space mark (and at the first piece)."""
    ids = tf.pad(tf.cast(source_ids, tf.int32), [[0, 0], [1, 0]], constant_values=BOS_ID)
    pieces = (ids != PAD_ID) & (ids != EOS_ID) & (ids != BOS_ID)  # (B, S + 1)
    positions = tf.broadcast_to(tf.range(tf.shape(ids)[1]), tf.shape(ids))
    begins = pieces & (tf.gather(word_starts_table, ids) | tf.equal(positions, 1))
    starts = tf.ragged.boolean_mask(positions, begins)  # (B, None)
    eos = tf.RaggedTensor.from_tensor(tf.reduce_sum(tf.cast(pieces, tf.int32), axis=1, keepdims=True) + 1)
    bos = tf.RaggedTensor.from_tensor(tf.zeros_like(eos.flat_values)[:, None])
    ends = tf.concat([starts[:, 1:], eos], axis=1) - 1
    return (ids, tf.concat([bos, starts, eos], axis=1).to_tensor(), tf.concat([bos, ends, eos], axis=1).to_tensor(),
            tf.cast(starts.row_lengths(), tf.int32))


class SpanTargets:
    """What a span parser reads from a run's vocabulary (a SentencePiece model with the tag and
    depth tokens of parsing.depth_labels, the "depth" linearization): which pieces begin a word, and
    the gold tree of each target sequence, in-graph.

    gold(target_ids (B, T)) -> (tag ids (B, N), -1 past each sentence; unary label ids (B, N);
    counts a(k) (B, N); lca label ids (B, N); words (B,)), the labels as spans.SpanLabels numbers them.
    word_counts: the train split's {word: count} (parsing.word_counts), which the frequency-based
    unknown words read (TransformerConfig.span_word_unk_alpha; word_count_table, else None).
    """

    def __init__(self, sentencepiece_proto: bytes, vocab_size: int, span_labels, word_counts=None):
        classes = piece_classes(sentencepiece_proto, vocab_size)
        if not (classes == DEPTH).any():
            raise ValueError("a span parser is trained on the depth linearization: this vocabulary has no depth tokens")
        pieces = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_proto).pieces
        tags, unaries, changes, lcas = (np.zeros([vocab_size], np.int32) for _ in range(4))
        tags[:] = -1
        for index in np.flatnonzero(classes == TAG):
            unary, _, tag = pieces[index].piece[len(_WORD_MARK):].rpartition(UNARY_MARK)
            tags[index], unaries[index] = span_labels.tag_id(tag), span_labels.label_id(unary) if unary else 0
        for index in np.flatnonzero(classes == DEPTH):
            match = DEPTH_TOKEN.match(pieces[index].piece[len(_WORD_MARK):])
            changes[index], lcas[index] = int(match.group(1)), span_labels.label_id(match.group(2))
        self.word_starts = tf.constant(word_start_pieces(sentencepiece_proto, vocab_size))
        self.piece_characters = tf.constant(piece_character_table(sentencepiece_proto, vocab_size))
        self.tags, self.unaries = tf.constant(tags), tf.constant(unaries)
        self.changes, self.lcas = tf.constant(changes), tf.constant(lcas)
        self.depth = tf.constant(classes == DEPTH)
        self.word_count_table = None if word_counts is None else WordCountTable(sentencepiece_proto, vocab_size,
                                                                                word_counts)

    def is_tag(self, target_ids):
        """(B, T) bool: the tag tokens of target ids (tag, word pieces, depth token, tag, ...), one a
        word: the first token and those after a depth token. (A tag token may also be a word's piece,
        "▁." for the word "." under the tag ".", so its id alone does not tell.)"""
        ids = tf.cast(target_ids, tf.int32)
        after_depth = tf.pad(tf.gather(self.depth, ids)[:, :-1], [[0, 0], [1, 0]], constant_values=True)
        return after_depth & (tf.gather(self.tags, ids) >= 0)

    def gold(self, target_ids):
        ids = tf.cast(target_ids, tf.int32)
        is_tag, is_depth = self.is_tag(ids), tf.gather(self.depth, ids)

        def picked(table, mask, default):
            return tf.ragged.boolean_mask(tf.gather(table, ids), mask).to_tensor(default)

        tags, unaries = picked(self.tags, is_tag, -1), picked(self.unaries, is_tag, 0)
        width = tf.shape(tags)[1]
        changes, lcas = (_fit_columns(picked(table, is_depth, 0), width, 0) for table in (self.changes, self.lcas))
        return tags, unaries, tf.cumsum(changes, axis=1), lcas, tf.reduce_sum(tf.cast(is_tag, tf.int32), axis=1)


@keras.saving.register_keras_serializable(package="keras_transformer")
class SpanParserModel(TokenLossModel):
    """Span and tag scores of a sentence; see the module docstring.

    Args:
      config: TransformerConfig of the encoder (vocab_size, num_layers, d_model, ...; its decoder
        fields are not read).
      num_labels: L, span labels including label 0, no constituent (spans.SpanLabels).
      num_tags: part-of-speech tags.
      span_hidden: width of the span and tag classifiers' hidden layer (Kitaev and Klein: 250).
      targets: the run's SpanTargets, which training reads word boundaries and gold trees with (they
        come with the vocabulary, not with get_config); None for a model that only scores.
    Call arguments: (source_ids (B, S), target_input_ids (B, T)), as the training stream gives them
      (the target is not read: the loss reads the gold tree from the target output ids); training.
    Returns (span_logits (K, L) float32, their span_positions (K, 3), tag_logits (B, N, num_tags),
      word_counts (B,)): the logits of span [b, i, j] of every sentence. `span_scores` gives them
      as a chart (and the tags) from word_pieces' outputs.
    `compile()` with no loss uses SpanParserLoss (below), divided by the words of the global batch.
    """

    def __init__(self, config, num_labels, num_tags, span_hidden=250, targets=None, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, TransformerConfig) else TransformerConfig.from_dict(config)
        self.num_labels, self.num_tags, self.span_hidden = num_labels, num_tags, span_hidden
        self.targets = targets
        c = self.config
        if c.d_model % 2:
            raise ValueError(f"a span parser splits word vectors in halves: d_model must be even, not {c.d_model}")
        if c.rdrop_alpha:
            raise ValueError("rdrop_alpha is for the seq2seq models; a span parser does not train with R-Drop")
        self._add_encoder_side(TokenEmbedding(c.vocab_size, self.content_width, name="source_embedding"))
        self.word_projection = keras.layers.Dense(c.d_model, name="word_projection")
        self.span_forward = keras.layers.Dense(span_hidden, use_bias=False, name="span_forward")
        self.span_backward = keras.layers.Dense(span_hidden, use_bias=False, name="span_backward")
        # Every span, (N + 1)^2 of them a sentence, in float32 under mixed precision too: the gradients
        # of span_bias, span_norm and span_output sum over all of them, which float16 and bfloat16 sums
        # get wrong (one step's span_output bias gradient was 40% off the float32 one's on 6 toy sentences).
        self.span_norm = LayerNormalization(epsilon=c.layer_norm_epsilon, name="span_norm", dtype="float32")
        self.span_output = keras.layers.Dense(num_labels, name="span_output", dtype="float32")
        self.tag_hidden = keras.layers.Dense(span_hidden, name="tag_hidden")
        self.tag_norm = LayerNormalization(epsilon=c.layer_norm_epsilon, name="tag_norm")
        self.tag_output = keras.layers.Dense(num_tags, name="tag_output")
        self.span_bias = self.add_weight(name="span_bias", shape=(span_hidden,), initializer="zeros", dtype="float32")
        self.char_embedding = self.char_convolution = self.char_projection = None  # made by build
        self.unk_seed_generator = None  # made by build for span_word_unk_rate and span_word_unk_alpha

    def build(self, input_shape=None):
        if self.built:
            return
        ids = tf.constant([[BOS_ID, 5, EOS_ID]], tf.int32)
        positions = tf.constant([[0, 1, 2]], tf.int32)
        # The layers a model without character features has first, in its order, then the character
        # layers, made here (Keras draws an unseeded initializer's seed when it is made): a seed gives
        # both models the same initial weights in the layers they share.
        self._scores(self._encoded_words(ids, positions, positions, None, training=False), tf.constant([1]))
        c = self.config
        if c.span_char_filters:
            self.char_embedding = keras.layers.Embedding(CHAR_IDS, CHAR_EMBEDDING, name="char_embedding")
            self.char_convolution = keras.layers.Conv1D(c.span_char_filters, CHAR_WIDTH, padding="same",
                                                        activation="relu", name="char_convolution")
            self.char_projection = keras.layers.Dense(self.content_width, name="char_projection")
            chars = tf.constant([[[_WORD_BEGIN, _FIRST_CHAR, _WORD_END] + [0] * (WORD_CHARS - 1)]], tf.int32)
            self.character_features(ids, positions, positions, chars)
        if c.span_word_unk_rate or c.span_word_unk_alpha:  # made last too: Keras draws its seed when it is made
            self.unk_seed_generator = keras.random.SeedGenerator(name="unk_seed_generator")
        super().build(input_shape)

    @property
    def content_width(self):
        """The width of the pieces' embeddings and character features: d_model, or d_model / 2 with
        TransformerConfig.span_partitioned (the other half is the position's)."""
        return self.config.d_model // 2 if self.config.span_partitioned else self.config.d_model

    def word_vectors(self, source_ids, word_starts, word_ends, training=None, word_chars=None):
        """(B, S) piece ids and (B, N + 2) piece positions -> word vectors (B, N + 2, D). word_chars:
        word_characters' (B, N, WORD_CHARS + 2), which a model with character features needs."""
        characters = self.character_features(source_ids, word_starts, word_ends, word_chars)
        return self._encoded_words(source_ids, word_starts, word_ends, characters, training)

    def _encoded_words(self, source_ids, word_starts, word_ends, characters, training):
        """word_vectors with character_features' output (or None) given."""
        source_ids = self.unknown_words(source_ids, word_starts, word_ends, training=training)
        memory, _ = self.encode(source_ids, training=training, source_additions=characters)
        first = tf.gather(memory, word_starts, batch_dims=1)
        last = tf.gather(memory, word_ends, batch_dims=1)
        return self.word_projection(tf.concat([first, last], axis=-1))

    def unknown_words(self, source_ids, word_starts, word_ends, training=None):
        """source_ids (B, S) with, in training, every piece of each word UNK with probability
        TransformerConfig.span_word_unk_rate (a word's pieces all or none; BOS, EOS and padding
        kept), or with TransformerConfig.span_word_unk_alpha's probability alpha / (alpha + its count
        in the train split); as they are otherwise. word_starts, word_ends (B, N + 2): word_pieces'
        positions."""
        rate, alpha = self.config.span_word_unk_rate, self.config.span_word_unk_alpha
        if not (training and (rate or alpha)):
            return source_ids
        if rate:
            unknown = ~dropout_mask(tf.shape(word_starts), rate, replica_seed(self.unk_seed_generator))  # (B, N + 2)
        else:
            unknown = self.rare_words(source_ids, word_starts, word_ends)
        positions = tf.range(tf.shape(source_ids)[1])[None, :, None]  # (1, S, 1)
        cover = ((positions >= word_starts[:, None, :]) & (positions <= word_ends[:, None, :])
                 & unknown[:, None, :])  # (B, S, N + 2): piece s is of word n, which is UNK
        # The sentinels and the padding words (word_pieces pads their positions with 0) point at the
        # BOS and EOS pieces only, which are never replaced; no word covers a padding piece.
        replaced = tf.reduce_any(cover, axis=2) & (source_ids != BOS_ID) & (source_ids != EOS_ID)
        return tf.where(replaced, tf.constant(UNK_ID, source_ids.dtype), source_ids)

    def rare_words(self, source_ids, word_starts, word_ends):
        """(B, N + 2) bool, True at each word drawn UNK: with probability alpha / (alpha + its count in
        the train split), TransformerConfig.span_word_unk_alpha (a word of count 0, which the counts
        lack, always); never at BOS, EOS and padding."""
        table = self.targets.word_count_table if self.targets is not None else None
        if table is None:
            raise ValueError(f"span_word_unk_alpha={self.config.span_word_unk_alpha} reads each training word's count: "
                             "give the model SpanTargets with the train split's word_counts")
        # The words: the columns 1 .. n of word_starts that hold a piece position (padding words read 0).
        word_counts = tf.reduce_sum(tf.cast(word_starts[:, 1:] > 0, tf.int32), axis=1) - 1  # (B,): EOS left out
        pieces, is_word = word_piece_ids(source_ids, word_starts, word_ends, word_counts)
        alpha = self.config.span_word_unk_alpha
        probabilities = alpha / (alpha + tf.cast(table.lookup(pieces), tf.float32))  # (W,)
        draws = tf.random.stateless_uniform(tf.shape(probabilities), seed=replica_seed(self.unk_seed_generator))
        columns = tf.cast(tf.where(is_word), tf.int32) + [0, 1]  # word w of a sentence is column w + 1
        return tf.scatter_nd(columns, draws < probabilities, tf.shape(word_starts))

    def character_features(self, source_ids, word_starts, word_ends, word_chars):
        """(B, S, D), D / 2 with TransformerConfig.span_partitioned: each piece's share of its word's
        character features (TransformerConfig.span_char_filters): a projection of the max over the
        word's characters of a convolution of their embeddings; 0 at BOS, EOS and padding. None for
        a model without character features."""
        if not self.config.span_char_filters:
            return None
        if word_chars is None:
            raise ValueError("this span parser reads each word's characters (span_char_filters="
                             f"{self.config.span_char_filters}): give span_scores word_characters' word_chars")
        word_chars = tf.cast(word_chars, tf.int32)
        batch, width, chars = tf.shape(word_chars)[0], tf.shape(word_chars)[1], tf.shape(word_chars)[2]
        flat = tf.reshape(word_chars, [batch * width, chars])
        hidden = self.char_convolution(self.char_embedding(flat))  # (B N, C, F), ReLU: >= 0
        hidden = tf.reduce_max(tf.where((flat > 0)[:, :, None], hidden, tf.zeros_like(hidden)), axis=1)
        vectors = self.char_projection(tf.reshape(hidden, [batch, width, self.config.span_char_filters]))  # (B, N, D)
        positions = tf.range(tf.shape(source_ids)[1])[None, :, None]  # (1, S, 1)
        is_word = (word_chars[:, None, :, 0] == _WORD_BEGIN)  # (B, 1, N)
        cover = (is_word & (positions >= word_starts[:, None, 1:width + 1])
                 & (positions <= word_ends[:, None, 1:width + 1]))  # (B, S, N): piece s is of word n
        return tf.einsum("bsn,bnd->bsd", tf.cast(cover, vectors.dtype), vectors)

    def span_logits(self, words, positions):
        """(B, N + 2, D) word vectors and span_positions (K, 3) -> the spans' label logits (K, L),
        float32; the hidden vector of span [b, i, j] is P_j - P_i + c."""
        forward, backward = tf.split(words, 2, axis=-1)
        fenceposts = self.span_forward(forward[:, :-1]) - self.span_backward(backward[:, 1:])  # (B, N + 1, H)
        fenceposts = tf.cast(fenceposts, tf.float32)
        hidden = tf.gather_nd(fenceposts, positions[:, ::2]) - tf.gather_nd(fenceposts, positions[:, :2])
        return self.span_output(tf.nn.relu(self.span_norm(hidden + self.span_bias)))

    def tag_logits(self, words):
        """(B, N + 2, D) word vectors -> (B, N, num_tags)."""
        return self.tag_output(tf.nn.relu(self.tag_norm(self.tag_hidden(words[:, 1:-1]))))

    def span_scores(self, source_ids, word_starts, word_ends, word_counts, training=None, word_chars=None):
        """word_pieces' outputs (source_ids (B, S) with BOS, word_starts, word_ends (B, N + 2),
        word_counts (B,)) -> (span_logits (B, N + 1, N + 1, L) float32, 0 where no span is;
        tag_logits (B, N, num_tags)). word_chars: word_characters' of the same, for a model with
        character features (TransformerConfig.span_char_filters)."""
        words = self.word_vectors(source_ids, word_starts, word_ends, training=training, word_chars=word_chars)
        return self._scores(words, word_counts)

    def _scores(self, words, word_counts):
        """span_scores from the word vectors (B, N + 2, D)."""
        width = tf.shape(words)[1] - 1
        positions = span_positions(word_counts, width)
        chart_shape = tf.stack([tf.shape(words)[0], width, width, self.num_labels])
        spans = tf.scatter_nd(positions, self.span_logits(words, positions), chart_shape)
        return spans, self.tag_logits(words)

    def call(self, inputs, training=None):
        if self.targets is None:
            raise ValueError("this SpanParserModel has no SpanTargets: it scores word_pieces' outputs (span_scores) "
                             "but cannot read the training stream's batches")
        source_ids, word_starts, word_ends, word_counts = source_word_positions(inputs[0], self.targets.word_starts)
        word_chars = None
        if self.config.span_char_filters:
            word_chars = word_characters(source_ids, word_starts, word_ends, word_counts, self.targets.piece_characters)
        words = self.word_vectors(source_ids, word_starts, word_ends, training=training, word_chars=word_chars)
        positions = span_positions(word_counts, tf.shape(words)[1] - 1)
        return self.span_logits(words, positions), positions, self.tag_logits(words), word_counts

    def compile(self, optimizer=None, loss=None, metrics=None, jit_compile="auto", **kwargs):
        """TokenLossModel.compile; jit_compile=True is refused: the loss reads the gold trees with
        ragged ops (a sentence's words vary), which XLA cannot compile."""
        if jit_compile is True:
            raise ValueError("the span parser's training step reads its gold trees with ragged ops, which XLA cannot "
                             "compile: train it without --jit-compile (run.jit_compile)")
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, jit_compile=False, **kwargs)

    def default_loss(self):
        if self.targets is None:
            raise ValueError("a SpanParserModel without SpanTargets has no loss to train with")
        return SpanParserLoss(self.targets, tag_weight=self.config.span_tag_loss_weight,
                              span_loss=self.config.span_loss)

    def build_compiled(self):
        """Nothing: the loss is not Keras' compiled loss (Keras would build it from a symbolic call)."""

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels, "num_tags": self.num_tags,
                "span_hidden": self.span_hidden}


def span_positions(word_counts, width):
    """(K, 3) int32: [b, i, j] for every span (i, j), 0 <= i < j <= word_counts[b], of every
    sentence b, in row-major order; width: N + 1, the fenceposts of the longest sentence."""
    fenceposts = tf.range(width)
    spans = ((fenceposts[:, None] < fenceposts[None, :])[None]
             & (fenceposts[None, None, :] <= tf.cast(word_counts, tf.int32)[:, None, None]))  # (B, N + 1, N + 1)
    return tf.cast(tf.where(spans), tf.int32)


def span_parser_loss(span_logits, tag_logits, gold_spans, gold_tags, tag_weight=1.0):
    """Cross-entropy of every span's label and every word's tag (times tag_weight), summed, per word
    of the batch.

    span_logits (..., L): label logits of spans, those SpanParserModel returns (K, L) or a chart's
    (B, N + 1, N + 1, L); gold_spans (...): the label id of each, 0 for no constituent, -1 for one to
    skip (no span, or one of a sentence whose gold tree could not be read); tag_logits (B, N, T);
    gold_tags (B, N): tag ids, -1 past the sentence. Each span is classified on its own (a local
    model, as Teng and Zhang, 2018, train theirs), not through the tree (Kitaev and Klein's hinge loss:
    span_hinge_loss_sum, TransformerConfig.span_loss="hinge").
    """
    total, words = span_parser_loss_sum(span_logits, tag_logits, gold_spans, gold_tags, tag_weight)
    return total / tf.maximum(words, 1.0)


def span_parser_loss_sum(span_logits, tag_logits, gold_spans, gold_tags, tag_weight=1.0):
    """(the summed cross-entropy of span_parser_loss, the words it is over) as float32 scalars."""
    span_mask = gold_spans >= 0
    span_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.boolean_mask(gold_spans, span_mask), tf.cast(tf.boolean_mask(span_logits, span_mask), tf.float32))
    tag_total, words = tag_loss_sum(tag_logits, gold_tags)
    return tf.reduce_sum(span_losses) + tag_weight * tag_total, words


def tag_loss_sum(tag_logits, gold_tags):
    """(the summed cross-entropy of the tags, the words it is over) as float32 scalars; tag_logits
    (B, N, T), gold_tags (B, N) tag ids, -1 past the sentence."""
    tag_mask = gold_tags >= 0
    tag_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        tf.boolean_mask(gold_tags, tag_mask), tf.cast(tf.boolean_mask(tag_logits, tag_mask), tf.float32))
    return tf.reduce_sum(tag_losses), tf.reduce_sum(tf.cast(tag_mask, tf.float32))


def span_hinge_loss_sum(span_logits, positions, gold_spans, lengths, batch, size):
    """The summed tree-level margin loss of TransformerConfig.span_loss="hinge" (Kitaev and Klein,
    2018), float32: over the sentences b with lengths[b] > 0, max(0, max over trees T of
    [s(T) + Hamming(T, gold)] - s(gold)). s(T) sums the logits of T's label at every span (no
    constituent, label 0, where T has none); the Hamming loss counts the spans whose label differs
    from the gold one. Both decompose over spans, so the maximizing tree is the CKY's of
    best_tree_of_label_scores on the logits plus 1 at every wrong label.

    span_logits (K, L) and positions (K, 3), SpanParserModel's; gold_spans (K,) the gold label id of
    each span, -1 for a span of a sentence left out (its length 0); lengths (B,) int32; batch: B;
    size: N + 1, the side of the sentences' charts that positions index.
    """
    logits = tf.cast(span_logits, tf.float32)
    gold = tf.maximum(gold_spans, 0)
    augmented = logits + 1.0 - tf.one_hot(gold, tf.shape(logits)[1], dtype=tf.float32)  # (K, L)
    chart_shape = tf.stack([batch, size, size])
    label_scores = tf.scatter_nd(positions, tf.reduce_max(augmented[:, 1:], axis=-1) - augmented[:, 0], chart_shape)
    best_label = tf.scatter_nd(positions, tf.argmax(augmented[:, 1:], axis=-1, output_type=tf.int32) + 1,
                               chart_shape)
    unaries, counts, lcas = best_tree_of_label_scores(tf.stop_gradient(label_scores), best_label, lengths)
    predicted = tf.gather_nd(gold_span_labels(counts, lcas, unaries, lengths), positions)  # (K,), -1 left out
    margins = (tf.gather(augmented, tf.maximum(predicted, 0), batch_dims=1)
               - tf.gather(logits, gold, batch_dims=1))  # (K,)
    kept = (gold_spans >= 0) & (predicted >= 0)
    per_sentence = tf.math.unsorted_segment_sum(tf.where(kept, margins, 0.0), positions[:, 0], batch)
    return tf.reduce_sum(tf.where(lengths > 0, tf.maximum(per_sentence, 0.0), 0.0))


def _fit_columns(values, width, default):
    """values (B, M) cut or padded with `default` to (B, width)."""
    values = values[:, :width]
    return tf.pad(values, [[0, 0], [0, width - tf.shape(values)[1]]], constant_values=default)


@keras.saving.register_keras_serializable(package="keras_transformer")
class SpanParserLoss(keras.losses.Loss):
    """span_parser_loss of a SpanParserModel's outputs against the gold trees that the target ids
    (the depth linearization) spell, read with the run's SpanTargets; what the model's training step
    divides by the words of the global batch (`sum_and_count`, as LabelSmoothedCrossEntropy's for
    tokens). A sentence whose target has another number of words than its source's word starts
    (which only a SentencePiece model that drops a whole word could cause) is left out of the loss.
    tag_weight: the tags' weight (TransformerConfig.span_tag_loss_weight); span_loss: "local", the
    spans' cross-entropy, or "hinge", span_hinge_loss_sum in its place (TransformerConfig.span_loss)."""

    def __init__(self, targets: SpanTargets, tag_weight=1.0, span_loss="local", name="span_parser_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        if span_loss not in SPAN_LOSSES:
            raise ValueError(f"span_loss must be one of {SPAN_LOSSES}; got {span_loss!r}")
        self.targets, self.tag_weight, self.span_loss = targets, float(tag_weight), span_loss

    def real_tokens(self, y_true, dtype=tf.float32):
        """(B, T) 1 at the tag tokens of y_true: the loss is per word."""
        return tf.cast(self.targets.is_tag(y_true), dtype)

    def sum_and_count(self, y_true, y_pred):
        span_logits, positions, tag_logits, word_counts = y_pred
        tags, unaries, counts, lcas, lengths = self.targets.gold(y_true)
        width = tf.shape(tag_logits)[1]
        agree = tf.equal(lengths, word_counts)[:, None]  # (B, 1)
        tags = tf.where(agree, _fit_columns(tags, width, -1), -1)
        unaries, counts, lcas = (_fit_columns(values, width, 0) for values in (unaries, counts, lcas))
        lengths = tf.where(agree[:, 0], lengths, 0)
        gold_spans = tf.gather_nd(gold_span_labels(counts, lcas, unaries, lengths), positions)
        if self.span_loss == "local":
            total, words = span_parser_loss_sum(span_logits, tag_logits, gold_spans, tags, self.tag_weight)
            return total, words, total
        tag_total, words = tag_loss_sum(tag_logits, tags)
        total = self.tag_weight * tag_total + span_hinge_loss_sum(span_logits, positions, gold_spans, lengths,
                                                                  tf.shape(tag_logits)[0], width + 1)
        return total, words, total

    def call(self, y_true, y_pred):
        total, words, _ = self.sum_and_count(y_true, y_pred)
        return total / tf.maximum(words, 1.0)


class TrainingSpanParser(StreamTraining, SpanParserModel):
    """A SpanParserModel that trains on `training_stream` elements (training.training_model)."""
