"""Shapes that are known when a graph is traced, or only when it runs."""
import tensorflow as tf


def dimension(x, axis):
    """x's size along axis: a Python int where the static shape knows it, else an int32 scalar tensor
    (e.g. the beam width of translate_nbest, chosen at run time)."""
    size = x.shape[axis]
    return size if size is not None else tf.shape(x)[axis]
