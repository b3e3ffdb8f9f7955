"""What the QDQ-onto-codes passes (``qdq_qlinear``, ``qdq_matmul``, ``qdq_conv_integer``) recognize: a
DequantizeLinear's parts, constant per-tensor activation parameters, and constant 8-bit
weights quantized per tensor or per output channel. One place, so both passes accept the
same forms."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ...kit.passes import attr, constant, dtype_of, graph_nodes, is_op, opset_of, sole_consumer

F32 = np.dtype(np.float32)
#: the 8-bit code types the integer kernels take
CODES = (np.dtype(np.uint8), np.dtype(np.int8))
_CODE_TYPES = (ir.DataType.UINT8, ir.DataType.INT8)


def dq_parts(value: ir.Value | None) -> tuple[ir.Node, ir.Value, ir.Value, ir.Value | None] | None:
    """(node, codes, scale, zero point or None) of the DequantizeLinear producing ``value``
    (float32 output, not blocked)."""
    node = value.producer() if value is not None else None
    if node is None or not is_op(node, "DequantizeLinear") or len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    if int(attr(node, "block_size", 0) or 0) or int(attr(node, "output_dtype", 0) or 0) not in (0, ir.DataType.FLOAT):
        return None
    zp = node.inputs[2] if len(node.inputs) > 2 else None
    return node, node.inputs[0], node.inputs[1], zp  # type: ignore[return-value]


def scalar_params(scale: ir.Value, zp: ir.Value | None) -> tuple[np.ndarray, np.ndarray | None] | None:
    """A constant finite positive float32 scalar scale and a constant 8-bit scalar zero point
    (or none)."""
    s = constant(scale)
    z = constant(zp) if zp is not None else None
    if s is None or s.size != 1 or s.dtype != F32 or not np.isfinite(s).all() or float(s.reshape(())) <= 0:
        return None
    if zp is not None and (z is None or z.size != 1 or z.dtype not in CODES):
        return None
    return s, z


CodeParams = tuple[float, int, np.dtype]


def code_params(scale: ir.Value, zp: ir.Value | None) -> CodeParams | None:
    """(scale, zero point, codes dtype) of constant scalar parameters with an 8-bit zero point."""
    found = scalar_params(scale, zp)
    z = found[1] if found is not None else None
    if found is None or z is None:
        return None
    return float(found[0].reshape(())), int(z.reshape(())), z.dtype


def sole_quantizer(node: ir.Node) -> tuple[ir.Node, CodeParams] | None:
    """The QuantizeLinear that alone reads ``node``'s output, with its parameters."""
    q = sole_consumer(node.outputs[0])
    if not is_op(q, "QuantizeLinear") or len(q.inputs) < 3 or q.inputs[2] is None or attr(q, "output_dtype", 0):
        return None
    params = code_params(q.inputs[1], q.inputs[2])  # type: ignore[arg-type]
    return (q, params) if params is not None else None


@dataclass(frozen=True)
class ConstantDQ:
    """A DequantizeLinear of constants: its node and inputs, and their values (the passes check
    or combine them)."""

    node: ir.Node
    codes: ir.Value
    scale: ir.Value
    zero_point: ir.Value | None
    codes_value: np.ndarray
    scale_value: np.ndarray
    zero_point_value: np.ndarray | None


def constant_dq(value: ir.Value | None) -> ConstantDQ | None:
    """The DequantizeLinear producing ``value`` when its codes, scale and zero point (if any)
    are constants."""
    parts = dq_parts(value)
    if parts is None:
        return None
    node, codes, scale, zp = parts
    w, s = constant(codes), constant(scale)
    z = constant(zp) if zp is not None else None
    if w is None or s is None or (zp is not None and z is None):
        return None
    return ConstantDQ(node, codes, scale, zp, w, s, z)


def channel_weights(value: ir.Value | None, model: ir.Model, channel_axis: int,
                    ranks: tuple[int, ...]) -> ConstantDQ | None:
    """The DequantizeLinear producing ``value`` when it reads constant 8-bit codes of one of
    ``ranks`` with a finite positive float32 scale per tensor or per ``channel_axis`` (the
    output channels), and a zero point of the codes' type shaped like the scale (or none)."""
    found = constant_dq(value)
    if found is None:
        return None
    w, s, z = found.codes_value, found.scale_value, found.zero_point_value
    if w.dtype not in CODES or w.ndim not in ranks or s.dtype != F32:
        return None
    if z is not None and (z.dtype != w.dtype or z.shape != s.shape):
        return None
    if s.size != 1:
        axis = int(attr(found.node, "axis", 1)) if opset_of(model, found.node) >= 13 else None
        if axis is None or axis % w.ndim != channel_axis % w.ndim or s.shape != (w.shape[channel_axis],):
            return None
    if not np.isfinite(s).all() or (s <= 0).any():
        return None
    return found


def drop_if_unread(graph: ir.Graph, node: ir.Node | None) -> None:
    """Remove ``node`` (a DQ the rewritten layer read) when nothing else reads its output."""
    if node is not None and node.graph is graph and not any(o.uses() or o.is_graph_output() for o in node.outputs):
        graph.remove(node, safe=True)


def activation_codes(value: ir.Value | None) -> tuple[ir.Node, ir.Value, ir.Value, ir.Value | None] | None:
    """A layer input's DQ parts when its codes are 8-bit (their inferred type, else their
    zero point's) and its parameters per tensor."""
    parts = dq_parts(value)
    if parts is None or scalar_params(parts[2], parts[3]) is None:
        return None
    code_type, zp_type = dtype_of(parts[1]), dtype_of(parts[3])
    if (code_type or zp_type) not in _CODE_TYPES or (code_type and zp_type and code_type != zp_type):
        return None
    return parts


def float_bias(layer: ir.Node, width: int) -> tuple[ir.Value | np.ndarray | None, ir.Node | None] | None:
    """A Gemm's or Conv's third input as (the float32 (width,) bias as a value or a dequantized
    array, its DQ or None); (None, None) without a bias; None for a bias a float tail cannot add
    as it is."""
    value = layer.inputs[2] if len(layer.inputs) > 2 else None
    if value is None:
        return None, None
    plain = constant(value)
    if plain is not None:
        return (value, None) if plain.dtype == F32 and plain.shape == (width,) else None
    found = constant_dq(value)
    if found is None:
        return None
    b, s = found.codes_value, found.scale_value
    z = found.zero_point_value if found.zero_point_value is not None else np.zeros((), np.int32)
    if b.dtype != np.int32 or b.shape != (width,) or s.dtype != F32 or s.size not in (1, width):
        return None
    if z.size not in (1, width):
        return None
    dequantized = ((b.astype(np.int64) - z.reshape(-1).astype(np.int64)).astype(F32) * s.reshape(-1)).astype(F32)
    return dequantized, found.node


def layer_nodes(model: ir.Model, graph: ir.Graph, op_types: str | tuple[str, ...], since: int) -> Iterator[ir.Node]:
    """The QDQ passes' candidates: ``graph``'s own nodes of ``op_types`` with two or more inputs
    and one output, at an opset from ``since`` (where the integer op they become exists)."""
    for node in graph_nodes(graph):
        if node.graph is not graph or not is_op(node, op_types) or len(node.inputs) < 2 or len(node.outputs) != 1:
            continue
        if opset_of(model, node) >= since:
            yield node
