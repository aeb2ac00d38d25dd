"""Fake step functions with hand-written or random logit tables, and a plain-Python reference of
the documented beam search, for the decoding tests.

Token ids used throughout: PAD 0, BOS 1, EOS 2, then A 3, B 4, C 5.
"""
import numpy as np
import tensorflow as tf

PAD, BOS, EOS, A, B, C = 0, 1, 2, 3, 4, 5


def log_softmax(logits):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def length_penalty(length, alpha):
    return ((5.0 + length) / 6.0) ** alpha


def probability_rows(num_steps, vocab_size, rows):
    """Logits (num_steps, V, V) indexed by (step, last id) from hand-written probabilities.

    rows maps (step, last_id) -- or (step, None) for every last id at that step -- to
    {token: probability}. The probability left over goes to the other tokens in distinct shares
    (so no two tokens tie); rows not given are uniform-ish the same way. The logits are the log of
    these probabilities plus a constant per row.
    """
    table = np.zeros([num_steps, vocab_size, vocab_size])
    for step in range(num_steps):
        for last in range(vocab_size):
            given = rows.get((step, last), rows.get((step, None), {}))
            others = [token for token in range(vocab_size) if token not in given]
            shares = np.array([1.0 + 0.01 * k for k in range(len(others))])
            probs = np.zeros(vocab_size)
            for token, prob in given.items():
                probs[token] = prob
            probs[others] = (1.0 - sum(given.values())) * shares / shares.sum()
            # A shift per row leaves the softmax unchanged: the decoder must normalise.
            table[step, last] = np.log(probs) + 3.0 + step - 0.5 * last
    return table


class TableModel:
    """Logits = table[sentence, step, last id]: table (S, T, V, V), one table per sentence.

    The cache holds each row's sentence index, so a wrong reordering across sentences shows, and
    the id history (N, T), so the cache is a nested structure of several shapes.
    """

    def __init__(self, table, dtype=tf.float32):
        self.table = np.asarray(table, np.float32)
        self.dtype = dtype

    def initial_cache(self, beam_size=1):
        num_sentences, num_steps = self.table.shape[:2]
        sentence = np.repeat(np.arange(num_sentences), beam_size).astype(np.int32)
        return {"sentence": tf.constant(sentence),
                "history": (tf.zeros([num_sentences * beam_size, num_steps], tf.int32),)}

    def step_fn(self, ids, step, cache):
        table = tf.constant(self.table)
        history = tf.where(tf.range(self.table.shape[1]) == step, ids[:, None],
                           cache["history"][0])
        rows = tf.stack([cache["sentence"], tf.fill(tf.shape(ids), step), ids], axis=1)
        logits = tf.cast(tf.gather_nd(table, rows), self.dtype)
        return logits, {"sentence": cache["sentence"], "history": (history,)}

    def logits(self, sentence, prefix):
        """prefix: the ids fed so far, BOS first."""
        step = len(prefix) - 1
        logits = self.table[sentence, step, prefix[-1]]
        return np.asarray(tf.cast(tf.constant(logits), self.dtype).numpy(), np.float32)


class PrefixModel:
    """Random logits that depend on the whole prefix, read from the cache only.

    The cache holds the id history (N, T) and the running sum of the ids (N, 1) in a nested
    structure; logits = table[hash(sentence, history)] + sum * bias. The ids argument is only
    written into the history, so a hypothesis whose cache was not reordered with it gets the logits
    of another prefix.
    """

    def __init__(self, num_sentences, vocab_size, max_length, seed, scale=2.0, num_codes=997):
        rng = np.random.default_rng(seed)
        self.num_sentences, self.max_length = num_sentences, max_length
        self.table = (rng.normal(size=[num_codes, vocab_size]) * scale).astype(np.float32)
        self.bias = (rng.normal(size=[vocab_size]) * 0.1).astype(np.float32)
        self.multipliers = rng.integers(1, num_codes, size=[max_length]).astype(np.int32)
        self.sentence_multiplier = 31
        self.num_codes = num_codes

    def initial_cache(self, beam_size=1):
        """beam_size: a Python int, or an int32 scalar tensor."""
        rows = self.num_sentences * beam_size
        return {"sentence": tf.repeat(tf.range(self.num_sentences, dtype=tf.int32), beam_size),
                "state": [tf.zeros([rows, self.max_length], tf.int32), tf.zeros([rows, 1])]}

    def step_fn(self, ids, step, cache):
        history, total = cache["state"]
        history = tf.where(tf.range(self.max_length) == step, ids[:, None], history)
        total = total + tf.cast(ids, tf.float32)[:, None]
        code = (tf.reduce_sum(history * self.multipliers, axis=1)
                + cache["sentence"] * self.sentence_multiplier) % self.num_codes
        logits = tf.gather(tf.constant(self.table), code) + total * self.bias
        return logits, {"sentence": cache["sentence"], "state": [history, total]}

    def logits(self, sentence, prefix):
        code = (sum(int(t) * int(m) for t, m in zip(prefix, self.multipliers))
                + sentence * self.sentence_multiplier) % self.num_codes
        return self.table[code] + np.float32(sum(prefix)) * self.bias


def in_blocks(step_fn, widths):
    """step_fn whose logits come as column blocks of these widths, the vocabulary in order (as a
    step function that splits its vocabulary projection across threads returns them)."""
    def blocked_step_fn(ids, step, cache):
        logits, cache = step_fn(ids, step, cache)
        return tf.split(logits, widths, axis=-1), cache

    return blocked_step_fn


def reference_greedy(model, max_lengths, max_length, min_length=0):
    """Returns [(ids tuple, sum of log-probs)] per sentence."""
    results = []
    for sentence, sentence_max in enumerate(max_lengths):
        sentence_max = min(max(sentence_max, 1), max_length)
        prefix, score = (BOS,), 0.0
        while len(prefix) - 1 < sentence_max:
            log_probs = log_softmax(model.logits(sentence, prefix))
            if len(prefix) < min_length:
                log_probs[EOS] = -np.inf
            token = int(np.argmax(log_probs))
            prefix, score = prefix + (token,), score + log_probs[token]
            if token == EOS:
                break
        results.append((prefix[1:], score))
    return results


def reference_beam_search(model, max_lengths, max_length, beam_size, alpha, num_return=None,
                          min_length=0, trace=None):
    """The beam search documented in keras_transformer/decoding/beam_search.py, one sentence at a
    time with Python lists. Returns [[(ids tuple, score)] best first] per sentence. If trace is a
    list, appends the parent beam of each live hypothesis at each step."""
    num_return = num_return or beam_size
    results = []
    for sentence, sentence_max in enumerate(max_lengths):
        sentence_max = min(max(sentence_max, 1), max_length)
        alive, finished = [((BOS,), 0.0)], []
        for step in range(max_length):
            candidates = []
            for beam, (prefix, log_prob) in enumerate(alive):
                log_probs = log_softmax(model.logits(sentence, prefix))
                if step + 1 < min_length:
                    log_probs[EOS] = -np.inf
                for token, token_log_prob in enumerate(log_probs):
                    candidates.append((log_prob + token_log_prob, beam, prefix + (token,)))
            candidates.sort(key=lambda c: -c[0])  # stable: ties keep beam-major order
            candidates = candidates[:2 * beam_size]
            length = step + 1
            finishes = [c[2][-1] == EOS or length >= sentence_max for c in candidates]
            for (log_prob, _, prefix), finish in zip(candidates[:beam_size], finishes):
                if finish:
                    finished.append((prefix[1:], log_prob / length_penalty(length, alpha)))
            finished = sorted(finished, key=lambda f: -f[1])[:num_return]
            going_on = [c for c, finish in zip(candidates, finishes) if not finish][:beam_size]
            if trace is not None:
                trace.append([beam for _, beam, _ in going_on])
            alive = [(prefix, log_prob) for log_prob, _, prefix in going_on]
            if length >= sentence_max:
                break
            bound = alive[0][1] / max(length_penalty(length + 1, alpha),
                                      length_penalty(sentence_max, alpha))
            if len(finished) == num_return and finished[-1][1] >= bound:
                break
        results.append(finished)
    return results
