"""An int8 product's float tail folded into one node: ``MatMulInteger -> Cast(float) ->
Mul(scale) [-> Add(bias)]`` becomes ``com.microsoft::MatMulIntegerToFloat``, and the same tail
after a ``ConvInteger`` becomes ``com.epoxy.cpu::ConvIntegerToFloat``.

Why: ``quantize_dynamic`` (epoxy's and onnxruntime's) writes every quantized MatMul as that
chain, with ``scale = Mul(activation scale, weight scale)``. Run as written, the cpu provider
makes three more passes over each product (the int32 -> float32 cast, the multiply, the bias
add: ~250 us a BERT-base projection, as much as a quarter of its int8 GEMM) and three more
steps. Fused, the kernel casts, scales and adds the bias in one compiled pass
(``jit/kernels_quantize.scale_columns``), in float32 and in the chain's order, so the values are
the unfused chain's bit for bit.

What is fused: a MatMulInteger with constant weights whose int32 output only a Cast to float32
reads, whose output only a Mul by ``Mul(x, constant)`` reads (x is the activation scale: a
scalar, computed at run time or, from a static QDQ layer (``epoxy.optimize.passes.qdq_matmul``),
a constant); a following Add of a constant float32 vector of the output's width is taken in too.

The convolution form (written by ``epoxy.optimize.passes.qdq_conv_integer`` for static QDQ
convolutions read as float, e.g. before resnet50's residual sums): a ConvInteger with constant
weights, then Cast to float32, Mul by a constant float32 scalar or ``(M, 1, ...)`` scale, and
optionally Add of a constant ``(M, 1, ...)`` bias. Fused, the int8 GEMM's sums go straight to
the float32 output (``jit/kernels_int8_conv.scale_rows``) instead of an int32 tensor, a cast,
a multiply and an add: resnet50's were 20 layers of four passes each.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    constant,
    copy_attributes,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    replace,
    sole_consumer,
)

from ..registry import KERNELS
from .conv import _Geometry, _geometry_for, _int8_weights, conv_integer
from .fused import DOMAIN as CPU_DOMAIN
from .fused import DOMAIN_VERSION as CPU_DOMAIN_VERSION

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)


def _other(node: ir.Node, value: ir.Value) -> ir.Value | None:
    """The input of a two-input ``node`` that is not ``value``."""
    if len(node.inputs) != 2:
        return None
    first, second = node.inputs
    return second if first is value else first if second is value else None


def _split_scale(scale: ir.Value | None, width: int) -> tuple[ir.Value, ir.Value] | None:
    """(activation scale, constant float32 weight scale) of ``scale = Mul(a, w)``: ``w`` one
    value or one per output column (1-D), ``a`` a scalar (DynamicQuantizeLinear's, or a static
    QDQ layer's constant), so the product broadcasts against the (..., width) output as the
    fused node's does."""
    producer = scale.producer() if scale is not None else None
    if producer is None or not is_op(producer, "Mul") or len(producer.inputs) != 2:
        return None
    p, q = producer.inputs
    if p is None or q is None:
        return None
    for activation, weights in ((p, q), (q, p)):  # a static layer's two constants: either order
        w = constant(weights)
        if w is None or w.dtype != _F32 or w.ndim > 1 or w.size not in (1, width):
            continue
        if activation.shape is None or len(activation.shape) != 0:
            continue
        a = constant(activation)
        if a is not None and a.dtype != _F32:
            continue
        return activation, weights
    return None


def _bias(node: ir.Node | None, y: ir.Value, width: int) -> ir.Value | None:
    """The constant float32 (width,) vector ``node`` adds to ``y``, when it is such an Add."""
    if node is None or not is_op(node, "Add"):
        return None
    other = _other(node, y)
    value = constant(other)
    if value is None or value.dtype != _F32 or value.shape != (width,):
        return None
    return other


class CpuMatMulIntegerToFloatPass(RewritePass):
    """``MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)]`` -> ``MatMulIntegerToFloat``."""

    needs = (frozenset({"MatMulInteger"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for mmi in graph_nodes(graph):
            if mmi.graph is not graph or not is_op(mmi, "MatMulInteger") or len(mmi.inputs) < 2:
                continue
            weights = constant(mmi.inputs[1])
            if weights is None or weights.ndim != 2:
                continue
            cast = sole_consumer(mmi.outputs[0])
            if not is_op(cast, "Cast") or int(attr(cast, "to", 0)) != ir.DataType.FLOAT:  # type: ignore[arg-type]
                continue
            mul = sole_consumer(cast.outputs[0])  # type: ignore[union-attr]
            if not is_op(mul, "Mul"):
                continue
            scale = _other(mul, cast.outputs[0])  # type: ignore[arg-type, union-attr]
            scales = _split_scale(scale, weights.shape[1])
            if scales is None:
                continue
            old, out = [mmi, cast, mul], mul.outputs[0]  # type: ignore[union-attr]
            if sole_consumer(scale) is mul:  # the scale product goes too: the fused node multiplies
                old.append(scale.producer())  # type: ignore[arg-type, union-attr]
            zero_points = list(mmi.inputs[2:4]) + [None] * (4 - len(mmi.inputs))
            inputs = [mmi.inputs[0], mmi.inputs[1], scales[0], scales[1], zero_points[0], zero_points[1]]
            add = sole_consumer(out)
            bias = _bias(add, out, weights.shape[1])
            if bias is not None:
                old.append(add)  # type: ignore[arg-type]
                out = add.outputs[0]  # type: ignore[union-attr]
                inputs.append(bias)
            while inputs and inputs[-1] is None:
                inputs.pop()
            fused = make_node(namer, "MatMulIntegerToFloat", inputs, name=mmi.name or "matmul_integer",
                              domain=DOMAIN, version=1)
            ensure_opset(model, DOMAIN, 1)
            replace(graph, old, [fused], [out], [fused.outputs[0]])
            count += 1
        return count


def _channel_constant(value: ir.Value | None, channels: int, rank: int) -> bool:
    """Whether ``value`` is a constant float32 scalar or ``(channels, 1, ...)`` array that
    broadcasts along a rank-``rank`` conv output's channel axis only."""
    found = constant(value)
    if found is None or found.dtype != _F32:
        return False
    return found.size == 1 and found.ndim <= 1 or found.shape == (channels,) + (1,) * (rank - 2)


class CpuConvIntegerToFloatPass(RewritePass):
    """``ConvInteger -> Cast -> Mul(scale) [-> Add(bias)]`` -> ``ConvIntegerToFloat``."""

    needs = (frozenset({"ConvInteger"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for conv in graph_nodes(graph):
            if conv.graph is not graph or not is_op(conv, "ConvInteger") or len(conv.inputs) < 2:
                continue
            weights = constant(conv.inputs[1])
            if weights is None or weights.ndim < 3:
                continue
            m, rank = weights.shape[0], weights.ndim
            cast = sole_consumer(conv.outputs[0])
            if not is_op(cast, "Cast") or int(attr(cast, "to", 0)) != ir.DataType.FLOAT:  # type: ignore[arg-type]
                continue
            mul = sole_consumer(cast.outputs[0])  # type: ignore[union-attr]
            scale = _other(mul, cast.outputs[0]) if is_op(mul, "Mul") else None  # type: ignore[arg-type, union-attr]
            if mul is None or not _channel_constant(scale, m, rank):
                continue
            old, out = [conv, cast, mul], mul.outputs[0]
            inputs = list(conv.inputs[:4]) + [None] * (4 - len(conv.inputs)) + [scale]
            add = sole_consumer(out)
            bias = _other(add, out) if is_op(add, "Add") else None
            if add is not None and bias is not None and _channel_constant(bias, m, rank) and constant(bias).size > 1:
                old.append(add)
                out = add.outputs[0]
                inputs.append(bias)
            fused = make_node(namer, "ConvIntegerToFloat", inputs, name=conv.name or "conv_integer",
                              domain=CPU_DOMAIN)
            copy_attributes(conv, fused)
            ensure_opset(model, CPU_DOMAIN, CPU_DOMAIN_VERSION)
            replace(graph, old, [fused], [out], [fused.outputs[0]])
            count += 1
        return count


@KERNELS.register("ConvIntegerToFloat", CPU_DOMAIN_VERSION, domain=CPU_DOMAIN)
def conv_integer_to_float(node: NodeSpec):
    """ConvInteger's sums as float32, times the scale, plus the bias: one pass from the int8
    GEMM where it runs the layer, else ConvInteger's kernel and the same steps in numpy."""
    geo = _Geometry(node)
    group = int(node.attr("group", 1))
    packed = _int8_weights(node, 1, 3, group)
    integer = conv_integer(node)

    def run(x, w, x_zero_point=None, w_zero_point=None, scale=None, bias=None):
        s = np.asarray(scale, dtype=np.float32)
        if packed is not None and x.ndim == 4:
            _, strides, dilations, begin, _, out_sp = _geometry_for(geo, x, w, group)
            y = packed.scaled(x, x_zero_point, strides, dilations, begin, out_sp, s, bias)
            if y is not None:
                return y
        y = integer(x, w, x_zero_point, w_zero_point).astype(np.float32) * s
        return y + bias if bias is not None else y

    return run
