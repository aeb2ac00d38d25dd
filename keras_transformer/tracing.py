"""Functions that tf.data traces, traced as they are written.

tf.data runs AutoGraph on every function given to map, filter, flat_map, group_by_window and the
like: it rewrites the function's Python source, and the source of every function it calls, so that
an `if` or a `for` on a tensor becomes graph control flow. The input pipeline's functions have no
such statements (their `if`s test Python values), so for them the rewrite is only a cost, paid at
each start of a job: about 1.3 s of a tiny training run's 45 s (py-spy).
"""
import tensorflow as tf


def plain(function):
    """`function`, traced without AutoGraph; a tensor in an `if` or `while` then fails at tracing."""
    return tf.autograph.experimental.do_not_convert(function)
