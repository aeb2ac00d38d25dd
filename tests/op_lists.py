"""What a model server sees in a SavedModel: the ops its graphs use, which of them core TensorFlow
registers (the stock TF Serving binary has those, and TF Text's SentencePiece kernels), which lack a
CPU kernel for the types they are given, and the float types they compute in.

Core TensorFlow's op names come from a fresh interpreter that imports tensorflow but not
tensorflow_text (whose import adds its ops to the registry, so only a process without it tells core
ops from TF Text's), once per test session (`core_op_names`); the listing itself runs in the test
process, where the op definitions and kernels of core ops are those of that fresh interpreter. A node
of a core op has a CPU kernel when the kernel registry holds a CPU (or device-independent) kernel
whose type constraints admit the node's type attributes (those left out take the op's defaults);
the nodes without one are described as "op(attr=type, ...)".
"""
import functools
import json
import os

import pytest
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2, types_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import kernels, op_def_registry

from tests.trained_tiny import once_per_session

# The only tensorflow-text ops the exported graph may use: TF Text 2.20 (linked by TF Serving 2.20)
# has them, as has every TF Text release since 2.0.
SENTENCEPIECE_OPS = {"SentencepieceOp", "SentencepieceTokenizeOp", "SentencepieceDetokenizeOp"}
# Registered in core TensorFlow but unusable by a model server: they call back into Python.
PYTHON_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}

WRITE_CORE_OP_NAMES = """
import json, sys
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
op_list = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
assert "tensorflow_text" not in sys.modules
with open(sys.argv[1], "w") as file:
    json.dump(sorted(op.name for op in op_list.op), file)
"""


@pytest.fixture(scope="session")
def core_op_names(tmp_path_factory) -> frozenset:
    """The ops a fresh `import tensorflow` registers, listed once per session."""
    from tests.test_export import run_python  # here: tests/test_export.py imports this module

    path = once_per_session(tmp_path_factory, "core_op_names.json", lambda path: run_python(WRITE_CORE_OP_NAMES, path))
    names = frozenset(json.loads(path.read_text()))
    assert {"MatMul", "While", "StatefulPartitionedCall"} <= names and not names & SENTENCEPIECE_OPS
    return names


def _type_attributes(node):
    op_def = op_def_registry.get(node.op)
    values = {attr.name: attr.default_value for attr in op_def.attr if attr.HasField("default_value")}
    values.update(node.attr)
    types = {name: [value.type] for name, value in values.items() if value.HasField("type")}
    types.update({name: list(value.list.type) for name, value in values.items()
                  if value.HasField("list") and value.list.type})
    return types


@functools.cache
def _cpu_kernels(op):
    return [kernel for kernel in kernels.get_registered_kernels_for_op(op).kernel
            if kernel.device_type in ("CPU", "DEFAULT")]


def _has_cpu_kernel(node):
    types = _type_attributes(node)
    return any(all(set(types.get(c.name, [])) <= set(c.allowed_values.list.type) for c in kernel.constraint)
               for kernel in _cpu_kernels(node.op))


def _describe(node):
    return node.op + "(" + ", ".join(f"{name}={'/'.join(types_pb2.DataType.Name(t) for t in values)}"
                                     for name, values in sorted(_type_attributes(node).items())) + ")"


def list_ops(saved_model, core_op_names):
    """{"registered": {op: in core TensorFlow}, "without_cpu_kernel": [core nodes described with their
    types], "float_types": [the float types of the core nodes' type attributes]} for the SavedModel
    folder saved_model, every graph and function of it."""
    # The check can fail: MatMul has no kernel for strings.
    string = attr_value_pb2.AttrValue(type=types_pb2.DT_STRING)
    assert not _has_cpu_kernel(node_def_pb2.NodeDef(op="MatMul", attr={"T": string}))
    with open(os.path.join(saved_model, "saved_model.pb"), "rb") as file:
        proto = saved_model_pb2.SavedModel.FromString(file.read())
    nodes = []
    for meta_graph in proto.meta_graphs:
        nodes += meta_graph.graph_def.node
        for function in meta_graph.graph_def.library.function:
            nodes += function.node_def
    core = [node for node in nodes if node.op in core_op_names]
    float_types = {types_pb2.DataType.Name(t) for node in core for values in _type_attributes(node).values()
                   for t in values if tf.as_dtype(t).is_floating}
    return {"registered": {node.op: node.op in core_op_names for node in nodes},
            "without_cpu_kernel": sorted({_describe(node) for node in core if not _has_cpu_kernel(node)}),
            "float_types": sorted(float_types)}
