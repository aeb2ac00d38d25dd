"""Parser: the Translator of keras_transformer.export, answering with trees. Raw tokenized sentences
in (words separated by spaces), bracketed trees out, in TensorFlow ops only, so that the SavedModel
runs in TF Serving as the translation export does.

    parser = Parser(model, sentencepiece_proto, decode_config)
    parser.parse(tf.constant(["I saw a dog ."]))["trees"]   # [b"(S (NP (PRP I)) (VP ... ) (. .))"]

Decoding is constrained so that every answer is a tree over exactly the input words, written as
parsing.linearization writes trees (each tag followed by its word): at each step only the tokens
that keep the output completable are allowed. After a tag, the decoder copies its word, piece by
piece, from the sentence's SentencePiece pieces (the i-th tag gets the i-th word): a copied piece
is the only choice there and adds nothing to the score, so the decoder sees the words it has tagged
so far, and the score is that of the tree tokens. Otherwise a tag is allowed while words remain
(inside a bracket, or alone for a one-word sentence), an opening bracket while words remain, a
closing bracket when it closes something that holds a word (the root only once every word has its
tag), and EOS only after the root is closed; each of them only if the tokens it leaves to output
(the missing tags and words, the closing brackets, EOS) still fit in the sentence's maximum
length, which is at least words + pieces + 3. Only the tree tokens, EOS and "copy the next piece"
are chosen among, so decoding scores those (a hundred or so) instead of the whole vocabulary
(Transformer.decoding_step_fn's output_ids): the same answers, found faster. The trees are built
from the tags (the i-th tag over the i-th word), never from the copied text.

With a tag dictionary (parsing.tag_dictionary; the training job writes one from the train trees),
a tag is allowed only among those the dictionary allows the word it is for: the next untagged one.
The allowed tags then share the probability the model gives to all the tags allowed there: only
masking the forbidden ones would hand their probability to the brackets too, and a beam search
that finds the tag the model wanted forbidden would open bracket after bracket instead.

A vocabulary of parsing.depth_labels' tokens (a tag token and a depth token a word, no brackets;
`--linearization depth`) makes a parser by word: DepthConstraint allows, word by word, a tag token,
the word's pieces copied, and a depth token but after the last word, then EOS, and the trees are
built from the labels in TensorFlow ops (depth_labels.trees_from_labels). Its answers have exactly
2 x words - 1 + pieces tokens and EOS, so the limit is on twice the words plus the pieces. With
`--linearization depth_word_first` (Parser's word_first) each word comes before its tag:
WordFirstDepthConstraint copies the word's pieces, then allows a tag token, then a depth token, and
the tag dictionary applies to the word just copied.

Signatures:
  serving_default  inputs (B,) string -> trees (B,) string, scores (B,) float32 (beam search's)
  score            as the Translator's: log p(linearized tree | sentence), the sentence's words read as
                   serving_default reads them
Empty (whitespace-only) sentences give "" with score 0. Invalid UTF-8 is replaced by U+FFFD. Words
"(" and ")" (and brackets inside words) are written -LRB- and -RRB- in the trees, as the PTB does.
A source longer than the parser's max_source_length pieces is cut (the tree still covers every
word; the words past the cut are not copied); a sentence whose words and pieces (within that cut)
add up to more than the model's max_length - 3 is refused with an InvalidArgumentError naming the
limit (1,021 for the parsing presets: at least 510 words).
"""
import numpy as np
import tensorflow as tf
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.config import EOS_ID, PAD_ID, DecodeConfig
from keras_transformer.data.text_files import WHITESPACE
from keras_transformer.decoding.beam_search import gather_rows
from keras_transformer.export import HOST, Translator, _valid_utf8
from keras_transformer.parsing.depth_labels import DEPTH_TOKEN, UNARY_MARK, trees_from_labels
from keras_transformer.parsing.tag_dictionary import ALPHANUMERIC, SHAPES

FORBIDDEN, OPEN, CLOSE, TAG, END, COPY, DEPTH = range(7)
_WORD_MARK = "\u2581"  # SentencePiece's space mark: tree tokens are pieces "▁(NP", "▁)", "▁NN"
NEG_LOGIT = -1e9  # finite, so a row with nothing allowed (after its sentence is done) never gives NaN


def tree_symbols(tokens) -> list[str]:
    """The SentencePiece user-defined symbols that make each tree token one piece."""
    return [_WORD_MARK + token for token in sorted(set(tokens))]


def piece_classes(sentencepiece_proto: bytes, vocab_size: int) -> np.ndarray:
    """(V,) int32: the class of each piece id (FORBIDDEN, OPEN, CLOSE, TAG, END; DEPTH for the
    depth tokens of parsing.depth_labels, in place of OPEN and CLOSE)."""
    proto = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_proto)
    user_defined = sentencepiece_model_pb2.ModelProto.SentencePiece.Type.USER_DEFINED
    classes = np.full([vocab_size], FORBIDDEN, np.int32)
    for index, piece in enumerate(proto.pieces):
        if piece.type != user_defined or not piece.piece.startswith(_WORD_MARK):
            continue
        token = piece.piece[len(_WORD_MARK):]
        classes[index] = (CLOSE if token == ")" else OPEN if token.startswith("(")
                          else DEPTH if DEPTH_TOKEN.match(token) else TAG)
    classes[EOS_ID] = END
    if not (classes == TAG).any() or (classes == OPEN).any() == (classes == DEPTH).any():
        raise ValueError("the SentencePiece model has no tree tokens (user-defined pieces such as '▁(NP', '▁)', "
                         "'▁NN', or '▁NN' and '▁+1NP'): it was not trained for parsing")
    return classes


def word_start_pieces(sentencepiece_proto: bytes, vocab_size: int) -> np.ndarray:
    """(V,) bool: the pieces that begin a word (SentencePiece's space mark "▁" first)."""
    proto = sentencepiece_model_pb2.ModelProto.FromString(sentencepiece_proto)
    starts = np.zeros([vocab_size], bool)
    starts[:len(proto.pieces)] = [piece.piece.startswith(_WORD_MARK) for piece in proto.pieces]
    return starts


class TreeConstraint:
    """Which choices each of N rows may make next; see the module docstring.

    The choices are the V' output indices (`classes`) and one more, COPY (index V'): "output the
    sentence's next piece".

    Args:
      classes: (V',) int32 the class of each output index.
      word_counts: (N,) int32 words of each row's sentence.
      max_lengths: (N,) int32 the longest output of each row, EOS included.
      word_starts: (N, S) bool: which of each row's sentence pieces (EOS and padding excluded) begin
        a word (SentencePiece's "▁"); S >= 1.
      piece_counts: (N,) int32 the pieces of each row's sentence (EOS excluded).
      word_rows, row_masks: a tag dictionary, or None: word_rows (N, W') int32 (W' >= 1) a row of
        row_masks (R, V' + 1) bool for each word of each row's sentence; a tag is allowed only where
        the row of the word it is for (the next one) allows it.
    """

    def __init__(self, classes, word_counts, max_lengths, word_starts, piece_counts, word_rows=None, row_masks=None):
        self.classes = tf.constant(np.append(classes, COPY).astype(np.int32))
        self.copy_index = len(classes)
        self.word_counts = word_counts
        self.max_lengths = max_lengths
        self.word_starts = word_starts
        self.piece_counts = piece_counts
        self.word_rows = word_rows
        self.row_masks = row_masks

    def initial_state(self):
        zeros = tf.zeros_like(self.word_counts)
        no = tf.cast(zeros, tf.bool)
        return zeros, zeros, no, no, zeros, no  # depth, tags, last open, started, copied, in a word

    def update(self, state, choices):
        """The state after each row chose choices (N,) (BOS at step 0 changes nothing)."""
        depth, tags, _, started, copied, _ = state
        kind = tf.gather(self.classes, choices)  # (N,)
        depth += tf.cast(kind == OPEN, tf.int32) - tf.cast(kind == CLOSE, tf.int32)
        tags += tf.cast(kind == TAG, tf.int32)
        copied += tf.cast(kind == COPY, tf.int32)
        in_word = self._next_in_word(kind, copied)
        return depth, tags, kind == OPEN, started | (kind == OPEN) | (kind == TAG), copied, in_word

    def allowed(self, state, step):
        """(N, V' + 1) bool: the choices each row may make at position `step`."""
        depth, tags, last_open, started, copied, in_word = state
        words = self.word_counts
        missing = words - tags
        # positions after this one, less what the rest of the words need: their tags and pieces
        left = self.max_lengths - step - 1 - tf.where(missing > 0, self.piece_counts - copied, 0)
        done = started & tf.equal(depth, 0)
        free = ~in_word
        open_ok = free & ~done & (missing > 0) & (missing + depth + 2 <= left)
        tag_ok = (free & ~done & (missing > 0) & ((depth > 0) | (~started & tf.equal(words, 1)))
                  & (missing + depth <= left))
        close_ok = (free & (depth > 0) & ~last_open & ((depth > 1) | tf.equal(missing, 0))
                    & (missing + depth <= left))
        end_ok = free & ((done & tf.equal(missing, 0)) | tf.equal(words, 0))
        never = tf.zeros_like(done)
        by_class = tf.stack([never, open_ok, close_ok, tag_ok, end_ok, in_word, never], axis=1)  # (N, 7)
        return tf.gather(by_class, self.classes, axis=1)  # (N, V' + 1)

    def _next_in_word(self, kind, copied):
        """(N,) bool: whether the next choice is a copy: after a tag or a copied piece, while the
        sentence's next piece continues the word."""
        pieces_left = copied < self.piece_counts
        next_starts_word = tf.gather(self.word_starts, tf.minimum(copied, tf.shape(self.word_starts)[1] - 1),
                                     batch_dims=1)  # (N,)
        return pieces_left & ((kind == TAG) | ((kind == COPY) & ~next_starts_word))

    @staticmethod
    def tags(state):
        """(N,) the tags output so far."""
        return state[1]

    @staticmethod
    def copied(state):
        """(N,) the sentence pieces copied so far."""
        return state[4]

    def dictionary_allowed(self, state):
        """(N, V' + 1) bool: False on the tags the tag dictionary forbids for the next word to be
        tagged (True elsewhere); None without a dictionary."""
        if self.word_rows is None:
            return None
        next_word = tf.minimum(self.tags(state), tf.shape(self.word_rows)[1] - 1)
        return tf.gather(self.row_masks, tf.gather(self.word_rows, next_word, batch_dims=1))

    def vocabulary_ids(self, state, choices, output_ids, pieces):
        """(N,) the ids a model is fed for choices (N,) made in `state`: output_ids[choice], or
        for COPY the row's next piece of pieces (N, S)."""
        copied = self.copied(state)
        copy = tf.equal(choices, self.copy_index)
        piece = tf.gather(pieces, tf.minimum(copied, tf.shape(pieces)[1] - 1), batch_dims=1)
        return tf.where(copy, piece, tf.gather(output_ids, tf.minimum(choices, self.copy_index - 1)))


class DepthConstraint(TreeConstraint):
    """TreeConstraint's counterpart for sequences of parsing.depth_labels: word by word, a tag
    token, the word's pieces copied, and (but after the last word) a depth token; then EOS. Every
    such sequence is a tree over the words, and its length is fixed: 2 x words - 1 + pieces + EOS.
    The state: (tags, copied, in a word, a depth token due)."""

    def initial_state(self):
        zeros = tf.zeros_like(self.word_counts)
        no = tf.cast(zeros, tf.bool)
        return zeros, zeros, no, no

    @staticmethod
    def tags(state):
        return state[0]

    @staticmethod
    def copied(state):
        return state[1]

    def update(self, state, choices):
        tags, copied, _, due = state
        kind = tf.gather(self.classes, choices)  # (N,)
        tags += tf.cast(kind == TAG, tf.int32)
        copied += tf.cast(kind == COPY, tf.int32)
        in_word = self._next_in_word(kind, copied)
        word_done = ~in_word & ((kind == TAG) | (kind == COPY))
        due = tf.where(kind == DEPTH, False, due | (word_done & (tags < self.word_counts)))
        return tags, copied, in_word, due

    def allowed(self, state, step):
        tags, _, in_word, due = state
        free = ~in_word
        tag_ok = free & ~due & (tags < self.word_counts)
        end_ok = free & ~due & tf.equal(tags, self.word_counts)
        never = tf.zeros_like(in_word)
        by_class = tf.stack([never, never, never, tag_ok, end_ok, in_word, free & due], axis=1)  # (N, 7)
        return tf.gather(by_class, self.classes, axis=1)


class WordFirstDepthConstraint(DepthConstraint):
    """DepthConstraint for parsing.depth_labels' sequences with each word before its tag (the
    "depth_word_first" linearization): word by word, the word's pieces copied, a tag token, and
    (but after the last word) a depth token; then EOS. A word whose pieces were cut from the source
    (see Parser) gets its tag without them. The state: (tags, copied, in a word, a depth token due,
    words begun)."""

    def initial_state(self):
        zeros = tf.zeros_like(self.word_counts)
        no = tf.cast(zeros, tf.bool)
        return zeros, zeros, (self.word_counts > 0) & (self.piece_counts > 0), no, zeros

    def _starts_word(self, copied):
        """(N,) bool: whether the sentence piece at index `copied` (N,) begins a word (the first one
        always does)."""
        starts = tf.gather(self.word_starts, tf.minimum(copied, tf.shape(self.word_starts)[1] - 1), batch_dims=1)
        return starts | tf.equal(copied, 0)

    def update(self, state, choices):
        tags, copied, in_word, due, begun = state
        kind = tf.gather(self.classes, choices)  # (N,)
        copy = kind == COPY
        begun += tf.cast(copy & self._starts_word(copied), tf.int32)
        tags += tf.cast(kind == TAG, tf.int32)
        copied += tf.cast(copy, tf.int32)
        # A word is copied after each depth token (the first one from the start), piece by piece;
        # BOS at step 0 leaves the state as it is.
        in_word = (copied < self.piece_counts) & (((kind == DEPTH) & (tags < self.word_counts))
                                                  | (copy & ~self._starts_word(copied))
                                                  | ((kind == FORBIDDEN) & in_word))
        due = tf.where(kind == DEPTH, False, due | ((kind == TAG) & (tags < self.word_counts)))
        return tags, copied, in_word, due, begun

    def allowed(self, state, step):
        tags, copied, in_word, due, begun = state
        free = ~in_word
        # the word to tag is copied (it began), or none of the sentence's pieces is left to copy
        word_read = (begun > tags) | (copied >= self.piece_counts)
        tag_ok = free & ~due & (tags < self.word_counts) & word_read
        end_ok = free & ~due & tf.equal(tags, self.word_counts)
        never = tf.zeros_like(in_word)
        by_class = tf.stack([never, never, never, tag_ok, end_ok, in_word, free & due], axis=1)  # (N, 7)
        return tf.gather(by_class, self.classes, axis=1)


def constrained_step_fn(step_fn, cache, constraint: TreeConstraint, output_ids, pieces):
    """(step_fn', cache') for keras_transformer.decoding, whose choices are indices into output_ids
    (V',) and COPY (V'): step_fn (fed vocabulary ids, scoring output_ids) with a column for COPY,
    and what `constraint` forbids set to NEG_LOGIT; pieces (N, S) are each row's sentence pieces.
    The constraint's state rides in the cache and follows the beams."""
    output_ids = tf.convert_to_tensor(output_ids, tf.int32)
    is_tag = tf.equal(constraint.classes, TAG)[None, :]  # (1, V' + 1)

    def step(choices, position, constrained_cache):
        model_cache, state = constrained_cache
        ids = constraint.vocabulary_ids(state, choices, output_ids, pieces)
        state = constraint.update(state, choices)
        logits, model_cache = step_fn(ids, position, model_cache)
        if isinstance(logits, (list, tuple)):  # vocabulary blocks of parallel groups
            logits = tf.concat(logits, axis=1)
        logits = tf.concat([logits, tf.zeros_like(logits[:, :1])], axis=1)  # (N, V' + 1): COPY's is 0
        allowed = constraint.allowed(state, position)
        dictionary = constraint.dictionary_allowed(state)
        if dictionary is not None:
            # The tags the dictionary keeps share the probability of all the allowed tags, so that
            # a forbidden tag's mass goes to the other tags, not to the brackets.
            tags = tf.where(allowed & is_tag, logits, NEG_LOGIT)
            shift = (tf.reduce_logsumexp(tags, axis=1, keepdims=True)
                     - tf.reduce_logsumexp(tf.where(dictionary, tags, NEG_LOGIT), axis=1, keepdims=True))
            logits = tf.where(is_tag, logits + shift, logits)
            allowed &= dictionary
        logits = tf.where(allowed, logits, NEG_LOGIT)
        return logits, (model_cache, state)

    def reorder_cache(constrained_cache, parents):
        model_cache, state = constrained_cache
        inner = getattr(step_fn, "reorder_cache", None)
        model_cache = inner(model_cache, parents) if inner else gather_rows(model_cache, parents)
        return model_cache, gather_rows(state, parents)

    step.reorder_cache = reorder_cache
    return step, (cache, constraint.initial_state())


def answer_ids(choices, pieces, choice_ids):
    """Choices (N, T) of a search with constrained_step_fn -> (vocabulary ids (N, T), the same with
    the copied pieces PAD: the tree tokens); pieces (N, S) as the constraint's."""
    copy_index = tf.size(choice_ids)
    copies = tf.equal(choices, copy_index)
    rank = tf.cumsum(tf.cast(copies, tf.int32), axis=1) - 1  # the k-th copy is the k-th piece
    copied = tf.gather(pieces, tf.clip_by_value(rank, 0, tf.shape(pieces)[1] - 1), batch_dims=1)
    tree_ids = tf.where(copies, PAD_ID, tf.gather(choice_ids, tf.minimum(choices, copy_index - 1)))
    return tf.where(copies, copied, tree_ids), tree_ids


def escape_words(words):
    """Brackets in words as the PTB writes them: ( -> -LRB-, ) -> -RRB-."""
    return tf.strings.regex_replace(tf.strings.regex_replace(words, r"\(", "-LRB-"), r"\)", "-RRB-")


def sequences_to_trees(sequences, words):
    """Skeletons (B,) string (linearized trees without their words) and the sentences' words,
    ragged (B, None), -> trees (B,) string.

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


def labels_to_trees(sequences, words):
    """Sequences (B,) string of tag and depth tokens (parsing.depth_labels' sequences without their
    words: tag, depth, tag, ..., tag) and the sentences' words, ragged (B, None), -> trees (B,)
    string. A sentence without words gives ""."""
    tokens = tf.strings.split(sequences)  # (B, None)
    position = tf.range(tf.size(tokens.flat_values, out_type=tokens.row_splits.dtype)) - tf.gather(
        tokens.row_starts(), tokens.value_rowids())
    width = tf.maximum(tf.reduce_max(words.row_lengths()), 1)

    def columns(ragged, default):  # (B, width)
        dense = ragged.to_tensor(default)[:, :width]
        return tf.pad(dense, [[0, 0], [0, width - tf.shape(dense, out_type=width.dtype)[1]]], constant_values=default)

    tag_tokens = columns(tf.ragged.boolean_mask(tokens, tokens.with_flat_values(position % 2 == 0)), "")
    depth_tokens = columns(tf.ragged.boolean_mask(tokens, tokens.with_flat_values(position % 2 == 1)), "+0")
    has_unary = tf.strings.regex_full_match(tag_tokens, f".*{UNARY_MARK}.*")
    unaries = tf.where(has_unary, tf.strings.regex_replace(tag_tokens, f"{UNARY_MARK}[^{UNARY_MARK}]*$", ""), "")
    tags = tf.strings.regex_replace(tag_tokens, f"^.*{UNARY_MARK}", "")
    changes = tf.strings.to_number(tf.strings.regex_replace(depth_tokens, r"^([+-]\d+).*$", r"\1"), tf.int32)
    lcas = tf.strings.regex_replace(depth_tokens, r"^[+-]\d+", "")
    lengths = tf.cast(words.row_lengths(), tf.int32)
    trees = trees_from_labels(columns(escape_words(words), ""), tags, unaries, changes, lcas, tf.maximum(lengths, 1))
    return tf.where(lengths > 0, trees, "")


class TagDictionaryTables(tf.Module):
    """A parsing.tag_dictionary.TagDictionary as a graph reads it, for scores over `columns` (tag
    names, None for a column that is no tag): `word_rows(words)` gives each word's row of
    `row_masks` (R, C) bool, True where the word may take the column (and on every column that is
    no tag). Row i < R - 2 is the i-th listed word's, the last two rows those of any other word of
    each of SHAPES. A row that allows none of the columns' tags allows them all. A tf.Module, so that
    a SavedModel holding it as an attribute holds its lookup table."""

    def __init__(self, dictionary, columns):
        super().__init__(name="tag_dictionary")
        is_tag = np.array([name is not None for name in columns])
        names = np.array([name or "" for name in columns])
        words = sorted(dictionary.words)
        rows = [dictionary.words[word] for word in words] + [dictionary.other.get(shape, ()) for shape in SHAPES]
        masks = np.ones([len(rows), len(columns)], bool)
        for row, tags in enumerate(rows):
            allowed = is_tag & np.isin(names, list(tags))
            if allowed.any():
                masks[row, is_tag] = allowed[is_tag]
        with tf.device(HOST):
            self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
                tf.constant(words, tf.string), tf.range(len(words), dtype=tf.int32)), default_value=-1)
        self.row_masks = tf.constant(masks)

    def word_rows(self, words):
        """(B, N) int32: the row of each word of words (B, None) strings (unescaped), 0 past a sentence."""
        with tf.device(HOST):
            escaped = escape_words(words.flat_values)
            listed = self.table.lookup(escaped)
            other = tf.shape(self.row_masks)[0] - 2 + tf.cast(~tf.strings.regex_full_match(escaped, ALPHANUMERIC),
                                                              tf.int32)  # the rows of SHAPES
            return words.with_flat_values(tf.where(listed >= 0, listed, other)).to_tensor(default_value=0)


class Parser(Translator):
    """Sentences in, trees out (module docstring). Arguments as Translator's; max_source_length
    defaults to the model's max_length - extra_length (the parsing presets: 1024 - 300).
    tag_dictionary: a parsing.tag_dictionary.TagDictionary that decoding obeys, or None (any tag
    for any word). word_first: the model writes each word before its tag (the "depth_word_first"
    linearization; its vocabulary is that of "depth")."""

    def __init__(self, model, sentencepiece_proto, decode_config=None, max_source_length=None,
                 max_beam_size=1, precision=None, tag_dictionary=None, word_first=False, name="parser"):
        extra_length = (decode_config or DecodeConfig()).extra_length
        if max_source_length is None:
            max_source_length = max(2, model.config.max_length - extra_length)
        super().__init__(model, sentencepiece_proto, decode_config, max_source_length=max_source_length,
                         max_beam_size=max_beam_size, precision=precision, name=name)
        classes = piece_classes(self.sentencepiece_proto, model.config.vocab_size)
        self.by_word = bool((classes == DEPTH).any())  # parsing.depth_labels' sequences, not brackets
        if word_first and not self.by_word:
            raise ValueError("word_first is for a vocabulary of depth labels (parsing.depth_labels); "
                             "this one has brackets")
        self.word_first = bool(word_first)
        self.word_starts = word_start_pieces(self.sentencepiece_proto, model.config.vocab_size)
        # PAD first (index 0 pads answers as id 0 does), BOS (fed at step 0), EOS and the tree tokens.
        keep = classes != FORBIDDEN
        keep[[PAD_ID, self.decode_config.bos_id, self.decode_config.eos_id]] = True
        self.output_ids = np.flatnonzero(keep).astype(np.int32)
        self.piece_classes = classes[self.output_ids]  # the class of each output index
        self.tag_dictionary = tag_dictionary
        if tag_dictionary is not None:
            self._tag_tables = self._tag_dictionary_tables(tag_dictionary)

    def _tag_dictionary_tables(self, dictionary):
        """TagDictionaryTables over the output indices (and the COPY column, which is no tag)."""
        proto = sentencepiece_model_pb2.ModelProto.FromString(self.sentencepiece_proto)
        names = [proto.pieces[i].piece[len(_WORD_MARK):] for i in self.output_ids]
        if self.by_word:  # "NP>PRP": the tag is PRP
            names = [name.rpartition(UNARY_MARK)[2] for name in names]
        return TagDictionaryTables(dictionary, [name if kind == TAG else None
                                                for name, kind in zip(names, self.piece_classes)] + [None])

    def _word_rows(self, words):
        """(B, W') int32 (W' >= 1): the tag dictionary's row of each word of words (B, None)."""
        return tf.pad(self._tag_tables.word_rows(words), [[0, 0], [0, 1]])  # a column for sentences without words

    def settings(self):
        values = super().settings()
        dictionary = self.tag_dictionary
        linearization = ("depth_word_first" if self.word_first else "depth") if self.by_word else "brackets"
        values.update(task="parsing", linearization=linearization,
                      max_words_and_pieces=self.max_words_and_pieces,
                      tag_dictionary=None if dictionary is None else dictionary.summary(),
                      signatures=list(self.signatures()),
                      max_output_length=f"max(source tokens with EOS + {self.decode_config.extra_length}, "
                                        f"{'2 x words + pieces' if self.by_word else 'words + pieces + 3'}), "
                                        f"at most {self.model.config.max_length}")
        del values["max_beam_size"]
        return values

    @property
    def max_words_and_pieces(self):
        """The most words + SentencePiece pieces of a sentence (so any sentence of up to half as many
        words fits); by word, the most of twice the words + the pieces."""
        return self.model.config.max_length - (0 if self.by_word else 3)

    def _words_and_pieces(self, word_counts, piece_counts):
        """(N,) what max_words_and_pieces limits: words + pieces, or 2 x words + pieces by word."""
        return (2 if self.by_word else 1) * word_counts + piece_counts

    def _choice_ids(self):
        """(V',) the vocabulary id of each output index (all ids when output_ids is None)."""
        if self.output_ids is None:
            return tf.range(self.model.config.vocab_size, dtype=tf.int32)
        return tf.constant(self.output_ids)

    @staticmethod
    def _pieces(source_ids):
        """(pieces (B, S), piece counts (B,)) of source_ids (B, S): EOS and padding dropped."""
        counts = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1) - 1
        positions = tf.range(tf.shape(source_ids)[1])[None, :]
        return tf.where(positions < counts[:, None], source_ids, PAD_ID), counts

    def _max_lengths(self, source_ids, is_empty, context):
        word_counts, _ = context
        needed = self._words_and_pieces(word_counts, self._pieces(source_ids)[1]) + self.model.config.max_length \
            - self.max_words_and_pieces  # brackets: the root's, its closing bracket and EOS; by word: exact
        lengths = tf.maximum(super()._max_lengths(source_ids, is_empty, context), needed)
        return tf.where(is_empty, 1, tf.minimum(lengths, self.model.config.max_length))

    def _decoding_step(self, source_ids, beam_size, max_length, max_lengths, context):
        step_fn, cache = self._model_step(source_ids, beam_size, max_length)
        word_counts, word_rows = context
        pieces, counts = self._pieces(source_ids)
        pieces = tf.repeat(pieces, beam_size, axis=0)  # (B*W, S)
        dictionary = {} if word_rows is None else dict(word_rows=tf.repeat(word_rows, beam_size, axis=0),
                                                       row_masks=self._tag_tables.row_masks)
        constraint_class = (WordFirstDepthConstraint if self.word_first else DepthConstraint) if self.by_word \
            else TreeConstraint
        constraint = constraint_class(self.piece_classes, tf.repeat(word_counts, beam_size),
                                    tf.repeat(max_lengths, beam_size),
                                    tf.gather(tf.constant(self.word_starts), pieces), tf.repeat(counts, beam_size),
                                    **dictionary)
        return constrained_step_fn(step_fn, cache, constraint, self._choice_ids(), pieces)

    @staticmethod
    def _words(inputs):
        """Raw sentences (B,) -> (their words, ragged (B, None); the sentences as the model reads them (B,))."""
        # Words are separated by whitespace as Python's str.split() sees it (pipelines.parse and the
        # repairs split so); tf.strings.split alone splits at ASCII whitespace only.
        spaced = tf.strings.regex_replace(_valid_utf8(inputs), f"{WHITESPACE}+", " ")
        words = tf.strings.split(tf.strings.strip(spaced))  # (B, None)
        # The words as the treebank writes them, so the model reads what it was trained on.
        return words, tf.strings.reduce_join(escape_words(words), axis=1, separator=" ")

    def _parse(self, inputs):
        """(trees (B,), scores (B,), linearized trees (B,)) of raw sentences (B,)."""
        words, sentences = self._words(inputs)
        word_counts = tf.cast(words.row_lengths(), tf.int32)
        source_ids, is_empty = self._source_ids(sentences)
        what = "twice its words and its" if self.by_word else "its words and"
        check = tf.debugging.assert_less_equal(
            self._words_and_pieces(word_counts, self._pieces(source_ids)[1]), self.max_words_and_pieces,
            message=f"a sentence is too long for this parser: {what} SentencePiece pieces add up to more "
                    f"than {self.max_words_and_pieces}")
        word_rows = None if self.tag_dictionary is None else self._word_rows(words)
        with tf.control_dependencies([check]):
            choices, scores = self._search(source_ids, is_empty, self.decode_config.beam_size,
                                           self.decode_config.alpha, num_return=1, context=(word_counts, word_rows))
        ids, tree_ids = answer_ids(choices[:, 0], self._pieces(source_ids)[0], self._choice_ids())
        tokenizer = self._sentencepiece()
        sequences = tokenizer.detokenize(ids)
        trees = (labels_to_trees if self.by_word else sequences_to_trees)(tokenizer.detokenize(tree_ids), words)
        return tf.where(is_empty, "", trees), tf.where(is_empty, 0.0, scores[:, 0]), tf.where(is_empty, "", sequences)

    translate_nbest = None  # n-best trees are not offered (and a SavedModel holds every tf.function)

    # Without AutoGraph, as the translator's signatures (keras_transformer/export.py): the parsing code
    # uses TensorFlow's control flow ops itself.
    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def parse(self, inputs):
        trees, scores, _ = self._parse(inputs)
        return {"trees": trees, "scores": scores}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def translate(self, inputs):
        """What the training job's evaluations read: the trees as `translations`, and the sequences."""
        trees, scores, sequences = self._parse(inputs)
        return {"translations": trees, "scores": scores, "sequences": sequences}

    @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="source"),
                                                   tf.TensorSpec([None], tf.string, name="target")])
    def score(self, source, target):
        """Translator.score of raw sentences read as `parse` reads them (words split at any
        whitespace, brackets as the treebank writes them) and linearized trees (`translate`'s
        sequences)."""
        return Translator.score.python_function(self, self._words(source)[1], target)

    def signatures(self):
        return {"serving_default": self.parse, "score": self.score}
