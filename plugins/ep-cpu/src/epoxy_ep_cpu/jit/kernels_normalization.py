"""Compiled LayerNormalization over a [rows, cols] view (one compiled kernel per dtype), and
inference BatchNormalization's per-channel affine map.

LayerNormalization computes everything in float64 (rounded once, on store) in the numpy
path's order: mean, then the variance of ``x - mean``, then ``1 / sqrt(var + eps)``: at least
as accurate as the numpy path's float32 arithmetic, not bit-identical to it. BatchNormalization
rounds as the numpy path does (``x * a`` then ``+ shift``, no fused multiply-add): the same
values, in one pass instead of numpy's two broadcast passes (densenet's pre-activation
BatchNorms: 15 % of its run on the numpy path)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit, prange, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from .activations import activate
from .threads import Shares, pick, serial_twin, share_count

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


@njit(parallel=True, cache=True, nogil=True, fastmath={"reassoc"})
def rms_norm(x, scale, eps, y):  # pragma: no cover - compiled
    """``y = x / sqrt(mean(x^2) + eps) * scale`` per row; the mean of squares summed in
    float64 (as LayerNormalization's statistics here), the row scaled in ``x``'s dtype."""
    rows, cols = x.shape
    for r in prange(rows):
        s = 0.0
        for c in range(cols):
            v = np.float64(x[r, c])
            s += v * v
        inv = 1.0 / np.sqrt(s / cols + eps)
        for c in range(cols):
            y[r, c] = (x[r, c] * inv) * scale[c]


rms_norm_serial = serial_twin(rms_norm)


def handles(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, axis: int) -> bool:
    """Whether the compiled kernel runs this case: float32/float64, not empty, parameters of
    ``x``'s dtype and exactly the normalized shape (broadcasting ones take the numpy path)."""
    tail = x.shape[axis:]
    return not (x.dtype not in _FLOATS or x.size == 0 or scale.dtype != x.dtype or scale.shape != tail
                or (bias is not None and (bias.dtype != x.dtype or bias.shape != tail)))


def run_layer_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, axis: int, eps: float,
                   nthreads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """``(y, mean, inv_std)`` (statistics with kept dims, in ``x``'s dtype), or ``None`` for a
    case the numpy path keeps: other dtypes, empty tensors, parameters that broadcast."""
    if not handles(x, scale, bias, axis):
        return None
    rows = x.size // scale.size
    x2 = x.reshape(rows, scale.size)
    y = np.empty(x2.shape, x.dtype)
    stats = x.shape[:axis] + (1,) * (x.ndim - axis)
    mean = np.empty(stats, x.dtype)
    inv = np.empty(stats, x.dtype)
    flat_scale = np.ascontiguousarray(scale).reshape(-1)
    flat_bias = flat_scale if bias is None else np.ascontiguousarray(bias).reshape(-1)
    kernel = pick(layer_norm, layer_norm_serial, nthreads, x.size)
    kernel(x2, flat_scale, flat_bias, bias is not None, eps, y, mean.reshape(-1), inv.reshape(-1))
    return y.reshape(x.shape), mean, inv


class LayerNormCall:
    """:func:`run_layer_norm` for one input shape of one node whose scale and bias are
    constants, prepared: the flattened parameters, the row split, the kernel (serial or
    parallel) and its compiled overload are settled once, so a call is three allocations
    and the compiled call (the general function spends ~10 us of Python and numba's per-call
    typing of eight arguments around a transformer's 16-64 wide rows).

    Callers pass ``x`` C-contiguous of ``dtype`` and ``shape`` (:meth:`accepts`)."""

    __slots__ = ("_fn", "_kernel", "_params", "dtype", "rows_shape", "shape", "stats_shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, axis: int, scale: np.ndarray,
                 bias: np.ndarray | None, eps: float, nthreads: int) -> None:
        self.shape, self.dtype = shape, dtype
        cols = math.prod(shape[axis:])
        self.rows_shape = (math.prod(shape[:axis]), cols)
        self.stats_shape = shape[:axis] + (1,) * (len(shape) - axis)
        flat_scale = np.ascontiguousarray(scale, dtype=dtype).reshape(-1)
        flat_bias = flat_scale if bias is None else np.ascontiguousarray(bias, dtype=dtype).reshape(-1)
        self._params = (flat_scale, flat_bias, bias is not None, float(eps))
        self._kernel = pick(layer_norm, layer_norm_serial, nthreads, math.prod(shape))
        self._fn: Any = None

    def accepts(self, x: np.ndarray) -> bool:
        return x.dtype == self.dtype and x.flags.c_contiguous

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Y, mean and inverse standard deviation (the statistics in ``stats_shape``)."""
        rows = self.rows_shape[0]
        mean, inv = np.empty(rows, self.dtype), np.empty(rows, self.dtype)
        y = self._run(x, mean, inv)
        return y, mean.reshape(self.stats_shape), inv.reshape(self.stats_shape)

    def normalized(self, x: np.ndarray) -> np.ndarray:
        """Y alone (the node's one output: the statistics go to one scratch buffer)."""
        stats = np.empty(self.rows_shape[0], self.dtype)
        return self._run(x, stats, stats)

    def _run(self, x: np.ndarray, mean: np.ndarray, inv: np.ndarray) -> np.ndarray:
        y = np.empty(self.shape, self.dtype)
        args = (x.reshape(self.rows_shape), *self._params, y.reshape(self.rows_shape), mean, inv)
        fn = self._fn
        if fn is None:
            fn = self._fn = direct.overload(self._kernel, args)
        fn(*args)
        return y


@njit(cache=True, nogil=True, boundscheck=False)
def batch_norm_planes(x, a, shift, y, plane, channels, act, alpha, beta, first, last):  # pragma: no cover - compiled
    """``y = act(x * a[c] + shift[c])`` over the contiguous planes [first, last) of ``plane``
    elements (plane p is channel ``p % channels``; ``act`` as ``activations.ACT_*``): a share
    of ``threads.Split`` (densenet121's 62 BatchNorm+Relu passes, 3.3 ms of a 2-thread run,
    ran on one thread under numba's parallel grain), the whole pass on one thread. Unsigned
    indices: with signed ones the inner loop did not vectorize (1 thread, [992, 14, 14] 85 ->
    20 us, [224, 56, 56] 316 -> 189, a copy's time; bench/README.md, session 40)."""
    n = uint64(plane)
    for p in range(first, last):
        av = a[p % channels]
        sv = shift[p % channels]
        base = uint64(p) * n
        for q in range(n):
            v = x[base + q] * av + sv
            v = activate(v, act, alpha, beta)
            y[base + q] = v


class BatchNormKernel:
    """Inference BatchNormalization with its affine map computed once (constant parameters),
    and the activation a fusion gave it (``act``, ``alpha``, ``beta``: the codes of
    ``kernels_conv``): the compiled overloads (serial or parallel) are looked up once each."""

    __slots__ = ("_act", "_fns", "a", "channels", "nthreads", "shift")

    def __init__(self, a: np.ndarray, shift: np.ndarray, nthreads: int, act: int = 0, alpha: float = 0.0,
                 beta: float = 0.0) -> None:
        self.a, self.shift = np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(shift).reshape(-1)
        self.channels = self.a.shape[0]
        self.nthreads = nthreads
        self._act = (act, self.a.dtype.type(alpha), self.a.dtype.type(beta))
        self._fns: dict[Any, Any] = {}

    def handles(self, x: np.ndarray) -> bool:
        """float32/64 ``x`` of the parameters' dtype, (N, C, ...) with C channels, contiguous."""
        return (x.dtype == self.a.dtype and x.dtype in _FLOATS and x.ndim >= 2 and x.shape[1] == self.channels
                and x.flags.c_contiguous)

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        y = out if out is not None else np.empty(x.shape, x.dtype)
        planes = x.shape[0] * x.shape[1]
        plane = x.size // planes if planes else 0
        shares = self._fns.get((x.shape, x.dtype))
        if shares is None:
            if len(self._fns) >= 64:  # a model of many shapes: prepared shares are cheap to remake
                self._fns.clear()
            shares = self._fns[(x.shape, x.dtype)] = Shares(batch_norm_planes, planes,
                                                             share_count(self.nthreads, x.size, planes))
        shares(x.reshape(-1), self.a, self.shift, y.reshape(-1), plane, self.channels, *self._act)
        return y


class RMSNormCall:
    """RMSNormalization over the trailing axes from ``axis`` for one input shape of a node whose
    scale is a constant of the normalized shape, prepared like :class:`LayerNormCall`.

    Callers pass ``x`` C-contiguous of ``dtype`` and ``shape`` (:meth:`accepts`)."""

    __slots__ = ("_fn", "_kernel", "_params", "dtype", "rows_shape", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, axis: int, scale: np.ndarray, eps: float,
                 nthreads: int) -> None:
        self.shape, self.dtype = shape, dtype
        self.rows_shape = (math.prod(shape[:axis]), math.prod(shape[axis:]))
        self._params = (np.ascontiguousarray(scale, dtype=dtype).reshape(-1), float(eps))
        self._kernel = pick(rms_norm, rms_norm_serial, nthreads, math.prod(shape))
        self._fn: Any = None

    @staticmethod
    def handles(x: np.ndarray, scale: np.ndarray, axis: int) -> bool:
        """float32/float64, not empty, a scale of ``x``'s dtype and exactly the normalized shape."""
        return x.dtype in _FLOATS and x.size > 0 and scale.dtype == x.dtype and scale.shape == x.shape[axis:]

    def accepts(self, x: np.ndarray) -> bool:
        return x.dtype == self.dtype and x.flags.c_contiguous

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = np.empty(self.rows_shape, self.dtype)
        args = (x.reshape(self.rows_shape), *self._params, y)
        fn = self._fn
        if fn is None:
            fn = self._fn = direct.overload(self._kernel, args)
        fn(*args)
        return y.reshape(self.shape)
