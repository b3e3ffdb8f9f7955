"""Static quantization to QDQ format: QuantizeLinear/DequantizeLinear around the float ops.

QDQ is the interchange form every runtime reads: the graph keeps its float ops, and each
quantized tensor passes through Q then DQ, so the model runs anywhere as float and a runtime
with integer kernels fuses ``DQ -> op`` into them. Activations get their scale and zero point
from calibration ranges (one Q/DQ pair per tensor, shared by every quantized consumer);
weights are stored as integer initializers behind a DequantizeLinear, per output channel
where asked; biases become int32 on the accumulator's scale. The result is checked and
never returned invalid.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from epoxy.errors import InvalidArgument
from epoxy.quantization.collect import collect
from epoxy.quantization.op_roles import OP_ROLES
from epoxy.quantization.params import QuantDtype, QuantParams, Range, quant_params
from epoxy.quantization.stats import CalibrationStats
from epoxy.quantization.weights import QuantizedTensor, quantize_bias, quantize_weight

#: the weighted layers alone: what any provider with integer convolutions and products runs
#: on codes (the default of providers not listed in TARGET_OP_TYPES)
DEFAULT_OP_TYPES = ("Conv", "MatMul", "Gemm")
#: the whole chain between convolutions: adds, products, concats, pools and activations too
CHAIN_OP_TYPES = tuple(OP_ROLES)
#: what OpenVINO's CPU plugin folds into int8 kernels: the whole chain
OPENVINO_OP_TYPES = CHAIN_OP_TYPES
#: first provider -> default op types. ep-cpu runs the whole chain on codes since session 22
#: (its QDQ passes: QuantizedAdd/Mul, lookups, code pools, concats; channels-last codes kept
#: between convolutions): its QDQ files of the bench CNNs ran faster than with the weighted
#: layers alone (1 thread: resnet50 1.57x, inception_v2 1.21x, squeezenet and inception_v1
#: 1.10x, densenet121 1.00x; shufflenet 0.93x, whose int8 is slower than its fp32 either way)
TARGET_OP_TYPES: dict[str, tuple[str, ...]] = {"openvino": CHAIN_OP_TYPES, "cpu": CHAIN_OP_TYPES}
FORMATS = ("qdq", "qoperator")


def default_op_types(providers: Iterable[Any]) -> tuple[str, ...]:
    """The op types the first of ``providers`` runs in int8 (see :data:`TARGET_OP_TYPES`)."""
    first = next(iter(providers), "cpu")
    if isinstance(first, tuple | list):  # (name, options)
        first = first[0]
    name = first if isinstance(first, str) else str(getattr(first, "name", first))
    return TARGET_OP_TYPES.get(name, DEFAULT_OP_TYPES)

_PER_TENSOR_OPSET = 10  # QuantizeLinear/DequantizeLinear exist from opset 10
_PER_CHANNEL_OPSET = 13  # DequantizeLinear's axis (per-channel scales) from opset 13
_DTYPES = ("int8", "uint8")


class QuantizationError(InvalidArgument, ValueError):
    """The model cannot be quantized as asked: ``node`` (its name, or ``op_type #index``
    when unnamed) and ``op_type`` say where, when one node is to blame."""

    def __init__(self, message: str, *, node: str | None = None, op_type: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.op_type = op_type


def _weight_axis(node: onnx.NodeProto, index: int, rank: int) -> int | None:
    """The output-channel axis of the weight at input ``index``, or None (per tensor)."""
    if index != 1 or rank < 2:
        return None
    if node.op_type == "Conv":
        return 0  # [M, C/group, kH, kW]
    if node.op_type == "ConvTranspose":
        return 1  # [C, M/group, kH, kW]
    if node.op_type == "MatMul":
        return rank - 1  # [..., K, N]
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1  # [N, K] or [K, N]
    return None


def _bias_index(node: onnx.NodeProto) -> int | None:
    return 2 if node.op_type in ("Conv", "ConvTranspose", "Gemm") else None


def _label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type} #{index}"


def _load(model: onnx.ModelProto | str | Path | bytes) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    if isinstance(model, onnx.ModelProto):
        copy.CopyFrom(model)
    elif isinstance(model, bytes):
        copy.ParseFromString(model)
    else:
        copy = onnx.load(str(model))
    return copy


def _default_opset(model: onnx.ModelProto) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    raise QuantizationError("the model imports no default-domain (ai.onnx) opset")


def _all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_nodes(sub)


def _changed_ops(model: onnx.ModelProto, old: int, new: int) -> list[str]:
    """Default-domain ops whose definition differs between opset ``old`` and ``new``."""
    changed: dict[str, None] = {}
    for node in _all_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            before = onnx.defs.get_schema(node.op_type, old, "").since_version
            after = onnx.defs.get_schema(node.op_type, new, "").since_version
        except onnx.defs.SchemaError:
            changed[f"{node.op_type} (no schema)"] = None
            continue
        if before != after:
            changed[f"{node.op_type} (opset {before} -> {after})"] = None
    return list(changed)


def raise_opset(model: onnx.ModelProto, target: int, why: str) -> onnx.ModelProto:
    """``model`` at default-domain opset >= ``target``: the import bumped when no op the
    model uses changed in between, else onnx's version converter, checked; refused with
    :class:`QuantizationError` (saying ``why`` the opset is needed) when neither works."""
    old = _default_opset(model)
    if old >= target:
        return model
    changed = _changed_ops(model, old, target)
    if not changed:
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                imp.version = target
        model.ir_version = max(model.ir_version, helper.find_min_ir_version_for(list(model.opset_import)))
        return model
    try:
        converted = onnx.version_converter.convert_version(model, target)
        onnx.checker.check_model(converted)
    except Exception as exc:  # the converter raises plain RuntimeError/ValidationError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise QuantizationError(
            f"{why} needs opset {target}, and this opset-{old} model cannot be raised safely: "
            f"{', '.join(changed)} changed in between and onnx's version converter failed ({first}). "
            f"Convert the model to opset {target} or later first") from exc
    return converted


def _tensor_types(model: onnx.ModelProto) -> dict[str, int]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an odd model: the declared types are all there is
        inferred = model
    g = inferred.graph
    return {vi.name: vi.type.tensor_type.elem_type for vi in (*g.input, *g.value_info, *g.output)
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}


class _Names:
    """Fresh tensor/node names that collide with nothing in the model, subgraphs included."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.used = {i.name for i in graph.initializer} | {i.name for i in graph.input}
        for node in _all_nodes(graph):
            self.used.update(node.input)
            self.used.update(node.output)
            self.used.add(node.name)

    def __call__(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


def _weight_plan(model: onnx.ModelProto, op_types: Collection[str], excluded: Collection[str],
                 per_channel: bool) -> bool:
    """Whether any weight will be quantized per channel (which needs opset 13)."""
    inits = {i.name: i for i in model.graph.initializer}
    for index, node in enumerate(model.graph.node):
        if node.op_type not in op_types or node.domain not in ("", "ai.onnx") or _label(node, index) in excluded:
            continue
        for i, name in enumerate(node.input):
            if name in inits and per_channel and _weight_axis(node, i, len(inits[name].dims)) is not None:
                return True
    return False


def _data_inputs(node: onnx.NodeProto) -> list[int]:
    data = OP_ROLES[node.op_type].data
    return [i for i in (range(len(node.input)) if data is None else data) if i < len(node.input) and node.input[i]]


@dataclass(frozen=True)
class Plan:
    """Which top-level nodes are quantized (by index), and the activations folded into their
    producer (no Q/DQ between producer and activation)."""

    quantized: frozenset[int]
    folded: frozenset[int]


def plan(graph: onnx.GraphProto, op_types: Collection[str], excluded: Collection[str]) -> Plan:
    """Nodes to quantize: every weighted op asked for, and each other op asked for that lies on
    an int8 chain, i.e. reads a quantized op's output and feeds a quantized op (so no Q/DQ pair
    is spent on a Concat or Add whose neighbours stay float). Nodes come in topological order,
    as the onnx checker requires."""
    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    readers: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.input:
            readers.setdefault(name, []).append(i)
    outputs = {o.name for o in graph.output}
    sub_reads = {name for n in nodes for a in n.attribute for g in ([a.g] if a.HasField("g") else []) + list(a.graphs)
                 for sub in _all_nodes(g) for name in sub.input}

    def candidate(i: int) -> bool:
        n = nodes[i]
        return (n.op_type in op_types and n.op_type in OP_ROLES and n.domain in ("", "ai.onnx")
                and _label(n, i) not in excluded)

    forward: set[int] = set()
    for i, n in enumerate(nodes):
        if not candidate(i):
            continue
        if OP_ROLES[n.op_type].role == "weighted" or any(producer.get(n.input[k]) in forward for k in _data_inputs(n)):
            forward.add(i)
    chosen: set[int] = set()
    for i in reversed(range(len(nodes))):
        if i in forward and (OP_ROLES[nodes[i].op_type].role == "weighted"
                             or any(r in chosen for r in readers.get(nodes[i].output[0], ()))):
            chosen.add(i)
    folded = set()
    for i in chosen:
        n = nodes[i]
        if OP_ROLES[n.op_type].role != "activation":
            continue
        src = n.input[0]
        p = producer.get(src)
        if (p in chosen and OP_ROLES[nodes[p].op_type].role in ("weighted", "own") and readers.get(src) == [i]
                and src not in outputs and src not in sub_reads):
            folded.add(i)
    return Plan(frozenset(chosen), frozenset(folded))


def quantize_static(model: onnx.ModelProto | str | Path | bytes, stats_or_feeds: CalibrationStats | Any, *,
                    method: str = "minmax", method_options: Mapping[str, Any] | None = None,
                    activation_dtype: QuantDtype = "uint8", weight_dtype: QuantDtype = "int8",
                    per_channel: bool = True, symmetric_weights: bool = True, reduce_range: bool = False,
                    op_types: Collection[str] | None = None, nodes_to_exclude: Collection[str] = (),
                    providers: Iterable[Any] = ("cpu",), format: str = "qdq",
                    quantize_outputs: bool = False) -> onnx.ModelProto:
    """A QDQ (or QOperator) copy of ``model`` with the nodes of ``op_types`` quantized.

    ``stats_or_feeds``: :class:`CalibrationStats` from :func:`collect` on this model, or
    calibration feeds (anything :func:`collect` takes, run on ``providers``). Activation
    ranges come from ``stats.ranges(method, **method_options)``; activations are asymmetric
    ``activation_dtype``; weights ``weight_dtype``, symmetric unless told, per output channel
    when ``per_channel`` (opset raised to 13 for it); ``reduce_range`` (7-bit weights) is for
    u8s8 kernels without VNNI. ``op_types`` defaults to what the first of ``providers`` runs in
    int8 (:func:`default_op_types`); ops other than Conv/MatMul/Gemm are quantized where they
    link quantized ops (see :func:`plan`). ``nodes_to_exclude`` (node names) stay float.
    ``quantize_outputs`` also puts Q/DQ on each quantized op's output read only by float ops
    or the graph (what QOperator needs); ``format="qoperator"`` writes QLinear* ops
    (:mod:`epoxy.quantization.qoperator`). Raises :class:`QuantizationError` naming the node
    rather than return a model that fails the onnx checker.
    """
    for what, dtype in (("activation_dtype", activation_dtype), ("weight_dtype", weight_dtype)):
        if dtype not in _DTYPES:
            raise ValueError(f"{what} must be 'int8' or 'uint8', got {dtype!r}")
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    chosen_ops = tuple(default_op_types(providers) if op_types is None else op_types)
    unsupported = sorted(set(chosen_ops) - set(OP_ROLES))
    if unsupported:
        raise ValueError(f"op_types has ops static quantization does not know: {', '.join(unsupported)}; "
                         f"known: {', '.join(OP_ROLES)}")
    proto = _load(model)
    try:
        onnx.checker.check_model(proto)
    except Exception as exc:
        raise QuantizationError(f"the model itself fails the onnx checker; fix it first: {exc}") from exc
    labels = [_label(n, i) for i, n in enumerate(proto.graph.node)]
    unknown = sorted(set(nodes_to_exclude) - set(labels))
    if unknown:
        raise ValueError(f"nodes_to_exclude names nodes the model does not have: {', '.join(unknown)}")
    if isinstance(stats_or_feeds, CalibrationStats):
        stats = stats_or_feeds
    else:
        stats = collect(proto, stats_or_feeds, providers=tuple(providers))
    options = dict(method_options or {})
    if method == "mse":
        options.setdefault("dtype", activation_dtype)
        options.setdefault("symmetric", False)
    ranges = stats.ranges(method, **options)

    if _weight_plan(proto, chosen_ops, nodes_to_exclude, per_channel):
        proto = raise_opset(proto, _PER_CHANNEL_OPSET, "per-channel DequantizeLinear (per_channel=True)")
    elif format == "qoperator":  # MaxPool and friends take 8-bit integers from opset 12
        proto = raise_opset(proto, _PER_CHANNEL_OPSET, "QOperator's integer pooling and reshaping")
    else:
        proto = raise_opset(proto, _PER_TENSOR_OPSET, "QuantizeLinear/DequantizeLinear")
    _Rewrite(proto, ranges, activation_dtype=activation_dtype, weight_dtype=weight_dtype,
             per_channel=per_channel, symmetric_weights=symmetric_weights, reduce_range=reduce_range,
             plan=plan(proto.graph, chosen_ops, nodes_to_exclude),
             quantize_outputs=quantize_outputs or format == "qoperator").run()
    if format == "qoperator":
        from epoxy.quantization.qoperator import to_qoperator

        proto = to_qoperator(proto)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:
        raise QuantizationError(f"the quantized model fails the onnx checker, not returned: {exc}") from exc
    return proto


class _Rewrite:
    """One pass over the top-level graph inserting Q/DQ pairs and integer weights in place."""

    def __init__(self, model: onnx.ModelProto, ranges: Mapping[str, Range], *, activation_dtype: QuantDtype,
                 weight_dtype: QuantDtype, per_channel: bool, symmetric_weights: bool, reduce_range: bool,
                 plan: Plan, quantize_outputs: bool) -> None:
        self.model, self.graph = model, model.graph
        self.ranges = ranges
        self.activation_dtype, self.weight_dtype = activation_dtype, weight_dtype
        self.per_channel, self.symmetric_weights, self.reduce_range = per_channel, symmetric_weights, reduce_range
        self.plan, self.quantize_outputs = plan, quantize_outputs
        # tensor -> the tensor whose scale and zero point it reuses (outputs of shared-scale ops)
        self.shared: dict[str, str] = {}
        self.names = _Names(model)
        self.types = _tensor_types(model)
        inputs = {i.name for i in self.graph.input}
        # an initializer that is also a graph input can be fed at run time: not a constant
        self.inits = {i.name: i for i in self.graph.initializer if i.name not in inputs}
        self.nodes: list[onnx.NodeProto] = []
        self.activations: dict[str, tuple[str, QuantParams]] = {}
        self.weights: dict[tuple[str, int | None], tuple[str, QuantizedTensor]] = {}
        self.biases: dict[tuple[str, str, str], str] = {}

    def run(self) -> None:
        nodes = list(self.graph.node)
        for index, node in enumerate(nodes):
            if index in self.plan.quantized:
                self._quantize_node(node, index)
            self.nodes.append(node)
            if index in self.plan.quantized and self.quantize_outputs and self._ends_chain(nodes, index):
                self._activation(node.output[0], node, index)
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        self._drop_unused_float_weights()

    def _is_float32(self, name: str) -> bool:
        if name in self.inits:
            return self.inits[name].data_type == TensorProto.FLOAT
        return self.types.get(name, TensorProto.FLOAT) == TensorProto.FLOAT

    def _ends_chain(self, nodes: list[onnx.NodeProto], index: int) -> bool:
        """Whether ``nodes[index]``'s output is where its own scale starts: not a shared-scale
        op's, and not an output a folded activation takes over."""
        node = nodes[index]
        role = OP_ROLES[node.op_type].role
        if role == "shared" or (role == "activation" and index not in self.plan.folded):
            return False
        out = node.output[0]
        return not any(j in self.plan.folded and nodes[j].input[0] == out for j in range(index + 1, len(nodes)))

    def _quantize_node(self, node: onnx.NodeProto, index: int) -> None:
        role = OP_ROLES[node.op_type].role
        if index in self.plan.folded:
            return  # its input stays float: the producer's output range is this node's
        bias_at = _bias_index(node)
        weight_scale: np.ndarray | None = None
        for i in _data_inputs(node):
            name = node.input[i]
            if i == bias_at or not self._is_float32(name):
                continue
            if name in self.inits and role == "weighted":
                dq, qt = self._weight(node, i, name)
                if i == 1:
                    weight_scale = qt.scale
            elif name in self.inits:
                dq = self._constant(name)
            else:
                dq = self._activation(name, node, index)
            node.input[i] = dq
        if role == "weighted" and bias_at is not None and len(node.input) > bias_at and weight_scale is not None:
            self._bias(node, bias_at, weight_scale)
        source = self._source(node.input[0])
        if source is not None and (role == "shared" or (node.op_type == "Concat" and self._inputs_agree(node))):
            self.shared[node.output[0]] = source

    def _source(self, dq_name: str) -> str | None:
        """The float activation whose DQ output ``dq_name`` is (None: not a quantized activation)."""
        return next((a for a, (dq, _) in self.activations.items() if dq == dq_name), None)

    def _inputs_agree(self, node: onnx.NodeProto) -> bool:
        by_dq = {dq: p for dq, p in self.activations.values()}
        params = [by_dq.get(name) for name in node.input]
        return all(p is not None and p == params[0] for p in params)

    def _constant(self, name: str) -> str:
        """A constant input of an op without weights (Add's bias, Mul's factor): per tensor in
        the activation type, so integer Add/Mul kernels see one type on both sides."""
        key = (name, None)
        if key not in self.weights:
            w = numpy_helper.to_array(self.inits[name])
            qt = quantize_weight(w, dtype=self.activation_dtype, axis=None, symmetric=False)
            q = self._initializer(f"{name}_quantized", qt.values)
            scale = self._initializer(f"{name}_scale", qt.scale)
            zero_point = self._initializer(f"{name}_zero_point", qt.zero_point)
            self.weights[key] = (self._dq(q, scale, zero_point, f"{name}_dequantized", None), qt)
        return self.weights[key][0]

    def _initializer(self, base: str, value: np.ndarray) -> str:
        name = self.names(base)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def _dq(self, q_name: str, scale: str, zero_point: str, out_base: str, axis: int | None) -> str:
        out = self.names(out_base)
        node = helper.make_node("DequantizeLinear", [q_name, scale, zero_point], [out], name=self.names(out + "_node"))
        if axis is not None:
            node.attribute.append(helper.make_attribute("axis", axis))
        self.nodes.append(node)
        return out

    def _activation(self, name: str, node: onnx.NodeProto, index: int) -> str:
        """The DQ output standing for activation ``name`` (made once, shared by all consumers);
        ``node`` is the quantized node asking, named when ``name`` has no calibration range."""
        if name not in self.activations:
            if name in self.shared:
                params = self.activations[self.shared[name]][1]
            elif name in self.ranges:
                rng = self.ranges[name]
                params = quant_params((rng.lo, rng.hi), dtype=self.activation_dtype, symmetric=False)
            else:
                label = _label(node, index)
                raise QuantizationError(
                    f"node {label!r} ({node.op_type}): no calibration range for tensor {name!r}; "
                    "collect the statistics on this same model", node=label, op_type=node.op_type)
            scale = self._initializer(f"{name}_scale", np.asarray(params.scale, np.float32))
            zero_point = self._initializer(f"{name}_zero_point", np.asarray(params.zero_point))
            q = self.names(f"{name}_quantized")
            self.nodes.append(helper.make_node("QuantizeLinear", [name, scale, zero_point], [q],
                                               name=self.names(q + "_node")))
            self.activations[name] = (self._dq(q, scale, zero_point, f"{name}_dequantized", None), params)
        return self.activations[name][0]

    def _weight(self, node: onnx.NodeProto, index: int, name: str) -> tuple[str, QuantizedTensor]:
        w = numpy_helper.to_array(self.inits[name])
        axis = _weight_axis(node, index, w.ndim) if self.per_channel else None
        key = (name, axis)
        if key not in self.weights:
            qt = quantize_weight(w, dtype=self.weight_dtype, axis=axis, symmetric=self.symmetric_weights,
                                 reduce_range=self.reduce_range)
            q = self._initializer(f"{name}_quantized", qt.values)
            scale = self._initializer(f"{name}_scale", qt.scale)
            zero_point = self._initializer(f"{name}_zero_point", qt.zero_point)
            self.weights[key] = (self._dq(q, scale, zero_point, f"{name}_dequantized", axis), qt)
        return self.weights[key]

    def _bias(self, node: onnx.NodeProto, index: int, weight_scale: np.ndarray) -> None:
        """int32 bias on scale input_scale * weight_scale; left float when it cannot be
        (input not quantized, a bias that is not one value per channel, int32 overflow)."""
        name = node.input[index]
        act = next((a for a, (dq, _) in self.activations.items() if dq == node.input[0]), None)
        if not name or name not in self.inits or act is None or not self._is_float32(name):
            return
        key = (name, act, node.input[1])
        if key not in self.biases:
            b = numpy_helper.to_array(self.inits[name])
            channels = weight_scale.shape[0] if weight_scale.ndim else None
            if b.ndim != 1 or (channels is not None and b.shape[0] != channels):
                return
            qt = quantize_bias(b, self.activations[act][1].scale, weight_scale)
            if qt is None:
                return
            q = self._initializer(f"{name}_quantized", qt.values)
            scale = self._initializer(f"{name}_scale", qt.scale)
            zero_point = self._initializer(f"{name}_zero_point", qt.zero_point)
            self.biases[key] = self._dq(q, scale, zero_point, f"{name}_dequantized", qt.axis)
        node.input[index] = self.biases[key]

    def _drop_unused_float_weights(self) -> None:
        """Remove float initializers no node, subgraph or graph output reads any more."""
        used = {o.name for o in self.graph.output}
        for node in _all_nodes(self.graph):
            used.update(node.input)
        quantized = {name for name, _ in self.weights} | {name for name, _, _ in self.biases}
        kept = [i for i in self.graph.initializer if i.name not in quantized or i.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(kept)
