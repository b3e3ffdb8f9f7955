"""Run value-moving ops of a QDQ model on the codes: ``DQ(c) -> op -> Q`` with one scale and zero
point on both sides becomes ``op(c)``, for ops whose output elements are input elements (MaxPool,
Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat) and for Relu, which becomes
``Max(c, zero_point)``.

Why: quantizers (onnxruntime's ``quantize_static``, epoxy's for OpenVINO, quantization-aware
exports) give such ops their input's scale and wrap them in DQ/Q so that an int8 runtime can
drop the pair. Run as written, each costs a dequantize pass, the op on float32 (4 bytes an
element) and a quantize pass; on the codes it is the op alone on 1-byte elements, as
onnxruntime's CPU provider drops these pairs.

Why the values are the same: DQ is ``(c - z) * s`` with ``s > 0``, increasing in ``c``, and Q
inverts it on its image (``|c - z| <= 255``, so the float32 round trip lands on the code). So
moving or selecting elements commutes with the pair exactly, max commutes with any increasing
map (MaxPool's padding is never a value), and ``Q(max(DQ(c), 0)) = max(c, z)``.

What is required: every data input a DequantizeLinear output with constant scalar float32 scale
and 8-bit zero point, all equal, codes of the zero point's type; the op's only reader a
QuantizeLinear with the same scale and zero point (no ``output_dtype``); MaxPool and Relu from
opset 12 (8-bit MaxPool and Max), MaxPool without its Indices output.
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    copy_attributes,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    replace,
)
from .qdq_match import code_params, dq_parts, drop_if_unread, sole_quantizer

#: op -> (indices of its data inputs, None: all; the opset from which it takes 8-bit codes)
MOVES: dict[str, tuple[tuple[int, ...] | None, int]] = {
    "MaxPool": ((0,), 12), "Reshape": ((0,), 5), "Flatten": ((0,), 9), "Squeeze": ((0,), 11),
    "Unsqueeze": ((0,), 11), "Transpose": ((0,), 1), "Concat": (None, 4), "Relu": ((0,), 12),
}

class QDQPassThroughPass(RewritePass):
    """``DQ -> MaxPool/Reshape/Flatten/Squeeze/Unsqueeze/Transpose/Concat/Relu -> Q`` with one set
    of parameters -> the op on the codes (Relu: ``Max(codes, zero_point)``)."""

    needs = (frozenset(MOVES), frozenset({"QuantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            spec = MOVES.get(node.op_type) if node.graph is graph and is_op(node, node.op_type) else None
            if spec is None or len(node.outputs) != 1 or opset_of(model, node) < spec[1] or not node.inputs:
                continue
            found = sole_quantizer(node)
            if found is None:
                continue
            q, params = found
            data = range(len(node.inputs)) if spec[0] is None else spec[0]
            codes, dqs = list(node.inputs), []
            for i in data:
                parts = dq_parts(node.inputs[i])
                if parts is None or code_params(parts[2], parts[3]) != params:
                    break
                codes[i] = parts[1]
                dqs.append(parts[0])
            else:
                new = self._on_codes(node, codes, q, namer)
                replace(graph, [node, q], [new], [q.outputs[0]], [new.outputs[0]])
                for dq in dqs:
                    drop_if_unread(graph, dq)
                count += 1
        return count

    @staticmethod
    def _on_codes(node: ir.Node, codes: list[ir.Value | None], q: ir.Node, namer: Namer) -> ir.Node:
        if node.op_type == "Relu":  # Q(max(DQ(c), 0)) = max(c, zero point)
            return make_node(namer, "Max", [codes[0], q.inputs[2]], name=node.name or "relu")
        new = make_node(namer, node.op_type, codes, name=node.name or node.op_type.lower())
        copy_attributes(node, new)
        return new

