"""Run a QDQ model's one-input float ops on their 8-bit codes through a 256-entry table, and
join a Concat's inputs of different scales on codes.

``DQ(c) -> f -> Q`` with per-tensor parameters, for an elementwise ``f`` of one tensor
(Sigmoid, Tanh, LeakyRelu, HardSwish, Clip, Gelu, ... or an arithmetic op with a constant
one-element operand), becomes ``com.epoxy.cpu::QuantizedLookup(c, table)``; a Concat whose
inputs are DQ outputs with different parameters and whose output is read by one Q becomes a
Concat of codes, each input first mapped into the output's parameters by such a table (the
requantization ``Q(DQ(c))``).

Why: quantizers wrap these ops in DQ/Q (onnxruntime's ``quantize_static`` does for Sigmoid,
LeakyRelu, Clip, Concat...; epoxy's gives Concat its own scale), so run as written each one
costs a dequantize pass, the float op on 4-byte elements and a quantize pass. But an 8-bit
input has only 256 values: the op's whole result is known ahead, and one byte lookup per
element replaces the three passes (onnxruntime's QLinearSigmoid / QLinearLeakyRelu use the
same idea).

Why the values are the QDQ graph's bit for bit: the table is not computed here. The pass
writes it as a constant chain, ``Q(f(DQ(all 256 codes)))`` with the node's own op, attributes
and parameters, which the plan builder evaluates once with the provider's own kernels
(``plan_builder._fold``): the same DequantizeLinear, ``f`` and QuantizeLinear kernels that
would have run on the tensor, applied to every code it can hold. The codes are listed in
bit-pattern order (``0..255`` viewed as the codes' type), so the kernel indexes the table with
the code's byte.

Per channel: an arithmetic op whose constant operand holds one value per channel (shape
``(C, 1, 1)`` against ``(N, C, H, W)`` data), or a BatchNormalization in inference mode with
constant parameters (onnxruntime's ``quantize_static`` leaves a pre-activation DenseNet's BN,
Mul and Add per channel between Q/DQ pairs), becomes a lookup with one table per channel: the
chain runs on every code of every channel (the codes laid out as ``(1, C, 1, 1, 256)``, the
data's rank with the codes last), and the kernel reads entry ``[c, byte]``.

What is required: a DequantizeLinear output with a constant scalar float32 scale and an 8-bit
zero point as the op's data input, its other inputs constants or DequantizeLinear of constants
(a one-element one for the arithmetic ops, no wider than the data, or one per channel of data
whose channel count the shapes give); the op's output read only by a QuantizeLinear with
such parameters (no ``output_dtype``). A DQ whose codes are themselves constant is left to
constant folding. Level ``extended``, cpu only, like the other QDQ passes: a provider that runs
QDQ in int8 itself reads the pattern.
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
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    rank_of,
    replace,
)
from .qdq_match import CodeParams, code_params, constant_dq, dq_parts, drop_if_unread, sole_quantizer
from .qdq_pairs import DOMAIN, DOMAIN_VERSION  # the cpu provider's op domain, named once

OP_TYPE = "QuantizedLookup"

#: elementwise ops of one tensor input (index 0); any further inputs must be constants
UNARY_OPS = frozenset({
    "Abs", "Ceil", "Celu", "Clip", "Cos", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
    "LeakyRelu", "Log", "Mish", "Neg", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sin", "Softplus",
    "Softsign", "Sqrt", "Tanh", "ThresholdedRelu",
})
#: elementwise ops of two tensors: a table when one of them is a one-element constant
BINARY_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"})


class _AllCodes:
    """The 256 codes of a dtype in bit-pattern order (entry ``b`` is the code whose byte is
    ``b``), one initializer per graph and dtype however many tables read it."""

    def __init__(self, graph: ir.Graph, namer: Namer) -> None:
        self.graph, self.namer = graph, namer
        self.made: dict[np.dtype, ir.Value] = {}

        self.grids: dict[tuple[np.dtype, int, int], ir.Value] = {}

    def __call__(self, dtype: np.dtype) -> ir.Value:
        if dtype not in self.made:
            self.made[dtype] = add_initializer(self.graph, self.namer, "lookup/codes",
                                               np.arange(256, dtype=np.uint8).view(dtype))
        return self.made[dtype]

    def per_channel(self, dtype: np.dtype, channels: int, rank: int) -> ir.Value:
        """The 256 codes for each of ``channels`` channels, shaped ``(1, C, 1.., 256)`` with
        ``rank`` dims: data of that rank with the codes on its last axis."""
        key = (dtype, channels, rank)
        if key not in self.grids:
            grid = np.broadcast_to(np.arange(256, dtype=np.uint8).view(dtype), (channels, 256))
            shape = (1, channels) + (1,) * (rank - 3) + (256,)
            self.grids[key] = add_initializer(self.graph, self.namer, "lookup/channel_codes",
                                              np.ascontiguousarray(grid).reshape(shape))
        return self.grids[key]


def _table(all_codes: _AllCodes, name: str, dq: ir.Node, dtype: np.dtype,
           op: ir.Node | None, data_index: int, q: ir.Node,
           channels: tuple[int, int] | None = None) -> tuple[list[ir.Node], ir.Value]:
    """The constant chain ``Q(op(DQ(all codes)))`` (no op: ``Q(DQ(all codes))``) and its output:
    a copy of the pattern's own nodes on every code, for the plan builder to fold; with
    ``channels`` (C, the data's rank), on every code of every channel."""
    namer = all_codes.namer
    codes = all_codes(dtype) if channels is None else all_codes.per_channel(dtype, *channels)
    dq_all = make_node(namer, "DequantizeLinear", [codes, *dq.inputs[1:]], name=f"{name}/table_dq")
    copy_attributes(dq, dq_all)
    chain, last = [dq_all], dq_all.outputs[0]
    if op is not None:
        inputs = list(op.inputs)
        inputs[data_index] = last
        op_all = make_node(namer, op.op_type, inputs, name=f"{name}/table_op", version=op.version)
        copy_attributes(op, op_all)
        chain.append(op_all)
        last = op_all.outputs[0]
    q_all = make_node(namer, "QuantizeLinear", [last, *q.inputs[1:]], name=f"{name}/table")
    copy_attributes(q, q_all)
    chain.append(q_all)
    return chain, q_all.outputs[0]


def _lookup(namer: Namer, name: str, codes: ir.Value, table: ir.Value) -> ir.Node:
    return make_node(namer, OP_TYPE, [codes, table], name=name, domain=DOMAIN)


def _fixed(value: ir.Value | None) -> np.ndarray | None:
    """``value`` when no feed changes it: a constant, or a DequantizeLinear of constants
    (onnxruntime's tool quantizes a Mul's per-channel operand too); its codes, whose shape it
    has, for the latter."""
    found = constant(value)
    if found is not None:
        return found
    dq = constant_dq(value)
    return None if dq is None else dq.codes_value


def _channels(data: ir.Value | None, operand: np.ndarray) -> tuple[int, int] | None:
    """(C, rank) when ``operand`` holds one value per channel (axis 1) of ``data``: shaped
    ``(C, 1.., 1)`` or ``(1, C, 1.., 1)`` against data of known channels and rank >= 3."""
    rank = rank_of(data)
    if data is None or data.shape is None or rank is None or rank < 3 or operand.ndim > rank:
        return None
    c = data.shape[1]
    if not isinstance(c, int) or c < 2:
        return None
    padded = (1,) * (rank - operand.ndim) + tuple(operand.shape)
    return (c, rank) if padded == (1, c) + (1,) * (rank - 2) else None


def _data_input(node: ir.Node) -> tuple[int, tuple[int, int] | None] | None:
    """The index of the one tensor input of an elementwise op the table can stand for, and
    (C, rank) when it takes one table per channel."""
    if is_op(node, "BatchNormalization"):
        training = node.attributes.get("training_mode")
        if len(node.inputs) != 5 or len(node.outputs) != 1 or (training is not None and training.value):
            return None
        params = [_fixed(v) for v in node.inputs[1:]]
        rank = rank_of(node.inputs[0])
        data = node.inputs[0]
        if any(p is None for p in params) or rank is None or rank < 3 or data is None or data.shape is None:
            return None
        c = data.shape[1]
        if not isinstance(c, int) or c < 2 or not all(p is not None and p.shape == (c,) for p in params):
            return None
        return 0, (c, rank)
    if is_op(node, tuple(UNARY_OPS)):
        others = node.inputs[1:]
        return (0, None) if all(v is None or constant(v) is not None for v in others) else None
    if not is_op(node, tuple(BINARY_OPS)) or len(node.inputs) != 2:
        return None
    for index, other in ((0, node.inputs[1]), (1, node.inputs[0])):
        value = _fixed(other)
        if value is None:
            continue
        data_rank = rank_of(node.inputs[index])
        if value.size == 1:
            if value.ndim == 0 or (data_rank is not None and value.ndim <= data_rank):  # no broadcast growth
                return index, None
            continue
        channels = _channels(node.inputs[index], value)
        if channels is not None:
            return index, channels
    return None


def _codes_dtype(params: CodeParams) -> np.dtype:
    return np.dtype(params[2])


class QDQLookupPass(RewritePass):
    """``DQ(c) -> f -> Q`` for an elementwise ``f`` of one tensor -> ``QuantizedLookup(c, table)``."""

    needs = (frozenset({"DequantizeLinear"}), frozenset({"QuantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        all_codes = _AllCodes(graph, namer)
        for node in graph_nodes(graph):
            if node.graph is not graph or len(node.outputs) != 1:
                continue
            found_input = _data_input(node)
            if found_input is None:
                continue
            index, channels = found_input
            parts = dq_parts(node.inputs[index])
            params = code_params(parts[2], parts[3]) if parts is not None else None
            found = sole_quantizer(node)
            if parts is None or params is None or found is None or constant(parts[1]) is not None:
                continue
            dq, codes = parts[0], parts[1]
            q = found[0]
            name = node.name or node.op_type.lower()
            chain, table = _table(all_codes, name, dq, _codes_dtype(params), node, index, q, channels)
            lookup = _lookup(namer, name, codes, table)
            replace(graph, [node, q], [*chain, lookup], [q.outputs[0]], [lookup.outputs[0]])
            drop_if_unread(graph, dq)
            count += 1
        if count:
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
        return count


class QDQConcatRequantizePass(RewritePass):
    """``DQ(c1, p1), DQ(c2, p2), ... -> Concat -> Q(p)`` with some ``pi != p`` -> ``Concat`` of
    codes, each ``ci`` of other parameters first mapped by its table ``Q(DQ(., pi), p)``.

    Why exact: Concat moves values, so ``Q(concat(DQ(ci)))`` is ``concat(Q(DQ(ci)))`` element
    for element, and each ``Q(DQ(ci))`` is the input's lookup. Inputs with the output's own
    parameters are taken as they are (``QDQPassThroughPass`` takes the Concat when all are).
    """

    needs = (frozenset({"Concat"}), frozenset({"DequantizeLinear"}))

    max_sweeps = 1

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        all_codes = _AllCodes(graph, namer)
        for node in graph_nodes(graph):
            if node.graph is not graph or not is_op(node, "Concat") or len(node.outputs) != 1 or not node.inputs:
                continue
            found = sole_quantizer(node)
            if found is None:
                continue
            q, out_params = found
            sides = [dq_parts(v) for v in node.inputs]
            params = [code_params(p[2], p[3]) if p is not None else None for p in sides]
            if any(p is None for p in params) or all(p == out_params for p in params):
                continue
            name = node.name or "concat"
            new_nodes: list[ir.Node] = []
            codes: list[ir.Value | None] = []
            for i, (side, p) in enumerate(zip(sides, params)):
                assert side is not None and p is not None
                if p == out_params:
                    codes.append(side[1])
                    continue
                chain, table = _table(all_codes, f"{name}/in{i}", side[0], _codes_dtype(p), None, 0, q)
                lookup = _lookup(namer, f"{name}/in{i}", side[1], table)
                new_nodes += [*chain, lookup]
                codes.append(lookup.outputs[0])
            joined = make_node(namer, "Concat", codes, name=name)
            copy_attributes(node, joined)
            replace(graph, [node, q], [*new_nodes, joined], [q.outputs[0]], [joined.outputs[0]])
            for side in sides:
                drop_if_unread(graph, side[0] if side is not None else None)
            count += 1
        if count:
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
        return count
