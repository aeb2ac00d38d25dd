"""Decoding driven by a step function `(ids, step, cache) -> (logits, cache)`; never the model."""
from keras_transformer.decoding.beam_search import beam_search, length_penalty
from keras_transformer.decoding.greedy import greedy_decode

__all__ = ["beam_search", "greedy_decode", "length_penalty"]
