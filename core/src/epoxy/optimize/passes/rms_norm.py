"""RMSNorm pattern fusion -> ``RMSNormalization`` (opset 23) over the last axis.

    ms = ReduceMean(Pow(x, 2) | Mul(x, x), axes=[-1])
    n  = Mul(x, Reciprocal(Sqrt(Add(ms, eps))))    (or Div(x, Sqrt(...)), or Reciprocal as Div(1, .))
    y  = Mul(n, gamma)                             (gamma optional, either operand order)

What the exporters write for Llama-style models (T5, Mistral, Qwen...: ``x * rsqrt(mean(x^2) +
eps) * weight``): seven nodes and five temporaries per norm, a quarter of a small Llama's run on
ep-cpu. float32 (stash_type 1) and float64 (stash_type 11) inputs; gamma must be a constant
varying along the last axis only. In models older than opset 23 the node carries
``version=23``.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    close,
    constant,
    dtype_of,
    fused_version,
    graph_nodes,
    is_op,
    make_node,
    private,
    rank_of,
    replace,
    scalar,
    sole_consumer,
)
from .layer_norm import _STASH, _affine_param, _last_axis_mean, _operand, eps_sqrt, vector_input


def _squared(node: ir.Node | None) -> ir.Value | None:
    """``x`` when ``node`` is ``Pow(x, 2)`` or ``Mul(x, x)``, else None."""
    if is_op(node, "Pow") and len(node.inputs) == 2 and close(scalar(node.inputs[1]), 2.0):
        return node.inputs[0]
    if is_op(node, "Mul") and len(node.inputs) == 2 and node.inputs[0] is node.inputs[1]:
        return node.inputs[0]
    return None


def _reciprocal_of(node: ir.Node | None, value: ir.Value) -> bool:
    """Whether ``node`` is ``Reciprocal(value)`` or ``Div(1, value)``."""
    if is_op(node, "Reciprocal") and node.inputs[0] is value:
        return True
    return (is_op(node, "Div") and len(node.inputs) == 2 and node.inputs[1] is value
            and close(scalar(node.inputs[0]), 1.0))


class RMSNormFusionPass(RewritePass):

    needs = (frozenset({"Pow", "Mul"}), frozenset({"ReduceMean"}))
    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for square in graph_nodes(graph):
            if square.graph is not graph:
                continue
            x = _squared(square)
            if x is None or dtype_of(x) not in _STASH:
                continue
            found = self._match(model, x, square, rank_of(x))
            if found is None:
                continue
            nodes, eps, gamma, out = found
            inner = [n.outputs[0] for n in nodes if n.outputs[0] is not out]
            if not all(private(v, nodes) for v in inner):
                continue
            np_dtype = dtype_of(x).numpy()  # type: ignore[union-attr]
            width = x.shape[-1] if x.shape is not None and isinstance(x.shape[-1], int) else None
            if gamma is not None:
                g = _affine_param(constant(gamma), width, np_dtype)
                if g is None:
                    continue
            elif width is None:
                continue
            else:
                g = np.ones(width, np_dtype)
            base = out.producer().name or "rms_norm"
            g_value = vector_input(graph, namer, gamma, g, f"{base}.scale")
            rms = make_node(
                namer, "RMSNormalization", [x, g_value],
                {"axis": -1, "epsilon": float(eps), "stash_type": _STASH[dtype_of(x)]},  # type: ignore[index]
                name=base, version=fused_version(model, 23),
            )
            replace(graph, nodes, [rms], [out], [rms.outputs[0]])
            count += 1
        return count

    def _match(self, model, x, square, rank):
        mean_node = sole_consumer(square.outputs[0])
        if _last_axis_mean(model, mean_node, rank) is not square.outputs[0]:
            return None
        found = eps_sqrt(mean_node)
        if found is None:
            return None
        add_eps, eps, sqrt = found
        nodes = [square, mean_node, add_eps, sqrt]
        nxt = sole_consumer(sqrt.outputs[0])
        if is_op(nxt, "Div") and nxt.inputs[0] is x and nxt.inputs[1] is sqrt.outputs[0]:
            scaled = nxt
        elif _reciprocal_of(nxt, sqrt.outputs[0]):
            nodes.append(nxt)
            scaled = sole_consumer(nxt.outputs[0])
            if not is_op(scaled, "Mul") or _operand(scaled, nxt.outputs[0]) is not x:
                return None
        else:
            return None
        nodes.append(scaled)
        out = scaled.outputs[0]
        gamma = None
        after = sole_consumer(out)
        if is_op(after, "Mul") and constant(_operand(after, out)) is not None:
            gamma = _operand(after, out)
            nodes.append(after)
            out = after.outputs[0]
        return nodes, eps, gamma, out
