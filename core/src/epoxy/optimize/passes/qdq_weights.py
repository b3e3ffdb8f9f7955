"""Dequantize constant integer weights once: ``DequantizeLinear(int W) -> MatMul/Gemm/Conv``
becomes a float32 initializer read by the same op.

Why a pass and not the plan builder's constant folding: the plan builder does run such a DQ
once, but only after every kernel was built, so the consumer's kernel saw a weight computed at
run time (no prepacking) and the optimizer's own passes (Conv+BatchNormalization folding,
MatMul+Add -> Gemm, the providers' fusions) saw no weight at all. Folded here, the weight is a
plain initializer for all of them.

Why provider-scoped (``builtin.py`` registers it for ``cpu`` only): the partitioner runs after
the optimizer, so a pass cannot ask which provider will take a node; it only knows the
session's provider order. A provider that runs QDQ in int8 (OpenVINO) needs the DQ kept to
see the pattern, so the fold runs only when the cpu provider has first pick, where the
consumer runs in float anyway. Activation Q->DQ pairs are never touched: they model the int8
rounding of the graph as written.

The value is computed as epoxy's cpu ``DequantizeLinear`` computes it (integer difference,
then ``float32(diff) * float32(scale)``), so outputs equal the unoptimized run's. Only float32
scales and outputs are folded; a float16/bfloat16 DQ is left to the plan builder.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import Namer, RewritePass, add_initializer, attr, constant, graph_nodes, is_op, opset_of

#: ops whose weight input runs in float on the provider: a float weight is what they read
WEIGHT_CONSUMERS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
#: weight plumbing between the DQ and its consumer (the constant-folding pass folds it next)
PLUMBING = frozenset({"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity"})
_F32 = np.dtype(np.float32)
#: integer code types numpy does not know (ml_dtypes), by name
_SMALL_INTS = frozenset({"int4", "uint4", "int2", "uint2"})


def _is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or dtype.name in _SMALL_INTS


def _feeds_weight_ops(value: ir.Value, depth: int = 3) -> bool:
    """Whether every reader of ``value`` is a weight consumer, possibly through plumbing."""
    uses = list(value.uses())
    if not uses or value.is_graph_output():
        return False
    for use in uses:
        node = use.node
        if node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type in WEIGHT_CONSUMERS:
            continue
        if node.op_type in PLUMBING and depth > 0 and len(node.outputs) == 1 and use.idx == 0:
            if _feeds_weight_ops(node.outputs[0], depth - 1):
                continue
        return False
    return True


def _expand(param: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray | None:
    """``param`` broadcastable against a tensor of ``shape`` (per-tensor, per-axis or blocked);
    None when it fits none of them (the kernel reports that at run time)."""
    rank = len(shape)
    if param.ndim == 0 or (param.size == 1 and block_size <= 0):
        return param.reshape(())
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    if block_size > 0:
        if param.ndim != rank or param.shape[axis] != -(-shape[axis] // block_size):
            return None
        return np.take(param, np.arange(shape[axis]) // block_size, axis=axis)
    if param.ndim == 1 and param.shape[0] == shape[axis]:
        return param.reshape([-1 if i == axis else 1 for i in range(rank)])
    return None


def dequantize(node: ir.Node, opset: int) -> np.ndarray | None:
    """The float32 value of a DequantizeLinear whose inputs are all constants, else None."""
    if len(node.inputs) < 2 or any(v is None for v in node.inputs[:2]):
        return None
    x, scale = constant(node.inputs[0]), constant(node.inputs[1])
    zp_value = node.inputs[2] if len(node.inputs) > 2 else None
    zp = None if zp_value is None else constant(zp_value)
    if x is None or scale is None or (zp_value is not None and zp is None):
        return None
    if scale.dtype != _F32 or int(attr(node, "output_dtype", 0) or 0) not in (0, ir.DataType.FLOAT):
        return None
    if not _is_integer(x.dtype):
        return None  # float8/float4 codes: not an integer weight
    diff = x.astype(np.int64)
    axis = int(attr(node, "axis", 1)) if opset >= 13 else 0
    block_size = int(attr(node, "block_size", 0) or 0)
    if opset < 13 and scale.size != 1:
        return None
    scale_full = _expand(scale, x.shape, axis, block_size)
    if scale_full is None:
        return None
    if zp is not None:
        zp_full = _expand(zp, x.shape, axis, block_size)
        if zp_full is None:
            return None
        diff = diff - zp_full.astype(np.int64)
    return np.asarray(diff.astype(_F32) * scale_full, dtype=_F32)


class DequantizeWeightsPass(RewritePass):
    """Replace a DequantizeLinear of constant integer weights read by MatMul/Gemm/Conv (possibly
    through Transpose/Reshape plumbing) by its float32 value."""

    needs = (frozenset({"DequantizeLinear"}),)

    max_sweeps = 1  # one DQ per weight: nothing new appears after a fold

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for node in graph_nodes(graph):
            if not is_op(node, "DequantizeLinear") or len(node.outputs) != 1:
                continue
            out = node.outputs[0]
            if not _feeds_weight_ops(out):
                continue
            value = dequantize(node, opset_of(model, node))
            if value is None:
                continue
            name = out.name or namer("dequantized")
            out.name = None
            folded = add_initializer(graph, None, name, value)
            ir.convenience.replace_all_uses_with(out, folded)
            graph.remove(node, safe=True)
            count += 1
        return count
