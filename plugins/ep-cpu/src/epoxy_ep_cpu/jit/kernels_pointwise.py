"""Pointwise (1x1, stride 1, unpadded) convolutions as one BLAS GEMM (one per group) and one
compiled epilogue pass, prepared per input shape.

Why: a 1x1 convolution is ``W (M, C) @ x (C, H*W)`` per batch item, already one GEMM on the
numpy path, but that path pays ~35 us of Python around it (geometry, path choice, im2col's
view, the bias broadcast, the fused tail's aliasing checks and activation), more than the GEMM
itself on the exporter CNNs' 8-64 channel layers on 8x8-16x16 maps. A prepared call settles
all of that once: per call it is one ``np.matmul`` into the output and one compiled pass that
adds the bias and the residual and applies the activation while each plane is in cache.
Layers with many multiply-adds win too: the epilogue replaces two or three numpy passes.

One float32 image on a large map (an ImageNet CNN's 1x1 layers at batch 1) runs on ``pgemm``
instead (``pointwise_gemm_ir``, AVX-512): the few-rows register tiles with B rows the input's
channel planes as they lie (nothing packed, where OpenBLAS packs the whole input on every call)
and the bias, residual and activation in the store of the last K block, column tiles outermost.
Threads split the positions (:func:`fused_columns`), each share whole 16-position vectors: at 2
threads 1.1-2.4x faster than OpenBLAS's products split by hand plus the epilogue pass
(squeezenet's 32 -> 128 on 27x27 106 -> 44 us, resnet50's 64 -> 256 on 56x56 681 -> 454 us;
bench/README.md, session 37). On small batched maps BLAS stays ahead (session 28). A grouped
layer runs one ``pgemm`` a group (:func:`fused_groups`), its threads splitting the groups'
positions together (bench/README.md, session 41).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from numba import njit, prange, uint64

from . import (
    config,
    direct,
    kernel_cache,  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
    kernels_sgemm,
    llvm_module,
    native_shares,
    pointwise_gemm_ir,
)
from .activations import activate
from .kernels_conv import PreparedConvCall
from .scratch import scratch
from .sgemm_ir import LANES
from .threads import GRAIN, Split, SplitMatmul, gemm_count, native, serial_twin, use

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NO_Z = {dt: np.empty(0, dtype=dt) for dt in _FLOATS}
_F32 = np.dtype(np.float32)
#: a plane of whole vectors: no strip (``fused_columns``' last two operands)
_NO_STRIP = (np.empty(0, dtype=_F32), np.empty(0, dtype=np.int64))

#: fewest positions of one image's map for the few-rows kernel (below, BLAS's packing of the
#: input is cheap and its kernel faster: 8 x 96 -> 24 on 8x8 1.20x, 8 x 32 -> 32 1.40x)
IMPLICIT_MIN_POSITIONS = 512


#: input channels up to which a layer on several threads takes ``pgemm``'s split: deeper ones
#: re-read their weights from L2 for every column tile, and inception_v1's 192/256 -> 16..128
#: layers on 27x27 ran slower split that way than as OpenBLAS shares (the model 1.03-1.05x at 2
#: threads; squeezenet, whose 1x1 layers are up to 128 deep on large maps, 0.95; session 37)
SPLIT_MAX_DEPTH = 128


def takes_implicit(n: int, c: int, m: int, plane: int, dtype: np.dtype, group: int, nthreads: int = 1) -> bool:
    """Whether a pointwise layer runs on ``pgemm`` (module docstring): one float32 image of 512
    positions or more, on one thread, or split over the native pool up to SPLIT_MAX_DEPTH input
    channels a group (without the pool, OpenBLAS's own threads split the product). A grouped
    layer runs one ``pgemm`` a group (:func:`fused_groups`)."""
    return (n == 1 and dtype == np.float32 and plane >= IMPLICIT_MIN_POSITIONS
            and plane >= LANES and kernels_sgemm.support() is None
            and (nthreads == 1 or (c // group <= SPLIT_MAX_DEPTH and native())))


#: largest input (C x H x W float32 bytes) of an expanding layer (M >= C) whose product runs
#: ``pgemm_rows`` (row tiles outermost: each output plane written as one run, the input
#: re-read from L2 a row tile); larger inputs, and layers that reduce the channels, keep
#: ``pgemm``'s column tiles outermost. One thread, a 64 MB touch before each call, us, column /
#: row order (``bench/gemm_orders.py``): 64 -> 256 on 56x56 1068 / 906, 16 -> 64 on 55x55 220 /
#: 108, 32 -> 128 on 27x27 162 / 87, 128 -> 512 on 28x28 766 / 711; but 256 -> 64 on 56x56 (a 3.2
#: MB input) 1004 / 1853 (bench/README.md, session 38)
ROWS_OUTER_MAX_INPUT = 1 << 20

_FUSED = llvm_module.LazyModule(
    "the fused pointwise GEMM", llvm_module.FLOAT_GEMM_FEATURES, pointwise_gemm_ir.module_ir,
    {name: [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 6 + [ctypes.c_void_p] * 2 + [ctypes.c_int64, ctypes.c_void_p]
     for name in ("pgemm", "pgemm_rows")},
    config.compiled_code_dir)


def driver(c: int, m: int, plane: int) -> str:
    """Which ``pointwise_gemm_ir`` driver runs a layer of ``c`` -> ``m`` channels on ``plane``
    positions (:data:`ROWS_OUTER_MAX_INPUT`)."""
    return "pgemm_rows" if m >= c and 4 * c * plane <= ROWS_OUTER_MAX_INPUT else "pgemm"


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _tail_strip(gemm, w, x, y, bias, z, params, m, c, plane, kc, act, strip, strip_rows,
                body):  # pragma: no cover - compiled
    """The plane's last positions [body, plane) (fewer than 16, past ``pgemm``'s whole
    vectors) through the same ``pgemm``: copied into zero-padded 16-position rows of ``strip``
    (the input's rows, then the output's, then the residual's), multiplied there and the output
    copied back. The same
    register tiles and K order as the body's positions, so the same bits as if the plane were
    whole vectors; the scalar dot products this replaced took 10-33 us of a 27x27 layer's
    50-117 (bench/README.md, session 39)."""
    rem = uint64(plane - body)
    lanes, cu, mu, pu = uint64(LANES), uint64(c), uint64(m), uint64(plane)
    xs, ys, zs = uint64(0), cu * lanes, (cu + mu) * lanes
    for k in range(cu):
        for j in range(lanes):
            strip[xs + k * lanes + j] = x[k * pu + uint64(body) + j] if j < rem else np.float32(0.0)
    has_z = z.shape[0] > 0
    if has_z:
        for ch in range(mu):
            for j in range(lanes):
                strip[zs + ch * lanes + j] = z[ch * pu + uint64(body) + j] if j < rem else np.float32(0.0)
    base = np.int64(strip.ctypes.data)
    native_shares.call_address14(gemm, np.int64(w.ctypes.data), np.int64(strip_rows.ctypes.data), base,
                                 base + 4 * np.int64(ys), c, LANES, m, c, kc, LANES, np.int64(bias.ctypes.data),
                                 base + 4 * np.int64(zs) if has_z else np.int64(0), act,
                                 np.int64(params.ctypes.data))
    for ch in range(mu):
        for j in range(rem):
            y[ch * pu + uint64(body) + j] = strip[ys + ch * lanes + j]


@njit(cache=True, nogil=True, boundscheck=False)
def fused_columns(gemm, w, rowoff, x, y, bias, z, params, m, c, plane, kc, act, strip, strip_rows,
                  first, last):  # pragma: no cover - compiled
    """Output positions [16 first, 16 last) of one image's ``act(W @ x + bias (+ z))``:
    ``pgemm`` over their whole vectors, and in the share that reaches the plane's end its last
    positions (fewer than 16: ``pgemm`` would read past the input) through a padded strip
    (:func:`_tail_strip`; ``strip`` holds ``(c + 2 m) * 16`` floats, ``strip_rows`` the
    strip's row offsets). A share of :class:`PointwiseCall`'s split (``threads.Split``)."""
    j0 = first * LANES
    body = plane // LANES * LANES
    j1 = min(last * LANES, body)
    if j1 > j0:
        z_at = np.int64(z.ctypes.data) + 4 * j0 if z.shape[0] > 0 else np.int64(0)
        native_shares.call_address14(gemm, np.int64(w.ctypes.data), np.int64(rowoff.ctypes.data),
                                     np.int64(x.ctypes.data) + 4 * j0, np.int64(y.ctypes.data) + 4 * j0, c, plane, m, c,
                                     kc, j1 - j0, np.int64(bias.ctypes.data), z_at, act, np.int64(params.ctypes.data))
    if last * LANES >= plane and body < plane:
        _tail_strip(gemm, w, x, y, bias, z, params, m, c, plane, kc, act, strip, strip_rows, body)


@njit(cache=True, nogil=True, boundscheck=False)
def fused_groups(gemm, w, rowoff, x, y, bias, z, params, m, c, plane, kc, act, strip, strip_rows, groups,
                 first, last):  # pragma: no cover - compiled
    """Units [first, last) of a grouped layer's ``act(W_g @ x_g + bias_g (+ z_g))`` for each of
    ``groups`` groups (``m`` output and ``c`` input channels a group; ``w`` the groups' (m, c)
    weights one after another): unit ``u`` is group ``u // units`` 's 16-position vector ``u %
    units``, each group's positions run as :func:`fused_columns` runs a group-1 layer's (the same
    tiles and K order: the bits of one ``pgemm`` a group). Each group's plane tail has its own
    part of ``strip`` (``(c + 2 m) * 16`` floats a group): two shares may finish two groups'
    planes at once. Shuffle networks' grouped 1x1 layers (24 -> 112 in 4 groups on 56x56) ran as
    4 small BLAS products plus an epilogue pass."""
    units = (plane + LANES - 1) // LANES
    part = (c + 2 * m) * LANES if strip.shape[0] > 0 else 0
    g0 = first // units
    g1 = min(groups, (last + units - 1) // units)
    for g in range(g0, g1):
        lo = max(first - g * units, 0)
        hi = min(last - g * units, units)
        zg = z[g * m * plane:(g + 1) * m * plane] if z.shape[0] > 0 else z
        fused_columns(gemm, w[g * m * c:(g + 1) * m * c], rowoff, x[g * c * plane:(g + 1) * c * plane],
                      y[g * m * plane:(g + 1) * m * plane], bias[g * m:(g + 1) * m], zg, params, m, c, plane, kc, act,
                      strip[g * part:(g + 1) * part], strip_rows, lo, hi)


@njit(cache=True, nogil=True, boundscheck=False, inline="always")
def _epilogue_plane(y, bias, z, p, plane, m, act, alpha, beta):  # pragma: no cover - compiled
    """``act(y + bias[channel] + z)`` in place on output plane ``p`` (= batch * M + channel);
    the activation codes are ``activations.ACT_*``."""
    bv = bias[p % m]
    base = uint64(p * plane)
    has_z = z.shape[0] > 0
    for q in range(uint64(plane)):
        v = y[base + q] + bv
        if has_z:
            v += z[base + q]
        v = activate(v, act, alpha, beta)
        y[base + q] = v


@njit(parallel=True, cache=True, nogil=True)
def epilogue_parallel(y, bias, z, planes, plane, m, act, alpha, beta):  # pragma: no cover - compiled
    for p in prange(planes):
        _epilogue_plane(y, bias, z, p, plane, m, act, alpha, beta)


epilogue_serial = serial_twin(epilogue_parallel)


class PointwiseCall(PreparedConvCall):
    """One layer's 1x1 convolution for one input shape: ``act(W @ x + bias + z)``.

    Callers pass ``x`` C-contiguous of ``dtype`` and ``shape``, and ``z`` None or a
    C-contiguous array of ``out_shape`` and ``dtype`` (:meth:`accepts` checks both), as for
    ``kernels_conv.Conv2dCall``, whose interface this shares."""

    __slots__ = ("_columns", "_count", "_epilogue", "_gemm", "_implicit", "_packed_rows", "_rest", "_split_product",
                 "_strip", "_w", "bias", "dtype", "out_shape", "shape", "x_shape", "y_shape")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, w: np.ndarray, bias: np.ndarray,
                 act: int, alpha: float, beta: float, nthreads: int, group: int = 1) -> None:
        n, c = shape[0], shape[1]
        m = w.shape[0]
        plane = int(np.prod(shape[2:]))
        self.shape, self.dtype = shape, dtype
        self.out_shape = (n, m, *shape[2:])
        # groups are a batch axis of the GEMM: (G, M/G, C/G) @ (N, G, C/G, HW) -> (N, G, M/G, HW)
        self.x_shape = (n, group, c // group, plane)
        self.y_shape = (n, group, m // group, plane)
        self._w = np.ascontiguousarray(w.reshape(group, m // group, c // group))
        self.bias = bias
        self._count = max(1, min(nthreads, n * m, (n * m * plane) // GRAIN))
        self._gemm = gemm_count(nthreads, n * m * c * plane // group)
        self._rest = (n * m, plane, m, act, dtype.type(alpha), dtype.type(beta))
        self._epilogue: Any = None
        self._split_product: Any = None
        self._implicit: Any = None
        self._columns: Any = None
        self._strip: tuple[int, np.ndarray] | None = None
        self._packed_rows: Any = None
        if plane == 1 and group == 1 and dtype == np.float32:
            # a 1x1 map (a classifier head as a convolution): rows times packed weights, as
            # Gemm's head runs (2 threads, [1, 1024, 1, 1] -> 1000: BLAS 205 us alone, 421 in
            # densenet121; onnxruntime 85; bench/README.md, session 40)
            t = self._w[0].reshape(m, c).T  # (C, M): the weights as Gemm's B
            if kernels_sgemm.support() is None and kernels_sgemm.owns(t, nthreads):
                self._packed_rows = kernels_sgemm.PackedFloatWeights(t, nthreads)
        if self._packed_rows is None and takes_implicit(n, c, m, plane, dtype, group, nthreads):
            self.bias = np.ascontiguousarray(bias, dtype=np.float32)
            cg, mg = c // group, m // group  # a group's channels (group 1: the layer's)
            units = group * -(-plane // LANES)
            rowoff = np.arange(cg, dtype=np.int64) * plane  # B's row k: the group's input channel k's plane
            gemm = _FUSED.address(driver(cg, mg, plane))
            self._implicit = ((gemm, self._w.reshape(-1), rowoff),
                              (self.bias,), (np.array([alpha, beta], dtype=np.float32), mg, cg, plane,
                                             kernels_sgemm.IMPLICIT_KC, act), units,
                              max(1, min(nthreads, units, gemm_count(nthreads, mg * c * plane))), group)
            # the plane's last positions past whole vectors: a padded strip a group, its input rows
            self._strip = ((group * (cg + 2 * mg) * LANES, np.arange(cg, dtype=np.int64) * LANES) if plane % LANES
                           else None)

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        dt = self.dtype
        y = np.empty(self.out_shape, dtype=dt) if out is None else out
        if self._implicit is not None:
            head, bias, tail, units, count, group = self._implicit
            strip = (_NO_STRIP if self._strip is None
                     else (scratch("pointwise-tail", self._strip[0], _F32), self._strip[1]))
            args = (*head, x.reshape(-1), y.reshape(-1), *bias, _NO_Z[dt] if z is None else z.reshape(-1), *tail,
                    *strip, *(() if group == 1 else (group,)))
            columns = self._columns
            if columns is None:
                kernel = fused_columns if group == 1 else fused_groups
                fn = direct.overload(kernel, (*args, 0, 1))
                columns = self._columns = (Split(kernel, fn, args, units, count) if count > 1
                                           else lambda *a: fn(*a, 0, units))
            columns(*args)
            return y
        if self._packed_rows is not None:
            rows = y.reshape(self.out_shape[0], -1)
            got = self._packed_rows.matmul_any(x.reshape(self.shape[0], -1), rows)
            if got is not rows:
                rows[...] = got
        else:
            operands = (self._w, x.reshape(self.x_shape), y.reshape(self.y_shape))
            product = self._split_product
            if product is None:
                product = self._split_product = SplitMatmul(*operands, self._gemm)
            product(*operands)
        args = (y.reshape(-1), self.bias, _NO_Z[dt] if z is None else z.reshape(-1), *self._rest)
        fn = self._epilogue
        if fn is None:
            fn = self._epilogue = direct.overload(epilogue_serial if self._count == 1 else epilogue_parallel, args)
        if self._count > 1:
            use(self._count, self._count * GRAIN)
        fn(*args)
        return y


#: input channels per group from which a grouped 1x1 layer runs as batched GEMMs here (with
#: fewer, each group's GEMM is too small to pay for its BLAS call: depthwise 1x1 has one)
MIN_CHANNELS_PER_GROUP = 4


def is_pointwise(kernel: tuple[int, ...], strides: tuple[int, ...], begin, end, group: int, c: int) -> bool:
    """Whether a 2-D layer of ``c`` input channels is a plain (grouped) 1x1 GEMM, the class
    :class:`PointwiseCall` runs (dilation does not matter for a 1x1 kernel)."""
    return (kernel == (1, 1) and tuple(strides) == (1, 1) and not any(begin) and not any(end)
            and (group == 1 or c // group >= MIN_CHANNELS_PER_GROUP))
