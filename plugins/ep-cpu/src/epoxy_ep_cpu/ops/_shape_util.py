"""Helpers shared by the shape / indexing / cast / creation op families."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

#: ai.onnx ``since`` versions of the ops of this family (onnx 1.23, opset 28); a kernel is
#: registered for each so dispatch and the capability report name the exact versions served.
_VERSIONS: dict[str, tuple[int, ...]] = {
    "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),
    "Constant": (1, 9, 11, 12, 13, 19, 21, 23, 24, 25),
    "ConstantOfShape": (9, 20, 21, 23, 24, 25),
    "Shape": (1, 13, 15, 19, 21, 23, 24, 25),
    "Size": (1, 13, 19, 21, 23, 24, 25),
    "Reshape": (1, 5, 13, 14, 19, 21, 23, 24, 25),
    "Flatten": (1, 9, 11, 13, 21, 23, 24, 25),
    "Squeeze": (1, 11, 13, 21, 23, 24, 25),
    "Unsqueeze": (1, 11, 13, 21, 23, 24, 25),
    "Transpose": (1, 13, 21, 23, 24, 25),
    "Concat": (1, 4, 11, 13),
    "Split": (1, 2, 11, 13, 18),
    "Slice": (1, 10, 11, 13),
    "Gather": (1, 11, 13),
    "GatherElements": (11, 13),
    "GatherND": (11, 12, 13),
    "Scatter": (9, 11),
    "ScatterElements": (11, 13, 16, 18),
    "ScatterND": (11, 13, 16, 18),
    "Expand": (8, 13),
    "Tile": (1, 6, 13),
    "Pad": (1, 2, 11, 13, 18, 19, 21, 23, 24, 25),
    "Range": (11, 27),
    "OneHot": (9, 11, 28),
    "EyeLike": (9, 22),
    "Trilu": (14,),
    "Compress": (9, 11, 28),
    "NonZero": (9, 13),
    "Unique": (11, 28),
    "TopK": (1, 10, 11, 24),
    "DepthToSpace": (1, 11, 13, 28),
    "SpaceToDepth": (1, 13, 28),
    "CenterCropPad": (18,),
    "ReverseSequence": (10, 28),
    "CumSum": (11, 14),
    "CumProd": (26,),
    "Cast": (1, 6, 9, 13, 19, 21, 23, 24, 25, 28),
    "CastLike": (15, 19, 21, 23, 24, 25),
    "BitCast": (26,),
    "Dropout": (1, 6, 7, 10, 12, 13, 22),
}


def schema_versions(op: str) -> tuple[int, ...]:
    """Every ``since`` version of an ai.onnx op of this family."""
    return _VERSIONS[op]


def versions_between(op: str, lo: int, hi: int | None = None) -> tuple[int, ...]:
    """Versions of ``op`` in ``[lo, hi)``; always includes ``lo``."""
    vs = {v for v in _VERSIONS[op] if v >= lo and (hi is None or v < hi)}
    vs.add(lo)
    return tuple(sorted(vs))


def norm_axis(axis: int, rank: int) -> int:
    axis = int(axis)
    return axis + rank if axis < 0 else axis


def to_ints(value: Any) -> list[int]:
    """A 1-D (or scalar) integer tensor / sequence as a Python list of ints."""
    if value is None:
        return []
    if type(value) is np.ndarray and value.dtype.kind in "iu":  # the usual int64 shape tensor: one C call
        return value.reshape(-1).tolist()
    arr = np.asarray(value)
    return [int(v) for v in arr.reshape(-1)]


def const_ints(node: NodeSpec, index: int) -> tuple[int, ...] | None:
    """Input ``index`` as Python ints when it is an integer constant of the graph: known when
    the kernel is built, so its run does not convert the same small tensor every time."""
    if index >= len(node.inputs) or not node.inputs[index]:
        return None
    value = node.constants.get(node.inputs[index])
    if value is None or np.asarray(value).dtype.kind not in "iu":
        return None
    return tuple(to_ints(value))


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


def scalar_index(indices: Any, dim: int) -> int | None:
    """A 0-d integer index as a Python int counted from the start, or None when ``indices``
    is not a 0-d integer array; raises IndexError outside ``[-dim, dim)`` (Gather's check)."""
    if type(indices) is not np.ndarray or indices.ndim or indices.dtype.kind not in "iu":
        return None
    i = int(indices)
    if i < 0:
        i += dim
    if not 0 <= i < dim:
        raise IndexError(f"Gather: index out of range for dimension of size {dim}")
    return i


def normalize_indices(indices: np.ndarray, dim: int | np.ndarray) -> np.ndarray:
    """Negative indices count from the end (int64 result)."""
    idx = np.asarray(indices).astype(np.int64, copy=False)
    return np.where(idx < 0, idx + dim, idx)


def broadcast_copy(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    return np.array(np.broadcast_to(x, tuple(shape)))


def contig(x: np.ndarray) -> np.ndarray:
    """C-contiguous array keeping 0-d shapes (``np.ascontiguousarray`` makes them 1-d)."""
    return x if x.flags.c_contiguous else x.copy(order="C")
