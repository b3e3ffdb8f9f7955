"""Helpers shared by the shape / indexing / cast / creation op families."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec


def schema_versions(op: str, upto: int | None = None) -> tuple[int, ...]:
    """Every ``since`` version of an ai.onnx op known to the installed onnx (fallback: 1)."""
    try:
        from onnx import defs

        versions = sorted({s.since_version for s in defs.get_all_schemas_with_history() if s.domain == "" and s.name == op})
    except Exception:  # pragma: no cover - onnx always present in practice
        versions = []
    if upto is not None:
        versions = [v for v in versions if v <= upto]
    return tuple(versions) or (1,)


def versions_between(op: str, lo: int, hi: int | None = None) -> tuple[int, ...]:
    """Schema versions of ``op`` in ``[lo, hi)``; always includes ``lo``."""
    vs = [v for v in schema_versions(op) if v >= lo and (hi is None or v < hi)]
    if lo not in vs:
        vs.insert(0, lo)
    return tuple(sorted(set(vs)))


def norm_axis(axis: int, rank: int) -> int:
    axis = int(axis)
    return axis + rank if axis < 0 else axis


def to_ints(value: Any) -> list[int]:
    """A 1-D (or scalar) integer tensor / sequence as a Python list of ints."""
    if value is None:
        return []
    arr = np.asarray(value)
    return [int(v) for v in arr.reshape(-1)]


def to_int(value: Any) -> int:
    arr = np.asarray(value)
    return int(arr.reshape(-1)[0])


def out_dtype(node: NodeSpec, index: int = 0) -> np.dtype | None:
    if index < len(node.output_types):
        dt = node.output_types[index].dtype
        if dt is not None:
            return np.dtype(dt)
    return None


def has_output(node: NodeSpec, index: int) -> bool:
    return index < len(node.outputs) and node.outputs[index] != ""


def arr(x: Any) -> np.ndarray:
    """Make sure a kernel result is an ndarray (not a numpy scalar)."""
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def normalize_indices(indices: np.ndarray, dim: int | np.ndarray) -> np.ndarray:
    """Negative indices count from the end (int64 result)."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    return np.where(idx < 0, idx + dim, idx)


def broadcast_copy(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    return np.array(np.broadcast_to(x, tuple(shape)))


def contig(x: np.ndarray) -> np.ndarray:
    """C-contiguous array keeping 0-d shapes (``np.ascontiguousarray`` makes them 1-d)."""
    return x if x.flags.c_contiguous else x.copy(order="C")
