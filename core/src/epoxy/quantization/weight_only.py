"""Weight-only quantization: MatMul/Gemm weights as int8, uint8, int4 or uint4 behind a
standard ``DequantizeLinear``; activations stay float.

This is the form LLM-style models ship in: it shrinks the model 4x (int8) or ~8x (4-bit)
and any runtime runs it, as float after the DQ or fused into an integer-weight kernel
(OpenVINO, onnxruntime's DQ->MatMul fusions). Granularity: per tensor, per output channel
(axis N, opset 13), or in blocks of ``block_size`` along the reduction axis K (the ONNX
blocked mode of ``DequantizeLinear``, opset 21, which 4-bit types also need). Blocks along
K keep one outlier from spoiling a whole column: only its own block pays for it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import helper, numpy_helper

from epoxy.quantization.matmul_weights import (
    DEFAULT_OP_TYPES,
    WeightQuantReport,
    WeightSite,
    drop_unused_initializers,
    find_sites,
)
from epoxy.quantization.qdq import QuantizationError, _load, _Names, _tensor_types, raise_opset
from epoxy.quantization.weights import quantize_weight

#: storage type -> (numpy dtype, qmin, qmax); 4-bit ranges are the full types (onnx's int4 is [-8, 7])
WEIGHT_DTYPES: dict[str, tuple[np.dtype, int, int]] = {
    "int8": (np.dtype(np.int8), -128, 127),
    "uint8": (np.dtype(np.uint8), 0, 255),
    "int4": (np.dtype(ml_dtypes.int4), -8, 7),
    "uint4": (np.dtype(ml_dtypes.uint4), 0, 15),
}
_BLOCKED_OPSET = 21  # DequantizeLinear's block_size attribute and int4/uint4 inputs
_PER_CHANNEL_OPSET = 13
_PER_TENSOR_OPSET = 10
_MIN_BLOCK = 16


@dataclass(frozen=True)
class WeightSpec:
    """How to quantize every weight: type, symmetry, and granularity (``block_size`` wins
    over ``per_channel``)."""

    dtype: str = "int8"
    symmetric: bool = True
    per_channel: bool = True
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in WEIGHT_DTYPES:
            raise ValueError(f"dtype must be one of {sorted(WEIGHT_DTYPES)}, got {self.dtype!r}")
        bs = self.block_size
        if bs is not None and (isinstance(bs, bool) or not isinstance(bs, int) or bs < _MIN_BLOCK
                               or bs & (bs - 1)):
            raise ValueError(f"block_size must be None or a power of two >= {_MIN_BLOCK} (32, 64, 128...), "
                             f"got {bs!r}")

    @property
    def opset(self) -> int:
        """The lowest default-domain opset whose DequantizeLinear reads this form."""
        if self.block_size is not None or self.dtype in ("int4", "uint4"):
            return _BLOCKED_OPSET
        return _PER_CHANNEL_OPSET if self.per_channel else _PER_TENSOR_OPSET

    @property
    def why_opset(self) -> str:
        if self.block_size is not None:
            return f"blocked DequantizeLinear (block_size={self.block_size})"
        if self.dtype in ("int4", "uint4"):
            return f"{self.dtype} DequantizeLinear"
        return "per-channel DequantizeLinear" if self.per_channel else "DequantizeLinear"


def _rows_4bit(rows: np.ndarray, dtype: str, symmetric: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of ``rows`` [R, L] on its own 4-bit scale: (values [R, L], scale [R], zero point [R]).

    The same conventions as :func:`epoxy.quantization.quant_params` for 8 bits: the range
    includes 0, symmetric ranges drop the lone most negative code (int4 [-7, 7], zero
    point 0; uint4 [1, 15], zero point 8), and an all-zero row gets scale 1.
    """
    np_dtype, qmin, qmax = WEIGHT_DTYPES[dtype]
    lo = np.minimum(rows.min(axis=1, initial=0.0), 0.0).astype(np.float64)
    hi = np.maximum(rows.max(axis=1, initial=0.0), 0.0).astype(np.float64)
    if symmetric:
        m = np.maximum(-lo, hi)
        half = (qmax - qmin) // 2  # 7
        scale = m / half
        zero = np.full(rows.shape[0], (qmin + qmax + 1) // 2, np.float64)  # 0 for int4, 8 for uint4
        low, high = zero - half, zero + half
    else:
        scale = (hi - lo) / (qmax - qmin)
        zero = np.zeros(rows.shape[0])
        low, high = np.full(rows.shape[0], qmin, np.float64), np.full(rows.shape[0], qmax, np.float64)
    empty = scale < np.finfo(np.float32).tiny
    scale = np.where(empty, 1.0, scale).astype(np.float32)
    if not symmetric:
        zero = np.where(empty, 0.0, np.clip(np.rint(qmin - lo / scale), qmin, qmax))
    q = np.clip(np.rint(rows / scale[:, None]) + zero[:, None], low[:, None], high[:, None])
    return q.astype(np.int64).astype(np_dtype), scale, zero.astype(np.int64).astype(np_dtype)


def quantize_rows(rows: np.ndarray, spec: WeightSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row-wise quantization of ``rows`` [R, L] in ``spec.dtype``: 8-bit through
    :func:`quantize_weight`, 4-bit through :func:`_rows_4bit`."""
    if spec.dtype in ("int4", "uint4"):
        return _rows_4bit(rows, spec.dtype, spec.symmetric)
    qt = quantize_weight(rows, dtype=spec.dtype, axis=0, symmetric=spec.symmetric)  # type: ignore[arg-type]
    return qt.values, qt.scale, qt.zero_point


@dataclass(frozen=True)
class StoredWeight:
    """A weight in its stored layout with DequantizeLinear's inputs and attributes."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int | None
    block_size: int | None


def quantize_stored(site: WeightSite, spec: WeightSpec) -> StoredWeight:
    """``site``'s weight quantized in the layout the model stores it ([K, N], or [N, K] under
    Gemm's transB): per output channel along N, or blocks along K."""
    w = site.weight  # [K, N]
    k, n = w.shape
    if spec.block_size is not None:
        bs = spec.block_size
        if k % bs:
            raise QuantizationError(
                f"node {site.label!r} ({site.node.op_type}): its weight's K dimension {k} is not a multiple of "
                f"block_size {bs}; pick a block_size dividing {k} or exclude the node",
                node=site.label, op_type=site.node.op_type)
        rows = w.reshape(k // bs, bs, n).transpose(0, 2, 1).reshape(-1, bs)  # one row per (block, column)
        q, scale, zp = quantize_rows(rows, spec)
        values = q.reshape(k // bs, n, bs).transpose(0, 2, 1).reshape(k, n)
        scale, zp = scale.reshape(k // bs, n), zp.reshape(k // bs, n)
        if site.trans_b:
            return StoredWeight(values.T.copy(), scale.T.copy(), zp.T.copy(), 1, bs)
        return StoredWeight(values, scale, zp, 0, bs)
    if spec.per_channel:
        q, scale, zp = quantize_rows(w.T, spec)  # one row per output channel
        return (StoredWeight(q, scale, zp, 0, None) if site.trans_b
                else StoredWeight(q.T.copy(), scale, zp, 1, None))
    q, scale, zp = quantize_rows(w.reshape(1, -1), spec)
    values = q.reshape(k, n)
    return StoredWeight(values.T.copy() if site.trans_b else values, scale.reshape(()), zp.reshape(()), None, None)


def rewrite_weights(model: onnx.ModelProto, sites: list[WeightSite], spec: WeightSpec) -> list[str]:
    """Put each site's weight behind a DequantizeLinear, in place: per graph reading a
    weight (the model's, or an If branch / Loop or Scan body), one quantized copy and one
    DequantizeLinear however many of its nodes read it, both in that graph (onnxruntime's
    DequantizeLinear fusions look the weight up in the node's own graph). Returns the
    quantized node labels."""
    main = model.graph
    names = _Names(model)
    stored: dict[str, StoredWeight] = {}  # weight -> its quantized values (computed once)
    made: dict[tuple[int, str], str] = {}  # (graph, weight) -> dequantized name
    new_nodes: dict[int, dict[int, list[onnx.NodeProto]]] = {}  # graph -> node position -> DQ nodes
    graphs = {id(s.graph or main): s.graph or main for s in sites}
    positions = {id(n): i for g in graphs.values() for i, n in enumerate(g.node)}
    for site in sites:
        graph = site.graph or main
        weight = site.node.input[1]
        if weight not in stored:
            stored[weight] = quantize_stored(site, spec)
        key = (id(graph), weight)
        if key not in made:
            sw = stored[weight]
            q, scale, zp = names(f"{weight}_quantized"), names(f"{weight}_scale"), names(f"{weight}_zero_point")
            graph.initializer.extend([numpy_helper.from_array(sw.values, q),
                                      numpy_helper.from_array(sw.scale.astype(np.float32), scale),
                                      numpy_helper.from_array(sw.zero_point, zp)])
            out = names(f"{weight}_dequantized")
            dq = helper.make_node("DequantizeLinear", [q, scale, zp], [out], name=names(f"{out}_node"))
            if sw.axis is not None:
                dq.attribute.append(helper.make_attribute("axis", sw.axis))
            if sw.block_size is not None:
                dq.attribute.append(helper.make_attribute("block_size", sw.block_size))
            new_nodes.setdefault(id(graph), {}).setdefault(positions[id(site.node)], []).append(dq)
            made[key] = out
        site.node.input[1] = made[key]
    for graph in reversed(graphs.values()):  # subgraphs first: a graph's rewrite copies its nodes
        inserted = new_nodes.get(id(graph), {})
        ordered: list[onnx.NodeProto] = []
        for i, node in enumerate(graph.node):
            ordered.extend(inserted.get(i, []))
            ordered.append(node)
        del graph.node[:]
        graph.node.extend(ordered)
    drop_unused_initializers(main, set(stored))
    return [s.label for s in sites]


def check_output(model: onnx.ModelProto) -> None:
    """Raise :class:`QuantizationError` rather than hand back a model the onnx checker refuses."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:
        raise QuantizationError(f"the quantized model fails the onnx checker, not returned: {exc}") from exc


def check_input(model: onnx.ModelProto) -> None:
    """Refuse a model that fails the onnx checker before anything is changed."""
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise QuantizationError(f"the model itself fails the onnx checker; fix it first: {exc}") from exc


def quantize_weights_report(model: onnx.ModelProto | str | Path | bytes, *, dtype: str = "int8",
                            block_size: int | None = None, op_types: Collection[str] = DEFAULT_OP_TYPES,
                            symmetric: bool = True, per_channel: bool = True,
                            nodes_to_include: Collection[str] | None = None, nodes_to_exclude: Collection[str] = (),
                            op_types_to_exclude: Collection[str] = ()) -> tuple[onnx.ModelProto, WeightQuantReport]:
    """:func:`quantize_weights`, also returning which nodes were quantized and why the
    others stayed float."""
    spec = WeightSpec(dtype, symmetric, per_channel, block_size)
    proto = _load(model)
    check_input(proto)
    size_before = proto.ByteSize()
    sites, kept = find_sites(proto, _tensor_types(proto), op_types=op_types, nodes_to_include=nodes_to_include,
                             nodes_to_exclude=nodes_to_exclude, op_types_to_exclude=op_types_to_exclude)
    if sites:
        for site in sites:  # refuse before any change: a K that block_size does not divide
            if block_size is not None and site.weight.shape[0] % block_size:
                quantize_stored(site, spec)
        proto = raise_opset(proto, spec.opset, spec.why_opset)
        # raise_opset may return a converted copy: find the same nodes in it
        sites, _ = find_sites(proto, _tensor_types(proto), op_types=op_types, nodes_to_include=nodes_to_include,
                              nodes_to_exclude=nodes_to_exclude, op_types_to_exclude=op_types_to_exclude)
    quantized = rewrite_weights(proto, sites, spec)
    check_output(proto)
    scheme = f"weight-only {dtype}" + (f", blocks of {block_size} along K" if block_size else
                                      ", per channel" if per_channel else ", per tensor")
    return proto, WeightQuantReport(scheme, tuple(quantized), tuple(kept), size_before, proto.ByteSize())


def quantize_weights(model: onnx.ModelProto | str | Path | bytes, *, dtype: str = "int8",
                     block_size: int | None = None, op_types: Collection[str] = DEFAULT_OP_TYPES,
                     symmetric: bool = True, per_channel: bool = True,
                     nodes_to_include: Collection[str] | None = None, nodes_to_exclude: Collection[str] = (),
                     op_types_to_exclude: Collection[str] = ()) -> onnx.ModelProto:
    """A copy of ``model`` whose MatMul/Gemm constant weights are ``dtype`` (int8, uint8,
    int4, uint4) behind a ``DequantizeLinear``; activations stay float.

    ``block_size`` (a power of two >= 16, dividing each weight's K) quantizes blocks along
    K; otherwise one scale per output channel (``per_channel``) or per tensor. 4-bit types
    and blocks need opset 21 (raised, or refused with :class:`QuantizationError`). Nodes
    whose weight is not a constant 2-D float32 initializer stay float, unless named in
    ``nodes_to_include``, which then raises naming the node. The result passes
    ``onnx.checker`` (full check) or is not returned.
    """
    return quantize_weights_report(model, dtype=dtype, block_size=block_size, op_types=op_types,
                                   symmetric=symmetric, per_channel=per_channel, nodes_to_include=nodes_to_include,
                                   nodes_to_exclude=nodes_to_exclude, op_types_to_exclude=op_types_to_exclude)[0]
