"""Pointwise (1x1, stride 1, unpadded) convolutions as one BLAS GEMM (one per group) and one
compiled epilogue pass, prepared per input shape.

Why: a 1x1 convolution is ``W (M, C) @ x (C, H*W)`` per batch item, already one GEMM on the
numpy path, but that path pays ~35 us of Python around it (geometry, path choice, im2col's
view, the bias broadcast, the fused tail's aliasing checks and activation), more than the GEMM
itself on the exporter CNNs' 8-64 channel layers on 8x8-16x16 maps. A prepared call settles
all of that once: per call it is one ``np.matmul`` into the output and one compiled pass that
adds the bias and the residual and applies the activation while each plane is in cache.
Layers with many multiply-adds win too: the epilogue replaces two or three numpy passes.

One float32 image on a large map (an ImageNet CNN's 1x1 layers at batch 1) runs its product
on the few-rows register-tiled kernel instead (``kernels_sgemm.implicit_kernel``, AVX-512),
whose B rows are the input's channel planes as they lie: nothing is packed, where OpenBLAS
packs the whole input on every call (squeezenet's 128 -> 16 on 55x55: 0.12 against 0.16 ms,
resnet50's 64 -> 256 on 56x56 0.93 against 1.02; on small batched maps BLAS stays ahead:
bench/README.md, "Session 28"). On one thread only: BLAS's threads split it better.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange, uint64

from . import direct, kernels_sgemm
from .activations import activate
from .kernels_conv import PreparedConvCall
from .sgemm_ir import LANES
from .threads import GRAIN, SplitMatmul, gemm_count, serial_twin, use

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NO_Z = {dt: np.empty(0, dtype=dt) for dt in _FLOATS}

#: fewest positions of one image's map for the few-rows kernel (below, BLAS's packing of the
#: input is cheap and its kernel faster: 8 x 96 -> 24 on 8x8 1.20x, 8 x 32 -> 32 1.40x)
IMPLICIT_MIN_POSITIONS = 512


def takes_implicit(n: int, c: int, m: int, plane: int, dtype: np.dtype, group: int, nthreads: int = 1) -> bool:
    """Whether a pointwise layer's product runs on the few-rows kernel (module docstring): on
    one thread only, where BLAS's threads split the same product better (resnet50 and
    densenet121 at 2 threads: 1.17-1.19x slower with the output channels split)."""
    return (n == 1 and group == 1 and nthreads == 1 and dtype == np.float32 and plane >= IMPLICIT_MIN_POSITIONS
            and plane >= LANES and kernels_sgemm.support() is None)


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

    __slots__ = ("_count", "_epilogue", "_gemm", "_implicit", "_rest", "_split_product", "_w", "bias", "dtype",
                 "out_shape", "shape", "x_shape", "y_shape")

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
        if takes_implicit(n, c, m, plane, dtype, group, nthreads):
            rowoff = np.arange(c, dtype=np.int64) * plane  # B's row k: input channel k's plane
            self._implicit = (kernels_sgemm.implicit_kernel(), np.ascontiguousarray(self._w[0]), rowoff,
                              kernels_sgemm.IMPLICIT_KC)

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        dt = self.dtype
        y = np.empty(self.out_shape, dtype=dt) if out is None else out
        if self._implicit is not None:
            self._product(x, y)
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

    def _product(self, x: np.ndarray, y: np.ndarray) -> None:
        """``y = W @ x`` for one image on the few-rows kernel, on one thread: the columns up to
        the last whole 16 there (it reads and writes whole vectors, never past a plane: the
        tail would read past the input's end), the rest on BLAS."""
        gemm, w, rowoff, kc = self._implicit
        m, c = w.shape
        plane = self.x_shape[3]
        body = plane - plane % LANES
        gemm(w.ctypes.data, rowoff.ctypes.data, x.ctypes.data, y.ctypes.data, c, plane, m, c, kc, body,
             1, 0, 0)
        if body < plane:
            np.matmul(w, x.reshape(c, plane)[:, body:], out=y.reshape(m, plane)[:, body:])


#: input channels per group from which a grouped 1x1 layer runs as batched GEMMs here (with
#: fewer, each group's GEMM is too small to pay for its BLAS call: depthwise 1x1 has one)
MIN_CHANNELS_PER_GROUP = 4


def is_pointwise(kernel: tuple[int, ...], strides: tuple[int, ...], begin, end, group: int, c: int) -> bool:
    """Whether a 2-D layer of ``c`` input channels is a plain (grouped) 1x1 GEMM, the class
    :class:`PointwiseCall` runs (dilation does not matter for a 1x1 kernel)."""
    return (kernel == (1, 1) and tuple(strides) == (1, 1) and not any(begin) and not any(end)
            and (group == 1 or c // group >= MIN_CHANNELS_PER_GROUP))
