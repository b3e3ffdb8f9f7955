"""Graph mutations: dangling inputs, cycles, duplicate names, missing or corrupt initializers
(wrong type, truncated, absurd values, packed 4-bit with no data), sparse initializers with
bad indices, unknown domains/opsets/ops, removed or shuffled nodes and outputs."""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .common import (
    ABSURD_DIMS,
    ABSURD_INTS,
    TENSOR_TYPES,
    Draft,
    any_graph,
    any_initializer,
    any_node,
    type_name,
    value_names,
)

OTHER_OPS = ["Add", "Relu", "MatMul", "Conv", "Reshape", "Loop", "If", "Scan", "Concat", "Gather", "Cast", "Split",
             "Slice", "Resize", "TopK", "NonZero", "Pad", "SequenceAt", "Identity", "Softmax", "NotAnOp", "Einsum",
             "ConstantOfShape", "Range", "Tile", "Expand", "Unique", "CumSum", "OneHot", "Where", "Transpose",
             "LayerNormalization", "RMSNormalization", "LRN", "LSTM", "AffineGrid", "DynamicQuantizeLinear"]


def dangling_input(rng: random.Random, draft: Draft) -> str | None:
    node = any_node(rng, draft.model)
    if node is None:
        return None
    if not node.input or rng.random() < 0.2:
        node.input.append("no_such_value")
    else:
        node.input[rng.randrange(len(node.input))] = rng.choice(["no_such_value", "", "x"])
    return f"{node.op_type} input made dangling/empty"


def cycle(rng: random.Random, draft: Draft) -> str | None:
    graph = any_graph(rng, draft.model)
    if not graph.node:
        return None
    a = rng.randrange(len(graph.node))
    b = rng.randrange(a, len(graph.node))
    if not graph.node[b].output or not graph.node[a].input:
        return None
    node = graph.node[a]
    node.input[rng.randrange(len(node.input))] = graph.node[b].output[0]
    return f"node {a} ({node.op_type}) reads the output of node {b}: a cycle"


def duplicate_name(rng: random.Random, draft: Draft) -> str | None:
    graph = any_graph(rng, draft.model)
    names = value_names(graph)
    producing = [n for n in graph.node if n.output]
    choice = rng.randrange(4)
    if choice == 0 and producing and names:
        node = rng.choice(producing)
        node.output[rng.randrange(len(node.output))] = rng.choice(names)
        return f"output of {node.op_type} renamed to an existing value"
    if choice == 1 and graph.initializer:
        graph.initializer.append(rng.choice(graph.initializer))
        return "an initializer duplicated"
    if choice == 2 and graph.input:
        graph.input.append(rng.choice(graph.input))
        return "a graph input duplicated"
    if graph.output:
        graph.output.append(rng.choice(graph.output))
        return "a graph output duplicated"
    return None


def missing_initializer(rng: random.Random, draft: Draft) -> str | None:
    graph = any_graph(rng, draft.model)
    if not graph.initializer:
        return None
    init = graph.initializer.pop(rng.randrange(len(graph.initializer)))
    return f"initializer {init.name!r} removed"


def corrupt_initializer(rng: random.Random, draft: Draft) -> str | None:
    init = any_initializer(rng, draft.model)
    if init is None:
        return None
    choice = rng.randrange(4)
    if choice == 0:
        init.data_type = rng.choice(TENSOR_TYPES)
        return f"initializer {init.name!r} data_type set to {type_name(init.data_type)}"
    if choice == 1 and init.raw_data:
        init.raw_data = init.raw_data[: rng.randrange(len(init.raw_data))]
        return f"initializer {init.name!r} raw data truncated"
    if choice == 2 and init.data_type in (TensorProto.INT64, TensorProto.INT32):
        values = numpy_helper.to_array(init).copy()
        if values.size:
            info = np.iinfo(values.dtype)
            values.reshape(-1)[rng.randrange(values.size)] = rng.choice(
                [v for v in ABSURD_INTS if info.min <= v <= info.max])
            init.CopyFrom(numpy_helper.from_array(values, init.name))
            return f"integer initializer {init.name!r} given an absurd value"
    init.ClearField("raw_data")
    init.float_data.extend([1.0] * rng.randrange(0, 4))
    return f"initializer {init.name!r} data replaced by a short float list"


def packed_without_data(rng: random.Random, draft: Draft) -> str | None:
    """A packed 4-bit (or 2-bit) initializer with huge dims and no data at all."""
    graph = draft.model.graph
    kind = rng.choice([TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1, TensorProto.UINT8])
    dims = [rng.choice(ABSURD_DIMS[3:]) for _ in range(rng.randrange(1, 3))]
    tensor = TensorProto(name=f"packed_{len(graph.initializer)}", data_type=kind, dims=dims)
    node = next((n for n in graph.node if n.input), None)
    if node is not None and rng.random() < 0.7:  # feed it to a node, replacing an initializer or input
        slot = rng.randrange(len(node.input))
        old = node.input[slot]
        tensor.name = old or tensor.name
        for i, init in enumerate(graph.initializer):
            if init.name == old:
                del graph.initializer[i]
                break
        node.input[slot] = tensor.name
    graph.initializer.append(tensor)
    return f"{type_name(kind)} initializer {tensor.name!r} dims {dims} with no data"


def sparse_indices(rng: random.Random, draft: Draft) -> str | None:
    graph = draft.model.graph
    if not graph.sparse_initializer:
        return None
    sparse = rng.choice(graph.sparse_initializer)
    choice = rng.randrange(3)
    if choice == 0:
        indices = numpy_helper.to_array(sparse.indices).copy()
        if indices.size:
            indices.reshape(-1)[rng.randrange(indices.size)] = rng.choice(ABSURD_INTS)
            sparse.indices.CopyFrom(numpy_helper.from_array(indices.astype(np.int64), sparse.indices.name))
            return f"sparse initializer {sparse.values.name!r} given an index out of range"
    if choice == 1:
        sparse.indices.CopyFrom(numpy_helper.from_array(np.zeros((0,), np.int64), sparse.indices.name))
        return f"sparse initializer {sparse.values.name!r} indices emptied"
    sparse.values.data_type = rng.choice(TENSOR_TYPES)
    return f"sparse initializer {sparse.values.name!r} values data_type {type_name(sparse.values.data_type)}"


def domain_or_opset(rng: random.Random, draft: Draft) -> str | None:
    model = draft.model
    choice = rng.randrange(6)
    if choice == 0:
        node = any_node(rng, model)
        if node is None:
            return None
        node.domain = rng.choice(["com.unknown", "ai.onnx.ml", "local", "ai.onnx.preview.training", "x" * 300])
        return f"{node.op_type} moved to domain {node.domain[:20]!r}"
    if choice == 1 and model.opset_import:
        model.opset_import[rng.randrange(len(model.opset_import))].version = rng.choice([0, 1, 5, 23, 24, 999, -3])
        return "opset version changed"
    if choice == 2:
        del model.opset_import[:]
        return "all opset imports removed"
    if choice == 3:
        model.opset_import.append(helper.make_opsetid(rng.choice(["", "com.unknown"]), rng.choice([1, 999])))
        return "opset import duplicated/added"
    if choice == 4:
        model.ir_version = rng.choice([0, 1, 3, 99, -1])
        return f"ir_version set to {model.ir_version}"
    node = any_node(rng, model)
    if node is None:
        return None
    old, node.op_type = node.op_type, rng.choice(OTHER_OPS)
    return f"{old} replaced by {node.op_type}"


def surgery(rng: random.Random, draft: Draft) -> str | None:
    graph = any_graph(rng, draft.model)
    choice = rng.randrange(6)
    if choice == 0 and graph.node:
        node = graph.node.pop(rng.randrange(len(graph.node)))
        return f"node {node.op_type} removed"
    if choice == 1 and graph.output:
        graph.output.pop(rng.randrange(len(graph.output)))
        return "a graph output removed"
    if choice == 2 and graph.input:
        value = rng.choice(graph.input)
        if value.type.HasField("tensor_type"):
            value.type.tensor_type.elem_type = rng.choice(TENSOR_TYPES)
            draft.inputs_changed |= graph is draft.model.graph
            return f"input {value.name!r} elem_type set to {type_name(value.type.tensor_type.elem_type)}"
    if choice == 3 and graph.node:
        node = rng.choice(graph.node)
        if node.input:
            inputs = list(node.input)
            rng.shuffle(inputs)
            del node.input[:]
            node.input.extend(inputs[: rng.randrange(len(inputs) + 1)])
            return f"{node.op_type} inputs shuffled/dropped"
    if choice == 4 and graph.node:
        node = rng.choice(graph.node)
        if node.output:
            node.output[rng.randrange(len(node.output))] = ""
            return f"{node.op_type} output name emptied"
    if len(graph.node) > 1:
        nodes = list(graph.node)
        rng.shuffle(nodes)
        del graph.node[:]
        graph.node.extend(nodes)
        return "nodes shuffled (not topologically sorted)"
    return None


def constant_input(rng: random.Random, draft: Draft) -> str | None:
    """Turn a fed input into an initializer holding an absurd value (sizes, counts, axes)."""
    graph = draft.model.graph
    initializers = {i.name for i in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initializers and v.type.HasField("tensor_type")]
    if not inputs:
        return None
    value = rng.choice(inputs)
    elem = value.type.tensor_type.elem_type
    rank = len(value.type.tensor_type.shape.dim)
    if elem not in (TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT):
        return None
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    count = rng.choice([1, 1, 2, 4]) if rank else 1
    pool = [v for v in ABSURD_INTS if abs(v) < 2**31] if dtype != np.int64 else ABSURD_INTS
    array = np.array([rng.choice(pool) for _ in range(count)], dtype=dtype).reshape([count] if rank else [])
    graph.initializer.append(numpy_helper.from_array(array, value.name))
    for i, v in enumerate(graph.input):
        if v.name == value.name:
            del graph.input[i]
            break
    if draft.feeds is not None:
        draft.feeds.pop(value.name, None)
    return f"input {value.name!r} made a constant {array.reshape(-1).tolist()}"


MUTATIONS = [dangling_input, cycle, duplicate_name, missing_initializer, corrupt_initializer, corrupt_initializer,
             packed_without_data, sparse_indices, domain_or_opset, domain_or_opset, surgery, surgery, constant_input,
             constant_input]
