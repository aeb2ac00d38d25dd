"""The Transformer (Vaswani et al., 2017) as a subclassed keras.Model: encode, decode and call."""
import keras
import tensorflow as tf

from keras_transformer import masking
from keras_transformer.config import EOS_ID, TransformerConfig
from keras_transformer.cpu import avx2_without_avx512
from keras_transformer.layers.decoder import Decoder
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import TokenEmbedding
from keras_transformer.layers.encoder import Encoder
from keras_transformer.layers.positional import positional_layer
from keras_transformer.losses import LabelSmoothedCrossEntropy, symmetric_kl_sum
from keras_transformer.metrics import MaskedTokenAccuracy, Perplexity
from keras_transformer.schedule import paper_optimizer
from keras_transformer.shapes import dimension


def _even_sizes(total, parts):
    """`parts` sizes that differ by at most 1 and add up to `total` (a Python int, then ints, or an
    int32 scalar tensor, then tensors)."""
    return [(total + parts - 1 - part) // parts for part in range(parts)]


def transposed_here():
    """Whether decoding_step_fn transposes the decoder's kernels by default: on an x86 CPU with AVX2
    and no AVX-512, where it was measured faster, and with no GPU visible."""
    return avx2_without_avx512() and not tf.config.list_physical_devices("GPU")


def stack_arguments(config):
    """The Encoder's and Decoder's arguments (but num_layers) from a TransformerConfig."""
    return dict(num_heads=config.num_heads, key_dim=config.key_dim, value_dim=config.value_dim, d_ff=config.d_ff,
                dropout_rate=config.dropout_rate, attention_dropout_rate=config.attention_dropout_rate,
                relu_dropout_rate=config.relu_dropout_rate, norm_first=config.norm_first,
                layer_norm_epsilon=config.layer_norm_epsilon)


def word_dropout(config, name):
    """The layer of config.word_dropout_rate (whole token vectors of a (B, T, D) embedding), or None
    at rate 0: a model without it has no such layer (nor its seed state in checkpoints)."""
    if config.word_dropout_rate == 0:
        return None
    return Dropout(config.word_dropout_rate, noise_shape=(None, None, 1), name=name)


def _split_rows(x, sizes):
    """x cut along axis 0 into len(sizes) pieces of these sizes (all Python ints, or not)."""
    if len(sizes) == 1:
        return [x]
    return tf.split(x, sizes if all(isinstance(size, int) for size in sizes) else tf.stack(sizes), axis=0,
                    num=len(sizes))


class TokenLossModel(keras.Model):
    """The training steps of the project's models: a loss summed over real target tokens and divided
    by those of the whole global batch (also under a distribution strategy), XLA per replica, and
    loss-scaled steps skipped together; and the encoder side of section 3 (`_add_encoder_side`,
    `encode`), which the Transformer and the span parser share. A subclass has `config` (a
    TransformerConfig), returns its outputs from call((source_ids, target_input_ids)), and gives its
    default loss (an object with `real_tokens(y)` and `sum_and_count(y, outputs)`, as
    losses.LabelSmoothedCrossEntropy) and metrics (a list, or None for none).
    """

    def _add_encoder_side(self, source_embedding):
        """The encoder side of section 3, from self.config: source_embedding (given: the Transformer
        may share it), its positional encoding and dropout, and the encoder stack (what `encode` runs)."""
        c = self.config
        self.source_embedding = source_embedding
        self.source_positional = positional_layer(c.positional)(c.max_length, name="source_positional")
        self.source_dropout = Dropout(c.dropout_rate, name="source_dropout")
        self.source_word_dropout = word_dropout(c, "source_word_dropout")
        self.encoder = Encoder(num_layers=c.num_layers, layer_drop_rate=c.layer_drop_rate, **stack_arguments(c),
                               partitions=2 if c.span_partitioned else 1, name="encoder")

    def encode(self, source_ids, training=False, source_additions=None):
        """source_ids (B, S) -> memory (B, S, D) and source_padding_mask (B, S). source_additions:
        None, or (B, S, D) vectors added to the pieces' embeddings (a span parser's character
        features), before word dropout and the positional encoding. With
        TransformerConfig.span_partitioned the embeddings and additions are D / 2 wide, and the
        positional encoding (D / 2) goes beside them instead of onto them."""
        source_ids = tf.cast(source_ids, tf.int32)
        source_padding_mask = masking.padding_mask(source_ids)
        x = self.source_embedding(source_ids)
        if source_additions is not None:
            x = x + tf.cast(source_additions, x.dtype)
        if self.source_word_dropout is not None:
            x = self.source_word_dropout(x, training=training)
        if self.config.span_partitioned:
            x = tf.concat([x, self.source_positional(tf.zeros_like(x))], axis=-1)  # (B, S, D): content, position
        else:
            x = self.source_positional(x)
        x = self.source_dropout(x, training=training)
        memory = self.encoder(x, attention_mask=masking.encoder_attention_mask(source_padding_mask),
                              training=training)
        return memory, source_padding_mask

    def default_loss(self):
        raise NotImplementedError

    def get_config(self):
        """The model's own arguments; no dtype policy (Keras' get_config has one): a model made
        from_config under another policy (precision.model_in_precision) takes that one."""
        return {"name": self.name, "trainable": self.trainable, "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(TransformerConfig.from_dict(config.pop("config")), **config)

    def default_metrics(self):
        return None

    def build_compiled(self):
        """Builds the compiled loss and metrics (Keras builds them from a batch: here a (1, 1) one)."""
        ids = tf.ones((1, 1), tf.int32)
        self._symbolic_build(data_batch=((ids, ids), ids))

    def compile(self, optimizer=None, loss=None, metrics=None, jit_compile="auto", **kwargs):
        """keras.Model.compile, with the paper's optimizer, loss and metrics where none is given.

        jit_compile=True over several replicas (MirroredStrategy, MultiWorkerMirroredStrategy)
        compiles each replica's forward and backward pass with XLA and leaves the collectives
        (the all-reduce of the token count and of the gradients, the data position's all-gather) and
        the optimizer's update to TensorFlow:
        Keras 3 would compile the step of all replicas as one XLA function, which XLA cannot run
        (variables on other devices; no XLA kernel for CollectiveGatherV2). On one device, and on
        TPUs (whose steps are compiled whole anyway), it is Keras' own whole-step compilation
        (TrainingTransformer also compiles passes apart on one device when it accumulates
        micro-batches).
        """
        optimizer = optimizer if optimizer is not None else paper_optimizer(self.config.d_model)
        loss = loss if loss is not None else self.default_loss()
        metrics = metrics if metrics is not None else self.default_metrics()
        self._replica_xla = jit_compile is True and self._xla_compiles_passes_apart()
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics,
                        jit_compile=False if self._replica_xla else jit_compile, **kwargs)

    def _passes_per_step(self) -> int:
        """Forward and backward passes in one optimizer step: one per replica."""
        return self.distribute_strategy.num_replicas_in_sync

    def _xla_compiles_passes_apart(self) -> bool:
        """Whether jit_compile=True compiles each forward and backward pass apart (see compile):
        when a step has several, not on TPUs."""
        return self._passes_per_step() > 1 and not isinstance(self.distribute_strategy, tf.distribute.TPUStrategy)

    @property
    def replica_xla(self) -> bool:
        """Whether each replica's forward and backward pass is XLA-compiled apart (see compile)."""
        return getattr(self, "_replica_xla", False)

    def _global_token_count(self, y):
        """The real target tokens of the global batch (all replicas'; y may hold several
        micro-batches), at least 1: the loss's divisor."""
        count = tf.reduce_sum(self.loss.real_tokens(y))
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            count = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, count)
        return tf.maximum(count, 1.0)

    def _loss_and_gradients(self, x, y, global_count):
        """(gradients, logits, token-loss sum, real tokens) of this replica's batch. The gradients are
        those of its share of the global batch's loss, its token-loss sum / global_count (times the
        optimizer's loss scale, if any): Keras sums the replicas' gradients, so the shares add up to
        the whole batch's loss. Under replica_xla it is XLA-compiled on its own, by a tf.function
        made at each trace of the step (one a replica), so that none is kept on the model for a
        SavedModel to find."""
        if self.replica_xla:
            return tf.function(self._uncompiled_loss_and_gradients, jit_compile=True,
                               autograph=False)(x, y, global_count)
        return self._uncompiled_loss_and_gradients(x, y, global_count)

    def _uncompiled_loss_and_gradients(self, x, y, global_count):
        with tf.GradientTape() as tape:
            if self.config.rdrop_alpha > 0:
                logits, total, count = self._rdrop_loss(x, y)
            else:
                logits = self(x, training=True)
                total, count, _ = self.loss.sum_and_count(y, logits)
            scaled_loss = self.optimizer.scale_loss(total / global_count)
        return tape.gradient(scaled_loss, self.trainable_weights), logits, total, count

    def _rdrop_loss(self, x, y):
        """(the first pass's logits, token-loss sum, real tokens) under R-Drop (TransformerConfig's
        rdrop_alpha): both passes in one call on the batch's rows stacked twice, so that each row
        gets dropout masks of its own in each."""
        def stacked(tensor):
            return tf.concat([tensor, tensor], axis=0)

        rows = tf.shape(y)[0]
        both = self(tf.nest.map_structure(stacked, x), training=True)
        both_total, both_count, _ = self.loss.sum_and_count(stacked(y), both)
        kl_total = symmetric_kl_sum(both[:rows], both[rows:], self.loss.real_tokens(y))
        total = 0.5 * both_total + 0.5 * self.config.rdrop_alpha * kl_total
        return both[:rows], total, 0.5 * both_count

    def _track_loss(self, total, count):
        """The reported loss: the mean token loss, weighted by the real tokens."""
        self._loss_tracker.update_state(total / tf.maximum(count, 1.0), sample_weight=count)

    def train_step(self, data):
        if not hasattr(self.loss, "sum_and_count"):
            return super().train_step(data)
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        gradients, logits, total, count = self._loss_and_gradients(x, y, self._global_token_count(y))
        self._track_loss(total, count)
        self._apply_gradients(gradients, self.trainable_weights)
        return self.compute_metrics(x, y, logits)

    def _apply_gradients(self, gradients, variables):
        """The optimizer's update with this replica's gradients; under a loss scale (mixed_float16)
        with several replicas, a step whose gradients overflow on any replica is skipped on all.

        Keras' LossScaleOptimizer decides whether to skip a step from the first replica's gradients
        alone (under MirroredStrategy; each replica from its own where the strategy needs no merge
        call), expecting them summed across replicas already; Keras 3 sums them later, inside the
        optimizer it wraps. An overflow on another replica alone would then reach the weights as
        inf / NaN, and the workers of several machines could disagree on whether to enter the
        gradients' all-reduce. So the replicas agree first (how many overflowed: one scalar, reduced
        in a merge call; as a replica-context all-reduce, its collective took another instance on
        some of 8 CPU replicas than on the others, and the 8-replica float16 test failed with a
        shape mismatch), and where any one did, every replica's gradients are made NaN: all skip.
        (The train steps of this class; a model compiled with a loss of Keras' own trains with
        Keras' step, without this agreement.)"""
        replica_context = tf.distribute.get_replica_context()
        if (isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer) and replica_context is not None
                and replica_context.num_replicas_in_sync > 1):
            values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in gradients if g is not None]
            finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in values]))
            overflowed = replica_context.merge_call(
                lambda strategy, flag: strategy.reduce(tf.distribute.ReduceOp.SUM, flag, axis=None),
                args=(1.0 - tf.cast(finite, tf.float32),))
            factor = tf.where(overflowed > 0.0, float("nan"), 1.0)
            gradients = [_times(g, factor) for g in gradients]
        self.optimizer.apply_gradients(zip(gradients, variables))

    def test_step(self, data):
        if not hasattr(self.loss, "sum_and_count"):
            return super().test_step(data)
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        logits = self(x, training=False)
        total, count, _ = self.loss.sum_and_count(y, logits)
        self._track_loss(total, count)
        return self.compute_metrics(x, y, logits)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(TokenLossModel):
    """The encoder-decoder Transformer of section 3 (Figure 1).

    Args:
      config: a TransformerConfig (or its dict).

    Call arguments:
      inputs: (source_ids (B, S), target_input_ids (B, T)), int token ids, 0 being padding.
        target_input_ids is the target shifted right (BOS first).
      training: enables dropout.
    Returns float32 logits (B, T, V) for the next target token at every position.

    `compile()` with no arguments uses the paper's recipe: Adam (0.9, 0.98, 1e-9) on the warm-up
    schedule, label-smoothed cross-entropy normalized by the real target tokens of the whole global
    batch (also under a distribution strategy), token accuracy and perplexity.
    """

    def __init__(self, config, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, TransformerConfig) else TransformerConfig.from_dict(config)
        c = self.config
        if c.span_tag_loss_weight != 1:
            raise ValueError(f"span_tag_loss_weight={c.span_tag_loss_weight} weighs a span parser's tag loss; the "
                             "Transformer has none: leave it at 1")
        if c.span_char_filters:
            raise ValueError(f"span_char_filters={c.span_char_filters} gives a span parser character features; the "
                             "Transformer has none: leave it at 0")
        if c.span_word_unk_rate:
            raise ValueError(f"span_word_unk_rate={c.span_word_unk_rate} reads a span parser's training words as UNK; "
                             "the Transformer's word dropout is word_dropout_rate: leave it at 0")
        if c.span_word_unk_alpha:
            raise ValueError(f"span_word_unk_alpha={c.span_word_unk_alpha} reads a span parser's rare training words "
                             "as UNK; the Transformer's word dropout is word_dropout_rate: leave it at 0")
        if c.span_loss != "local":
            raise ValueError(f"span_loss={c.span_loss!r} is a span parser's loss on its spans; the Transformer has "
                             "none: leave it at 'local'")
        if c.span_partitioned:
            raise ValueError("span_partitioned=True factors a span parser's encoder into content and position; the "
                             "Transformer's is the paper's: leave it False")
        if c.tie_embeddings:
            shared = TokenEmbedding(c.vocab_size, c.d_model, name="shared_embedding")
            self._add_encoder_side(shared)
            self.target_embedding = self.output_embedding = shared
        else:
            self._add_encoder_side(TokenEmbedding(c.vocab_size, c.d_model, name="source_embedding"))
            self.target_embedding = TokenEmbedding(c.vocab_size, c.d_model, name="target_embedding")
            self.output_embedding = TokenEmbedding(c.vocab_size, c.d_model, name="output_projection")
        self.target_positional = positional_layer(c.positional)(c.max_length, name="target_positional")
        self.target_dropout = Dropout(c.dropout_rate, name="target_dropout")
        self.target_word_dropout = word_dropout(c, "target_word_dropout")
        self.decoder = Decoder(num_layers=c.num_decoder_layers, layer_drop_rate=c.layer_drop_rate, **stack_arguments(c),
                               name="decoder")
        if c.aligned_next:
            self.next_piece_projection = keras.layers.Dense(c.d_model, use_bias=False, name="next_piece_projection")

    @classmethod
    def from_preset(cls, name, **field_overrides):
        """A built model of preset `name` (tiny, base, big), with some config fields replaced."""
        model = cls(TransformerConfig.from_preset(name, **field_overrides))
        model.build()
        return model

    def build(self, input_shape=None):
        if self.built:
            return
        if not self.output_embedding.built:  # only its `logits` is called, never the layer itself
            self.output_embedding.build()
        ids = tf.ones((1, 1), tf.int32)
        self.call((ids, ids), training=False)  # creates every other weight of every sub-layer
        super().build(input_shape)

    def decode(self, target_input_ids, memory, source_padding_mask, training=False,
               return_attention_scores=False, source_ids=None):
        """target_input_ids (B, T), memory (B, S, D), source_padding_mask (B, S) -> logits (B, T, V).

        With return_attention_scores, also the last decoder layer's encoder-decoder attention
        weights (B, H, T, S). source_ids (B, S): the encoded source, needed with aligned_decoder.
        """
        target_input_ids = tf.cast(target_input_ids, tf.int32)
        x = self.target_embedding(target_input_ids)
        if self.target_word_dropout is not None:
            x = self.target_word_dropout(x, training=training)
        x = self.target_positional(x)
        if self.config.aligned_decoder:
            if source_ids is None:
                raise ValueError("a model with aligned_decoder decodes with the source's ids (source_ids)")
            copied = self._copied_counts(target_input_ids, tf.cast(source_ids, tf.int32))  # (B, T)
            x += self._copied_memory(memory, tf.range(tf.shape(memory)[0])[:, None], copied,
                                     self._next_memory(memory))
        x = self.target_dropout(x, training=training)
        x = self.decoder(x, memory, masking.self_attention_mask(target_input_ids),
                         masking.cross_attention_mask(source_padding_mask), training=training,
                         return_attention_scores=return_attention_scores)
        if return_attention_scores:
            x, scores = x
            return self.output_embedding.logits(x), scores
        return self.output_embedding.logits(x)

    @staticmethod
    def _copies(ids, source_ids, copied):
        """(N,) bool: whether target ids (N,) are copies of their rows' next source piece, the
        (copied)-th of source_ids (N, S) (aligned_decoder); PAD, BOS and EOS never are."""
        next_piece = tf.gather(source_ids, tf.minimum(copied, tf.shape(source_ids)[1] - 1), batch_dims=1)
        return (ids == next_piece) & (ids > EOS_ID) & (copied < tf.shape(source_ids)[1])

    def _copied_counts(self, target_ids, source_ids):
        """(B, T) int32: how many source pieces the target has copied up to each position, matching
        the source's pieces in order (aligned_decoder)."""
        def count(copied, ids):
            return copied + tf.cast(self._copies(ids, source_ids, copied), tf.int32)
        counts = tf.scan(count, tf.transpose(target_ids), initializer=tf.zeros_like(target_ids[:, 0]))
        return tf.transpose(counts)

    def _next_memory(self, memory):
        """memory (B, S, D) through the next piece's projection (aligned_next), or None."""
        return self.next_piece_projection(memory) if self.config.aligned_next else None

    @staticmethod
    def _copied_memory(memory, sentences, copied, next_memory=None):
        """memory (B, S, D) at the last copied source piece: sentences and copied (how many pieces
        were copied up to here) index rows of memory and broadcast together; zeros where nothing was
        copied yet. Plus next_memory (B, S, D), if given, at the next piece not copied yet (the
        source's EOS once all are; at most the last position)."""
        sentences = tf.broadcast_to(sentences, tf.shape(copied))
        last = tf.gather_nd(memory, tf.stack([sentences, tf.maximum(copied - 1, 0)], axis=-1))
        vectors = last * tf.cast(copied > 0, memory.dtype)[..., None]
        if next_memory is not None:
            following = tf.minimum(copied, tf.shape(memory)[1] - 1)
            vectors += tf.gather_nd(next_memory, tf.stack([sentences, following], axis=-1))
        return vectors

    def call(self, inputs, training=None):
        source_ids, target_input_ids = inputs
        memory, source_padding_mask = self.encode(source_ids, training=training)
        return self.decode(target_input_ids, memory, source_padding_mask, training=training, source_ids=source_ids)

    def decoding_step_fn(self, source_ids, beam_size=1, cache_length=None, parallel_groups=1, output_ids=None,
                         transposed_kernels=None):
        """Everything keras_transformer.decoding needs to translate `source_ids` (B, S).

        Encodes once, computes every decoder layer's encoder-decoder keys and values once per
        sentence, and returns (step_fn, initial_cache) for W = beam_size (a Python int, or an int32
        scalar tensor for a width chosen when the graph runs): step_fn(ids (B*W,), step, cache) ->
        (logits (B*W, V) float32, cache) feeds one target position of W hypotheses per sentence
        (batch-major) through the cached decoder; its `reorder_cache` moves only the rows' prefix
        slots (Decoder.reorder_cache), never the keys and values. cache_length (L) is the most
        positions it will be fed (default: the config's max_length).

        parallel_groups (G, default 1): cut the sentences into G groups of consecutive ones, each
        encoded and decoded by its own ops, and the output projection into G vocabulary blocks
        (the logits come as a list of G blocks (B*W, V/G), see keras_transformer.decoding, unless
        a block would have fewer than the 2W columns beam search needs, or W is a tensor): G chains
        of independent ops that TensorFlow runs at once, one per inter-op thread. The results are
        those of G = 1. It pays off when an op gains little from several threads, as a decoding
        step's small matrix products do: on 2 cores, G = 2 with 1 intra-op and 2 inter-op threads
        (benchmarks/decode.py --parallel-groups 2; README, "Speed on a CPU"). With more intra-op
        threads per group than its share of the cores, the groups compete for them.

        output_ids (V',) int (optional): the only vocabulary ids the decoder may choose among. The
        logits are then those of these ids (B*W, V'), in one block: a decoder whose answers hold
        few tokens (the parser's tree tokens) scores V' columns instead of V. Their log-softmax is
        the full one's with every other token's logit at -inf. step_fn is still fed vocabulary
        ids (any of the V): the caller maps its choices back (the parser also feeds words it copies).

        transposed_kernels (not in the paper; the results do not depend on it beyond float rounding):
        transpose the decoder's kernels once, and compute each step's product x W as (W^T x^T)^T.
        Both oneDNN's and Eigen's float32 matrix products are faster in that layout on a CPU with
        AVX2 and no AVX-512, at a step's few rows (README, "Speed on a CPU"). None (the default)
        chooses it where that was measured: on such a CPU with no GPU visible (`transposed_here`).
        """
        cache_length = cache_length if cache_length is not None else self.config.max_length
        if not (isinstance(parallel_groups, int) and parallel_groups >= 1):
            raise ValueError(f"parallel_groups must be an integer >= 1; got {parallel_groups!r}")
        sentences = dimension(source_ids, 0)
        # Group g holds sentences [starts[g], starts[g] + sizes[g]); sizes differ by at most 1.
        sizes = _even_sizes(sentences, parallel_groups)
        starts = [sum(sizes[:g]) for g in range(parallel_groups)]
        groups = [self._decoding_group(source_ids[start:start + size], beam_size, cache_length)
                  for start, size in zip(starts, sizes)]
        dtype = groups[0][1].dtype  # the memory's
        if output_ids is not None:
            output_ids = tf.convert_to_tensor(output_ids, tf.int32)
            output_kernels = [tf.gather(self.output_embedding.transposed_embeddings(dtype), output_ids, axis=1)]
        elif (parallel_groups > 1 and isinstance(beam_size, int)
              and self.config.vocab_size // parallel_groups >= 2 * beam_size):
            # Blocks of at least 2W columns each (the beam search's need); W known when traced.
            output_kernels = self.output_embedding.transposed_embeddings(
                dtype, _even_sizes(self.config.vocab_size, parallel_groups))  # [(D, V_i)], made once
        else:
            output_kernels = [self.output_embedding.transposed_embeddings(dtype)]  # [(D, V)], made once
        row_sizes = [size * beam_size for size in sizes]
        if transposed_kernels is None:
            transposed_kernels = transposed_here()
        kernels = self.decoder.transposed_kernels(dtype) if transposed_kernels else None  # made once

        def step_fn(ids, step, cache):
            outputs, new_cache = [], []
            for (memory_key_values, memory_bias, _, alignment), group_ids, group_cache in zip(
                    groups, _split_rows(ids, row_sizes), cache):
                x = self.target_positional(self.target_embedding(group_ids[:, None]), start=step)  # (n, 1, D)
                if alignment is not None:
                    memory, sentences, row_sources, next_memory = alignment
                    copied = group_cache["copied"]
                    copied += tf.cast(self._copies(group_ids, row_sources, copied), tf.int32)
                    x += self._copied_memory(memory, sentences, copied, next_memory)[:, None, :]
                x, decoder_cache = self.decoder.call_cached(x, memory_key_values, memory_bias, group_cache, step,
                                                            beam_size, kernels)
                if alignment is not None:
                    decoder_cache = dict(decoder_cache, copied=copied)
                outputs.append(x)
                new_cache.append(decoder_cache)
            x = outputs[0] if len(outputs) == 1 else tf.concat(outputs, axis=0)  # (B*W, 1, D)
            logits = [self.output_embedding.logits(x, kernel)[:, 0, :] for kernel in output_kernels]
            return (logits[0] if len(logits) == 1 else logits), new_cache

        def reorder_cache(cache, parents):
            reordered = []
            for group_cache, group_parents, start in zip(cache, _split_rows(parents, row_sizes), starts):
                local_parents = group_parents - start * beam_size
                decoder_cache = self.decoder.reorder_cache(group_cache, local_parents)
                if self.config.aligned_decoder:
                    decoder_cache = dict(decoder_cache, copied=tf.gather(group_cache["copied"], local_parents))
                reordered.append(decoder_cache)
            return reordered

        step_fn.reorder_cache = reorder_cache
        return step_fn, [group_cache for _, _, group_cache, _ in groups]

    def _decoding_group(self, source_ids, beam_size, cache_length):
        """(memory keys / values per layer, memory bias, initial cache, alignment) of a group of
        sentences. With aligned_decoder the cache also counts each row's copied source pieces
        ("copied"), and alignment is (memory, each row's sentence (N,), each row's source ids (N, S),
        the memory through the next piece's projection or None), made once for all steps; else None."""
        memory, source_padding_mask = self.encode(source_ids, training=False)
        memory_key_values = self.decoder.project_memory(memory)
        memory_bias = masking.mask_to_bias(masking.cross_attention_mask(source_padding_mask), memory.dtype)
        rows = tf.shape(source_ids)[0] * beam_size
        cache = self.decoder.initial_cache(rows, cache_length, memory.dtype, beam_size)
        alignment = None
        if self.config.aligned_decoder:
            cache["copied"] = tf.zeros([rows], tf.int32)
            sentences = tf.range(rows) // beam_size
            alignment = (memory, sentences, tf.gather(tf.cast(source_ids, tf.int32), sentences),
                         self._next_memory(memory))
        return memory_key_values, memory_bias, cache, alignment

    def default_loss(self):
        return LabelSmoothedCrossEntropy(self.config.label_smoothing)

    def default_metrics(self):
        return [MaskedTokenAccuracy(), Perplexity()]


def _times(gradient, factor):
    """gradient (a tensor, IndexedSlices or None) times a float32 scalar."""
    if gradient is None:
        return None
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(factor, gradient.values.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)
