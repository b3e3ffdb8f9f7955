"""Run a QDQ model's average pools on their codes: ``DQ(c) -> GlobalAveragePool -> Q`` with
per-tensor parameters becomes ``com.epoxy.cpu::QuantizedGlobalAveragePool(c, x_scale, x_zp,
y_scale, y_zp)``, and ``DQ(c) -> AveragePool -> Q`` (2-D windows) becomes
``com.epoxy.cpu::QuantizedAveragePool`` with the same inputs and the pool's attributes.

Why: quantizers wrap the pool in DQ/Q (epoxy's ``quantize_static`` gives it its own scale,
onnxruntime's does too), and squeeze-excite blocks pool a whole feature map per block; run as
written that is a dequantize pass writing 4 bytes an element, the float pool reading them, and
a quantize pass. On the codes it is one read of 1 byte an element into exact integer sums.

The values: the mean ``(sum(c) - n * x_zp) * x_scale / n`` from exact integer sums, divided by
``y_scale`` and rounded half to even in float64, so each output is the exact mean's code (a
window's padding is the float reading's zeros, i.e. code ``x_zp``: it adds nothing to the sum
of ``c - x_zp``; ``n`` counts it or not as ``count_include_pad`` says). The
QDQ graph rounds its float32 sums first, so the two can differ by one code where the mean lies
within float32 rounding of a half step (as onnxruntime's QLinearGlobalAveragePool, and the
QLinearConv rewrite here, agree with the float reading within one step). Level ``extended``,
cpu only, like the other QDQ passes.

What is required: GlobalAveragePool whose input is a DequantizeLinear output with a constant
scalar float32 scale and an 8-bit zero point, read only by a QuantizeLinear with such
parameters (no ``output_dtype``).
"""

from __future__ import annotations

import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, attr, ensure_opset, graph_nodes, is_op, make_node, replace
from .qdq_match import code_params, dq_parts, drop_if_unread, sole_quantizer
from .qdq_pairs import DOMAIN, DOMAIN_VERSION  # the cpu provider's op domain, named once

OP_TYPE = "QuantizedGlobalAveragePool"
WINDOWED_OP_TYPE = "QuantizedAveragePool"


class QDQGlobalAveragePoolPass(RewritePass):
    """``DQ(c) -> GlobalAveragePool -> Q`` with scalar parameters -> ``QuantizedGlobalAveragePool``."""

    needs = (frozenset({"GlobalAveragePool"}), frozenset({"DequantizeLinear"}), frozenset({"QuantizeLinear"}))

    max_sweeps = 1
    source, target = "GlobalAveragePool", OP_TYPE

    def takes(self, node: ir.Node) -> bool:
        """Whether this pool (of the source op type) is one the target op runs."""
        return True

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if node.graph is not graph or not is_op(node, self.source) or len(node.outputs) != 1:
                continue
            if not self.takes(node):
                continue
            parts = dq_parts(node.inputs[0])
            found = sole_quantizer(node)
            if parts is None or found is None or code_params(parts[2], parts[3]) is None:
                continue
            dq, codes, scale, zp = parts
            q = found[0]
            attributes = {name: a.value for name, a in node.attributes.items()}
            fused = make_node(namer, self.target, [codes, scale, zp, q.inputs[1], q.inputs[2]], attributes,
                              name=node.name or self.source, domain=DOMAIN, version=DOMAIN_VERSION)
            replace(graph, [node, q], [fused], [q.outputs[0]], [fused.outputs[0]])
            drop_if_unread(graph, dq)
            count += 1
        if count:
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
        return count


class QDQAveragePoolPass(QDQGlobalAveragePoolPass):
    """``DQ(c) -> AveragePool -> Q`` (2-D windows) with scalar parameters -> ``QuantizedAveragePool``,
    the pool's attributes kept."""

    needs = (frozenset({"AveragePool"}), frozenset({"DequantizeLinear"}), frozenset({"QuantizeLinear"}))

    source, target = "AveragePool", WINDOWED_OP_TYPE

    def takes(self, node: ir.Node) -> bool:
        kernel = attr(node, "kernel_shape")
        return isinstance(kernel, list | tuple) and len(kernel) == 2
