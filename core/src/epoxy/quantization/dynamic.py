"""Dynamic int8 quantization: int8 weights now, activations quantized at run time.

No calibration: each activation's range is measured on the fly, per run, so the scheme suits
models whose activation ranges vary with the input (transformers). Two output formats:

- ``"qoperator"``: what onnxruntime's ``quantize_dynamic`` writes and its CPU provider runs on
  integer kernels: ``DynamicQuantizeLinear`` (uint8, one per activation, shared by its
  consumers) -> ``MatMulInteger`` with the int8 weight -> ``Cast`` -> ``Mul`` by
  ``activation_scale * weight_scale`` (-> ``Add`` of a Gemm's bias).
- ``"qdq"``: int8 weights behind a per-channel ``DequantizeLinear``, activations float; OpenVINO
  turns ``DQ -> MatMul`` into int8-weight MatMuls that quantize activations dynamically.
  This is weight-only int8 (:mod:`epoxy.quantization.weight_only`).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from epoxy.quantization.matmul_weights import (
    DEFAULT_OP_TYPES,
    WeightQuantReport,
    WeightSite,
    drop_unused_initializers,
    find_sites,
    gemm_alpha_beta,
)
from epoxy.quantization.qdq import _load, _Names, _tensor_types, raise_opset
from epoxy.quantization.weight_only import check_input, check_output, quantize_weights_report
from epoxy.quantization.weights import quantize_weight

FORMATS = ("qoperator", "qdq")
_DQL_OPSET = 11  # DynamicQuantizeLinear
_WEIGHT_DTYPES = ("int8", "uint8")


class _QOperatorRewrite:
    """Replaces each site's MatMul/Gemm by the integer chain, in place, in graph order; a
    site inside an If branch or a Loop/Scan body gets its chain and its quantized weight in
    that subgraph (onnxruntime's QDQ fusions look a weight up in the node's own graph)."""

    def __init__(self, model: onnx.ModelProto, *, weight_dtype: str, per_channel: bool, reduce_range: bool) -> None:
        self.main = model.graph
        self.graph = model.graph  # the graph being rewritten
        self.names = _Names(model)
        self.weight_dtype, self.per_channel, self.reduce_range = weight_dtype, per_channel, reduce_range
        # (graph, float tensor) -> (q, scale, zero point): one DynamicQuantizeLinear per graph reading it
        self.activations: dict[tuple[int, str], tuple[str, str, str]] = {}
        # (graph, weight, transB) -> (q, zero point, scale)
        self.weights: dict[tuple[int, str, bool], tuple[str, str, np.ndarray]] = {}
        self.replaced: set[str] = set()
        self.out_nodes: list[onnx.NodeProto] = []

    def _const(self, base: str, value: np.ndarray) -> str:
        name = self.names(base)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def _node(self, op: str, inputs: list[str], out_base: str, **attrs: Any) -> str:
        out = self.names(out_base)
        self.out_nodes.append(helper.make_node(op, inputs, [out], name=self.names(f"{out}_node"), **attrs))
        return out

    def _activation(self, name: str) -> tuple[str, str, str]:
        key = (id(self.graph), name)
        if key not in self.activations:
            q, scale, zp = (self.names(f"{name}_quantized"), self.names(f"{name}_scale"),
                            self.names(f"{name}_zero_point"))
            self.out_nodes.append(helper.make_node("DynamicQuantizeLinear", [name], [q, scale, zp],
                                                   name=self.names(f"{name}_DynamicQuantizeLinear")))
            self.activations[key] = (q, scale, zp)
        return self.activations[key]

    def _weight(self, site: WeightSite) -> tuple[str, str, np.ndarray]:
        key = (id(self.graph), site.node.input[1], site.trans_b)
        if key not in self.weights:
            symmetric = self.weight_dtype == "int8"
            qt = quantize_weight(site.weight, dtype=self.weight_dtype, axis=1 if self.per_channel else None,  # type: ignore[arg-type]
                                 symmetric=symmetric, reduce_range=self.reduce_range)
            base = site.node.input[1]
            self.weights[key] = (self._const(f"{base}_quantized", qt.values),
                                 self._const(f"{base}_zero_point", qt.zero_point), qt.scale)
            self.replaced.add(base)
        return self.weights[key]

    def _site(self, site: WeightSite) -> None:
        node = site.node
        a_q, a_scale, a_zp = self._activation(node.input[0])
        w_q, w_zp, w_scale = self._weight(site)
        alpha, beta = gemm_alpha_beta(node)
        stem = node.name or node.output[0]
        acc = self._node("MatMulInteger", [a_q, w_q, a_zp, w_zp], f"{stem}_int32")
        acc_f = self._node("Cast", [acc], f"{stem}_float", to=TensorProto.FLOAT)
        w_scale_name = self._const(f"{stem}_weight_scale", (w_scale * np.float32(alpha)).astype(np.float32))
        scale = self._node("Mul", [a_scale, w_scale_name], f"{stem}_scale")
        has_bias = node.op_type == "Gemm" and len(node.input) > 2 and bool(node.input[2])
        if not has_bias:
            self.out_nodes.append(helper.make_node("Mul", [acc_f, scale], [node.output[0]],
                                                   name=self.names(f"{stem}_rescale")))
            return
        product = self._node("Mul", [acc_f, scale], f"{stem}_product")
        bias = node.input[2]
        if beta != 1.0:
            inits = {i.name: i for i in self.graph.initializer}
            if bias in inits and inits[bias].data_type == TensorProto.FLOAT:
                bias = self._const(f"{bias}_beta", (numpy_helper.to_array(inits[bias]) * np.float32(beta))
                                   .astype(np.float32))
                self.replaced.add(node.input[2])
            else:
                beta_name = self._const(f"{stem}_beta", np.asarray(beta, np.float32))
                bias = self._node("Mul", [bias, beta_name], f"{stem}_bias")
        self.out_nodes.append(helper.make_node("Add", [product, bias], [node.output[0]],
                                               name=self.names(f"{stem}_add_bias")))

    def run(self, sites: list[WeightSite]) -> list[str]:
        by_node = {id(s.node): s for s in sites}
        graphs = {id(s.graph or self.main): s.graph or self.main for s in sites}
        # subgraphs before the graphs holding them: rewriting a graph's node list copies its
        # nodes, and a subgraph must be final by then (sites come outer graph first)
        for graph in reversed(graphs.values()):
            self.graph, self.out_nodes = graph, []
            for node in graph.node:
                site = by_node.get(id(node))
                if site is None:
                    self.out_nodes.append(node)
                else:
                    self._site(site)
            del graph.node[:]
            graph.node.extend(self.out_nodes)
        drop_unused_initializers(self.main, self.replaced)
        return [s.label for s in sites]


def quantize_dynamic_report(model: onnx.ModelProto | str | Path | bytes, *,
                            op_types: Collection[str] = DEFAULT_OP_TYPES, weight_dtype: str = "int8",
                            per_channel: bool = True, format: str = "qoperator", reduce_range: bool = False,
                            nodes_to_include: Collection[str] | None = None, nodes_to_exclude: Collection[str] = (),
                            op_types_to_exclude: Collection[str] = ()) -> tuple[onnx.ModelProto, WeightQuantReport]:
    """:func:`quantize_dynamic`, also returning which nodes were quantized and why the
    others stayed float."""
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}")
    if weight_dtype not in _WEIGHT_DTYPES:
        raise ValueError(f"weight_dtype must be one of {_WEIGHT_DTYPES}, got {weight_dtype!r}")
    if format == "qdq":
        if reduce_range:
            raise ValueError("reduce_range is for the u8s8 integer kernels of format='qoperator'")
        proto, report = quantize_weights_report(
            model, dtype=weight_dtype, op_types=op_types, symmetric=weight_dtype == "int8", per_channel=per_channel,
            nodes_to_include=nodes_to_include, nodes_to_exclude=nodes_to_exclude,
            op_types_to_exclude=op_types_to_exclude)
        return proto, WeightQuantReport(f"dynamic {weight_dtype}, qdq (weights only)", report.quantized,
                                        report.kept_float, report.size_before, report.size_after)
    proto = _load(model)
    check_input(proto)
    size_before = proto.ByteSize()
    kwargs = dict(op_types=op_types, nodes_to_include=nodes_to_include, nodes_to_exclude=nodes_to_exclude,
                  op_types_to_exclude=op_types_to_exclude)
    sites, kept = find_sites(proto, _tensor_types(proto), **kwargs)  # type: ignore[arg-type]
    if sites:
        proto = raise_opset(proto, _DQL_OPSET, "DynamicQuantizeLinear")
        sites, _ = find_sites(proto, _tensor_types(proto), **kwargs)  # type: ignore[arg-type]
    quantized = _QOperatorRewrite(proto, weight_dtype=weight_dtype, per_channel=per_channel,
                                  reduce_range=reduce_range).run(sites)
    check_output(proto)
    scheme = f"dynamic u8{'s8' if weight_dtype == 'int8' else 'u8'}, qoperator, " + \
        ("per channel" if per_channel else "per tensor")
    return proto, WeightQuantReport(scheme, tuple(quantized), tuple(kept), size_before, proto.ByteSize())


def quantize_dynamic(model: onnx.ModelProto | str | Path | bytes, *, op_types: Collection[str] = DEFAULT_OP_TYPES,
                     weight_dtype: str = "int8", per_channel: bool = True, format: str = "qoperator",
                     reduce_range: bool = False, nodes_to_include: Collection[str] | None = None,
                     nodes_to_exclude: Collection[str] = (), op_types_to_exclude: Collection[str] = ()
                     ) -> onnx.ModelProto:
    """A dynamically quantized copy of ``model``: MatMul/Gemm constant weights become
    ``weight_dtype`` (int8 symmetric, or uint8 asymmetric), one scale per output channel when
    ``per_channel``; activations are quantized to uint8 at run time (``format="qoperator"``,
    integer kernels) or left float behind int8 weights (``format="qdq"``).

    ``reduce_range`` keeps 7-bit weights, for u8s8 kernels without VNNI whose int16 pair sums
    would saturate. Nodes whose weight is not a constant 2-D float32 initializer, or
    excluded, stay float (:func:`quantize_dynamic_report` says which and why); a node named
    in ``nodes_to_include`` that cannot be quantized raises :class:`QuantizationError`. The
    result passes ``onnx.checker`` (full check) or is not returned.
    """
    return quantize_dynamic_report(model, op_types=op_types, weight_dtype=weight_dtype, per_channel=per_channel,
                                   format=format, reduce_range=reduce_range, nodes_to_include=nodes_to_include,
                                   nodes_to_exclude=nodes_to_exclude, op_types_to_exclude=op_types_to_exclude)[0]
