"""Checks a quantized model passes before ``epoxy quantize`` writes it.

Three gates, in order: ``onnx.checker`` with ``full_check`` (types and shapes), one run on
epoxy on the chosen providers, and one on onnxruntime when it is installed (the interchange
promise: every model the tool writes loads there). A failure raises
:class:`QuantizedModelCheckError` naming the gate and, where it can be found, the node.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from epoxy.quantization.qdq import QuantizationError

Feed = Mapping[str, np.ndarray]


class QuantizedModelCheckError(QuantizationError):
    """The quantized model failed a check (``gate``: ``onnx-checker``, ``epoxy`` or
    ``onnxruntime``); ``node`` names the node when the failure could be pinned on one."""

    def __init__(self, message: str, *, gate: str, node: str | None = None, op_type: str | None = None) -> None:
        super().__init__(message, node=node, op_type=op_type)
        self.gate = gate


def _labels(model: onnx.ModelProto) -> dict[str, str]:
    """Node label (name, or ``op_type #index``) -> op type."""
    return {n.name or f"{n.op_type} #{k}": n.op_type for k, n in enumerate(model.graph.node)}


def _node_in(message: str, model: onnx.ModelProto) -> str | None:
    """The node an error message names: a quoted or ``Name: X`` mention of a node name."""
    labels = _labels(model)
    for pattern in (r"[Nn]ode(?: name)?[:= ]\s*'?\"?([^'\"\s,)]+)", r"(?i)\bname:\s*'?([^'\s,)]+)"):
        for found in re.findall(pattern, message):
            if found in labels:
                return found
    # the longest node name that appears verbatim (longest first: "conv1" inside "conv10")
    for label in sorted((n for n in labels if len(n) > 2), key=len, reverse=True):
        if re.search(rf"(?<![\w.]){re.escape(label)}(?![\w.])", message):
            return label
    return None


def _fail(gate: str, model: onnx.ModelProto, exc: BaseException, node: str | None = None) -> QuantizedModelCheckError:
    node = node or _node_in(str(exc), model)
    op_type = _labels(model).get(node) if node else None
    first = " ".join(str(exc).split())[:400] or type(exc).__name__
    where = f" at node {node!r} ({op_type})" if node else ""
    return QuantizedModelCheckError(f"the quantized model fails the {gate} check{where}, so it was not written: "
                                    f"{first}", gate=gate, node=node, op_type=op_type)


def _prefix(model: onnx.ModelProto, k: int, known: Mapping[str, onnx.ValueInfoProto]) -> onnx.ModelProto:
    """The model cut after node ``k``, whose outputs become the graph's (typed where shape
    inference knew them, else left to the runtime)."""
    cut = onnx.ModelProto()
    cut.CopyFrom(model)
    kept = list(model.graph.node[:k + 1])
    del cut.graph.node[:]
    cut.graph.node.extend(kept)
    del cut.graph.output[:]
    cut.graph.output.extend(known[o] if o in known else onnx.helper.make_empty_tensor_value_info(o)
                            for o in kept[-1].output if o)
    return cut


def locate(model: onnx.ModelProto, fails: Callable[[onnx.ModelProto], bool]) -> str | None:
    """The first node whose prefix of the graph fails (``fails(prefix_model)``), by bisection
    over the top-level nodes in order; None when even the whole graph passes. For errors that
    name no node: a prefix failing means some node in it fails, so the first failing prefix
    ends at the culprit."""
    nodes = model.graph.node
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        known = {vi.name: vi for vi in (*inferred.value_info, *inferred.output) if vi.type.HasField("tensor_type")}
    except Exception:  # a model shape inference rejects: outputs untyped
        known = {}
    lo, hi = 0, len(nodes) - 1
    if hi < 0 or not fails(_prefix(model, hi, known)):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(_prefix(model, mid, known)):
            hi = mid
        else:
            lo = mid + 1
    node = nodes[lo]
    return node.name or f"{node.op_type} #{lo}"


def _raises(run: Callable[[onnx.ModelProto], object]) -> Callable[[onnx.ModelProto], bool]:
    def fails(model: onnx.ModelProto) -> bool:
        try:
            run(model)
        except Exception:
            return True
        return False
    return fails


def check_onnx(model: onnx.ModelProto) -> None:
    """``onnx.checker`` with ``full_check``: structure, types and inferred shapes."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # ValidationError, InferenceError
        raise _fail("onnx-checker", model, exc) from exc


def check_epoxy(model: onnx.ModelProto, feed: Feed, providers: Sequence[str]) -> list[np.ndarray]:
    """One session and one run on epoxy; a kernel error's own node is the one named."""
    from epoxy.session import InferenceSession

    def run(m: onnx.ModelProto) -> list[np.ndarray]:
        return [np.asarray(v) for v in InferenceSession(m, providers=list(providers)).run(None, dict(feed))]

    try:
        return run(model)
    except Exception as exc:
        node = getattr(exc, "node", None) or _node_in(str(exc), model) or locate(model, _raises(run))
        raise _fail("epoxy", model, exc, node) from exc


def check_onnxruntime(model: onnx.ModelProto, feed: Feed) -> str | None:
    """One session and one run on onnxruntime: None when onnxruntime is not installed, else
    what passed. A missing CPU kernel (NOT_IMPLEMENTED: bfloat16 Relu, say) is onnxruntime's
    gap in a model the checker and epoxy accepted, so it is reported, not refused."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    def run(m: onnx.ModelProto) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = 3  # its warnings about unused initializers of cut models are noise here
        session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, dict(feed))

    try:
        run(model)
    except Exception as exc:
        node = _node_in(str(exc), model)
        if "NOT_IMPLEMENTED" in str(exc):
            return f"onnxruntime: not run, its CPU provider has no kernel for node {node!r} (a gap, not an error)"
        raise _fail("onnxruntime", model, exc, node or locate(model, _raises(run))) from exc
    return "onnxruntime"


def check_all(model: onnx.ModelProto, feed: Feed, providers: Sequence[str]) -> list[str]:
    """Every gate; returns what each that ran said (all passed), raises at the first failure."""
    check_onnx(model)
    check_epoxy(model, feed, providers)
    passed = ["onnx-checker", f"epoxy ({','.join(providers)})"]
    ort_result = check_onnxruntime(model, feed)
    if ort_result is not None:
        passed.append(ort_result)
    return passed


def describe(exc: BaseException) -> dict[str, Any]:
    """The fields of a check failure for the JSON output."""
    return {"error": str(exc), "gate": getattr(exc, "gate", None), "node": getattr(exc, "node", None),
            "op_type": getattr(exc, "op_type", None)}
