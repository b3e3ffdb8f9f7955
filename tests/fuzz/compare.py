"""Outputs of epoxy against onnxruntime on a case both ran: same count, kinds, dtypes, shapes,
values (allclose, NaN equal to NaN, infinities by sign; exact for integers, bools, strings).

A disagreement is a finding to look at, not a failure of the run: a mutated model may hold
what the spec leaves undefined (an index out of range, an overflow), and onnxruntime is not
the reference. Models with random ops are not compared.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
                        "Multinomial", "Dropout"})
#: (rtol, atol) by float width
TOLERANCE = {2: (1e-2, 1e-3), 4: (1e-3, 1e-5), 8: (1e-7, 1e-9)}


def comparable(model_bytes: bytes) -> bool:
    """Whether outputs are deterministic: the model parses and holds no random op."""
    try:
        model = onnx.load_from_string(model_bytes)
    except Exception:  # noqa: BLE001 - both ran what onnx cannot parse: compare anyway
        return True
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        for node in graph.node:
            if node.op_type in RANDOM_OPS:
                return False
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g)
                stack.extend(attr.graphs)
    return not any(n.op_type in RANDOM_OPS for f in model.functions for n in f.node)


def _bits_as(value: np.ndarray, other: np.ndarray) -> np.ndarray:
    """onnxruntime returns float8/4-bit outputs as their raw unsigned bits: read them as the
    ml_dtypes type the other side has."""
    exotic = other.dtype.type.__module__.startswith("ml_dtypes")
    if exotic and value.dtype.kind == "u" and value.dtype.itemsize == other.dtype.itemsize:
        return value.view(other.dtype)
    return value


def disagreement(ours: Any, theirs: Any, where: str = "output") -> str | None:
    """None when ``ours`` and ``theirs`` agree, else what differs first."""
    if isinstance(ours, list | tuple) or isinstance(theirs, list | tuple):
        if not isinstance(ours, list | tuple) or not isinstance(theirs, list | tuple):
            return f"{where}: {type(ours).__name__} vs {type(theirs).__name__}"
        if len(ours) != len(theirs):
            return f"{where}: {len(ours)} items vs {len(theirs)}"
        for i, (a, b) in enumerate(zip(ours, theirs)):
            found = disagreement(a, b, f"{where}[{i}]")
            if found:
                return found
        return None
    if ours is None or theirs is None:
        return None if ours is None and theirs is None else f"{where}: {type(ours).__name__} vs {type(theirs).__name__}"
    if isinstance(ours, dict) or isinstance(theirs, dict):
        return None if ours == theirs else f"{where}: maps differ"
    a, b = _bits_as(np.asarray(ours), np.asarray(theirs)), _bits_as(np.asarray(theirs), np.asarray(ours))
    if a.dtype != b.dtype and not (a.dtype.kind in "OUS" and b.dtype.kind in "OUS"):
        return f"{where}: dtype {a.dtype} vs {b.dtype}"
    if a.shape != b.shape:
        return f"{where}: shape {list(a.shape)} vs {list(b.shape)}"
    if a.dtype.kind in "OUS":
        return None if a.astype(str).tolist() == b.astype(str).tolist() else f"{where}: strings differ"
    if a.dtype.kind in "fc" or a.dtype.type.__module__ != "numpy":
        a64, b64 = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64), b.astype(
            np.complex128 if b.dtype.kind == "c" else np.float64)
        rtol, atol = TOLERANCE.get(a.dtype.itemsize, (1e-2, 1e-2))
        close = np.isclose(a64, b64, rtol=rtol, atol=atol, equal_nan=True)
        if close.all():
            return None
        i = int(np.flatnonzero(~close.reshape(-1))[0])
        return (f"{where}: {int((~close).sum())} of {close.size} values differ "
                f"(first: {a64.reshape(-1)[i]} vs {b64.reshape(-1)[i]})")
    if np.array_equal(a, b):
        return None
    differ = a != b
    i = int(np.flatnonzero(differ.reshape(-1))[0])
    first = f"{a.reshape(-1)[i]} vs {b.reshape(-1)[i]}"
    return f"{where}: {int(differ.sum())} of {differ.size} values differ (first: {first})"
