"""A float32 GEMM for few rows against constant weights, on AVX-512: a batch of 2-32 rows
through a dense layer (a classifier head at a small batch, a decoder's few tokens, a server's
merged requests).

Why: OpenBLAS packs the right operand on every call, and with few rows the packing is the
call: ``(M, 4096) @ (4096, 4096)`` on one thread took 8.7 ms at M = 2 and 12.4 at M = 16
against 2.2 at M = 1 (its matrix-vector path) and onnxruntime's 3.2 and 6.8 (MLAS packs the
weights once, at session creation). Here the weights are packed once (``PackedFloatWeights``,
column tiles of ``sgemm_ir.TILE_COLS``) and a register-tiled kernel (``sgemm_ir``, written in
LLVM IR and compiled by llvmlite at the first product in a process, ~0.2 s) streams them once
per K block; see bench/README.md "Session 26" for the measurements that set ``MAX_ROWS`` and
``MIN_MACS``.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import numpy as np

from epoxy.kit.aligned import aligned_empty, output_empty

from . import blas_spin, config, llvm_module, native_pool, native_shares, threads
from .sgemm_ir import LANES, TILE_COLS, module_ir
from .threads import run_shares

#: most rows a product may have to take this kernel: above it OpenBLAS's packing is amortized
#: and its blocked kernel is faster
MAX_ROWS = 32
#: rows a call of the kernel takes at most when it runs every product of a layer
#: (``DenseWeights`` owning its packed weights): up to here it takes 0.6-0.97x OpenBLAS's time
#: (K x N of 768 x 768, 768 x 3072, 3072 x 768, 1024 x 1000, 4096 x 4096, 128 x 512, 32 x 1024
#: at 48-1024 rows; one row 0.98-1.13x, its matrix-vector product), beyond it up to 1.08x, so
#: longer products run in chunks of it (bench/README.md, session 32)
CHUNK_ROWS = 1024
#: fewest weights (K x N) a layer must have for its kernel to own packed weights:
#: below, a call's ~3 us of ctypes and zeroing outweigh the product and the weights' memory is small
MIN_OWNED_WEIGHTS = 1 << 16
#: most weight bytes a layer may own: its original is dropped only once the packed copy is
#: made (at its first product), so one layer's packing adds its size to the peak RSS; vgg19's
#: 411 MB classifier weight took its peak from 967 to 1519 MB (onnxruntime: 967)
MAX_OWNED_BYTES = 1 << 25
#: fewest multiply-adds worth a call: a call costs ~5 us (ctypes, the zeroed output), and
#: below this OpenBLAS's packing is cheap (256 x 256 weights: M = 4 0.61x, M = 16 1.27x)
MIN_MACS = 1 << 20
#: K rows of a column tile one block holds: 128 x 64 floats (32 KB) stay in L1/L2 while every
#: row tile reads them. 256 before session 35; on an Intel Xeon 128 ran bert's products 4-7 %
#: faster alone (128 x 768 x 3072: 4.69 -> 4.37 ms) and bert 0.96-0.98x at 1 thread, even at 2
#: (bench/ab_constant.py; 64: 1.03x)
KC = 128
#: the same for the implicit GEMM (``igemm``), whose B rows are runs of an input grid, each in
#: another page: a block of 256 rows touched 256 pages per column tile, past the first-level
#: TLB; with 64 the layers ran 0.83-0.97x the time (1 thread, us, 256 / 64: 96 x 576 x 3136
#: 3174 / 2767, 64 x 576 x 3136 2171 / 1942, 64 x 256 x 784 223 / 184, 128 x 576 x 196 245 /
#: 219, 1000 x 512 x 169 1422 / 1322; bench/README.md, session 35)
IMPLICIT_KC = 64
#: multiply-adds per thread below which a product stays on one thread
MACS_PER_THREAD = 1 << 22
#: packed weight elements per thread from which a product splits however few its rows: a
#: classifier head at batch 1 (1 x 1024 @ 1024 x 1000, 1 M multiply-adds) streams 4 MB of
#: weights, and two threads stream them from two caches (2 threads, us, hot / after a 64 MB
#: touch: 212 / 258 on one thread, onnxruntime 46 / 146; bench/README.md, session 40)
WEIGHTS_PER_THREAD = 1 << 16

_F32 = np.dtype(np.float32)
_REQUIRED_FEATURES = llvm_module.FLOAT_GEMM_FEATURES


@functools.cache
def support() -> str | None:
    """None when the kernel can run here, else why not (no llvmlite, or a CPU without AVX2 and
    FMA: OpenBLAS runs every product then)."""
    return llvm_module.missing(_REQUIRED_FEATURES)


_MODULE = llvm_module.LazyModule(
    "the float32 few-rows GEMM", _REQUIRED_FEATURES, module_ir,
    {"sgemm": [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 8, "igemm": [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 9,
     "cgemm": [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 7},
    config.compiled_code_dir)


def _kernel() -> Any:
    """The compiled ``sgemm`` as a ctypes function (compiled once per process)."""
    return _MODULE.function("sgemm")


def implicit_kernel() -> Any:
    """The compiled ``igemm`` (``sgemm_ir._implicit_driver_ir``) as a ctypes function."""
    return _MODULE.function("igemm")


def gathered_address() -> int:
    """The compiled ``cgemm``'s address, for compiled callers (native_shares.call_address12)."""
    return _MODULE.address("cgemm")


def implicit_address() -> int:
    """The compiled ``igemm``'s address, for compiled callers (native_shares.call_address)."""
    return _MODULE.address("igemm")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def fits(b: np.ndarray) -> bool:
    """Whether weights ``b (K, N)`` are for this kernel: float32, 2-D, some products of few
    rows big enough to gain (:func:`gains`)."""
    return b.ndim == 2 and b.dtype == _F32 and gains(MAX_ROWS, b.shape[0], b.shape[1])


def owns(b: np.ndarray, nthreads: int) -> bool:
    """Whether weights ``b (K, N)`` are packed once and run every product of their layer on
    ``nthreads`` threads (float32, 2-D, MIN_OWNED_WEIGHTS up to MAX_OWNED_BYTES; on several threads only
    where OpenBLAS's idle workers can be parked while the kernel's shares run: next to a
    spinning worker BERT took 76 ms at 2 threads against OpenBLAS's 50, parked 44.5 against
    49.8): then the layer keeps only the packed copy and the session may drop the original
    (``released_inputs``)."""
    return ((nthreads <= 1 or blas_spin.available()) and b.ndim == 2 and b.dtype == _F32
            and MIN_OWNED_WEIGHTS <= b.shape[0] * b.shape[1] <= MAX_OWNED_BYTES // 4)


def gains(m: int, k: int, n: int) -> bool:
    """Whether an ``(m, k) @ (k, n)`` product is this kernel's: 2 <= m <= MAX_ROWS, MIN_MACS up."""
    return 2 <= m <= MAX_ROWS and m * k * n >= MIN_MACS


class PackedFloatWeights:
    """Constant float32 weights ``B (K, N)`` (any strides: Gemm's ``transB`` passes a transposed
    view) packed for the kernel: N zero-padded to a multiple of 16, column tile ``[j, j + w)``
    stored at floats ``[j K, (j + w) K)`` as ``(K, w)``."""

    __slots__ = ("_kc", "_n_pad", "_packed", "_packed_at", "k", "n", "nthreads")

    def __init__(self, b: np.ndarray, nthreads: int) -> None:
        k, n = b.shape
        self.k, self.n, self.nthreads = k, n, max(1, nthreads)
        self._kc = KC  # settled with the packing (a layer's products all block K alike)
        self._n_pad = _round_up(n, LANES)
        packed = aligned_empty(k * self._n_pad, _F32)  # B's register loads on cache lines
        for first in range(0, self._n_pad, TILE_COLS):
            width = min(TILE_COLS, self._n_pad - first)
            tile = packed[first * k:(first + width) * k].reshape(k, width)
            stop = min(first + width, n)
            tile[:, :stop - first] = b[:, first:stop]
            tile[:, stop - first:] = 0.0
        self._packed = packed
        self._packed_at = packed.ctypes.data

    @property
    def nbytes(self) -> int:
        return int(self._packed.nbytes)

    def unpacked(self) -> np.ndarray:
        """``B (K, N)`` again, as a fresh C-contiguous float32 array: for a layer that let its
        original weights go once packed (a convolution's other paths need them back, rarely)."""
        k, n = self.k, self.n
        b = np.empty((k, n), dtype=_F32)
        for first in range(0, n, TILE_COLS):
            width = min(TILE_COLS, self._n_pad - first)
            stop = min(first + width, n)
            b[:, first:stop] = self._packed[first * k:(first + width) * k].reshape(k, width)[:, :stop - first]
        return b

    def takes(self, a: np.ndarray) -> bool:
        """Whether ``a`` is a product for this kernel: float32 ``(M, K)`` rows with unit steps
        along K, :func:`gains` (one row stays OpenBLAS's matrix-vector product)."""
        return (a.dtype == _F32 and a.ndim == 2 and a.shape[1] == self.k and gains(a.shape[0], self.k, self.n)
                and a.strides[1] == 4 and a.strides[0] % 4 == 0 and a.strides[0] >= 0 and a.flags.aligned)

    def matmul_any(self, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``a (M, K) @ B`` for any float32 rows (M >= 0, any strides): the kernel of a layer
        that owns its packed weights, in chunks of CHUNK_ROWS rows."""
        if not (a.strides[-1] == 4 and a.strides[0] % 4 == 0 and a.strides[0] >= 0 and a.flags.aligned):
            a = np.ascontiguousarray(a)
        m = a.shape[0]
        if m <= CHUNK_ROWS:
            return self.matmul(a, out) if m else np.zeros((0, self.n), dtype=_F32)
        if out is None or not (out.dtype == _F32 and out.shape == (m, self.n) and out.flags.c_contiguous):
            out = output_empty((m, self.n), _F32)
        for first in range(0, m, CHUNK_ROWS):
            last = min(m, first + CHUNK_ROWS)
            part = self.matmul(a[first:last], out[first:last] if self._n_pad == self.n else None)
            if self._n_pad != self.n:
                out[first:last] = part
        return out

    def matmul(self, a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``a (M, K) @ B`` as float32 ``(M, N)``: into ``out`` when it is a C-contiguous array of
        that shape and N a multiple of 16, else a fresh C-contiguous array (when N is not a
        multiple of 16, a copy of the padded rows' first N columns: downstream kernels and
        users get what BLAS would give). The caller checked :meth:`takes`."""
        m = a.shape[0]
        if not (out is not None and self._n_pad == self.n and out.dtype == _F32 and out.shape == (m, self.n)
                and out.flags.c_contiguous):
            out = output_empty((m, self._n_pad), _F32)  # the kernel's first K block stores: no zeroing
        lda = a.strides[0] // 4
        head = (a.ctypes.data, self._packed_at, out.ctypes.data, lda, self._n_pad, m, self.k, self._n_pad, self._kc)
        tiles = -(-self._n_pad // TILE_COLS)
        count = max(1, min(self.nthreads, tiles, max(m * self.k * self._n_pad // MACS_PER_THREAD,
                                                      self.k * self._n_pad // WEIGHTS_PER_THREAD)))
        fn, n_pad = _kernel(), self._n_pad
        if count > 1 and threads.native():
            # shares of column tiles handed to the native pool's spinning helpers (~3 us, where
            # waking a worker thread took ~100 us a product: BERT at 2 threads, 24 products)
            threads.keep_blas_pinned()
            argv = np.array((_MODULE.address("sgemm"), *head), dtype=np.int64)
            if native_pool.pool(count - 1).run(native_shares.share_address(_columns_share), argv,
                                               native_pool.bounds_for(tiles, count)):
                return out if self._n_pad == self.n else np.ascontiguousarray(out[:, :self.n])

        def columns(first: int, last: int) -> None:  # a share of column tiles (ctypes drops the GIL)
            fn(*head, first * TILE_COLS, min(n_pad, last * TILE_COLS))

        run_shares(columns, (), tiles, count)
        return out if self._n_pad == self.n else np.ascontiguousarray(out[:, :self.n])


def _columns_share(argp, first, last):  # pragma: no cover - compiled (native_shares.share_address)
    """Column tiles [first, last) of a product on the packed weights: argv is the compiled
    ``sgemm``'s address, then its arguments up to the column range (:meth:`PackedFloatWeights.matmul`)."""
    v = native_shares.carray(native_shares.i64_at(argp), (10,))
    hi = last * TILE_COLS
    native_shares.call_address11(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], first * TILE_COLS,
                                 hi if hi < v[8] else v[8])
