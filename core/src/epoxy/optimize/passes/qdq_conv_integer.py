"""Run a QDQ convolution with a float output on its integer codes: ``Conv(DQ(x_q), DQ(W_q)[, B])``
whose output is not quantized again becomes ``ConvInteger(x_q, W_q, x_zp, W_zp) -> Cast(float)
-> Mul(x_scale * W_scale) [-> Add(B)]``.

Why: ``quantize_static`` for the cpu provider (epoxy's default op types, onnxruntime's with
Conv only) quantizes the convolutions' inputs and weights, but a convolution read by float ops
(a residual ``Add``/``Sum``, a head) has no Q after it, so ``QDQConvToQLinearPass`` cannot take
it. Run as written it is a float32 convolution of fake-quantized values: resnet50's 22
convolutions before its residual sums ran at float speed, 39 ms of a 76 ms int8 run. On codes
the cpu provider runs ConvInteger on its int8 GEMM, and the tail is three elementwise steps.

Which layers: those the int8 GEMM takes (``qdq_qlinear.MIN_MACS``, ``MIN_CHANNELS``, as for
QLinearConv); smaller ones keep the float reading, faster there.

What changes in the values: the sum is exact (integers) and scaled once by ``x_scale *
W_scale`` in float32, where the QDQ graph sums dequantized float32 products; the two agree
within float32 rounding of the sum (tests bound it). Level ``extended``, as for the other QDQ
rewrites; standard ONNX out, so any provider may run the chain.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    constant,
    copy_attributes,
    make_node,
    replace,
)
from .qdq_match import F32, ConstantDQ, activation_codes, channel_weights, drop_if_unread, float_bias, layer_nodes
from .qdq_qlinear import CONV_RANKS, large_enough


class QDQConvToIntegerPass(RewritePass):
    """``Conv`` of a DQ'd activation and DQ'd 8-bit weights, float output -> ``ConvInteger``
    and its float tail."""

    needs = (frozenset({"Conv"}), frozenset({"DequantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for conv in layer_nodes(model, graph, "Conv", since=10):  # ConvInteger is opset 10
            x = activation_codes(conv.inputs[0])
            weights = channel_weights(conv.inputs[1], model, channel_axis=0, ranks=CONV_RANKS)
            if x is None or weights is None or not large_enough(conv, weights.codes_value):
                continue
            m = weights.codes_value.shape[0]
            bias = float_bias(conv, m)
            if bias is None:
                continue
            nodes = _chain(conv, x, weights, bias[0], graph, namer)
            replace(graph, [conv], nodes, [conv.outputs[0]], [nodes[-1].outputs[0]])
            for dq in (x[0], weights.node, bias[1]):  # a DQ only the layer read goes with it
                drop_if_unread(graph, dq)
            count += 1
        return count


def _chain(conv: ir.Node, x: tuple[ir.Node, ir.Value, ir.Value, ir.Value | None], weights: ConstantDQ,
           bias: ir.Value | np.ndarray | None, graph: ir.Graph, namer: Namer) -> list[ir.Node]:
    """The standard-ONNX nodes computing the convolution on codes."""
    _, x_codes, x_scale, x_zp = x
    name = conv.name or "conv"
    w = weights.codes_value
    per_channel = (w.shape[0],) + (1,) * (w.ndim - 2)  # broadcasts along the output's channel axis
    inputs = [x_codes, weights.codes, x_zp, weights.zero_point]
    while inputs[-1] is None:  # optional zero points left out at the end
        inputs.pop()
    integer = make_node(namer, "ConvInteger", inputs, name=f"{name}/integer")
    copy_attributes(conv, integer)
    cast = make_node(namer, "Cast", [integer.outputs[0]], {"to": ir.DataType.FLOAT}, name=f"{name}/to_float")
    x_scale_value = constant(x_scale)  # a constant scalar: activation_codes checked it
    product = (np.asarray(x_scale_value, dtype=F32).reshape(()) * weights.scale_value.astype(F32)).astype(F32)
    scale = add_initializer(graph, namer, f"{name}/scale", product.reshape(per_channel) if product.size > 1
                            else product.reshape(()))
    scaled = make_node(namer, "Mul", [cast.outputs[0], scale], name=f"{name}/scaled")
    nodes = [integer, cast, scaled]
    if bias is not None:
        b = constant(bias) if isinstance(bias, ir.Value) else bias
        column = add_initializer(graph, namer, f"{name}/bias", np.asarray(b, dtype=F32).reshape(per_channel))
        nodes.append(make_node(namer, "Add", [scaled.outputs[0], column], name=f"{name}/bias_add"))
    return nodes
