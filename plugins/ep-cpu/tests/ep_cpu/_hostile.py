"""Shared by the hostile-model tests: one-node models with chosen input types (static,
symbolic or unknown rank, or constants), the three engines' outcomes, and the error a kernel
raised however the session reports it."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.errors import EpoxyError, InvalidGraphError, ResourceLimitError

#: keeps ResourceLimitError messages independent of the machine's free memory
LIMIT = 1 << 30


@dataclass(frozen=True)
class In:
    """A graph input fed ``value``; ``shape`` as declared (``None``: unknown rank, strings:
    symbolic dims, default: the value's shape), or an initializer when ``const``."""

    value: np.ndarray | None
    shape: Sequence[int | str] | None | str = "static"
    const: bool = False


@dataclass
class Case:
    """A one-node model and its feeds."""

    model: onnx.ModelProto
    feeds: dict[str, Any] = field(default_factory=dict)


def one_node(op: str, inputs: Sequence[In | np.ndarray | None], attrs: Mapping[str, Any] | None = None,
             opset: int = 21, n_out: int = 1, domain: str = "") -> Case:
    """Node ``n0`` reading ``x0, x1...`` (``""`` for None) and writing ``y0, y1...`` (untyped)."""
    names, infos, inits, feeds = [], [], [], {}
    for i, spec in enumerate(inputs):
        spec = spec if isinstance(spec, In) or spec is None else In(spec)
        if spec is None or spec.value is None:
            names.append("")
            continue
        name = f"x{i}"
        names.append(name)
        value = np.asarray(spec.value)
        if spec.const:
            inits.append(numpy_helper.from_array(value, name))
            continue
        shape = value.shape if spec.shape == "static" else spec.shape
        elem = helper.np_dtype_to_tensor_dtype(value.dtype) if value.dtype != object else onnx.TensorProto.STRING
        infos.append(helper.make_tensor_value_info(name, elem, shape))
        feeds[name] = value
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name="n0", domain=domain, **dict(attrs or {}))
    graph = helper.make_graph([node], "g", infos, [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
                              initializer=inits)
    opsets = [helper.make_opsetid("", opset)] if not domain else [helper.make_opsetid("", 21),
                                                                  helper.make_opsetid(domain, opset)]
    return Case(helper.make_model(graph, opset_imports=opsets), feeds)


def options(limit: int | None = LIMIT) -> epoxy.SessionOptions:
    so = epoxy.SessionOptions()
    so.memory_limit_bytes = limit
    return so


def run_epoxy(case: Case, limit: int | None = LIMIT) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # declared-vs-inferred type notes of the untyped outputs
        sess = epoxy.InferenceSession(case.model.SerializeToString(), options(limit), providers=["cpu"])
        return sess.run(None, case.feeds)


def run_reference(case: Case) -> list[np.ndarray]:
    return [np.asarray(v) for v in ReferenceEvaluator(case.model).run(None, case.feeds)]


def run_onnxruntime(case: Case) -> list[np.ndarray]:
    import onnxruntime

    sess = onnxruntime.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, case.feeds)


def outcome(run: Any, case: Case) -> list[np.ndarray] | str:
    """Outputs, or ``"error"`` when the engine refused the case (comparable either way)."""
    try:
        return [np.asarray(v) for v in run(case)]
    except Exception:  # noqa: BLE001 - an engine refusing the case is an outcome to compare
        return "error"


def same(a: list[np.ndarray] | str, b: list[np.ndarray] | str, rtol: float = 1e-5, atol: float = 1e-6) -> bool:
    """Equal outcomes: both errors, or the same shapes and values (NaN equal to NaN)."""
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "fc" or y.dtype.kind in "fc":
            if not np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


@dataclass(frozen=True)
class Refusal:
    """What a kernel raised for a hostile case, and whether at session creation."""

    error: EpoxyError
    at_creation: bool


def refusal(case: Case, limit: int | None = LIMIT) -> Refusal:
    """The InvalidGraphError / ResourceLimitError a kernel raised for ``case``. A kernel
    factory's error raised while the partitioner asks for capability reaches the user as
    the cause of a ProviderError (an EpoxyError either way); this walks to the kernel's."""
    at_creation = True
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sess = epoxy.InferenceSession(case.model.SerializeToString(), options(limit), providers=["cpu"])
            at_creation = False
            sess.run(None, case.feeds)
    except EpoxyError as exc:
        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, (InvalidGraphError, ResourceLimitError)):
                return Refusal(seen, at_creation)
            seen = seen.__cause__
        raise AssertionError(f"expected a refusal, got {type(exc).__name__}: {exc}") from exc
    raise AssertionError("the case ran: expected a refusal")
