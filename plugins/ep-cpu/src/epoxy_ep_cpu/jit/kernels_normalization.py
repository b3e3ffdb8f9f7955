"""Compiled LayerNormalization over a [rows, cols] view (one compiled kernel per dtype).

Everything is computed in float64 (rounded once, on store) in the numpy path's order: mean,
then the variance of ``x - mean``, then ``1 / sqrt(var + eps)``: at least as accurate as the
numpy path's float32 arithmetic, not bit-identical to it."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .threads import pick, serial_twin

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc"})
def layer_norm(x, scale, bias, has_bias, eps, y, mean, inv_std):  # pragma: no cover - compiled
    rows, cols = x.shape
    for r in prange(rows):
        s = 0.0
        for c in range(cols):
            s += x[r, c]
        m = s / cols
        v = 0.0
        for c in range(cols):
            d = x[r, c] - m
            v += d * d
        inv = 1.0 / np.sqrt(v / cols + eps)
        if has_bias:
            for c in range(cols):
                y[r, c] = (x[r, c] - m) * inv * scale[c] + bias[c]
        else:
            for c in range(cols):
                y[r, c] = (x[r, c] - m) * inv * scale[c]
        mean[r] = m
        inv_std[r] = inv


layer_norm_serial = serial_twin(layer_norm)


def run_layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, axis: int, eps: float,
                   nthreads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(y, mean, inv_std)`` (statistics with kept dims, in ``x``'s dtype), or ``None`` for a
    case the numpy path keeps: other dtypes, empty tensors, parameters that broadcast."""
    tail = x.shape[axis:]
    if (x.dtype not in _FLOATS or x.size == 0 or scale.dtype != x.dtype or scale.shape != tail
            or (bias is not None and (bias.dtype != x.dtype or bias.shape != tail))):
        return None
    rows = x.size // scale.size
    x2 = x.reshape(rows, scale.size)
    y = np.empty(x2.shape, x.dtype)
    stats = x.shape[:axis] + (1,) * len(tail)
    mean = np.empty(stats, x.dtype)
    inv = np.empty(stats, x.dtype)
    flat_scale = np.ascontiguousarray(scale).reshape(-1)
    flat_bias = flat_scale if bias is None else np.ascontiguousarray(bias).reshape(-1)
    kernel = pick(layer_norm, layer_norm_serial, nthreads, x.size)
    kernel(x2, flat_scale, flat_bias, bias is not None, eps, y, mean.reshape(-1), inv.reshape(-1))
    return y.reshape(x.shape), mean, inv
