"""Run a QDQ residual addition on its codes: ``DQ(a) + DQ(b) [-> Relu] -> Q`` becomes
``com.epoxy.cpu::QuantizedAdd(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)`` (attribute
``relu``); a product of two tensors, ``DQ(a) * DQ(b) [-> Relu] -> Q`` (SiLU's ``x * sigmoid(x)``,
HardSwish's ``x * hardsigmoid(x)``, a squeeze-excite gate), becomes ``QuantizedMul`` alike.

Why: quantizers put Q/DQ around a residual Add (onnxruntime's ``quantize_static`` does by
default, and the block's Relu after it), so run as written every block pays two dequantize
passes, a float32 add, a Relu and a quantize pass over float32 tensors (4 bytes an element, five
passes). The fused op is one pass from two 8-bit inputs to 8-bit codes; on the cpu provider it
also keeps the layout its inputs arrive in (QLinearConv's channels-last codes), so a block's
codes never go through a float tensor.

Why the values are the same: the op is defined as the graph's float reading, step for step in
float32: ``va = float32(a - a_zp) * a_scale`` (the difference is exact), likewise ``vb``,
``v = va + vb`` (``va * vb``), ``max(v, 0)`` for the Relu, then QuantizeLinear's ``sat(rint(v / y_scale) +
y_zp)`` (the division, not a reciprocal). Unlike onnxruntime's QLinearAdd (which rescales each
input by ``scale / y_scale`` first) nothing is reassociated, so the codes are bit for bit those
of the QDQ graph; level ``extended`` with the other QDQ passes, cpu first (a provider that runs
QDQ in int8 itself reads the pattern).

What is required: Add (or a two-input Sum) or Mul whose inputs are both DequantizeLinear outputs with
constant scalar float32 scales and 8-bit zero points, not both of constant codes (constant
folding computes those: a ``QDQLookupPass`` table is such a chain); its output read only by a
QuantizeLinear with such parameters (no ``output_dtype``), or only by a Relu read only by one.
An Add or Mul of one constant (per tensor or per channel) is ``QDQLookupPass``'s, which runs
first.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    constant,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    replace,
    sole_consumer,
)
from .qdq_match import code_params, dq_parts, drop_if_unread, sole_quantizer
from .qdq_pairs import DOMAIN, DOMAIN_VERSION  # the cpu provider's op domain, named once

OP_TYPE = "QuantizedAdd"
#: the float op -> the op on codes that computes it
FUSED_OPS = {"Add": OP_TYPE, "Sum": OP_TYPE, "Mul": "QuantizedMul"}


def _dequantized(value: ir.Value | None) -> tuple[ir.Node, list[ir.Value]] | None:
    """The DQ producing ``value`` and its (codes, scale, zero point), when scalar and constant."""
    parts = dq_parts(value)
    if parts is None or parts[3] is None or code_params(parts[2], parts[3]) is None:
        return None
    return parts[0], [parts[1], parts[2], parts[3]]


class QDQAddPass(RewritePass):
    """``DQ(a) + DQ(b) [-> Relu] -> Q`` with scalar parameters -> one ``QuantizedAdd`` on codes
    (``*``: ``QuantizedMul``)."""

    needs = (frozenset(FUSED_OPS), frozenset({"DequantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if node.graph is not graph or len(node.outputs) != 1 or len(node.inputs) != 2:
                continue
            if not is_op(node, tuple(FUSED_OPS)):
                continue
            sides = [_dequantized(v) for v in node.inputs]
            if sides[0] is None or sides[1] is None:
                continue
            if all(constant(side[1][0]) is not None for side in sides if side is not None):
                continue  # constants (a lookup's table chain): folded at plan time as standard ops
            relu = sole_consumer(node.outputs[0])
            tail = relu if is_op(relu, "Relu") else node
            found = sole_quantizer(tail)
            if found is None:
                continue
            q, _ = found
            inputs = [*sides[0][1], *sides[1][1], q.inputs[1], q.inputs[2]]
            fused = make_node(namer, FUSED_OPS[node.op_type], inputs, {"relu": int(tail is not node)},
                              name=node.name or node.op_type.lower(), domain=DOMAIN, version=DOMAIN_VERSION)
            fused.outputs[0].type = q.outputs[0].type
            fused.outputs[0].shape = q.outputs[0].shape
            old = [node, q] if tail is node else [node, tail, q]
            replace(graph, old, [fused], [q.outputs[0]], [fused.outputs[0]])
            for dq, _ in sides:  # type: ignore[misc]
                drop_if_unread(graph, dq)
            count += 1
        if count:
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
        return count
