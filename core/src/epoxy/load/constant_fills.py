"""ConstantOfShape nodes of a constant shape folded on the protobuf, before onnx_ir builds the graph.

Why here and not only in the optimizer: models that make their weights with ConstantOfShape
(onnx's ``light`` models: half their nodes, 836 of densenet121's 1,746) paid for each one a
node to deserialize (~20 us) and a fold of the optimizer's
:class:`~epoxy.optimize.passes.ConstantFoldingPass` (~40 us of graph edits), against ~10 us
for an initializer. The rule is the pass's, so the optimized graph is the same either way:
a main-graph ``ConstantOfShape`` of the ONNX domain (spelled ``""``, imported at opset 9 or
later) whose shape is an initializer no feed can override, whose output is not a graph
output and whose fill is one number becomes an initializer holding ``numpy.full`` of that
shape, made when the graph is built (:func:`attach_fills`) and marked as a pass's own array
(later folds may scale it in place). Until then the protobuf carries the initializer's
name, type and dims only: loading owns it, the checker and shape inference read it as a
typed input, the graph checks know it has no data yet. The shapes nothing reads any more
then go at once (when the dead-node pass runs). The pass still runs for what this leaves
(a shape computed by other constant plumbing). One difference can show: the cpu-only QDQ
passes that run before the fold now see such a fill as the initializer it becomes (a
quantized weight made by ConstantOfShape is then folded into its integer op, as one given
as data is).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from ..kit.passes import PASS_MADE
from .constant_nodes import imports_onnx
from .proto_tensors import model_graphs

_TRAINING_DOMAIN = "ai.onnx.preview.training"
#: fill types folded here (others, e.g. bfloat16 or strings, are left to the pass)
_FOLDED_KINDS = frozenset("biuf")


@dataclass(frozen=True)
class Fill:
    """An initializer to make when the graph is built: ``numpy.full(shape, value)``."""

    shape: tuple[int, ...]
    value: np.ndarray  # 0-d, in the fill's dtype


def _fill_value(node: onnx.NodeProto, seen: dict[bytes, np.ndarray | None]) -> np.ndarray | None:
    """The node's fill as a 0-d array (float32 zero without ``value``), None when not one
    number of a folded type."""
    if not node.attribute:
        return np.zeros((), np.float32)
    if len(node.attribute) != 1:
        return None
    attr = node.attribute[0]
    if attr.name != "value" or attr.type != onnx.AttributeProto.TENSOR:
        return None
    key = attr.t.SerializeToString()  # weights share a handful of fills: each read once
    if key not in seen:
        try:
            array = numpy_helper.to_array(attr.t)
        except Exception:  # noqa: BLE001 - malformed: left to the pass and the kernel to report
            array = None
        ok = array is not None and array.size == 1 and array.dtype.kind in _FOLDED_KINDS
        seen[key] = array.reshape(()) if ok else None  # type: ignore[union-attr]
    return seen[key]


def _shape(tensor: onnx.TensorProto, max_elements: int) -> tuple[int, ...] | None:
    """A 1-D int64 initializer as a shape of at most ``max_elements`` elements, else None."""
    if tensor.data_type != onnx.TensorProto.INT64 or len(tensor.dims) != 1 or tensor.data_location:
        return None
    if tensor.raw_data:
        if len(tensor.raw_data) != 8 * tensor.dims[0]:
            return None
        dims = tuple(int(d) for d in np.frombuffer(tensor.raw_data, "<i8"))
    else:
        if len(tensor.int64_data) != tensor.dims[0]:
            return None
        dims = tuple(tensor.int64_data)
    if any(d < 0 for d in dims) or math.prod(dims) > max_elements:
        return None
    return dims


def _has_gradient(proto: onnx.ModelProto) -> bool:
    """Whether a Gradient node is anywhere (function bodies too: they are inlined before the
    optimizer, which then runs only gradient-safe passes, and folding is not one)."""
    bodies = (node for function in proto.functions for node in function.node)
    nodes = itertools.chain((node for graph in model_graphs(proto) for node in graph.node), bodies)
    return any(node.op_type == "Gradient" and node.domain == _TRAINING_DOMAIN for node in nodes)


def _drop_unread(proto: onnx.ModelProto, names: set[str]) -> int:
    """Remove the main-graph initializers of ``names`` no node of any graph reads any more
    (the folded fills' shapes), as the optimizer's dead-node pass would at its end, after
    building, converting and carrying each one through every pass; how many went."""
    graph = proto.graph
    unread = names - {o.name for o in graph.output}
    for sub in model_graphs(proto):
        for node in sub.node:
            unread.difference_update(node.input)
            if not unread:
                return 0
    positions = [i for i, t in enumerate(graph.initializer) if t.name in unread]
    for i in reversed(positions):
        del graph.initializer[i]
    return len(positions)


def fold_constant_fills(proto: onnx.ModelProto, max_elements: int, drop_unread: bool = False,
                        max_bytes: int | None = None) -> tuple[dict[str, Fill], int]:
    """Turn the foldable ConstantOfShape nodes of ``proto``'s main graph (edited in place)
    into data-less initializers: the fills to attach once the graph is built, by name, and
    how many shape initializers left unread were removed (``drop_unread``). ``max_bytes``
    (the session's memory limit): a larger fill stays a node, which the limit check refuses
    before anything allocates it, as it did before this fold existed."""
    graph = proto.graph
    if not any(node.op_type == "ConstantOfShape" for node in graph.node):
        return {}, 0  # most models: the checks below are walks of their own
    if not imports_onnx(proto, since=9) or _has_gradient(proto):  # ConstantOfShape is an opset-9 op
        return {}, 0
    overridable = {i.name for i in graph.input}
    shapes = {t.name: t for t in graph.initializer if t.name not in overridable}
    taken = {o.name for o in graph.output} | {t.name for t in graph.initializer} | overridable
    fills: dict[str, Fill] = {}
    seen: dict[bytes, np.ndarray | None] = {}
    positions = []
    for i, node in enumerate(graph.node):
        if (node.op_type != "ConstantOfShape" or node.domain != "" or len(node.input) != 1
                or len(node.output) != 1 or not node.output[0] or node.output[0] in taken):
            continue
        shape_tensor = shapes.get(node.input[0])
        if shape_tensor is None:
            continue
        dims = _shape(shape_tensor, max_elements)
        value = None if dims is None else _fill_value(node, seen)
        if dims is None or value is None:
            continue
        if max_bytes is not None and math.prod(dims) * value.itemsize > max_bytes:
            continue
        name = node.output[0]
        taken.add(name)
        fills[name] = Fill(dims, value)
        positions.append(i)
    shape_names = {graph.node[i].input[0] for i in positions}
    for i in reversed(positions):
        del graph.node[i]
    dropped = _drop_unread(proto, shape_names) if drop_unread else 0
    for name, fill in fills.items():
        tensor = graph.initializer.add()
        tensor.name = name
        tensor.data_type = onnx.helper.np_dtype_to_tensor_dtype(fill.value.dtype)
        tensor.dims.extend(fill.shape)
    return fills, dropped


def attach_fills(graph: ir.Graph, fills: dict[str, Fill]) -> None:
    """Give each folded initializer of ``graph`` its array, marked as a fold's own, as
    :func:`epoxy.kit.passes.add_initializer` marks one (a later fold may rewrite it in place)."""
    initializers = graph.initializers
    for name, fill in fills.items():
        tensor = ir.Tensor(np.full(fill.shape, fill.value, dtype=fill.value.dtype))
        tensor.meta[PASS_MADE] = True
        initializers[name].const_value = tensor
