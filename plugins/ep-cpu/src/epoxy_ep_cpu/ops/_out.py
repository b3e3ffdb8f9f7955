"""``out=`` support for kernels (planned arena buffers, see ``epoxy.plan.arena``).

A wrapped kernel tries its in-place path only when the inputs match the planned buffer
exactly (dtype and result shape); otherwise it allocates as usual and returns a fresh
array, which is always allowed: the planned buffer is then simply not used this time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ._broadcast import broadcast_pair

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
        dtype = out.dtype
        if not (dtype in FAST_FLOATS and a.dtype == dtype and b.dtype == dtype):
            return None
        shape = out.shape
        if a.shape != shape or b.shape != shape:
            if broadcast_pair(a.shape, b.shape) != shape:  # None (incompatible): the plain kernel raises
                return None
        return ufunc(a, b, out)  # positional ``out``: cheaper than the keyword on tiny tensors

    return fast


def binary_ufunc_kernel(run: Callable[..., Any], ufunc: np.ufunc) -> Callable[..., Any]:
    """``accepts_out(run, binary_ufunc_into(ufunc))`` as one function: a float binary op on
    tiny tensors (a chain of Adds) pays one Python call per step, not three."""
    fast = binary_ufunc_into(ufunc)

    def call(a: Any, b: Any, out: np.ndarray | None = None) -> Any:
        if out is not None:
            dtype = out.dtype
            if (dtype in FAST_FLOATS and a.dtype == dtype and b.dtype == dtype
                    and a.shape == out.shape and b.shape == out.shape):
                return ufunc(a, b, out)
            result = fast(out, a, b)  # broadcasting, or not for this buffer
            if result is not None:
                return result
        return run(a, b)

    call.supports_out = True  # type: ignore[attr-defined]
    return call
