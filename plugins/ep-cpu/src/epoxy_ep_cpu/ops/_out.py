"""``out=`` support for kernels (planned arena buffers, see ``epoxy.plan.arena``).

A wrapped kernel tries its in-place path only when the inputs match the planned buffer
exactly (dtype and result shape); otherwise it allocates as usual and returns a fresh
array, which is always allowed: the planned buffer is then simply not used this time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

FAST_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def accepts_out(run: Callable[..., Any], fast: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` plus an ``out=`` path: ``fast(out, *args)`` writes into ``out`` and returns
    it, or returns None when this call cannot use ``out``."""

    def call(*args: Any, out: np.ndarray | None = None) -> Any:
        if out is not None:
            result = fast(out, *args)
            if result is not None:
                return result
        return run(*args)

    call.supports_out = True  # type: ignore[attr-defined]
    return call


def binary_ufunc_into(ufunc: np.ufunc) -> Callable[..., Any]:
    """In-place path for a float binary ufunc with ONNX (numpy) broadcasting."""

    def fast(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        if not (a.dtype == b.dtype == out.dtype and out.dtype in FAST_FLOATS):
            return None
        same = a.shape == out.shape and b.shape == out.shape
        if not same:
            try:
                if np.broadcast_shapes(a.shape, b.shape) != out.shape:
                    return None
            except ValueError:  # incompatible: let the plain kernel raise its error
                return None
        return ufunc(a, b, out=out)

    return fast
