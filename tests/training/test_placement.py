"""Nothing leaves the accelerator by accident: every op of the traced training step (forward, loss,
gradients, optimizer, the data position) has a GPU kernel for the dtypes it uses, by TensorFlow's own
kernel registry; the host-only ops (strings, SentencePiece) of the evaluation and serving Translator
are placed on the CPU explicitly. (The input pipeline is tf.data, which runs on the host.) That the
step compiles with XLA, which TPUs need, is tested in test_strategy.py and test_precision.py.

The registry is that of the installed TensorFlow, whose Linux build registers its CUDA kernels
whether or not a GPU is present; kernels registered for DEFAULT serve every device type.
"""
import keras
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import kernels

from keras_transformer.config import DecodeConfig, TransformerConfig
from keras_transformer.data import NumbersCorpus, TokenizerSettings, load_or_train_tokenizer
from keras_transformer.export import HOST, Translator
from keras_transformer.model import Transformer
from keras_transformer.training.data_stream import DataPosition
from keras_transformer.training.training_model import TrainingTransformer

CONFIG = TransformerConfig.from_preset("tiny", vocab_size=30, dropout_rate=0.1, num_layers=1)
ACCELERATOR_DEVICES = ("GPU", "DEFAULT")


def _nodes(graph):
    """Every node of a graph and of the functions it calls (loops, conditions, XLA-compiled parts)."""
    graph_def = graph.as_graph_def()
    return list(graph_def.node) + [node for function in graph_def.library.function for node in function.node_def]


def _dtypes(node):
    return {name: value.type for name, value in node.attr.items() if value.WhichOneof("value") == "type"}


def _has_kernel(node, device_types):
    """Whether a kernel for one of device_types accepts the node's dtype attributes."""
    dtypes = _dtypes(node)
    for kernel in kernels.get_registered_kernels_for_op(node.op).kernel:
        if kernel.device_type not in device_types:
            continue
        if all(constraint.name not in dtypes or dtypes[constraint.name] in constraint.allowed_values.list.type
               for constraint in kernel.constraint):
            return True
    return False


def _describe(node):
    return f"{node.op}({', '.join(f'{k}={types_pb2.DataType.Name(v)}' for k, v in sorted(_dtypes(node).items()))})"


def _ops_without_gpu_kernel(graph):
    return sorted({_describe(node) for node in _nodes(graph) if not _has_kernel(node, ACCELERATOR_DEVICES)})


def test_the_registry_check_sees_a_host_only_op():
    graph = tf.function(lambda text: tf.strings.to_hash_bucket_fast(tf.strings.strip(text), 10)).get_concrete_function(
        tf.TensorSpec([None], tf.string)).graph
    assert "StringToHashBucketFast()" in _ops_without_gpu_kernel(graph)
    int_matmul = tf.function(tf.linalg.matmul).get_concrete_function(
        tf.TensorSpec([2, 2], tf.int32), tf.TensorSpec([2, 2], tf.int32)).graph
    assert "MatMul(T=DT_INT32)" in _ops_without_gpu_kernel(int_matmul)  # a dtype the GPU kernel lacks


def _training_step_graph(policy, accumulate_steps):
    """The traced training step of the run (TrainingTransformer.train_step on a stream element)."""
    keras.config.set_dtype_policy(policy)
    model = TrainingTransformer(CONFIG, accumulate_steps=accumulate_steps, data_position=DataPosition())
    model.compile()
    model.prepare_for_training()
    ids = tf.TensorSpec([None, None], tf.int32)
    position = tf.TensorSpec([3], tf.int64)  # [epoch, segment, batch]
    if accumulate_steps == 1:
        step = tf.function(lambda s, t, o, p: model.train_step({"batch": ((s, t), o), "position": p}))
        return step.get_concrete_function(ids, ids, ids, position).graph
    flat = tf.TensorSpec([accumulate_steps, None], tf.int32)

    def packed_step(source, target_input, target_output, shapes, position):
        return model.train_step({"micro_batches": {"source_ids": source, "target_input_ids": target_input,
                                                   "target_output_ids": target_output, "shapes": shapes},
                                 "position": position})

    return tf.function(packed_step).get_concrete_function(
        flat, flat, flat, tf.TensorSpec([accumulate_steps, 3], tf.int32), position).graph


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
@pytest.mark.parametrize("accumulate_steps", [1, 2])
def test_every_op_of_the_training_step_has_a_gpu_kernel(policy, accumulate_steps):
    graph = _training_step_graph(policy, accumulate_steps)
    ops = {node.op for node in _nodes(graph)}
    # Forward, loss and its gradient, the optimizer, the position: the step really is in the graph.
    assert {"BatchMatMulV2", "Softmax", "ResourceApplyAdam", "ReluGrad"} <= ops
    if policy == "mixed_float16":
        assert "IsFinite" in ops and any(node.attr["T"].type == types_pb2.DT_HALF for node in _nodes(graph)
                                         if node.op == "BatchMatMulV2")
    assert _ops_without_gpu_kernel(graph) == []


@pytest.fixture(scope="module")
def translator(tmp_path_factory):
    corpus = NumbersCorpus(num_train=500, num_validation=5, num_test=5, seed=0)
    tokenizer = load_or_train_tokenizer(tmp_path_factory.mktemp("vocabulary"), corpus.training_sentences(),
                                        TokenizerSettings(vocab_size=400, corpus="numbers"))
    keras.config.set_dtype_policy("float32")
    model = Transformer(TransformerConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size))
    model.build()
    return Translator(model, tokenizer.model_proto, DecodeConfig(beam_size=2), max_beam_size=2)


@pytest.mark.parametrize("signature", ["serving_default", "translate_nbest", "score"])
def test_host_only_ops_of_the_translator_are_placed_on_the_cpu(translator, signature):
    graph = translator.signatures()[signature].get_concrete_function().graph
    nodes = _nodes(graph)
    host_only = [node for node in nodes if not _has_kernel(node, ACCELERATOR_DEVICES)]
    assert {"SentencepieceOp", "SentencepieceTokenizeOp"} <= {node.op for node in host_only}
    # Graph inputs and outputs (strings in, strings out) are where TF Serving puts them.
    unplaced = sorted({_describe(node) for node in host_only
                       if node.op not in ("Placeholder", "_Arg", "_Retval") and HOST.lower() not in node.device.lower()})
    assert unplaced == []
    placed = [node for node in nodes if HOST.lower() in node.device.lower()]
    assert not any(node.op in ("BatchMatMulV2", "MatMul", "TopKV2") for node in placed)  # the model is not
