"""A span parser's charts in TensorFlow ops, for a batch: the best tree from span scores
(`spans.best_spans`' CKY) written as parsing.depth_labels' labels, so that
`depth_labels.trees_from_labels` writes it out; and the reverse, the gold label of every span from
a tree's depth labels, for training and for the log-probability of a chosen tree; and bracketed
trees read into their words, tags and spans, for the log-probability of any tree (SpanParser's
`score`). They run where Python cannot: in a SavedModel and inside a training step.

A chart holds a value for every span by width: chart[w, b, i] is span (i, i + w) of sentence b,
for widths and starts 0 .. N (entries past a sentence's end are computed and never read).

Depth labels and spans say the same (depth_labels' module docstring): with a(k) the number of
constituents over both words k and k + 1 (a(-1) = a(n - 1) = 0), words i .. j - 1 (j - i >= 2)
are a constituent exactly when every a(k) inside, i <= k <= j - 2, is above a(i - 1) and a(j - 1);
its label is the lca label of the first pair where a is lowest inside. A one-word span's label is
the word's unary chain.
"""
import tensorflow as tf

from keras_transformer.parsing.depth_labels import trees_from_labels
from keras_transformer.parsing.trees import EMPTY_ELEMENT_TAG, ROOT_LABELS


def by_width(dense):
    """(B, N + 1, N + 1) [b, i, j] -> chart (N + 1, B, N + 1) [w, b, i] = dense[b, i, min(i + w, N)]."""
    size = tf.shape(dense)[1]
    index = tf.range(size)
    ends = tf.minimum(index[:, None] + index[None, :], size - 1)  # (I, W): [i, w] = min(i + w, N)
    rows = tf.gather(tf.transpose(dense, [1, 2, 0]), ends, axis=1, batch_dims=1)  # (I, W, B)
    return tf.transpose(rows, [1, 2, 0])


def from_width(chart):
    """chart (N + 1, B, N + 1) [w, b, i] -> (B, N + 1, N + 1) [b, i, j] = chart[max(j - i, 0), b, i]."""
    size = tf.shape(chart)[0]
    index = tf.range(size)
    widths = tf.maximum(index[None, :] - index[:, None], 0)  # (I, J)
    rows = tf.gather(tf.transpose(chart, [2, 0, 1]), widths, axis=1, batch_dims=1)  # (I, J, B)
    return tf.transpose(rows, [2, 0, 1])


def _set_row(chart, row, values):
    """chart with chart[row] = values."""
    return tf.tensor_scatter_nd_update(chart, [[row]], values[None])


def best_tree_labels(span_log_probs, lengths, constituent_bias=0.0):
    """`spans.best_spans` for a batch, its tree as depth labels.

    span_log_probs (B, N + 1, N + 1, L): log p(label | span (i, j)) for i < j <= lengths[b], label 0
    no constituent; lengths (B,) int32 words (0 for none). Returns (B, N) int32 each: unary label
    ids (0: none) of each word; counts a(k), the labelled spans over words k and k + 1 (for
    k < lengths - 1, 0 elsewhere); lca label ids, the innermost of those spans' labels.
    """
    log_probs = tf.cast(span_log_probs, tf.float32)
    label_scores = tf.reduce_max(log_probs[..., 1:], axis=-1) - log_probs[..., 0] + constituent_bias
    best_label = tf.argmax(log_probs[..., 1:], axis=-1, output_type=tf.int32) + 1
    return best_tree_of_label_scores(label_scores, best_label, lengths)


def best_tree_of_label_scores(label_scores, best_label, lengths):
    """best_tree_labels from each span's best label (B, N + 1, N + 1) int32 (1 .. L - 1) and its
    score (B, N + 1, N + 1) float32 against no constituent (a tree's score is the sum of its
    labelled spans'); lengths (B,) int32. Returns as best_tree_labels."""
    label_scores = tf.cast(label_scores, tf.float32)
    lengths = tf.cast(lengths, tf.int32)
    size = tf.shape(label_scores)[1]
    batch = tf.shape(label_scores)[0]
    index = tf.range(size)
    # The whole sentence of two or more words always takes its best label.
    whole = ((index[None, :, None] == 0) & (index[None, None, :] == lengths[:, None, None])
             & (lengths[:, None, None] > 1))  # (B, N + 1, N + 1)
    labelled = (label_scores > 0) | whole
    scores = by_width(tf.where(whole, label_scores, tf.maximum(label_scores, 0.0)))
    labelled, best_label = by_width(labelled), by_width(best_label)

    def inside(width, chart, splits):
        """The best of every span of this width: its score plus that of its best split (at i + t)."""
        offsets = tf.range(1, width)  # t
        left = tf.gather(chart, offsets)  # (t, B, I): span (i, i + t)
        ends = tf.minimum(index[None, :] + offsets[:, None], size - 1)  # (t, I)
        right = tf.gather(tf.gather(chart, width - offsets), ends, axis=2, batch_dims=1)  # span (i + t, i + width)
        totals = left + right
        splits = _set_row(splits, width, tf.argmax(totals, axis=0, output_type=tf.int32) + 1)
        return width + 1, _set_row(chart, width, scores[width] + tf.reduce_max(totals, axis=0)), splits

    chart = _set_row(tf.zeros_like(scores), 1, scores[1])
    _, _, splits = tf.while_loop(lambda width, *_: width < size, inside,
                                 (tf.constant(2), chart, tf.zeros_like(scores, tf.int32)))

    def outside(width, in_tree, depths, labels, counts, lcas):
        """From the spans of the tree of this width to their two halves: each tree span (i, i + w)
        split at m gives pair m - 1 its count (the labelled spans over it, itself included) and the
        innermost one's label, and hands both down to the halves."""
        here = tf.cast(tf.where(in_tree[width]), tf.int32)  # (A, 2): [b, i]
        rows, starts = here[:, 0], here[:, 1]
        own = tf.gather_nd(labelled[width], here)
        depth = tf.gather_nd(depths[width], here) + tf.cast(own, tf.int32)
        label = tf.where(own, tf.gather_nd(best_label[width], here), tf.gather_nd(labels[width], here))
        offset = tf.gather_nd(splits[width], here)
        middle = starts + offset
        pairs = tf.stack([rows, middle - 1], axis=1)
        halves = tf.concat([tf.stack([offset, rows, starts], axis=1),
                            tf.stack([width - offset, rows, middle], axis=1)], axis=0)
        return (width - 1, tf.tensor_scatter_nd_update(in_tree, halves, tf.ones_like(halves[:, 0], tf.bool)),
                tf.tensor_scatter_nd_update(depths, halves, tf.concat([depth, depth], axis=0)),
                tf.tensor_scatter_nd_update(labels, halves, tf.concat([label, label], axis=0)),
                tf.tensor_scatter_nd_update(counts, pairs, depth), tf.tensor_scatter_nd_update(lcas, pairs, label))

    roots = tf.equal(index[:, None, None], lengths[None, :, None]) & tf.equal(index[None, None, :], 0)
    zeros = tf.zeros_like(splits)
    per_pair = tf.zeros([batch, size], tf.int32)
    _, _, _, _, counts, lcas = tf.while_loop(lambda width, *_: width > 1, outside,
                                             (size - 1, roots, zeros, zeros, per_pair, per_pair))
    words = tf.sequence_mask(lengths, size - 1)
    unaries = tf.where(words & labelled[1][:, :-1], best_label[1][:, :-1], 0)
    return unaries, counts[:, :-1], lcas[:, :-1]


def trees_from_span_scores(words, span_log_probs, tag_ids, lengths, label_names, tag_names, constituent_bias=0.0):
    """(trees, log_probs): bracketed trees (B,) string, "" for a sentence without words, of the best
    trees (as best_tree_labels) over words (B, N) string (escaped, as in the PTB) with their tags
    tag_ids (B, N) int32; label_names (L,) and tag_names (T,) string, label 0 being ""; and the
    log p of each tree's spans (tree_log_probs; its tags are not counted), 0 for no words."""
    lengths = tf.cast(lengths, tf.int32)
    unaries, counts, lcas = best_tree_labels(span_log_probs, lengths, constituent_bias)
    log_probs = tree_log_probs(span_log_probs, lengths, unaries, counts, lcas)
    changes = counts - tf.pad(counts[:, :-1], [[0, 0], [1, 0]])
    label_names = tf.convert_to_tensor(label_names, tf.string)
    trees = trees_from_labels(words, tf.gather(tf.convert_to_tensor(tag_names, tf.string), tag_ids),
                              tf.gather(label_names, unaries), changes, tf.gather(label_names, lcas),
                              tf.maximum(lengths, 1))
    return tf.where(lengths > 0, trees, ""), log_probs


def tree_log_probs(span_log_probs, lengths, unaries, counts, lcas):
    """log p (B,) float32 of trees given as best_tree_labels gives them, under span_log_probs
    (B, N + 1, N + 1, L), whose spans are independent given the sentence: the sum, over every span
    (i, j) with i < j <= lengths[b], of log p(its label in the tree), label 0 (no constituent) for
    a span that is not one. 0 for a sentence without words."""
    return labelled_log_probs(span_log_probs, gold_span_labels(counts, lcas, unaries, lengths))


def labelled_log_probs(span_log_probs, labels):
    """The sum (B,) float32 of log p(labels[b, i, j]) under span_log_probs (B, N + 1, N + 1, L) over
    the entries of labels (B, N + 1, N + 1) int32 that are not -1 (those that are no span)."""
    picked = tf.gather(tf.cast(span_log_probs, tf.float32), tf.maximum(labels, 0), batch_dims=3)
    return tf.reduce_sum(tf.where(labels >= 0, picked, 0.0), axis=[1, 2])


def gold_span_labels(counts, lca_ids, unary_ids, lengths):
    """The label id of every span (B, N + 1, N + 1) of trees given as depth labels: (i, j) for
    i < j <= lengths[b] gets its constituent's label id, or 0 (no constituent); other entries -1.

    counts (B, N) int32: a(k), the constituents over words k and k + 1, for k < lengths - 1 (other
    entries not read); lca_ids (B, N) the label id of the lowest of them; unary_ids (B, N) the label
    id of each word's unary chain (0 for none).
    """
    lengths = tf.cast(lengths, tf.int32)
    width = tf.shape(counts)[1]
    pairs = tf.sequence_mask(lengths - 1, width)
    counts = tf.where(pairs, counts, 0)
    # a(k) for k = -1 .. N (0 outside the pairs), so that span (i, i + w) is bounded by outer[i] and outer[i + w].
    outer = tf.pad(counts, [[0, 0], [1, 1]])  # (B, N + 2)
    size = width + 1
    index = tf.range(size)

    def widen(span_width, lowest, label, chart):
        """From width - 1 to width: the lowest a(k) inside each span and the label of its first pair."""
        last = tf.gather(counts, tf.minimum(index + span_width - 2, width - 1), axis=1)  # (B, I): a(i + w - 2)
        last_label = tf.gather(lca_ids, tf.minimum(index + span_width - 2, width - 1), axis=1)
        first = tf.equal(span_width, 2)
        label = tf.where(first | (last < lowest), last_label, label)
        lowest = tf.where(first, last, tf.minimum(lowest, last))
        bounds = tf.maximum(outer[:, :-1], tf.gather(outer, tf.minimum(index + span_width, width + 1), axis=1))
        return span_width + 1, lowest, label, _set_row(chart, span_width, tf.where(lowest > bounds, label, 0))

    unaries = tf.pad(tf.where(tf.sequence_mask(lengths, width), unary_ids, 0), [[0, 0], [0, 1]])
    chart = _set_row(tf.zeros([size, tf.shape(counts)[0], size], tf.int32), 1, unaries)
    zeros = tf.zeros_like(unaries)
    _, _, _, chart = tf.while_loop(lambda span_width, *_: span_width < size, widen,
                                   (tf.constant(2), zeros, zeros, chart))
    spans = from_width(chart)
    inside = (index[None, :, None] < index[None, None, :]) & (index[None, None, :] <= lengths[:, None, None])
    return tf.where(inside, spans, -1)


def read_bracketed_trees(trees, label_names, tag_names):
    """Bracketed trees (B,) string, as a span parser writes them ("(S (NP (PRP I)) (VP (VBD saw)))",
    one constituent at the top; "" for a sentence without words) or as treebanks do (over several
    lines, with a root wrapper, function tags and empty elements: preprocessed_trees), read in
    TensorFlow ops: (words ragged (B, None) string; tag ids ragged (B, None) int32, the indices of
    tag_names; spans (K, 3) int32 [b, i, j] of every constituent, unary chains collapsed as
    spans.tree_spans collapses them ("S+VP"); their label ids (K,) int32, the indices of label_names,
    whose entry 0 ("", no constituent) no label matches).

    An InvalidArgumentError quotes the first tree, as given, that is not one (unbalanced brackets,
    text outside the top constituent, a word not directly under a tag, a constituent without words
    other than those its empty elements leave), or the first label or tag that is not in
    label_names / tag_names, with its tree.
    """
    trees = tf.convert_to_tensor(trees, tf.string)
    # (B, T): a column past every tree
    lengths, dense, is_open, is_close, depth = _bracket_tokens(preprocessed_trees(trees), 1)
    position = tf.range(tf.shape(dense)[1])[None, :]
    valid = position < lengths[:, None]
    is_label = valid & _shifted(is_open, 1) & ~is_open & ~is_close
    is_word = valid & ~is_open & ~is_close & ~is_label
    # One top constituent: the depth is above 0 inside it and 0 after its last token only. Each "("
    # is followed by a label; a word sits alone under a tag, "(TAG word)"; a constituent has a
    # constituent or a word after its label.
    last = position == lengths[:, None] - 1
    well_formed = tf.reduce_all(
        ~valid | (tf.where(last, tf.equal(depth, 0), depth > 0)
                  & (~is_open | _shifted(is_label, -1))
                  & (~is_word | (_shifted(is_label, 1) & _shifted(is_close, -1)))
                  & (~is_label | _shifted(is_open, -1) | _shifted(is_word, -1))), axis=1)
    check = tf.debugging.Assert(tf.reduce_all(well_formed), [
        "score: not a bracketed tree (balanced brackets, one constituent at the top, each word alone under its tag, "
        "no constituent without words), e.g.", tf.boolean_mask(trees, ~well_formed)[:1]])
    with tf.control_dependencies([check]):
        dense = tf.identity(dense)
    spans, chains = _constituents(dense, is_open, is_close, is_word, depth, lengths)
    words = tf.ragged.boolean_mask(dense, is_word)
    tags = tf.ragged.boolean_mask(_shifted(dense, 1, ""), is_word)
    tag_ids = _name_ids(tag_names, tags.flat_values, tf.cast(tags.value_rowids(), tf.int32), trees, 0, "tag")
    return (words, tags.with_flat_values(tag_ids), spans,
            _name_ids(label_names, chains, spans[:, 0], trees, 1, "constituent label"))


# An empty element, "(-NONE- *T*-1)", and then a bracket that holds nothing but a label and what
# empty elements left, become _EMPTY; a bracket that holds only a label in the tree as written is no
# tree, and read_bracketed_trees refuses it.
_EMPTY = "\x00"
_EMPTY_ELEMENT = r"\(\s*" + EMPTY_ELEMENT_TAG + r"\s+[^()\s]+\s*\)"  # no character of "-NONE-" is special
_EMPTIED = r"\(\s*[^()\s\x00]*(\s*\x00)+\s*\)"
# A constituent's label (one followed by a bracket, not a tag followed by its word) with a function
# tag or an index: "(NP-SBJ-1 (", "(NP=2 (". Labels that start with "-" (-NONE-, -LRB-) stay whole.
_FUNCTION_TAGGED = r"\((\s*)([^-=()\s][^-=()\s]*)[-=][^()\s]*(\s*)\("
_WRAPPED = r"(?s)^\s*\(\s*(?:" + "|".join(label for label in ROOT_LABELS if label) + r")?\s*(\(.*\))\s*\)\s*$"


def preprocessed_trees(trees):
    """trees.preprocess in TensorFlow ops, on bracketed trees (B,) string: empty elements and the
    constituents they leave empty dropped, function tags and indices stripped from constituent labels
    (NP-SBJ-1 -> NP), root wrappers ("( (S ...))", "(ROOT (S ...))", "(TOP ...)") over a single
    constituent removed; tags and words as they are. A preprocessed tree comes back as it is, up to
    whitespace; text that is not a tree is for read_bracketed_trees to refuse."""
    def until_unchanged(step, trees):
        def body(trees, _):
            changed = step(trees)
            return changed, tf.reduce_any(tf.not_equal(changed, trees))
        return tf.while_loop(lambda _, changing: changing, body, (trees, tf.constant(True)))[0]

    trees = tf.strings.regex_replace(trees, _EMPTY_ELEMENT, _EMPTY)
    trees = until_unchanged(lambda trees: tf.strings.regex_replace(trees, _EMPTIED, _EMPTY), trees)
    trees = tf.strings.regex_replace(trees, r"\x00", " ")
    # Two passes: a match takes the next label's "(" with it, so the first leaves every other label
    # of a chain "(S-1 (NP-SBJ (NP-2 (" to the second.
    for _ in range(2):
        trees = tf.strings.regex_replace(trees, _FUNCTION_TAGGED, r"(\1\2\3(")
    return until_unchanged(_unwrapped_roots, trees)


def _bracket_tokens(trees, columns_past):
    """Bracketed text (B,) string as tokens, "(", ")" and what lies between: (tokens a row (B,) int32;
    tokens (B, T) string, "" past a row's end and in `columns_past` more columns; where they are "("
    and ")" (B, T) bool; the bracket depth after each token (B, T) int32)."""
    tokens = tf.strings.split(tf.strings.regex_replace(trees, r"([()])", r" \1 "))  # (B, None)
    dense = tf.pad(tokens.to_tensor(""), [[0, 0], [0, columns_past]], constant_values="")  # (B, T)
    is_open, is_close = tf.equal(dense, "("), tf.equal(dense, ")")
    depth = tf.cumsum(tf.cast(is_open, tf.int32) - tf.cast(is_close, tf.int32), axis=1)
    return tf.cast(tokens.row_lengths(), tf.int32), dense, is_open, is_close, depth


def _unwrapped_roots(trees):
    """Each tree (B,) string whose top bracket is a root wrapper over one constituent, without it."""
    _, dense, _, is_close, depth = _bracket_tokens(trees, 3)  # at least 3 columns
    children = tf.reduce_sum(tf.cast(is_close & tf.equal(depth, 1), tf.int32), axis=1)
    label, after = dense[:, 1], dense[:, 2]
    named = tf.reduce_any(tf.equal(label[:, None], [name for name in ROOT_LABELS if name]), axis=1)
    wrapper = (tf.equal(dense[:, 0], "(") & (tf.equal(label, "(") | (named & tf.equal(after, "(")))
               & tf.equal(children, 1))
    return tf.where(wrapper, tf.strings.regex_replace(trees, _WRAPPED, r"\1"), trees)


def _shifted(values, by, fill=False):
    """values (B, T) moved `by` columns to the right (1: each position holds the one before it;
    -1: the one after it), `fill` where nothing is."""
    if by > 0:
        return tf.pad(values[:, :-by], [[0, 0], [by, 0]], constant_values=fill)
    return tf.pad(values[:, -by:], [[0, 0], [0, -by]], constant_values=fill)


def _constituents(tokens, is_open, is_close, is_word, depth, lengths):
    """read_bracketed_trees' (spans (K, 3) [b, i, j], their labels (K,) string, unary chains joined
    by "+", outermost first) from well-formed trees' tokens (B, T), their masks and depths (B, T)."""
    size = tf.shape(tokens)[1]
    wide = tf.cast(size, tf.int64) + 1
    position = tf.cast(tf.range(size), tf.int64)[None, :]
    # The "(" and ")" of the constituents pair up level by level: at each depth they alternate, "("
    # first, so the k-th "(" by (depth after it, position) closes at the k-th ")" by (depth before it, position).
    open_order = tf.argsort(tf.where(is_open, tf.cast(depth, tf.int64) * wide + position, wide * wide), axis=1)
    close_order = tf.argsort(tf.where(is_close, tf.cast(depth + 1, tf.int64) * wide + position, wide * wide), axis=1)
    pairs = tf.sequence_mask(tf.reduce_sum(tf.cast(is_open, tf.int32), axis=1), size)  # (B, T) of the sorted
    words_before = tf.cumsum(tf.cast(is_word, tf.int32), axis=1, exclusive=True)  # (B, T)
    starts = tf.gather(words_before, open_order, batch_dims=1)
    ends = tf.gather(words_before, close_order, batch_dims=1)
    labels = tf.gather(tokens, tf.minimum(open_order + 1, size - 1), batch_dims=1)
    preterminal = tf.gather(is_word, tf.minimum(open_order + 2, size - 1), batch_dims=1)  # "(TAG word)"
    rows = tf.broadcast_to(tf.range(tf.shape(tokens)[0])[:, None], tf.shape(tokens))
    row, start, end, opened, label = (tf.boolean_mask(values, pairs & ~preterminal)
                                      for values in (rows, starts, ends, open_order, labels))
    # Unary chains: the constituents over one span, outermost (first opened) first, as one label.
    widest = tf.cast(tf.reduce_max(tf.concat([lengths, [0]], axis=0)), tf.int64) + 1
    span_key = (tf.cast(row, tf.int64) * widest + tf.cast(start, tf.int64)) * widest + tf.cast(end, tf.int64)
    order = tf.argsort(span_key * wide + tf.cast(opened, tf.int64))
    span_key = tf.gather(span_key, order)
    first = tf.concat([tf.ones_like(span_key[:1], tf.bool), span_key[1:] != span_key[:-1]], axis=0)
    spans = tf.boolean_mask(tf.stack([tf.gather(row, order), tf.gather(start, order), tf.gather(end, order)], 1),
                            first)
    chains = tf.strings.unsorted_segment_join(tf.gather(label, order), tf.cumsum(tf.cast(first, tf.int32)) - 1,
                                              tf.reduce_sum(tf.cast(first, tf.int32)), separator="+")
    return spans, chains


def _name_ids(names, values, rows, trees, first, what):
    """The index of each of values (K,) string in names[first:] (counted from 0 in names); an
    InvalidArgumentError quotes the first value that is not there and its tree (trees[rows[k]])."""
    # A comparison with every name, not a lookup table: a table made inside a function is a
    # resource that a SavedModel does not keep.
    names = tf.convert_to_tensor(names, tf.string)[first:]
    same = tf.equal(values[:, None], names[None, :])  # (K, names): at most one True a row, names being distinct
    unknown = ~tf.reduce_any(same, axis=1)
    known = tf.debugging.Assert(tf.reduce_all(~unknown), [
        f"score: a {what} this parser does not know (function tags and root labels are not its own):",
        tf.boolean_mask(values, unknown)[:1], "in the tree", tf.gather(trees, tf.boolean_mask(rows, unknown)[:1])])
    with tf.control_dependencies([known]):  # a sum, not an argmax, which fails over no names
        return tf.reduce_sum(tf.where(same, tf.range(tf.shape(names)[0])[None, :], 0), axis=1) + first
