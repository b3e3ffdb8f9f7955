"""Helpers for the reduction / loss / signal families: axis resolution and work dtypes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def is_low_float(dtype: np.dtype) -> bool:
    """float16 and the ml_dtypes floats (bfloat16, float8...): accumulate them in float32."""
    return dtype == np.float16 or (dtype.kind == "V" and dtype.itemsize <= 2)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or is_low_float(dtype)


def work_dtype(dtype: np.dtype) -> np.dtype:
    """dtype to compute in: float32 for narrow floats, the dtype itself otherwise."""
    return np.dtype(np.float32) if is_low_float(dtype) else dtype


def float_work_dtype(dtype: np.dtype) -> np.dtype:
    """dtype for transcendental math: float32 for narrow floats, float64 for non-floats."""
    if is_low_float(dtype):
        return np.dtype(np.float32)
    if dtype.kind == "f":
        return dtype
    return np.dtype(np.float64)


def resolve_axes(
    axes: Sequence[int] | np.ndarray | None, rank: int, noop_with_empty_axes: bool
) -> tuple[int, ...]:
    """The axes a Reduce* node reduces: all when absent/empty (unless noop), else normalized."""
    if axes is None or len(axes) == 0:
        return () if noop_with_empty_axes else tuple(range(rank))
    out = []
    for a in np.asarray(axes).reshape(-1).tolist():
        a = int(a)
        if a < -rank or a >= max(rank, 1):
            raise ValueError(f"axis {a} out of range for rank {rank}")
        out.append(a + rank if a < 0 else a)
    if rank == 0:
        return ()
    return tuple(sorted(set(out)))


def as_array(value, dtype: np.dtype) -> np.ndarray:
    """``value`` as an ndarray (never a numpy scalar) of exactly ``dtype``."""
    arr = np.asarray(value)
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr
