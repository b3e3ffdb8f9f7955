"""What ``epoxy quantize`` did and what it cost: sizes, accuracy, latency, int8 vs float nodes.

The report is plain data (``to_dict()`` is the ``--json`` output) with one text form
(``format()``). Accuracy is measured on held-out batches the calibration never saw, output by
output; latency is a rough in-process median, labelled as such, since ``bench/`` is where
speed is measured properly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import onnx

#: ops that compute on integers themselves (QOperator form and the integer helpers)
INTEGER_OPS = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul",
                         "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearGlobalAveragePool",
                         "QLinearAveragePool", "QLinearSigmoid", "QLinearLeakyRelu", "QGemm", "MatMulNBits",
                         "DynamicQuantizeLinear", "MatMulIntegerToFloat"})
#: ops that only move values between representations: counted apart from compute
_PLUMBING = frozenset({"QuantizeLinear", "DequantizeLinear", "Cast", "DynamicQuantizeLinear"})
_LOW_FLOAT = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}


@dataclass(frozen=True)
class OutputAccuracy:
    """One output of the quantized model against the float model, over the held-out batches."""

    output: str
    max_abs: float
    mean_abs: float
    rel_error: float  # ||y - y0|| / ||y0|| over every held-out value
    cosine: float
    top1_agreement: float | None = None  # only for [N, C] class scores


def accuracy(name: str, reference: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> OutputAccuracy:
    """Compare batch by batch, pooled: ``rel_error`` is the L2 norm of the difference over
    all values, so one large-output batch is not averaged away by small ones."""
    y0 = np.concatenate([np.asarray(r, np.float64).ravel() for r in reference])
    y = np.concatenate([np.asarray(g, np.float64).ravel() for g in got])
    diff = np.abs(y - y0)
    norm0, norm = float(np.linalg.norm(y0)), float(np.linalg.norm(y))
    rel = float(np.linalg.norm(y - y0) / norm0) if norm0 else float(np.linalg.norm(y))
    cosine = float(y @ y0 / (norm * norm0)) if norm and norm0 else float(norm == norm0)
    top1 = None
    if all(np.ndim(r) == 2 and np.shape(r)[1] > 1 for r in reference):
        agree = [np.argmax(np.asarray(r), 1) == np.argmax(np.asarray(g), 1) for r, g in zip(reference, got)]
        top1 = float(np.mean(np.concatenate(agree)))
    return OutputAccuracy(name, float(diff.max(initial=0.0)), float(diff.mean()) if diff.size else 0.0,
                          rel, cosine, top1)


@dataclass(frozen=True)
class NodeCounts:
    """Compute nodes of the written graph by how they compute; Q/DQ/Cast counted apart."""

    int8: tuple[str, ...]  # integer ops, or float ops whose inputs all come through DequantizeLinear
    int8_weights: tuple[str, ...]  # float compute on some dequantized inputs (weight-only schemes)
    low_float: tuple[str, ...]  # float16/bfloat16 compute
    float32: tuple[str, ...]
    plumbing: dict[str, int]

    def summary(self) -> dict[str, int]:
        return {"int8": len(self.int8), "int8 weights, float compute": len(self.int8_weights),
                "float16/bfloat16": len(self.low_float), "float32": len(self.float32),
                **{op: n for op, n in sorted(self.plumbing.items())}}


def count_nodes(model: onnx.ModelProto) -> NodeCounts:
    """Classify the compute nodes, those inside If branches and Loop/Scan bodies included
    (labelled ``Loop #3/body/MatMul #0``; the If/Loop/Scan node itself only holds them). A
    QDQ node counts as int8 when every non-empty float input comes from a DequantizeLinear
    (a runtime fuses it into an integer kernel). Value names are unique across a model's
    graphs, so one producer map serves every scope."""
    from epoxy.quantization.matmul_weights import graph_scopes

    scopes = graph_scopes(model)
    nodes = [(node, label) for scope in scopes for node, label in zip(scope.graph.node, scope.labels, strict=True)]
    producer = {o: n.op_type for n, _ in nodes for o in n.output}
    inits = {i.name: i.data_type for scope in scopes for i in scope.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        types = {vi.name: vi.type.tensor_type.elem_type
                 for scope in graph_scopes(inferred) for vi in scope.graph.value_info}
    except Exception:  # no types: the low-float count stays empty
        types = {}
    int8: list[str] = []
    weights: list[str] = []
    low: list[str] = []
    f32: list[str] = []
    plumbing: Counter[str] = Counter()
    for node, label in nodes:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue  # If / Loop / Scan: their bodies' nodes are counted
        if node.op_type in _PLUMBING or node.op_type == "Constant":
            plumbing[node.op_type] += 1
            continue
        inputs = [i for i in node.input if i]
        if node.op_type in INTEGER_OPS or (inputs and any(producer.get(i) == "DequantizeLinear" for i in inputs)
                                           and all(producer.get(i) == "DequantizeLinear" or i in inits
                                                   and inits[i] not in (1, 10, 16) for i in inputs)):
            int8.append(label)
        elif any(producer.get(i) == "DequantizeLinear" for i in inputs):
            weights.append(label)
        elif any(types.get(o) in _LOW_FLOAT or inits.get(o) in _LOW_FLOAT for o in (*node.output, *inputs)):
            low.append(label)
        else:
            f32.append(label)
    return NodeCounts(tuple(int8), tuple(weights), tuple(low), tuple(f32), dict(plumbing))


@dataclass(frozen=True)
class Latency:
    """Median milliseconds per run, fp32 and quantized, on the same providers and feed;
    ``runs`` is the minimum number of timed runs."""

    fp32_ms: float
    quantized_ms: float
    runs: int
    providers: tuple[str, ...]
    note: str = "rough: median of in-process runs (at least 5, up to 0.2 s); measure with bench/ or `epoxy bench`"

    @property
    def speedup(self) -> float:
        return self.fp32_ms / self.quantized_ms if self.quantized_ms else float("inf")


@dataclass(frozen=True)
class AutoTrial:
    """One candidate of ``--mode auto`` and what became of it."""

    scheme: str
    rel_error: float | None
    ms: float | None
    verdict: str  # "chosen", or why not


@dataclass
class QuantizationReport:
    """Everything the tool says after quantizing; ``to_dict()`` is the JSON form."""

    mode: str
    scheme: str  # the precision line ("activation uint8 / weight int8, ...: this CPU has ...")
    providers: tuple[str, ...]
    size_before: int
    size_after: int
    calibration_batches: int = 0
    held_out_batches: int = 0
    accuracy: list[OutputAccuracy] = field(default_factory=list)
    latency: Latency | None = None
    nodes: NodeCounts | None = None
    partition: dict[str, dict[str, int]] = field(default_factory=dict)  # provider set -> node count per provider
    checks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    auto: list[AutoTrial] = field(default_factory=list)

    @property
    def rel_error(self) -> float | None:
        """The worst relative error over the outputs (None without held-out data)."""
        return max((a.rel_error for a in self.accuracy), default=None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode, "scheme": self.scheme, "providers": list(self.providers),
            "size": {"before": self.size_before, "after": self.size_after,
                     "ratio": round(self.size_after / self.size_before, 4) if self.size_before else None},
            "calibration_batches": self.calibration_batches, "held_out_batches": self.held_out_batches,
            "accuracy": [asdict(a) for a in self.accuracy], "rel_error": self.rel_error,
            "latency": None, "nodes": None, "partition": self.partition, "checks": self.checks,
            "notes": self.notes, "warnings": self.warnings, "auto": [asdict(t) for t in self.auto],
        }
        if self.latency is not None:
            out["latency"] = {**asdict(self.latency), "speedup": round(self.latency.speedup, 3)}
        if self.nodes is not None:
            out["nodes"] = {"summary": self.nodes.summary(), "int8": list(self.nodes.int8),
                            "int8 weights, float compute": list(self.nodes.int8_weights),
                            "float16/bfloat16": list(self.nodes.low_float), "float32": list(self.nodes.float32)}
        return out

    def format(self) -> str:
        lines = [f"mode: {self.mode}", f"scheme: {self.scheme}",
                 f"size: {self.size_before:,} -> {self.size_after:,} bytes"
                 + (f" ({self.size_after / self.size_before:.0%})" if self.size_before else "")]
        if self.calibration_batches:
            lines.append(f"calibration: {self.calibration_batches} batches, {self.held_out_batches} held out")
        elif self.held_out_batches:
            lines.append(f"accuracy measured on {self.held_out_batches} batches (this mode needs no calibration)")
        for a in self.accuracy:
            top1 = f", top-1 agreement {a.top1_agreement:.1%}" if a.top1_agreement is not None else ""
            lines.append(f"accuracy {a.output}: rel error {a.rel_error:.2%}, cosine {a.cosine:.5f}, "
                         f"max abs {a.max_abs:.4g}, mean abs {a.mean_abs:.4g}{top1}")
        if self.latency is not None:
            lat = self.latency
            lines.append(f"latency on {','.join(lat.providers)}: fp32 {lat.fp32_ms:.3f} ms, quantized "
                         f"{lat.quantized_ms:.3f} ms ({lat.speedup:.2f}x) [{lat.note}]")
        if self.nodes is not None:
            s = self.nodes.summary()
            lines.append("nodes: " + ", ".join(f"{k} {v}" for k, v in s.items()))
            if self.nodes.float32:
                lines.append("  float32: " + ", ".join(self.nodes.float32))
        for providers, counts in self.partition.items():
            lines.append(f"partition ({providers}): " + ", ".join(f"{p} {n}" for p, n in counts.items()))
        if self.checks:
            lines.append("checks passed: " + ", ".join(self.checks))
        if self.auto:
            lines.append("auto: candidates tried")
            for t in self.auto:
                err = f"{t.rel_error:.2%}" if t.rel_error is not None else "-"
                ms = f"{t.ms:.3f} ms" if t.ms is not None else "-"
                lines.append(f"  {t.scheme:<22} rel error {err:>8}  {ms:>12}  {t.verdict}")
        lines += [f"note: {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)
