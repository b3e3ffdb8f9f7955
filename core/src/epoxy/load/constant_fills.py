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
(later folds may scale it in place). The pass's reshaping folds of such a fill (an Unsqueeze,
Squeeze, Reshape or Transpose of constant axes and shape: densenet121 unsqueezes 238 of its
fills into per-channel scales) give a fill of another shape, folded here too by the pass's
own rules (:mod:`epoxy.graph.fold_rules`); a fill an Identity or Dropout reads is left to the
passes that remove those first. Until then the protobuf carries the initializer's name, type
and dims only: loading owns it, the checker and shape inference read it as a
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
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from ..graph.fold_rules import FOLDERS, RESHAPING, Attributes
from ..kit.passes import PASS_MADE
from .constant_nodes import imports_onnx
from .proto_tensors import model_graphs

_TRAINING_DOMAIN = "ai.onnx.preview.training"
#: ops the optimizer removes before it folds (IdentityEliminationPass, DropoutEliminationPass)
_ELIMINATED = frozenset({"Identity", "Dropout"})
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
    dims_field = tensor.dims
    if tensor.data_type != onnx.TensorProto.INT64 or len(dims_field) != 1 or tensor.data_location:
        return None
    raw = tensor.raw_data
    if raw:
        if len(raw) != 8 * dims_field[0]:
            return None
        dims = struct.unpack(f"<{dims_field[0]}q", raw)
    else:
        if len(tensor.int64_data) != dims_field[0]:
            return None
        dims = tuple(tensor.int64_data)
    if (dims and min(dims) < 0) or math.prod(dims) > max_elements:
        return None
    return dims


def _has_gradient(proto: onnx.ModelProto, graphs: list[onnx.GraphProto]) -> bool:
    """Whether a Gradient node is anywhere in ``graphs`` (the model's) or in a function body
    (they are inlined before the optimizer, which then runs only gradient-safe passes, and
    folding is not one)."""
    bodies = (node for function in proto.functions for node in function.node)
    nodes = itertools.chain((node for graph in graphs for node in graph.node), bodies)
    return any(node.op_type == "Gradient" and node.domain == _TRAINING_DOMAIN for node in nodes)


def _unread(proto: onnx.ModelProto, names: set[str], graphs: list[onnx.GraphProto]) -> set[str]:
    """Those of ``names`` that no node of ``graphs`` (the model's) reads and that are not
    graph outputs."""
    unread = names - {o.name for o in proto.graph.output}
    for sub in graphs:
        for node in sub.node:
            unread.difference_update(node.input)
            if not unread:
                break
    return unread


def _drop_initializers(graph: onnx.GraphProto, names: set[str]) -> int:
    positions = [i for i, t in enumerate(graph.initializer) if t.name in names]
    for i in reversed(positions):
        del graph.initializer[i]
    return len(positions)


def _opset(proto: onnx.ModelProto) -> int:
    """The ONNX opset the folded nodes (domain ``""``) run at: ``imports_onnx`` found it."""
    return next(o.version for o in proto.opset_import if o.domain == "")


def _proto_attributes(node: onnx.NodeProto) -> Attributes:
    """``kit.passes.attr`` for a NodeProto: what the fold rules read of a node."""
    values = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}

    def get(name: str, default: Any = None) -> Any:
        return values.get(name, default)

    return get


#: a reshape as :func:`_reshaped` evaluates it: op type, attributes, the fill's shape, the
#: other inputs' names (one model's constants: a name is one value)
_ReshapeKey = tuple[str, tuple[bytes, ...], tuple[int, ...], tuple[str, ...]]


def _reshaped(node: onnx.NodeProto, fill: Fill, constants: dict[str, onnx.TensorProto], opset: int,
              seen: dict[_ReshapeKey, tuple[int, ...] | None]) -> Fill | None:
    """The fill a reshaping fold (:data:`~epoxy.graph.fold_rules.RESHAPING`) of ``fill``
    gives, by the pass's own evaluator run on a zero-stride view (nothing is allocated);
    None where the pass would not fold it (an input that is not a constant, a rule that
    refuses the node). ``seen``: the shapes evaluated so far (densenet121's 238 Unsqueezes
    are 30 distinct ones)."""
    arity, evaluate = FOLDERS[node.op_type]
    others = tuple(node.input[1:arity])
    key = (node.op_type, tuple(a.SerializeToString() for a in node.attribute), fill.shape, others)
    if key not in seen:
        seen[key] = _reshaped_shape(node, fill, constants, opset, evaluate, others)
    shape = seen[key]
    return None if shape is None else Fill(shape, fill.value)


def _reshaped_shape(node: onnx.NodeProto, fill: Fill, constants: dict[str, onnx.TensorProto], opset: int,
                    evaluate: Callable[[Attributes, int, list], np.ndarray | None],
                    others: tuple[str, ...]) -> tuple[int, ...] | None:
    if any(a.name == "value" for a in node.attribute):  # the pass leaves such a node too
        return None
    args: list[np.ndarray | None] = [np.broadcast_to(fill.value, fill.shape)]
    for name in others:
        tensor = constants.get(name) if name else None
        if name and (tensor is None or tensor.data_location == onnx.TensorProto.EXTERNAL):
            return None
        try:
            args.append(None if tensor is None else numpy_helper.to_array(tensor))
        except Exception:  # noqa: BLE001 - malformed: left to the pass and the kernel to report
            return None
    try:
        result = evaluate(_proto_attributes(node), opset, args)
    except Exception:  # noqa: BLE001 - a malformed node: the pass leaves it to the kernel too
        return None
    return None if result is None else tuple(int(d) for d in result.shape)


@dataclass
class FoldedFills:
    """What :func:`fold_constant_fills` did: the fills to attach by name, how many nodes it
    folded and how many initializers left unread it removed."""

    fills: dict[str, Fill] = field(default_factory=dict)
    nodes: int = 0
    dropped: int = 0


def fold_constant_fills(proto: onnx.ModelProto, max_elements: int, drop_unread: bool = False,
                        max_bytes: int | None = None) -> FoldedFills:
    """Turn the foldable ConstantOfShape nodes of ``proto``'s main graph (edited in place),
    and the reshaping folds of their fills, into data-less initializers; with
    ``drop_unread``, remove the shapes, axes and fills nothing reads any more. ``max_bytes``
    (the session's memory limit): a larger fill stays a node, which the limit check refuses
    before anything allocates it, as it did before this fold existed."""
    graph = proto.graph
    if not any(node.op_type == "ConstantOfShape" for node in graph.node):
        return FoldedFills()  # most models: the checks below are walks of their own
    graphs = list(model_graphs(proto))
    if not imports_onnx(proto, since=9) or _has_gradient(proto, graphs):  # ConstantOfShape is an opset-9 op
        return FoldedFills()
    overridable = {i.name for i in graph.input}
    constants = {t.name: t for t in graph.initializer if t.name not in overridable}
    taken = {o.name for o in graph.output} | {t.name for t in graph.initializer} | overridable
    # what the passes before the fold remove (an Identity, a Dropout) reads its input by
    # another name, or gives it a graph output's: left to them, and the fold after them
    taken.update(node.input[0] for node in graph.node if node.op_type in _ELIMINATED and node.input)
    opset = _opset(proto)
    fills: dict[str, Fill] = {}
    seen: dict[bytes, np.ndarray | None] = {}
    reshapes: dict[_ReshapeKey, tuple[int, ...] | None] = {}
    positions = []
    read: set[str] = set()  # the folded nodes' inputs
    for i, node in enumerate(graph.node):
        op_type = node.op_type  # tested first: one read of the proto for most nodes
        if op_type == "ConstantOfShape":
            inputs = node.input
            if len(inputs) != 1 or node.domain:
                continue
            fill = _as_fill(node, constants.get(inputs[0]), seen, max_elements, max_bytes)
        elif op_type in RESHAPING:
            inputs = node.input
            if not inputs or inputs[0] not in fills or node.domain:
                continue
            fill = _reshaped(node, fills[inputs[0]], constants, opset, reshapes)
        else:
            continue
        outputs = node.output
        if fill is None or len(outputs) != 1 or not outputs[0] or outputs[0] in taken:
            continue
        taken.add(outputs[0])
        fills[outputs[0]] = fill
        positions.append(i)
        read.update(inputs)
    read.discard("")
    for i in reversed(positions):
        del graph.node[i]
    dropped = 0
    if drop_unread:
        unread = _unread(proto, read, graphs)
        dropped = _drop_initializers(graph, unread)
        fills = {name: fill for name, fill in fills.items() if name not in unread}
    data_types: dict[np.dtype, int] = {}
    for name, fill in fills.items():
        dtype = fill.value.dtype
        data_type = data_types.get(dtype) or data_types.setdefault(dtype, onnx.helper.np_dtype_to_tensor_dtype(dtype))
        tensor = graph.initializer.add(name=name, data_type=data_type)
        tensor.dims.extend(fill.shape)
    return FoldedFills(fills, len(positions), dropped)


def _as_fill(node: onnx.NodeProto, shape_tensor: onnx.TensorProto | None, seen: dict[bytes, np.ndarray | None],
             max_elements: int, max_bytes: int | None) -> Fill | None:
    """A ConstantOfShape node's fill (``shape_tensor``: its shape's initializer, if it is
    one no feed overrides), None where it is not folded here."""
    dims = None if shape_tensor is None else _shape(shape_tensor, max_elements)
    value = None if dims is None else _fill_value(node, seen)
    if dims is None or value is None:
        return None
    if max_bytes is not None and math.prod(dims) * value.itemsize > max_bytes:
        return None
    return Fill(dims, value)


def attach_fills(graph: ir.Graph, fills: dict[str, Fill]) -> None:
    """Give each folded initializer of ``graph`` its array, marked as a fold's own, as
    :func:`epoxy.kit.passes.add_initializer` marks one (a later fold may rewrite it in place;
    a reshaped fill is its own array too, where the pass's reshape is a view of its fill's)."""
    initializers = graph.initializers
    for name, fill in fills.items():
        tensor = ir.Tensor(np.full(fill.shape, fill.value, dtype=fill.value.dtype))
        tensor.meta[PASS_MADE] = True
        initializers[name].const_value = tensor
