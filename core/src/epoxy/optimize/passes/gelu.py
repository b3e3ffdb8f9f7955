"""GELU pattern fusion: the Erf form and the tanh approximation -> one ``Gelu`` node.

Erf form:   ``0.5 * x * (1 + Erf(x / sqrt(2)))`` (``x * 0.7071...`` for the division too)
tanh form:  ``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` (``x^3`` as Pow or
two Muls). The final product may be grouped any way: ``(x * a) * 0.5``,
``(x * 0.5) * a`` or ``x * (a * 0.5)``.

``Gelu`` is opset 20; in older models the node carries ``version=20`` (a provider that
does not run it gets it expanded back into its ONNX function body).
"""

from __future__ import annotations

import math

import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    binary_with_scalar,
    close,
    dtype_of,
    fused_version,
    graph_nodes,
    is_op,
    make_node,
    private,
    replace,
    scalar,
    sole_consumer,
)

_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)
SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _tail(x: ir.Value, a: ir.Value) -> tuple[list[ir.Node], ir.Value] | None:
    """Match ``0.5 * x * a`` grouped any way, ``a`` being the ``1 + erf/tanh(...)`` value."""
    m1 = sole_consumer(a)
    if not is_op(m1, "Mul") or len(m1.inputs) != 2:
        return None
    other = m1.inputs[1] if m1.inputs[0] is a else m1.inputs[0]
    if other is x:  # (x * a) * 0.5
        m2 = sole_consumer(m1.outputs[0])
        if close(binary_with_scalar(m2, "Mul", m1.outputs[0]), 0.5):
            return [m1, m2], m2.outputs[0]  # type: ignore[list-item,union-attr]
        return None
    if close(scalar(other), 0.5):  # x * (a * 0.5)
        m2 = sole_consumer(m1.outputs[0])
        if is_op(m2, "Mul") and len(m2.inputs) == 2 and {id(v) for v in m2.inputs} == {id(x), id(m1.outputs[0])}:
            return [m1, m2], m2.outputs[0]
        return None
    half = other.producer() if other is not None else None  # (x * 0.5) * a
    if close(binary_with_scalar(half, "Mul", x), 0.5) and private(other, [m1]):
        return [half, m1], m1.outputs[0]  # type: ignore[list-item]
    return None


def _one_plus(v: ir.Value) -> ir.Node | None:
    add = sole_consumer(v)
    return add if close(binary_with_scalar(add, "Add", v), 1.0) else None


def _match_erf(erf: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Value] | None:
    d = erf.inputs[0]
    div = d.producer() if d is not None else None
    if div is None or not private(d, [erf]) or len(div.inputs) != 2:
        return None
    x = div.inputs[0]
    if is_op(div, "Div") and close(scalar(div.inputs[1]), SQRT2):
        pass
    elif is_op(div, "Mul") and close(scalar(div.inputs[1]), 1.0 / SQRT2):
        pass
    elif is_op(div, "Mul") and close(scalar(div.inputs[0]), 1.0 / SQRT2):
        x = div.inputs[1]
    else:
        return None
    add = _one_plus(erf.outputs[0])
    if x is None or add is None:
        return None
    tail = _tail(x, add.outputs[0])
    if tail is None:
        return None
    return x, [div, erf, add, *tail[0]], tail[1]


def _cube_of(v: ir.Value) -> tuple[ir.Value, list[ir.Node]] | None:
    """``v = x^3`` as ``Pow(x, 3)``, ``Mul(x, Mul(x, x))`` or ``Mul(Mul(x, x), x)``."""
    node = v.producer()
    if node is None or len(node.inputs) != 2:
        return None
    if is_op(node, "Pow") and close(scalar(node.inputs[1]), 3.0):
        return node.inputs[0], [node]  # type: ignore[return-value]
    if not is_op(node, "Mul"):
        return None
    for sq_value, x in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        sq = sq_value.producer() if sq_value is not None else None
        if is_op(sq, "Mul") and sq.inputs[0] is x and sq.inputs[1] is x and private(sq_value, [node]):
            return x, [sq, node]  # type: ignore[return-value]
    return None


def _match_tanh(tanh: ir.Node) -> tuple[ir.Value, list[ir.Node], ir.Value] | None:
    s_val = tanh.inputs[0]
    s = s_val.producer() if s_val is not None else None
    if not is_op(s, "Mul") or not private(s_val, [tanh]) or len(s.inputs) != 2:
        return None
    r_val = next(
        (v for v in s.inputs if v is not None and close(binary_with_scalar(s, "Mul", v), SQRT_2_OVER_PI)), None
    )
    r = r_val.producer() if r_val is not None else None
    if not is_op(r, "Add") or not private(r_val, [s]) or len(r.inputs) != 2:
        return None
    for x, q_val in ((r.inputs[0], r.inputs[1]), (r.inputs[1], r.inputs[0])):
        q = q_val.producer() if q_val is not None else None
        if q is None or not private(q_val, [r]):
            continue
        p_val = next((v for v in q.inputs if v is not None and close(binary_with_scalar(q, "Mul", v), 0.044715)), None)
        if p_val is None or not private(p_val, [q]):
            continue
        cube = _cube_of(p_val)
        if cube is None or cube[0] is not x:
            continue
        add = _one_plus(tanh.outputs[0])
        if add is None:
            return None
        tail = _tail(x, add.outputs[0])
        if tail is None:
            return None
        return x, [*cube[1], q, r, s, tanh, add, *tail[0]], tail[1]
    return None


class GeluFusionPass(RewritePass):

    needs = (frozenset({"Erf", "Tanh"}),)
    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if node.graph is not graph:
                continue
            if is_op(node, "Erf"):
                found, approximate = _match_erf(node), "none"
            elif is_op(node, "Tanh"):
                found, approximate = _match_tanh(node), "tanh"
            else:
                continue
            if found is None:
                continue
            x, nodes, out = found
            if dtype_of(x) not in _TYPES:
                continue
            inner = [n.outputs[0] for n in nodes if n.outputs[0] is not out]
            if not all(private(v, nodes) for v in inner):
                continue
            attrs = {"approximate": approximate} if approximate != "none" else None
            gelu = make_node(namer, "Gelu", [x], attrs, name=out.producer().name or "gelu",  # type: ignore[union-attr]
                             version=fused_version(model, 20))
            replace(graph, nodes, [gelu], [out], [gelu.outputs[0]])
            count += 1
        return count
