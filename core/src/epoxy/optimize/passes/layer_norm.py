"""LayerNorm pattern fusion -> ``LayerNormalization`` (opset 17) over the last axis.

    mean = ReduceMean(x, axes=[-1])        d = Sub(x, mean)
    var  = ReduceMean(Pow(d, 2) | Mul(d, d), axes=[-1])
    n    = Div(d, Sqrt(Add(var, eps)))     (or Mul(d, Reciprocal(Sqrt(...))))
    y    = Add(Mul(n, gamma), beta)        (gamma and beta optional, either operand order)

float32 (stash_type 1) and float64 (stash_type 11) inputs; gamma/beta must be constants
varying along the last axis only. In older models the node carries ``version=17``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    attr,
    close,
    constant,
    dtype_of,
    fused_version,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    private,
    rank_of,
    replace,
    scalar,
    sole_consumer,
)

_STASH = {ir.DataType.FLOAT: 1, ir.DataType.DOUBLE: 11}


def _last_axis_mean(model: ir.Model, node: ir.Node | None, rank: int | None) -> ir.Value | None:
    """The input of a keepdims ReduceMean over the last axis only, else None."""
    if not is_op(node, "ReduceMean") or not node.inputs or node.inputs[0] is None:
        return None
    if attr(node, "keepdims", 1) != 1:
        return None
    if opset_of(model, node) >= 18:
        axes_value = node.inputs[1] if len(node.inputs) > 1 else None
        axes_array = constant(axes_value) if axes_value is not None else None
        axes = None if axes_array is None else [int(a) for a in axes_array.reshape(-1)]
    else:
        axes = attr(node, "axes")
    if axes is None or len(axes) != 1:
        return None
    if axes[0] != -1 and (rank is None or axes[0] != rank - 1):
        return None
    return node.inputs[0]


def _operand(node: ir.Node, value: ir.Value) -> ir.Value | None:
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if a is value and b is not value:
        return b
    if b is value and a is not value and node.op_type in ("Add", "Mul"):
        return a
    return None


def vector_input(graph: ir.Graph, namer: Namer, value: ir.Value | None, values: np.ndarray, name: str) -> ir.Value:
    """``value`` itself when it is a constant 1-D vector (the fused op reads it as it is),
    else a new initializer ``name`` holding ``values`` (its broadcast, or the default)."""
    if value is not None and constant(value).ndim == 1:  # type: ignore[union-attr]
        return value
    return add_initializer(graph, namer, name, values)


def eps_sqrt(mean_node: ir.Node) -> tuple[ir.Node, float, ir.Node] | None:
    """``(add, eps, sqrt)`` when ``mean_node``'s output goes only to ``Add(., eps)`` (a
    constant in [0, 1)) and that only to ``Sqrt``: the shared tail of LayerNorm's variance and
    RMSNorm's mean square."""
    add_eps = sole_consumer(mean_node.outputs[0])
    if not is_op(add_eps, "Add"):
        return None
    eps = scalar(_operand(add_eps, mean_node.outputs[0]))
    if eps is None or not 0 <= eps < 1:
        return None
    sqrt = sole_consumer(add_eps.outputs[0])
    if not is_op(sqrt, "Sqrt"):
        return None
    return add_eps, eps, sqrt


def _affine_param(c: np.ndarray | None, width: int | None, dtype: np.dtype) -> np.ndarray | None:
    """``c`` as a 1-D vector of the normalized width when it broadcasts along the last axis
    only (leading 1s allowed), else None."""
    if c is None or c.dtype != dtype or c.ndim == 0:
        return None
    if any(d != 1 for d in c.shape[:-1]):
        return None
    if width is not None and c.shape[-1] != width:
        return None
    return c.reshape(-1)


class LayerNormFusionPass(RewritePass):

    needs = (frozenset({"ReduceMean"}),)
    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for mean_node in graph_nodes(graph):
            if mean_node.graph is not graph or not is_op(mean_node, "ReduceMean"):
                continue
            x = mean_node.inputs[0] if mean_node.inputs else None
            if x is None or dtype_of(x) not in _STASH:
                continue
            rank = rank_of(x)
            if _last_axis_mean(model, mean_node, rank) is not x:
                continue
            found = self._match(model, x, mean_node, rank)
            if found is None:
                continue
            nodes, eps, gamma, beta, out = found
            inner = [n.outputs[0] for n in nodes if n.outputs[0] is not out]
            if not all(private(v, nodes) for v in inner):
                continue
            np_dtype = dtype_of(x).numpy()  # type: ignore[union-attr]
            width = None
            if x.shape is not None and isinstance(x.shape[-1], int):
                width = x.shape[-1]
            g = _affine_param(constant(gamma), width, np_dtype) if gamma is not None else None
            b = _affine_param(constant(beta), width, np_dtype) if beta is not None else None
            if (gamma is not None and g is None) or (beta is not None and b is None):
                continue
            if g is None or b is None:
                n = (g if g is not None else b if b is not None else None)
                size = width if n is None else n.size
                if size is None:
                    continue
                if g is None:
                    g = np.ones(size, np_dtype)
                if b is None:
                    b = np.zeros(size, np_dtype)
            if g.size != b.size:
                continue
            base = out.producer().name or "layer_norm"
            g_value = vector_input(graph, namer, gamma, g, f"{base}.scale")
            b_value = vector_input(graph, namer, beta, b, f"{base}.bias")
            ln = make_node(
                namer, "LayerNormalization", [x, g_value, b_value],
                {"axis": -1, "epsilon": float(eps), "stash_type": _STASH[dtype_of(x)]},  # type: ignore[index]
                name=base, version=fused_version(model, 17),
            )
            replace(graph, nodes, [ln], [out], [ln.outputs[0]])
            count += 1
        return count

    def _match(self, model, x, mean_node, rank):
        mean = mean_node.outputs[0]
        sub = sole_consumer(mean)
        if not is_op(sub, "Sub") or sub.inputs[0] is not x or sub.inputs[1] is not mean:
            return None
        d = sub.outputs[0]
        readers = {id(u.node): u.node for u in d.uses()}
        if d.is_graph_output() or len(readers) != 2:
            return None
        square = div = None
        for r in readers.values():
            if is_op(r, "Pow") and r.inputs[0] is d and close(scalar(r.inputs[1]), 2.0):
                square = r
            elif is_op(r, "Mul") and r.inputs[0] is d and r.inputs[1] is d:
                square = r
            elif is_op(r, ("Div", "Mul")):
                div = r
        if square is None or div is None:
            return None
        var_node = sole_consumer(square.outputs[0])
        if _last_axis_mean(model, var_node, rank) is not square.outputs[0]:
            return None
        found = eps_sqrt(var_node)
        if found is None:
            return None
        add_eps, eps, sqrt = found
        nodes = [mean_node, sub, square, var_node, add_eps, sqrt]
        if is_op(div, "Div"):
            if div.inputs[0] is not d or div.inputs[1] is not sqrt.outputs[0]:
                return None
        else:
            recip = sole_consumer(sqrt.outputs[0])
            if not is_op(recip, "Reciprocal") or _operand(div, d) is not recip.outputs[0]:
                return None
            nodes.append(recip)
        nodes.append(div)
        out = div.outputs[0]
        gamma = beta = None
        nxt = sole_consumer(out)
        if is_op(nxt, "Mul") and constant(_operand(nxt, out)) is not None:
            gamma = _operand(nxt, out)
            nodes.append(nxt)
            out = nxt.outputs[0]
            nxt = sole_consumer(out)
        if is_op(nxt, "Add") and constant(_operand(nxt, out)) is not None:
            beta = _operand(nxt, out)
            nodes.append(nxt)
            out = nxt.outputs[0]
        return nodes, eps, gamma, beta, out
