"""A dynamic int8 MatMul's float tail folded into one node: ``MatMulInteger -> Cast(float) ->
Mul(scale) [-> Add(bias)]`` becomes ``com.microsoft::MatMulIntegerToFloat``.

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
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    constant,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    replace,
    sole_consumer,
)

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
