"""Group-1 2-D convolutions as one BLAS GEMM on the padded phase grid, prepared per input shape.

Why: the direct kernel (``kernels_conv``) multiplies on LLVM's vector loops, ~5 GFMA/s on
the exporter CNNs' 8-64 channel layers, and the numpy im2col path pays ~35 us of Python and
three copies around its GEMM. Here the input is zero-padded and split by stride phase as for
the direct kernel (``kernels_conv._pad_plane``), so that every (input channel, kernel
position) row of the im2col matrix is one contiguous run of a phase grid: building it is
``C * kh * kw`` vectorized copies, not ``C * kh * kw * oh`` short ones. The GEMM ``W (M,
C*kh*kw) @ cols`` then runs on BLAS over the grid's positions (its ``wq - ow`` extra columns
per row included), and one compiled pass stores the kept columns with the bias, the residual
and the activation. Measured on one thread against the direct kernel (bench/README, session
13): equal on the smallest batch-1 layers, 2-3x faster from batch 8 or 48 channels up.

On small maps the grid's extra columns are a large share of the GEMM (7x7 with a 3x3 kernel:
61 grid positions for 49 outputs, 14x14: 222 for 196), so there each im2col row keeps only
the output positions ("compact" columns: ``oh`` runs of ``ow`` copied from the grid) and the
GEMM is exactly the convolution's (:func:`compact_columns`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit, uint64

from . import (
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
)
from .activations import activate
from .kernels_conv import PreparedConvCall, _geometry, _offsets, _pad_plane
from .scratch import scratch
from .threads import Split, SplitMatmul, gemm_count, share_count

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NO_Z = {dt: np.empty(0, dtype=dt) for dt in _FLOATS}

#: elements of the grid im2col matrix above which a layer keeps the other paths (the numpy
#: path tiles its im2col there; the matrix is n * C * kh * kw * grid positions)
MAX_COLS = 1 << 22
#: the share of extra grid columns from which a layer's im2col keeps only the output positions
#: (bench/README, session 16: 512 channels on 7x7, 1 thread, 4.4 -> 3.3 ms; 56x56 maps,
#: 3.5 % extra, keep the grid: one long copy per row instead of 56 short ones)
COMPACT_MIN_EXTRA = 0.05


def compact_columns(oh: int, ow: int, wq: int) -> bool:
    """Whether a layer's im2col rows hold only the ``oh * ow`` output positions rather than
    the grid's ``(oh - 1) * wq + ow``."""
    span = (oh - 1) * wq + ow
    return span - oh * ow > COMPACT_MIN_EXTRA * oh * ow


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _rows_of_plane(xp, cols, offs, p, psize, ks, span):  # pragma: no cover - compiled
    """The ``ks`` im2col rows of input plane ``p`` (= batch * C + channel): row ``k`` is the
    plane's phase grid from kernel position ``k``'s offset, ``span`` positions long."""
    g = uint64(span)
    for k in range(ks):
        dst = cols[uint64((p * ks + k) * span):]
        src = xp[uint64(p * psize + offs[k]):]
        for q in range(g):
            dst[q] = src[q]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _compact_rows_of_plane(xp, cols, offs, p, psize, ks, oh, ow, wq):  # pragma: no cover - compiled
    """As :func:`_rows_of_plane`, keeping only the output positions: row ``k`` is ``oh``
    runs of ``ow`` grid positions, one per output row."""
    kept = uint64(oh * ow)
    owu = uint64(ow)
    for k in range(ks):
        dst = cols[uint64(p * ks + k) * kept:]
        src = xp[uint64(p * psize + offs[k]):]
        for oy in range(oh):
            d = uint64(oy * ow)
            s = uint64(oy * wq)
            for q in range(owu):
                dst[d + q] = src[s + q]


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _store_plane(acc, bias, z, y, p, m, span, wq, oh, ow, act, alpha, beta):  # pragma: no cover - compiled
    """Output plane ``p`` (= batch * M + channel) from its grid row of the GEMM's result:
    the kept columns, plus the bias and the residual, through the activation (codes as
    ``activations.ACT_*``)."""
    bv = bias[p % m]
    plane = oh * ow
    has_z = z.shape[0] > 0
    for oy in range(oh):
        a = uint64(p * span + oy * wq)
        d = uint64(p * plane + oy * ow)
        for ox in range(uint64(ow)):
            v = acc[a + ox] + bv
            if has_z:
                v += z[d + ox]
            v = activate(v, act, alpha, beta)
            y[d + ox] = v


@njit(cache=True, nogil=True)
def cols_planes(x, xp, cols, pdims, dims, compact, first, last):  # pragma: no cover - compiled
    """Input planes [first, last) padded and written as their im2col rows: a share of
    ``threads.run_shares``, the whole layer on one thread."""
    offs = _offsets(dims)
    psize, wq, ks, oh, ow = dims[1], dims[3], dims[6] * dims[7], dims[8], dims[9]
    span = (oh - 1) * wq + ow
    for p in range(first, last):
        _pad_plane(x, xp, pdims, p)
        if compact:
            _compact_rows_of_plane(xp, cols, offs, p, psize, ks, oh, ow, wq)
        else:
            _rows_of_plane(xp, cols, offs, p, psize, ks, span)


@njit(cache=True, nogil=True)
def store_planes(acc, bias, z, y, dims, compact, act, alpha, beta, first, last):  # pragma: no cover - compiled
    """Output planes [first, last) stored from the GEMM's rows (a share, as above)."""
    wq, m, oh, ow = dims[3], dims[4], dims[8], dims[9]
    span = (oh - 1) * wq + ow
    if compact:  # the GEMM's rows hold the output positions only
        wq, span = ow, oh * ow
    for p in range(first, last):
        _store_plane(acc, bias, z, y, p, m, span, wq, oh, ow, act, alpha, beta)


class GridConvCall(PreparedConvCall):
    """One group-1 layer's convolution for one input shape: ``act(conv(x, W) + bias + z)``
    by grid im2col, BLAS GEMM and a compiled store (module docstring).

    Callers pass ``x`` C-contiguous of ``dtype`` and ``shape``, and ``z`` None or a
    C-contiguous array of ``out_shape`` and ``dtype`` (:meth:`accepts` checks both), as for
    ``kernels_conv.Conv2dCall``, whose interface this shares."""

    __slots__ = ("_cols", "_cols_split", "_count", "_gemm", "_gemm_shape", "_head", "_planes", "_product", "_store",
                 "_store_split", "_tail", "_w", "bias", "cols_size", "dtype", "out_shape", "shape", "xp_size")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, bias: np.ndarray,
                 strides: tuple[int, ...], dilations: tuple[int, ...], begin: Sequence[int],
                 out_sp: Sequence[int], act: int, alpha: float, beta: float, nthreads: int) -> None:
        n, c = shape[0], shape[1]
        m = w.shape[0]
        key = (shape, w.shape, tuple(strides), tuple(dilations), tuple(begin), tuple(out_sp), 1)
        pdims, dims, (self.xp_size, _, _) = _geometry(*key)  # type: ignore[arg-type]
        oh, ow, wq = int(out_sp[0]), int(out_sp[1]), int(dims[3])
        compact = compact_columns(oh, ow, wq)
        span = oh * ow if compact else (oh - 1) * wq + ow
        ck = c * math.prod(w.shape[2:])
        self.shape, self.dtype = shape, dtype
        self.out_shape = (n, m, oh, ow)
        self.cols_size = n * ck * span
        self._gemm_shape = ((n, ck, span), (n, m, span))
        self._w = np.ascontiguousarray(w.reshape(m, ck))
        self.bias = bias
        self._head = (pdims, dims, compact)
        self._tail = (dims, compact, act, dtype.type(alpha), dtype.type(beta))
        self._planes = (n * c, n * m)
        work = self.cols_size + n * m * oh * ow
        self._count = share_count(nthreads, work, n * c)
        self._gemm = gemm_count(nthreads, n * m * ck * span)
        self._cols: Any = None
        self._store: Any = None
        self._cols_split: Any = None
        self._store_split: Any = None
        self._product: Any = None

    @staticmethod
    def fits(shape: tuple[int, ...], w_shape: tuple[int, ...], wq: int, out_sp: Sequence[int]) -> bool:
        """Whether the layer's grid im2col matrix stays within :data:`MAX_COLS` elements."""
        span = (out_sp[0] - 1) * wq + out_sp[1]
        return shape[0] * shape[1] * math.prod(w_shape[2:]) * span <= MAX_COLS

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        dt = self.dtype
        # the padded planes, the im2col matrix and the accumulator are temporaries: reused
        # per thread (``scratch``: fresh multi-MB arrays page-faulted, ~4 ms of squeezenet's run)
        cols = scratch("grid.cols", self.cols_size, dt)
        args = (x.reshape(-1), scratch("grid.padded", self.xp_size, dt), cols, *self._head)
        planes_in, planes_out = self._planes
        fn = self._cols
        if fn is None:
            fn = self._cols = direct.overload(cols_planes, (*args, 0, planes_in))
            self._cols_split = Split(cols_planes, fn, args, planes_in, self._count)
        if self._count > 1:
            self._cols_split(*args)
        else:  # one thread: the kernel called directly (a tiny layer's call is a few us)
            fn(*args, 0, planes_in)
        cols_shape, acc_shape = self._gemm_shape
        acc = scratch("grid.acc", math.prod(acc_shape), dt).reshape(acc_shape)
        operands = (self._w, cols.reshape(cols_shape), acc)
        product = self._product
        if product is None:
            product = self._product = SplitMatmul(*operands, self._gemm)
        product(*operands)
        y = np.empty(self.out_shape, dtype=dt) if out is None else out
        stored = (acc.reshape(-1), self.bias, _NO_Z[dt] if z is None else z.reshape(-1), y.reshape(-1), *self._tail)
        fn = self._store
        if fn is None:
            fn = self._store = direct.overload(store_planes, (*stored, 0, planes_out))
            self._store_split = Split(store_planes, fn, stored, planes_out, self._count)
        if self._count > 1:
            self._store_split(*stored)
        else:  # one thread: the kernel called directly (a tiny layer's call is a few us)
            fn(*stored, 0, planes_out)
        return y
