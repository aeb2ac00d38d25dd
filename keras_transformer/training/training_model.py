"""TrainingTransformer: the Transformer's training step, plus the data position and gradient accumulation.

It has exactly the Transformer's layers and weights (checkpoints and weight files of one load into
the other); only its `train_step` differs, and only for the elements of `training_stream`:
  {"batch": ..., "position": ...}: the Transformer's own step, then the position is recorded;
  {"micro_batches": ..., "position": ...}: one optimizer step over K micro-batches (below).
Any other element ((x, y) pairs) gets the Transformer's step unchanged.

Gradient accumulation: the step's loss is sum(token losses of all K micro-batches, all replicas) /
(their real target tokens), exactly the loss of one step on their union. Each micro-batch adds the
gradient of its own token-loss sum divided by that global count, so the sum of the K gradients
is the gradient of the union's loss; the optimizer then applies it once (one learning-rate step).
The micro-batches run in a tf.while_loop, one after the other (parallel_iterations=1): one copy of
the model in the graph whatever K is, and one micro-batch's activations in memory at a time.
Each is unpacked to its own (B, L) shape, which the data decide: XLA cannot compile that as part of
one whole step ("Input 1 to node `while/Reshape` ... must be a compile-time constant"), so with
jit_compile=True and K > 1 each micro-batch's forward and backward pass is compiled apart, on one
device too, as Transformer.compile does over several replicas.
"""
import keras
import tensorflow as tf

from keras_transformer.model import Transformer
from keras_transformer.training.data_stream import DataPosition, unpack_micro_batch
from keras_transformer.training.distribution import is_multi_worker


class StreamTraining:
    """What makes a model.TokenLossModel (the Transformer, the span parser) train on
    `training_stream` elements; see the module docstring. Mixed in before the model's class.

    Args (keywords, besides the model's own):
      accumulate_steps: K, micro-batches per optimizer step (the stream must pack the same K).
      data_position: the DataPosition the step records into (None: not recorded). It is kept out
        of the model's own checkpoint dependencies: the run's checkpoint saves it beside the model.
    """

    def __init__(self, *args, accumulate_steps=1, data_position=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.accumulate_steps = accumulate_steps
        # A bound method, which checkpoints do not follow: the position is no part of the model.
        self._record_position = data_position.record if data_position is not None else None

    def _passes_per_step(self) -> int:
        """One pass per replica and micro-batch: with several micro-batches, XLA compiles each pass
        apart on one device too, since it cannot compile their shapes into a whole step (see the
        module docstring)."""
        return super()._passes_per_step() * self.accumulate_steps

    def prepare_for_training(self):
        """Builds the weights, the compiled loss and metrics, and the optimizer's slots.

        Keras would otherwise build them from the first element of the dataset, which it reduces
        across replicas: not possible for per-replica batches of different shapes, nor for the
        stream's dict elements.
        """
        self.build()
        self.build_compiled()
        if not self.optimizer.built:
            self.optimizer.build(self.trainable_variables)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Nothing to build after `prepare_for_training` (see there); Keras' way otherwise."""
        if self.built and self.optimizer is not None and self.optimizer.built and self.compiled:
            return
        super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def train_step(self, data):
        if not isinstance(data, dict):
            return _reducible_across_workers(super().train_step(data))
        if "micro_batches" in data:
            logs = self._accumulated_train_step(data["micro_batches"])
        else:
            logs = super().train_step(data["batch"])
        if self._record_position is not None:
            self._record_position(data["position"])
        return _reducible_across_workers(logs)

    def test_step(self, data):
        return _reducible_across_workers(super().test_step(data))

    def _accumulated_train_step(self, micro_batches):
        # (K, budget), 0 beyond each micro-batch: the divisor is the tokens of all K and all replicas.
        global_count = self._global_token_count(micro_batches["target_output_ids"])
        variables = self.trainable_variables

        def body(index, gradient_sums):
            x, y = unpack_micro_batch(micro_batches, index)
            gradients, logits, total, count = self._loss_and_gradients(x, y, global_count)
            self._track_loss(total, count)
            self.compute_metrics(x, y, logits)
            return index + 1, [total_gradient + tf.convert_to_tensor(gradient)
                               for total_gradient, gradient in zip(gradient_sums, gradients)]

        initial = [tf.zeros(variable.shape, variable.dtype) for variable in variables]
        # One micro-batch at a time: with the default 10 parallel iterations the next micro-batch's
        # forward pass could start before this one's backward pass ends, and hold their activations
        # at once, where accumulating is for the memory of one.
        _, gradient_sums = tf.while_loop(lambda index, _: index < self.accumulate_steps, body,
                                         (tf.constant(0), initial), parallel_iterations=1)
        self._apply_gradients(gradient_sums, variables)
        return self.get_metrics_result()


class TrainingTransformer(StreamTraining, Transformer):
    """A Transformer that trains on `training_stream` elements; see the module docstring.

    Args: config, a TransformerConfig; accumulate_steps and data_position as StreamTraining's.
    """


def _reducible_across_workers(logs):
    """The step's scalar logs as (1,) tensors under MultiWorkerMirroredStrategy, unchanged otherwise.

    Keras 3 reduces the per-replica logs of a multi-worker step with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on scalars ("Invalid reduction dimension 0
    for input with 0 dimensions", tensorflow/tensorflow#72388); on (1,) tensors it is the mean over
    the replicas, a scalar, as a single machine's `tf.reduce_mean` over its replicas gives.
    """
    if not is_multi_worker(tf.distribute.get_strategy()):
        return logs
    return {name: tf.reshape(value, [1]) for name, value in logs.items()}


def rng_state_variables(model: keras.Model):
    """The seed-generator states of the model's dropout layers: saved with each checkpoint so that a
    resumed run draws the same dropout masks as an uninterrupted one (Keras does not track them
    for tf.train.Checkpoint)."""
    return [variable for variable in model.variables if "seed_generator_state" in variable.path]


__all__ = ["DataPosition", "StreamTraining", "TrainingTransformer", "rng_state_variables"]
