"""QOperator form of a QDQ model: each ``DequantizeLinear -> op -> QuantizeLinear`` group
becomes one integer op (QLinearConv, QLinearMatMul, com.microsoft QGemm / QLinearAdd /
QLinearMul / QLinearConcat / QLinearAveragePool / QLinearGlobalAveragePool).

This is onnxruntime's QOperator format, written from the same calibration as the QDQ model
so the two agree: tensors between integer ops stay 8-bit, the graph input passes through a
QuantizeLinear and each float reader (a graph output, an op without an integer form) gets a
DequantizeLinear. Ops that only move values (MaxPool, Reshape, Transpose, ...) run on the
integer tensor itself when their input and output share scale and zero point. A Relu or Clip
after a converted op disappears when the output's integer range already clips the same way.
A group that does not match (a float bias, a missing output Q) keeps its float op between
DQ and Q: the model stays correct, only that op stays float.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from epoxy.quantization.op_roles import OP_ROLES

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class QTensor:
    """An integer tensor with the scale and zero point (tensor names) that give its value."""

    q: str
    scale: str
    zero_point: str


@dataclass
class _Group:
    """One op to convert: its quantized inputs (None where an input is absent or not from a
    DQ), the Q its result goes through, and the activation folded between them (if any)."""

    node: onnx.NodeProto
    inputs: list[QTensor | None]
    out: QTensor
    q_node: onnx.NodeProto
    folded: onnx.NodeProto | None


Builder = Callable[["_Graph", _Group], onnx.NodeProto | None]

#: op type -> builder of its integer node (None from a builder: the group stays float)
BUILDERS: dict[str, Builder] = {}


def builder(*op_types: str) -> Callable[[Builder], Builder]:
    """Register ``fn`` as the QOperator builder of ``op_types``."""
    def add(fn: Builder) -> Builder:
        for op in op_types:
            BUILDERS[op] = fn
        return fn
    return add


class _Graph:
    """Look-ups over the QDQ graph: producers, readers, initializer values, fresh names."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.graph = model.graph
        self.producer = {o: n for n in self.graph.node for o in n.output if o}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for n in self.graph.node:
            for name in n.input:
                self.readers.setdefault(name, []).append(n)
        self.inits = {i.name: i for i in self.graph.initializer}
        self.outputs = {o.name for o in self.graph.output}

    def value(self, name: str) -> np.ndarray | None:
        return numpy_helper.to_array(self.inits[name]) if name in self.inits else None

    def from_dq(self, name: str) -> QTensor | None:
        dq = self.producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 3:
            return None
        return QTensor(dq.input[0], dq.input[1], dq.input[2])

    def dtype(self, name: str) -> int | None:
        return self.inits[name].data_type if name in self.inits else None


def _attrs(node: onnx.NodeProto, drop: tuple[str, ...] = ()) -> list[onnx.AttributeProto]:
    return [a for a in node.attribute if a.name not in drop]


def _make(op: str, inputs: list[str], group: _Group, *, domain: str = "", drop: tuple[str, ...] = ()) -> onnx.NodeProto:
    node = helper.make_node(op, inputs, [group.out.q], name=f"{group.node.name or group.node.op_type}_quant",
                            domain=domain)
    node.attribute.extend(_attrs(group.node, drop))
    return node


def _triple(t: QTensor) -> list[str]:
    return [t.q, t.scale, t.zero_point]


def _bias(g: _Graph, group: _Group, index: int) -> tuple[bool, list[str]]:
    """(usable, inputs): an absent bias, or an int32 one behind a DQ; a float bias is unusable."""
    node = group.node
    if len(node.input) <= index or not node.input[index]:
        return True, []
    b = g.from_dq(node.input[index])
    if b is None or g.dtype(b.q) != TensorProto.INT32:
        return False, []
    return True, [b.q]


@builder("Conv")
def _conv(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    x, w = group.inputs[0], group.inputs[1]
    ok, bias = _bias(g, group, 2)
    if x is None or w is None or not ok:
        return None
    return _make("QLinearConv", [*_triple(x), *_triple(w), group.out.scale, group.out.zero_point, *bias], group)


@builder("MatMul")
def _matmul(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    a, b = group.inputs[0], group.inputs[1]
    if a is None or b is None:
        return None
    return _make("QLinearMatMul", [*_triple(a), *_triple(b), group.out.scale, group.out.zero_point], group)


@builder("Gemm")
def _gemm(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    a, b = group.inputs[0], group.inputs[1]
    ok, bias = _bias(g, group, 2)
    beta = next((x.f for x in group.node.attribute if x.name == "beta"), 1.0)
    if a is None or b is None or not ok or (bias and beta != 1.0):
        return None
    return _make("QGemm", [*_triple(a), *_triple(b), bias[0] if bias else "", group.out.scale,
                           group.out.zero_point], group, domain=MS_DOMAIN, drop=("beta",))


@builder("Add", "Mul", "Sum")
def _binary(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    if len(group.inputs) != 2 or group.inputs[0] is None or group.inputs[1] is None:
        return None  # a Sum of three or more has no integer form
    a, b = group.inputs[0], group.inputs[1]
    op = "Add" if group.node.op_type == "Sum" else group.node.op_type
    return _make(f"QLinear{op}", [*_triple(a), *_triple(b), group.out.scale, group.out.zero_point],
                 group, domain=MS_DOMAIN)


@builder("Concat")
def _concat(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    if any(t is None for t in group.inputs):
        return None
    parts = [name for t in group.inputs if t is not None for name in _triple(t)]
    return _make("QLinearConcat", [group.out.scale, group.out.zero_point, *parts], group, domain=MS_DOMAIN)


@builder("AveragePool", "GlobalAveragePool")
def _pool(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    x = group.inputs[0]
    if x is None:
        return None
    return _make(f"QLinear{group.node.op_type}", [*_triple(x), group.out.scale, group.out.zero_point], group,
                 domain=MS_DOMAIN)


def _same_params(g: _Graph, a: QTensor, b: QTensor) -> bool:
    sa, sb, za, zb = (g.value(n) for n in (a.scale, b.scale, a.zero_point, b.zero_point))
    if sa is None or sb is None or za is None or zb is None:  # run-time parameters: only the same names agree
        return (a.scale, a.zero_point) == (b.scale, b.zero_point)
    return bool(np.array_equal(sa, sb) and np.array_equal(za, zb) and za.dtype == zb.dtype)


@builder(*(op for op, role in OP_ROLES.items() if role.role == "shared"))
def _shared(g: _Graph, group: _Group) -> onnx.NodeProto | None:
    x = group.inputs[0]
    if x is None or not _same_params(g, x, group.out) or any(group.node.output[1:]):
        return None  # a second output (MaxPool's indices) would be lost
    node = onnx.NodeProto()
    node.CopyFrom(group.node)
    node.input[0] = x.q
    del node.output[:]
    node.output.append(group.out.q)
    node.name = f"{group.node.name or group.node.op_type}_quant"
    return node


def _clip_bounds(g: _Graph, node: onnx.NodeProto) -> tuple[float, float] | None:
    """Relu's or Clip's (min, max); None when a bound is computed at run time."""
    if node.op_type == "Relu":
        return 0.0, float("inf")
    attrs = {a.name: a.f for a in node.attribute}  # opset < 11 keeps the bounds as attributes
    bounds = [attrs.get("min", -float("inf")), attrs.get("max", float("inf"))]
    for k, i in enumerate((1, 2)):
        if len(node.input) > i and node.input[i]:
            v = g.value(node.input[i])
            if v is None:
                return None
            bounds[k] = float(v)
    return bounds[0], bounds[1]


def _foldable(g: _Graph, act: onnx.NodeProto, out: QTensor) -> bool:
    """Whether the output's integer range already clips at ``act``'s bounds (within half a step)."""
    bounds = _clip_bounds(g, act)
    scale, zero_point = g.value(out.scale), g.value(out.zero_point)
    if bounds is None or scale is None or zero_point is None or scale.size != 1:
        return False
    info = np.iinfo(zero_point.dtype)
    s, z = float(scale.reshape(())), int(zero_point.reshape(()))
    lo, hi = (info.min - z) * s, (info.max - z) * s
    return lo >= bounds[0] - s / 2 and hi <= bounds[1] + s / 2


def _output_q(g: _Graph, name: str) -> onnx.NodeProto | None:
    return next((r for r in g.readers.get(name, ()) if r.op_type == "QuantizeLinear" and len(r.input) >= 3), None)


def _group(g: _Graph, node: onnx.NodeProto) -> _Group | None:
    if node.domain not in ("", "ai.onnx") or node.op_type not in BUILDERS or not node.output:
        return None
    data = OP_ROLES[node.op_type].data
    indices = range(len(node.input)) if data is None else data
    inputs = [g.from_dq(node.input[i]) if i < len(node.input) and node.input[i] else None for i in indices]
    out_name, folded = node.output[0], None
    readers = g.readers.get(out_name, [])
    if (len(readers) == 1 and readers[0].op_type in ("Relu", "Clip") and out_name not in g.outputs
            and OP_ROLES[node.op_type].role in ("weighted", "own")):
        folded = readers[0]
        out_name = folded.output[0]
    q_node = _output_q(g, out_name)
    if q_node is None:
        return None
    out = QTensor(q_node.output[0], q_node.input[1], q_node.input[2])
    if folded is not None and not _foldable(g, folded, out):
        return None
    return _Group(node, inputs, out, q_node, folded)


def to_qoperator(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite the QDQ ``model`` (in place, returned) into QOperator form."""
    g = _Graph(model)
    replaced: dict[int, list[onnx.NodeProto]] = {}  # id(node) -> what stands in its place
    removed: set[int] = set()
    uses_ms = False
    for node in list(model.graph.node):
        group = _group(g, node)
        if group is None or id(group.q_node) in removed:
            continue
        new = BUILDERS[node.op_type](g, group)
        if new is None:
            continue
        uses_ms |= new.domain == MS_DOMAIN
        float_out = (group.folded or node).output[0]
        still_read = float_out in g.outputs or any(r is not group.q_node for r in g.readers.get(float_out, ()))
        stand_in = [new]
        if still_read:  # a float reader (or the graph output) keeps its tensor, dequantized
            stand_in.append(helper.make_node("DequantizeLinear", [group.out.q, group.out.scale, group.out.zero_point],
                                             [float_out], name=f"{new.name}_dequantize"))
        replaced[id(node)] = stand_in
        removed.add(id(group.q_node))
        if group.folded is not None:
            removed.add(id(group.folded))
    nodes: list[onnx.NodeProto] = []
    for node in model.graph.node:
        if id(node) in removed:
            continue
        nodes.extend(replaced.get(id(node), [node]))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    if uses_ms and not any(i.domain == MS_DOMAIN for i in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    _drop_dead(model.graph)
    return model


def _drop_dead(graph: onnx.GraphProto) -> None:
    """Remove Q/DQ nodes nobody reads any more, then unread initializers and stale value_info."""
    while True:
        read = {o.name for o in graph.output} | {name for n in graph.node for name in n.input}
        for n in graph.node:
            for a in n.attribute:
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    read.update(name for s in sub.node for name in s.input)
        dead = [n for n in graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")
                and not any(o in read for o in n.output)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    kept = [i for i in graph.initializer if i.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    produced = {o for n in graph.node for o in n.output}
    info = [v for v in graph.value_info if v.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(info)
