"""Compiled Softmax/LogSoftmax over a [outer, n, inner] view, reducing the middle axis.

The row maximum is subtracted as it is, NaN included (a row holding NaN or +inf, or only
-inf, comes out all NaN), exactly as the numpy path and the ONNX reference do.

float32 softmax over the last axis (every attention's) has its own kernel,
:func:`softmax_rows_f32`, on the vectorizable exp of ``fast_math``: exp(x - max) written in
one pass, summed in float64, scaled in another; ~2.5 ns an element where numpy's passes take
~4-6 and the scalar-exp kernel ~8, so it takes every size."""

from __future__ import annotations

import numpy as np
from numba import njit, prange, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from .fast_math import exp as fast_exp
from .threads import Split, pick, serial_twin, share_count, thread_count_for

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: the most elements the compiled kernel takes: without SVML numba calls a scalar exp per
#: element, slower than numpy's vectorized exp, so it wins only where numpy's per-call
#: overhead (several temporaries) dominates; timing the two with timeit at 1 thread put the
#: crossover between 1024 and 4096 elements
SMALL = 2048


@njit(parallel=True, cache=True, nogil=True)
def softmax(x, log, y):  # pragma: no cover - compiled
    outer, n, inner = x.shape
    for p in prange(outer * inner):
        o = p // inner
        i = p - o * inner
        m = x[o, 0, i]
        for k in range(1, n):
            if m != m:
                break
            v = x[o, k, i]
            if v != v or v > m:
                m = v
        s = 0.0
        for k in range(n):
            e = np.exp(x[o, k, i] - m)
            s += e
            if not log:
                y[o, k, i] = e
        if log:
            ls = np.log(s)
            for k in range(n):
                y[o, k, i] = (x[o, k, i] - m) - ls
        else:
            for k in range(n):
                y[o, k, i] = y[o, k, i] / s


softmax_serial = serial_twin(softmax)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _row_max(x, b, n):  # pragma: no cover - compiled
    """The largest of ``x[b:b+n]`` (NaN aside: a NaN makes its row's sum NaN, and the row
    all NaN, in :func:`softmax_rows_f32` whatever the maximum). Eight running maxima: one
    compare-and-select chain waits ~4 cycles an element, eight interleave (5x faster)."""
    m0 = x[b]
    m1 = m2 = m3 = m4 = m5 = m6 = m7 = m0
    eight = uint64(8)
    blocks = n // eight
    for j in range(blocks):
        o = b + j * eight
        v = x[o]
        m0 = v if v > m0 else m0
        v = x[o + uint64(1)]
        m1 = v if v > m1 else m1
        v = x[o + uint64(2)]
        m2 = v if v > m2 else m2
        v = x[o + uint64(3)]
        m3 = v if v > m3 else m3
        v = x[o + uint64(4)]
        m4 = v if v > m4 else m4
        v = x[o + uint64(5)]
        m5 = v if v > m5 else m5
        v = x[o + uint64(6)]
        m6 = v if v > m6 else m6
        v = x[o + uint64(7)]
        m7 = v if v > m7 else m7
    for q in range(blocks * eight, n):
        v = x[b + q]
        m0 = v if v > m0 else m0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    return m4 if m4 > m0 else m0


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, boundscheck=False)
def _row_sum(y, b, n):  # pragma: no cover - compiled
    """The float64 sum of ``y[b:b+n]``, vectorized (reassociated: summed in SIMD lanes)."""
    s = 0.0
    for q in range(n):
        s += np.float64(y[b + q])
    return s


@njit(parallel=True, cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def softmax_rows_f32(x, log, y, n):  # pragma: no cover - compiled
    """Softmax (or LogSoftmax) of each ``n``-element row of the flat float32 ``x`` into ``y``.
    Unsigned offsets: numba then skips negative-index wraparound, which blocks vectorizing."""
    nu = uint64(n)
    for r in prange(x.shape[0] // n):
        b = uint64(r) * nu
        mf = np.float64(_row_max(x, b, nu))
        for q in range(nu):
            y[b + q] = fast_exp(np.float64(x[b + q]) - mf)
        s = _row_sum(y, b, nu)
        if log:
            ls = np.log(s)
            for q in range(nu):
                y[b + q] = (np.float64(x[b + q]) - mf) - ls
        else:
            inv = 1.0 / s
            for q in range(nu):
                y[b + q] = y[b + q] * inv


softmax_rows_f32_serial = serial_twin(softmax_rows_f32)


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", boundscheck=False)
def exp_rows_f32(s, z, n, first, last):  # pragma: no cover - compiled
    """Rows [first, last) of the flat float32 scores ``s`` (rows of ``n``), in place:
    ``exp(s - max)``, ``max`` the row's largest value or 0 where that is not finite (a row
    all -inf gives zeros, one holding +inf or NaN gives NaN after the division, as
    FusedAttention's numpy passes do); ``z[r]`` the row's sum (float64, then float32)."""
    nu = uint64(n)
    for r in range(first, last):
        b = uint64(r) * nu
        m = _row_max(s, b, nu)
        mf = np.float64(m) if np.isfinite(m) else 0.0
        for q in range(nu):
            s[b + q] = fast_exp(np.float64(s[b + q]) - mf)
        z[r] = _row_sum(s, b, nu)


class ExpRows:
    """FusedAttention's softmax numerators for one scores shape: :func:`exp_rows_f32` over
    the rows, split in shares on the native pool (``threads.Split``) from two threads; the
    caller divides the context by the returned sums. Why: numpy's four passes (row max,
    subtract, exp, sum) ran on one thread, ~0.45 ms of a bert layer's 12 x 128 x 128 scores
    at two threads (bench/README.md, session 34)."""

    __slots__ = ("_fn", "_n", "_rows", "_split")

    def __init__(self, shape: tuple[int, ...], nthreads: int) -> None:
        self._n = int(shape[-1])
        self._rows = _prod(shape[:-1])
        count = share_count(nthreads, self._rows * self._n, self._rows)
        sample = (np.empty(1, _F32), np.empty(1, _F32), self._n)
        self._fn = direct.overload(exp_rows_f32, (*sample, 0, 1))
        self._split = Split(exp_rows_f32, self._fn, sample, self._rows, count) if count > 1 else None

    def __call__(self, s: np.ndarray) -> np.ndarray:
        """``s`` (C-contiguous float32 of the prepared shape) exponentiated in place; returns
        the row sums shaped ``s.shape[:-1] + (1,)``."""
        z = np.empty(s.shape[:-1] + (1,), dtype=_F32)
        args = (s.reshape(-1), z.reshape(-1), self._n)
        if self._split is not None:
            self._split(*args)
        else:
            self._fn(*args, 0, self._rows)
        return z
_F32 = np.dtype(np.float32)


class LastAxisRows:
    """Softmax over the last axis of float32 scores of one shape, through
    :func:`softmax_rows_f32`'s entry looked up once (``direct``) and the thread count picked
    once: the same bits as the Softmax node's kernel. Why: ``FusedAttentionCore`` at batch 1
    (a 4 x 16 x 16 scores tensor) spent ~5 us of its ~14 in the Softmax node's layers
    (axis checks, dtype dispatch, thread pick, numba's argument typing) around a ~2.5 us
    kernel."""

    __slots__ = ("_fn", "_n", "_nthreads", "_size")

    def __init__(self, shape: tuple[int, ...], nthreads: int) -> None:
        self._n, self._size, self._nthreads = int(shape[-1]), _prod(shape), nthreads
        self._fn = None  # the serial kernel's entry, when one thread does these scores
        if thread_count_for(nthreads, self._size) == 1:
            sample = np.empty(1, _F32)
            self._fn = direct.overload(softmax_rows_f32_serial, (sample, False, sample, self._n))

    def __call__(self, s: np.ndarray) -> np.ndarray:
        """The softmax of ``s`` (C-contiguous float32 of the prepared shape) in a new array:
        written over ``s`` the row loops' overlap checks fail and they run scalar (slower)."""
        y = np.empty(s.shape, _F32)
        if self._fn is not None:
            self._fn(s.reshape(-1), False, y.reshape(-1), self._n)
        else:  # picked per launch: numba's thread count is set per calling thread
            kernel = pick(softmax_rows_f32, softmax_rows_f32_serial, self._nthreads, self._size)
            kernel(s.reshape(-1), False, y.reshape(-1), self._n)
        return y


def run_softmax(x: np.ndarray, axis: int, log: bool, nthreads: int) -> np.ndarray | None:
    """Softmax (or LogSoftmax) of ``x`` over ``axis``, or ``None`` for a case the numpy path
    keeps (dtypes other than float32/float64, empty tensors, more than :data:`SMALL` elements
    unless float32 over its last non-unit axis: :func:`softmax_rows_f32` takes any size)."""
    if x.dtype not in _FLOATS or x.size == 0:
        return None
    n = x.shape[axis]
    if x.dtype == _F32 and _prod(x.shape[axis + 1:]) == 1:  # rows along the last non-unit axis
        xf = np.ascontiguousarray(x).reshape(-1)
        y = np.empty(x.shape, x.dtype)
        pick(softmax_rows_f32, softmax_rows_f32_serial, nthreads, x.size)(xf, log, y.reshape(-1), n)
        return y
    if x.size > SMALL:
        return None
    outer = x.size // (n * _prod(x.shape[axis + 1:]))
    x3 = x.reshape(outer, n, -1)
    y = np.empty(x3.shape, x.dtype)
    pick(softmax, softmax_serial, nthreads, x.size)(x3, log, y)
    return y.reshape(x.shape)


def _prod(dims: tuple[int, ...]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out
