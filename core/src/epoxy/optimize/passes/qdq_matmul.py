"""Run a QDQ linear layer on its integer codes: ``MatMul(DQ(x_q), DQ(W_q))`` (or ``Gemm`` with
``alpha = 1``, ``transA = 0``, ``beta = 1`` and a constant bias) becomes
``MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast(float) -> Mul(Mul(x_scale, W_scale)) [-> Add(bias)]``.

Why: a static QDQ transformer (epoxy's ``quantize_static`` on MatMul/Gemm, onnxruntime's QDQ
tool, quantization-aware exports) quantizes each projection's input and weights but leaves the
product in float. Run as written on the cpu provider, the weights are dequantized once and the
product is a float32 GEMM with fake-quantized inputs: float speed at best. On codes, the cpu
provider runs the product on its int8 GEMM (AVX512-VNNI: 128x768x768 0.83 ms against sgemm's
1.70) and fuses the standard tail into ``MatMulIntegerToFloat`` with one compiled pass for the
scale and bias (``epoxy_ep_cpu/ops/fused_int8.py``), as onnxruntime's CPU provider runs the same
pattern. The pass writes standard ONNX: any provider may run the chain.

Which layers: 2-D constant weights of at least ``MIN_WEIGHTS`` elements (the products the cpu
provider's int8 GEMM takes once a few rows come in); a smaller product runs its float GEMM
faster. Activation-by-activation products (attention scores) keep the float reading.

What changes in the values: the product's sum is exact (integers) and scaled once by
``x_scale * W_scale`` in float32, where the QDQ graph sums the dequantized float32 values in
BLAS order; the two agree within float32 rounding of the sum (tests bound it). Level
``extended``, as for convolutions: ``basic`` keeps the float reading.

What is required: a per-tensor float32 scale and 8-bit zero point (or none) for ``x``;
weights quantized per tensor or per output column (axis 1 of ``[K, N]``; axis 0 of a ``transB``
Gemm's ``[N, K]``, whose codes are stored transposed here); a Gemm's bias a constant float32
``(N,)`` vector or an int32 DQ of one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    attr,
    is_op,
    make_node,
    replace,
)
from .qdq_match import ConstantDQ, activation_codes, channel_weights, drop_if_unread, float_bias, layer_nodes

#: the smallest weight matrix (K x N elements) run on codes; at 16+ rows the product reaches the
#: 1 M multiply-adds from which the cpu provider's int8 GEMM runs (``kernels_int8_gemm.MIN_MACS``)
MIN_WEIGHTS = 1 << 16


@dataclass
class _Layer:
    """A linear layer the pass rewrites: the node, the input's DQ parts, the weights (codes
    ``[K, N]``: a transposed copy for a ``transB`` Gemm) and the float bias to add (or None)."""

    node: ir.Node
    x_dq: ir.Node
    x_codes: ir.Value
    x_scale: ir.Value
    x_zp: ir.Value | None
    weights: ConstantDQ
    codes: ir.Value | np.ndarray
    bias: ir.Value | np.ndarray | None
    bias_dq: ir.Node | None


def _match(model: ir.Model, node: ir.Node) -> _Layer | None:
    x = activation_codes(node.inputs[0])
    if x is None:
        return None
    if is_op(node, "MatMul"):
        weights = channel_weights(node.inputs[1], model, channel_axis=1, ranks=(2,))
        if weights is None:
            return None
        codes: ir.Value | np.ndarray = weights.codes
        bias: tuple[ir.Value | np.ndarray | None, ir.Node | None] = (None, None)
    else:  # Gemm: y = x @ op(W) + C, alpha and beta 1
        if attr(node, "transA", 0) or float(attr(node, "alpha", 1.0)) != 1.0 or float(attr(node, "beta", 1.0)) != 1.0:
            return None
        trans_b = bool(attr(node, "transB", 0))
        weights = channel_weights(node.inputs[1], model, channel_axis=0 if trans_b else 1, ranks=(2,))
        if weights is None:
            return None
        codes = np.ascontiguousarray(weights.codes_value.T) if trans_b else weights.codes
        width = weights.codes_value.shape[0 if trans_b else 1]
        found = float_bias(node, width)
        if found is None:
            return None
        bias = found
    if weights.codes_value.size < MIN_WEIGHTS:
        return None
    return _Layer(node, x[0], x[1], x[2], x[3], weights, codes, bias[0], bias[1])


def _chain(layer: _Layer, graph: ir.Graph, namer: Namer) -> list[ir.Node]:
    """The standard-ONNX nodes computing the layer on codes."""
    name = layer.node.name or layer.node.op_type.lower()
    codes = layer.codes if isinstance(layer.codes, ir.Value) else add_initializer(graph, namer, f"{name}/codes_kn",
                                                                                    layer.codes)
    inputs = [layer.x_codes, codes, layer.x_zp, layer.weights.zero_point]
    while inputs[-1] is None:  # optional zero points left out at the end
        inputs.pop()
    mmi = make_node(namer, "MatMulInteger", inputs, name=f"{name}/integer")
    cast = make_node(namer, "Cast", [mmi.outputs[0]], {"to": ir.DataType.FLOAT}, name=f"{name}/to_float")
    # the scale product stays a node of two constants: the cpu provider's tail fusion reads the
    # activation's and the weights' scales apart (MatMulIntegerToFloat's a_scale, b_scale)
    scale = make_node(namer, "Mul", [layer.x_scale, layer.weights.scale], name=f"{name}/scale")
    scaled = make_node(namer, "Mul", [cast.outputs[0], scale.outputs[0]], name=f"{name}/scaled")
    nodes = [mmi, cast, scale, scaled]
    if layer.bias is not None:
        bias = layer.bias if isinstance(layer.bias, ir.Value) else add_initializer(graph, namer, f"{name}/bias",
                                                                                   layer.bias)
        nodes.append(make_node(namer, "Add", [scaled.outputs[0], bias], name=f"{name}/bias_add"))
    return nodes


class QDQMatMulToIntegerPass(RewritePass):
    """``MatMul``/``Gemm`` of a DQ'd activation and DQ'd 8-bit weights -> ``MatMulInteger`` and
    its float tail."""

    needs = (frozenset({"MatMul", "Gemm"}), frozenset({"DequantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in layer_nodes(model, graph, ("MatMul", "Gemm"), since=10):  # MatMulInteger is opset 10
            layer = _match(model, node)
            if layer is None:
                continue
            nodes = _chain(layer, graph, namer)
            replace(graph, [node], nodes, [node.outputs[0]], [nodes[-1].outputs[0]])
            for dq in (layer.x_dq, layer.weights.node, layer.bias_dq):  # a DQ only the layer read goes with it
                drop_if_unread(graph, dq)
            count += 1
        return count
