"""Every tensor a model protobuf holds, wherever it sits, named for error messages.

Size limits, data checks and external data must see the same tensors: initializers and
sparse initializers of the main graph, of every subgraph and of every model-local function
body, and tensor attributes (``value``, ``sparse_value``, lists of tensors) of any node in
them. One walk here, so no check can miss a place another one covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import onnx

_A = onnx.AttributeProto
_TENSOR_KINDS = frozenset({_A.TENSOR, _A.SPARSE_TENSOR, _A.TENSORS, _A.SPARSE_TENSORS})


class FoundTensor(NamedTuple):
    """A tensor of the model: ``what`` names it (``initializer 'w'``, ``node 'c' attribute
    'value'``), ``tensor`` is the dense or sparse proto itself (edits reach the model). A
    tuple: every load makes one per tensor."""

    what: str
    tensor: onnx.TensorProto | onnx.SparseTensorProto


def model_graphs(proto: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph, every subgraph below it, and every graph inside function bodies."""
    stack = [proto.graph]
    for function in proto.functions:
        stack.extend(node_graphs(function.node))
    while stack:
        graph = stack.pop()
        yield graph
        stack.extend(node_graphs(graph.node))


def node_graphs(nodes: Iterable[onnx.NodeProto]) -> list[onnx.GraphProto]:
    """The subgraphs held directly by the attributes of ``nodes`` (not the ones nested below them)."""
    found: list[onnx.GraphProto] = []
    for node in nodes:
        for attr in node.attribute:
            if attr.type == _A.GRAPH:
                found.append(attr.g)
            elif attr.type == _A.GRAPHS:
                found.extend(attr.graphs)
    return found


def _node_tensors(node: onnx.NodeProto, where: str) -> Iterator[FoundTensor]:
    if not any(attr.type in _TENSOR_KINDS for attr in node.attribute):
        return
    label = f"{where}node {node.name or node.op_type!r}"
    for attr in node.attribute:
        if attr.type == _A.TENSOR:
            yield FoundTensor(f"{label} attribute {attr.name!r}", attr.t)
        elif attr.type == _A.SPARSE_TENSOR:
            yield FoundTensor(f"{label} attribute {attr.name!r}", attr.sparse_tensor)
        elif attr.type == _A.TENSORS:
            for k, t in enumerate(attr.tensors):
                yield FoundTensor(f"{label} attribute {attr.name!r}[{k}]", t)
        elif attr.type == _A.SPARSE_TENSORS:
            for k, s in enumerate(attr.sparse_tensors):
                yield FoundTensor(f"{label} attribute {attr.name!r}[{k}]", s)


def model_tensors(proto: onnx.ModelProto) -> Iterator[FoundTensor]:
    """Every dense and sparse tensor of the model (see the module docstring)."""
    for graph in model_graphs(proto):
        for t in graph.initializer:
            yield FoundTensor(f"initializer {t.name!r}", t)
        for s in graph.sparse_initializer:
            yield FoundTensor(f"sparse initializer {s.values.name!r}", s)
        for node in graph.node:
            yield from _node_tensors(node, "")
    for function in proto.functions:
        for node in function.node:
            yield from _node_tensors(node, f"function {function.name!r} ")


def dense_parts(found: FoundTensor) -> Iterator[tuple[str, onnx.TensorProto]]:
    """(name, dense proto) behind a found tensor: itself, or a sparse one's values and indices."""
    tensor = found.tensor
    if isinstance(tensor, onnx.SparseTensorProto):
        yield f"{found.what} values", tensor.values
        yield f"{found.what} indices", tensor.indices
    else:
        yield found.what, tensor
