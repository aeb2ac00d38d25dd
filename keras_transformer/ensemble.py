"""Several Transformers that translate as one (not in the paper, whose base model is one set of
averaged weights): at each position the members' next-token distributions are averaged,

    p(y | prefix, x) = (1 / K) sum_k p_k(y | prefix, x),

and beam search ranks hypotheses by the sum of log p, as it would one model's. The members are
typically checkpoints of one run, or runs of several seeds; each keeps its own weights, encoder
outputs and decoder cache, so a decoding step costs K steps of one model. They must share the
vocabulary (the same SentencePiece model) and the maximum length.

TransformerEnsemble stands wherever a Transformer translates (export.Translator, so also
training.evaluation.BeamSearchTranslator and an export): `call` returns log p above as logits
(float32; their log-softmax is themselves), so the `score` signature scores with the ensemble,
and `decoding_step_fn` returns a step function whose logits are log p, in the members' blocks.
"""
import math

import keras
import tensorflow as tf

from keras_transformer.decoding import selection
from keras_transformer.decoding.beam_search import gather_rows


def _log_softmax_blocks(logits):
    """A step function's logits (N, V) or blocks [(N, V_i)] -> float32 log-probability blocks,
    normalised over all of them together (selection.log_normalizer, given each block's best column)."""
    blocks = selection.logit_blocks(logits)
    block_best = [tf.argmax(block, axis=-1, output_type=tf.int32) for block in blocks]  # [(N,)]
    normalizer = selection.log_normalizer(blocks, block_best)[:, None]  # (N, 1)
    return [block - normalizer for block in blocks]


def _log_mean(log_probs):
    """log((1 / K) sum_k exp(x_k)) of K tensors of one shape."""
    return tf.reduce_logsumexp(tf.stack(log_probs), axis=0) - math.log(len(log_probs))


class TransformerEnsemble(keras.Model):
    """The mean of the next-token distributions of `members`, built Transformers (module docstring).

    Attributes read as a Transformer's: `config` (the first member's; each member has its
    vocab_size and max_length) and `dtype_policy` (the first member's).
    """

    def __init__(self, members, **kwargs):
        members = list(members)
        if not members:
            raise ValueError("TransformerEnsemble needs at least one member")
        first = members[0].config
        for index, member in enumerate(members[1:], start=1):
            for field in ("vocab_size", "max_length"):
                if getattr(member.config, field) != getattr(first, field):
                    raise ValueError(f"TransformerEnsemble: member {index} has {field}="
                                     f"{getattr(member.config, field)}, member 0 has {getattr(first, field)}; "
                                     f"members must share the vocabulary and the maximum length")
        super().__init__(dtype=members[0].dtype_policy, **kwargs)
        self.members = members
        self.config = first
        self.built = True

    def call(self, inputs, training=False):
        """(source_ids (B, S), target_input_ids (B, T)) -> log of the members' mean distribution
        (B, T, V), float32."""
        return _log_mean([tf.nn.log_softmax(tf.cast(member(inputs, training=training), tf.float32))
                          for member in self.members])

    def decoding_step_fn(self, source_ids, beam_size=1, **kwargs):
        """(step_fn, initial_cache) as Transformer.decoding_step_fn, with the same arguments (passed
        to every member); the cache holds one member cache each, and step_fn's logits are the log of
        the members' mean distribution, in the blocks the members return."""
        steps = [member.decoding_step_fn(source_ids, beam_size, **kwargs) for member in self.members]

        def step_fn(ids, step, cache):
            member_blocks, new_cache = [], []
            for (member_step, _), member_cache in zip(steps, cache):
                logits, member_cache = member_step(ids, step, member_cache)
                member_blocks.append(_log_softmax_blocks(logits))
                new_cache.append(member_cache)
            if len({len(blocks) for blocks in member_blocks}) != 1:
                raise ValueError("TransformerEnsemble: the members split their logits into different blocks")
            blocks = [_log_mean(list(block)) for block in zip(*member_blocks)]
            return (blocks[0] if len(blocks) == 1 else blocks), new_cache

        def reorder_cache(cache, parents):
            return [(getattr(member_step, "reorder_cache", None) or gather_rows)(member_cache, parents)
                    for (member_step, _), member_cache in zip(steps, cache)]

        step_fn.reorder_cache = reorder_cache
        return step_fn, [initial_cache for _, initial_cache in steps]
