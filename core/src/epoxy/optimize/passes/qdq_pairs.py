"""Fuse an activation's ``QuantizeLinear -> DequantizeLinear`` pair into one float32 node,
``com.epoxy.cpu::QuantizeDequantizeLinear(X, scale, zero_point)`` (attribute ``axis``).

Why: once ``DequantizeWeightsPass`` folded the weights, a static QDQ model on the cpu provider
runs its float kernels, and each activation pays a Q (float -> int8) and a DQ (int8 -> float)
that only model the rounding. The fused op computes ``dequantize(quantize(x))`` in one float32
temporary and never writes the integer codes; the cpu provider's kernel equals the pair bit for
bit (``epoxy_ep_cpu/ops/fake_quant.py`` says why).

Why provider-scoped (``builtin.py`` registers it for ``cpu`` only, like DequantizeWeightsPass, at
level ``extended``: a ``basic`` file written by ``epoxy compile`` keeps standard ops only):
a provider that runs QDQ in int8 (OpenVINO) needs the pair to see the pattern. The op's domain
is the cpu provider's; the core only names it (it imports no plugin).

What is fused: a Q with constant float32 scale and (optional) constant 8/16-bit zero point on a
float32 input, whose integer output is read only by DequantizeLinear nodes (one or more) with
equal constant scale, zero point and axis, each writing float32. A Q whose codes are also a
graph output or read by anything else stays, and so do blocked or float8 forms.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import (
    Namer,
    RewritePass,
    add_initializer,
    attr,
    constant,
    dtype_of,
    ensure_opset,
    is_op,
    make_node,
    opset_of,
    replace,
)

#: the cpu provider's custom domain, and the fused op it implements there
DOMAIN = "com.epoxy.cpu"
DOMAIN_VERSION = 1
OP_TYPE = "QuantizeDequantizeLinear"
#: integer codes the fused op takes (every code and code difference is exact in float32)
CODE_TYPES = frozenset({ir.DataType.INT8, ir.DataType.UINT8, ir.DataType.INT16, ir.DataType.UINT16})
_F32 = np.dtype(np.float32)
#: (scale, zero point, axis), the zero point always present
Params = tuple[np.ndarray, np.ndarray, int]


def _code_type(q: ir.Node) -> np.dtype | None:
    """The integer type ``q`` writes (its zero point's, else ``output_dtype``, else uint8) when
    the fused op takes it."""
    zp_value = q.inputs[2] if len(q.inputs) > 2 else None
    out = int(attr(q, "output_dtype", 0) or 0)
    if zp_value is not None:
        code = dtype_of(zp_value)
        if code is None or (out and out != code):
            return None  # a type conflict: the kernel reports it
    else:
        code = ir.DataType(out) if out else ir.DataType.UINT8
    return code.numpy() if code in CODE_TYPES else None


def _params(node: ir.Node, opset: int, rank: int | None, code: np.dtype) -> Params | None:
    """(scale, zero point, axis) of a per-tensor / per-axis Q or DQ with constant parameters;
    an absent zero point is zeros of ``code``. None when not foldable."""
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return None
    scale = constant(node.inputs[1])
    zp_value = node.inputs[2] if len(node.inputs) > 2 else None
    zp = np.zeros(scale.shape if scale is not None else (), dtype=code) if zp_value is None else constant(zp_value)
    if scale is None or zp is None or scale.dtype != _F32 or zp.dtype != code:
        return None
    if int(attr(node, "block_size", 0) or 0) != 0:
        return None
    if scale.size == 1:  # per-tensor: the axis means nothing
        return (scale.reshape(()), zp.reshape(()), 0) if zp.size == 1 else None
    axis = int(attr(node, "axis", 1))
    if opset < 13 or scale.ndim != 1 or rank is None or not -rank <= axis < rank or zp.shape != scale.shape:
        return None
    return scale, zp, axis % rank


def _same(a: Params, b: Params) -> bool:
    return a[2] == b[2] and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a[:2], b[:2]))


def _foldable_dqs(q: ir.Node, params: Params, opset: int, rank: int | None, code: np.dtype) -> list[ir.Node] | None:
    """The DQs reading ``q``'s codes when they are its only readers and all match ``params``."""
    codes = q.outputs[0]
    uses = list(codes.uses())
    if not uses or codes.is_graph_output():
        return None
    dqs: dict[int, ir.Node] = {}
    for use in uses:
        dq = use.node
        if not is_op(dq, "DequantizeLinear") or use.idx != 0 or len(dq.outputs) != 1:
            return None
        if int(attr(dq, "output_dtype", 0) or 0) not in (0, ir.DataType.FLOAT):
            return None
        theirs = _params(dq, opset, rank, code)
        if theirs is None or not _same(params, theirs):
            return None
        dqs[id(dq)] = dq
    found = list(dqs.values())
    if sum(dq.outputs[0].is_graph_output() for dq in found) > 1:
        return None  # one fused value cannot carry two output names
    return sorted(found, key=lambda dq: dq.outputs[0].is_graph_output())  # a graph output's name last: it stays


class QuantizeDequantizePairPass(RewritePass):
    """Replace an activation ``QuantizeLinear -> DequantizeLinear(s)`` pair with constant, equal
    parameters by one ``com.epoxy.cpu::QuantizeDequantizeLinear`` node."""

    needs = (frozenset({"QuantizeLinear"}), frozenset({"DequantizeLinear"}))

    max_sweeps = 1  # a fused node is never part of a new pair

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for q in list(graph):
            if not is_op(q, "QuantizeLinear") or len(q.outputs) != 1 or not q.inputs or q.inputs[0] is None:
                continue
            x = q.inputs[0]
            if constant(x) is not None:
                continue  # a constant's pair is the constant-folding pass's (a weight stays foldable)
            if dtype_of(x) != ir.DataType.FLOAT or int(attr(q, "precision", 0) or 0) not in (0, ir.DataType.FLOAT):
                continue
            opset = opset_of(model, q)
            rank = len(x.shape) if x.shape is not None else None
            code = _code_type(q)
            params = None if code is None else _params(q, opset, rank, code)
            if code is None or params is None:
                continue
            dqs = _foldable_dqs(q, params, opset, rank, code)
            if not dqs:
                continue
            _, zp, axis = params
            zp_value = q.inputs[2] if len(q.inputs) > 2 and q.inputs[2] is not None else \
                add_initializer(graph, namer, f"{q.name or 'qdq'}/zero_point", zp)
            fused = make_node(namer, OP_TYPE, [x, q.inputs[1], zp_value], {"axis": axis},
                              name=q.name or "qdq", domain=DOMAIN, version=DOMAIN_VERSION)
            fused.outputs[0].type = ir.TensorType(ir.DataType.FLOAT)
            fused.outputs[0].shape = x.shape
            replace(graph, [q, *dqs], [fused], [dq.outputs[0] for dq in dqs], [fused.outputs[0]] * len(dqs))
            count += 1
        if count:
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
        return count
