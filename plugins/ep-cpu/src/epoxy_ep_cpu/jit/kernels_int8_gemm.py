"""An exact 8-bit integer GEMM on AVX512-VNNI, for the integer products with constant weights
(MatMulInteger, QLinearMatMul, DynamicQuantizeMatMul, MatMulIntegerToFloat; ConvInteger and
QLinearConv through ``kernels_int8_conv``).

Why: numpy and OpenBLAS have no integer GEMM, so the integer kernels compute exactly on float32
BLAS (``ops/_int_matmul.py``) and an int8 model ran at best at float32 speed. One VNNI
instruction (``vpdpbusd``) multiplies 64 unsigned by 64 signed bytes in groups of four and adds
each group into one of 16 int32 lanes; numba cannot emit it (it widens integer arithmetic to
int64), so the microkernel is written here in LLVM IR and compiled by llvmlite (numba's own code
generator) for this CPU, once per process, at the first integer product big enough to use it.

The kernel multiplies ``A (M, Kp) uint8`` (rows ``lda`` bytes apart) by the packed weights: B's
columns in tiles of ``TILE_COLS`` (64; the last tile 16, 32 or 48 wide), each tile stored as
``(Kp / 4, width, 4)`` int8, so that four consecutive K bytes of 16 columns fill one register.
A register tile is ``TILE_ROWS`` (6) rows x 64 columns: 24 accumulators of 16 int32 lanes, one
per output element, stay in registers while K is walked four bytes at a time (per step: four
loads of B, six broadcasts of four A bytes, 24 ``vpdpbusd``), then are stored as they are.
Rows and columns at the edges take smaller tiles of the same code, so nothing is padded but K
(to a multiple of 4, with zeros in B) and N (to a multiple of 16). Columns are walked in panels
of ~256 KB of B, which stay in the L2 cache while every row tile reads them.

Measured on this kind of machine (Zen 4, 1 thread, exact results, product only): 3136 x 64 x
256 (a 1x1 convolution of a 64-channel 56x56 map) 0.61 -> 0.26 ms, 3136 x 576 x 64 0.57 ->
0.51, 128 x 768 x 3072 1.44 -> 1.32 (230 GMAC/s), against the kernel it replaced, which kept one
accumulator per output element's 64-byte K slices and summed each accumulator's lanes at the
end: that cost as much as the products themselves when K is 64 (session 22).

Codes of other signedness and the zero points are folded in exactly: with ``a_u = a + oa``
(``oa`` = 128 for int8 activations, which makes them unsigned) and ``b_s = b - ob`` (``ob`` =
128 for uint8 weights), the kernel's ``V = sum (a + oa)(b - ob)`` gives
``sum (a - za)(b - zb) = V + (ob - zb) * rowsum(a) - (oa + za) * colsum(b) + K (oa ob + za zb)``,
every term in wrapping int32 arithmetic, which equals the int64 result wrapped to int32 (the
float32-BLAS path's result, bit for bit). ``|V| <= K * 255 * 128`` stays in int32 for
``K <= MAX_K``.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any

import numpy as np

from epoxy.kit.aligned import aligned_empty, output_empty

from . import config, llvm_module
from .int8_gemm_ir import EPILOGUES, K_GROUP, LANES, TILE_COLS, TILE_ROWS, module_ir
from .threads import worker_pool

#: bytes of packed B one column panel holds: the panel stays in L2 while every row tile reads it
PANEL_BYTES = 256 * 1024
#: longest K whose kernel sums cannot overflow int32 (K * 255 * 128 < 2**31)
MAX_K = 1 << 16
#: integers and biases below this take the float32 requantization (``Requantization``): their
#: sum stays exact in float32
F32_EXACT = 1 << 23
#: multiply-adds below which the float32-chunk path is faster: a call's fixed cost is ~18 us
#: (the ctypes call 3, each buffer address 2, the padding copy and the zero-point terms);
#: 64 x 64 x 64 (0.26 M) ran at 0.84x that path's speed, 64 x 256 x 256 (4.2 M) at 1.44x
MIN_MACS = 1 << 20
#: multiply-adds per thread below which a product runs on fewer threads. Measured on this
#: 2-vCPU machine (session 19): 128 x 768 x 3072 runs 1.58x faster on two threads, 512 x 768 x
#: 3072 1.78x, but a resnet layer's 3136 x 576 x 64 only 1.19x alone, and inside a model the
#: hand-off to the worker made the 2-thread QDQ resnet50 slower than serial GEMMs (39.7 vs
#: 37.1 ms); at 2**26 the conv layers stay serial (38.0 ms) and transformer-sized products split.
#: 2**24 since session 22: with its stem and adds on codes too, a QDQ resnet50 runs no float GEMM
#: whose OpenBLAS worker would keep spinning on the second core, and its layers split pay (2
#: threads, epoxy's whole-chain QDQ files, median ms from 2**26 to 2**24: resnet50 26.8 -> 19.9,
#: densenet121 47.7 -> 38.8; models with float convolutions left lose a little: inception_v1
#: 16.1 -> 16.5, inception_v2 17.2 -> 17.5, squeezenet 5.48 -> 5.54; 2**22 and 2**20 lost more)
MACS_PER_THREAD = 1 << 24

_REQUIRED_FEATURES = ("avx512f", "avx512bw", "avx512vnni")
_U8, _I8, _I32, _I64 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)


@functools.cache
def support() -> str | None:
    """None when the kernel can run here, else why not (no llvmlite, or a CPU without
    AVX512-VNNI: the float32-BLAS path runs then). Probed once; compiles nothing."""
    return llvm_module.missing(_REQUIRED_FEATURES)


def _signatures() -> dict[str, list[Any]]:
    """Every entry point's ctypes arguments: ``gemm_<epilogue>`` and its grouped twin
    ``gemm_<epilogue>_groups`` (4 more counts) for each of ``int8_gemm_ir.EPILOGUES``."""
    signatures: dict[str, list[Any]] = {}
    for name, spec in EPILOGUES.items():
        for entry, counts in ((name, 7), (f"{name}_groups", 11)):
            signatures[f"gemm_{entry}"] = [*[ctypes.c_void_p] * 3, *[ctypes.c_int64] * counts,
                                           *[ctypes.c_void_p] * len(spec.columns),
                                           *[ctypes.c_double] * len(spec.scalars)]
    return signatures


#: every entry point, compiled at the first call in a process (~0.3 s) and kept with its engine
_MODULE = llvm_module.LazyModule("the int8 GEMM", _REQUIRED_FEATURES, module_ir, _signatures(),
                                 config.compiled_code_dir)


def _kernel(epilogue: str = "int32") -> Any:
    """The compiled ``gemm_<epilogue>`` (``int8_gemm_ir.EPILOGUES``, or ``<epilogue>_groups``
    for the grouped twin) as a ctypes function (it releases the GIL while it runs)."""
    return _MODULE.function(f"gemm_{epilogue}")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class PackedInt8Weights:
    """A constant right operand ``B (K, N)`` of 8-bit codes with its zero point (None, a
    scalar or one per column), packed once for the kernel (:func:`_packed_tiles`); with its
    column sums and zero points as int64."""

    __slots__ = ("_base", "_base64", "_columns", "_k_pad", "_n_pad", "_offset", "_packed", "_packed_at", "_panel",
                 "_row_factor", "_slope", "_slope64", "k", "n", "nthreads")

    def __init__(self, b: np.ndarray, zero_point: np.ndarray | None, nthreads: int) -> None:
        k, n = b.shape
        self.k, self.n, self.nthreads = k, n, max(1, nthreads)
        self._offset = 128 if b.dtype == _U8 else 0
        self._packed = _packed_tiles(b, self._offset)
        self._packed_at = self._packed.ctypes.data
        self._k_pad, self._n_pad = _round_up(k, K_GROUP), _round_up(n, LANES)
        self._panel = max(TILE_COLS, PANEL_BYTES // self._k_pad // TILE_COLS * TILE_COLS)
        self._columns: dict[tuple[int, int], np.ndarray] = {}
        # the column term of the module docstring, ``K (oa ob + za zb) - (oa + za) colsum(b)``,
        # split as base[oa] + za * slope, each wrapped to int32 once (int32 arithmetic wraps)
        col_sums = b.sum(axis=0, dtype=_I64)
        zb = np.zeros(1, _I64) if zero_point is None else np.asarray(zero_point).astype(_I64).reshape(-1)
        ob = self._offset
        self._base64 = {oa: k * oa * ob - oa * col_sums for oa in (0, 128)}
        self._slope64 = np.ascontiguousarray(np.broadcast_to(k * zb - col_sums, (n,)))
        self._base = {oa: base.astype(_I32) for oa, base in self._base64.items()}
        self._slope = self._slope64.astype(_I32)
        factor = ob - zb  # the row term's factor: one, or per column
        self._row_factor = factor if factor.any() else None

    @property
    def row_term(self) -> bool:
        """Whether the sums need a per-row term (weights whose zero point is off their offset:
        uint8 codes not centred on 128, int8 codes not on 0); the requantizing epilogue does not
        take those (:meth:`requantized` is None)."""
        return self._row_factor is not None

    @property
    def k_pad(self) -> int:
        """K padded as the kernel reads it: rows of A this long (past K, any bytes) are read in place."""
        return self._k_pad

    @staticmethod
    def fits(b: np.ndarray, zero_point: np.ndarray | None) -> bool:
        """Whether :class:`PackedInt8Weights` takes ``b``: 2-D 8-bit codes, K <= MAX_K, a
        zero point of the same dtype that is a scalar or one per column."""
        if b.ndim != 2 or b.dtype not in (_U8, _I8) or b.shape[0] > MAX_K or 0 in b.shape:
            return False
        if zero_point is None:
            return True
        zp = np.asarray(zero_point)
        return zp.dtype == b.dtype and (zp.size == 1 or (zp.ndim == 1 and zp.size == b.shape[1]))

    def matmul(self, a: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray | None:
        """``(a - zero_point) @ (B - its zero point)`` as int32 for ``a (..., M, K)`` of 8-bit
        codes with a scalar (or absent) zero point of its dtype; None for what this does not
        take (the caller's float32-BLAS path runs it), including products too small to win."""
        taken = self._taken(a, zero_point)
        if taken is None:
            return None
        rows, za = taken
        c = self._kernel_product(rows)
        c += self._base[128 if a.dtype == _I8 else 0]
        if za:
            c += np.int32(za) * self._slope
        if self._row_factor is not None:
            sums = rows.sum(axis=1, dtype=_I64)
            c += (sums[:, None] * self._row_factor[None, :]).astype(_I32)
        return c.reshape(a.shape[:-1] + (self.n,))

    def product_parts(self, a: np.ndarray, zero_point: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """``(V, column_term)`` for 2-D ``a (M, K)``: the kernel's int32 product ``V (M, Np)``
        (columns past N are not sums) and the int64 per-column term, so
        that :meth:`matmul` is ``int32(V[:M, :N] + column_term)``. For an epilogue that reads
        ``V`` once (requantization) instead of two more int32 passes here. None where
        :meth:`matmul` is None or has a row term (weights with a zero point off their offset)."""
        taken = self._taken_2d(a, zero_point)
        if taken is None:
            return None
        rows, za = taken
        oa = 128 if a.dtype == _I8 else 0
        return self._kernel_product(rows, trim=False), self._base64[oa] + za * self._slope64

    def _taken_2d(self, a: np.ndarray, zero_point: np.ndarray | None) -> tuple[np.ndarray, int] | None:
        """:meth:`_taken` for the epilogue paths: 2-D ``a`` and weights without a row term."""
        if self._row_factor is not None or a.ndim != 2:
            return None
        return self._taken(a, zero_point)

    def _taken(self, a: np.ndarray, zero_point: np.ndarray | None) -> tuple[np.ndarray, int] | None:
        """``a`` as (M, K) rows and its zero point as an int, or None for what the kernel does not
        take: not 8-bit codes of this K, a zero point not a scalar of ``a``'s dtype, too few MACs."""
        if a.dtype not in (_U8, _I8) or a.ndim < 2 or a.shape[-1] != self.k:
            return None
        if zero_point is not None:
            zp = np.asarray(zero_point)
            if zp.size != 1 or zp.dtype != a.dtype:
                return None
            za = int(zp.reshape(()))
        else:
            za = 0
        m = math.prod(a.shape[:-1])
        if m * self.n * self.k < MIN_MACS:
            return None
        return a.reshape(m, self.k), za

    def requantization(self, bias: np.ndarray | None, scale: np.ndarray,
                       y_zero_point: np.ndarray) -> Requantization:
        """The epilogue's terms for :meth:`requantized`, padded to this product's columns: built
        once per node when they are constants, else per call."""
        return Requantization(self.n, self._n_pad, bias, scale, y_zero_point)

    def requantized(self, a: np.ndarray, zero_point: np.ndarray | None, terms: Requantization) -> np.ndarray | None:
        """QLinearConv's output codes ``(M, N)`` (of ``terms.dtype``) for 2-D ``a (M, K)``: per
        element ``clip(rint((float64(sum) + bias[n]) * scale[n]) + y_zero_point)``, ``sum`` the
        exact int32 ``(a - zero_point) @ (B - its zero point)``, computed in the kernel's
        epilogue as the sums leave the registers (the int32 sums never reach memory). A view
        with row stride Np when N is not a multiple of 16. None where :meth:`product_parts` is."""
        taken = self._taken_2d(a, zero_point)
        if taken is None:
            return None
        rows, za = taken
        y = output_empty((rows.shape[0], self._n_pad), terms.dtype)
        column = self._column_term(128 if a.dtype == _I8 else 0, za)
        self._run(terms.epilogue, rows, y, (column.ctypes.data, *terms.addresses), terms.scalars)
        return y if self._n_pad == self.n else y[:, :self.n]

    def _column_term(self, oa: int, za: int) -> np.ndarray:
        """The column term as wrapped int32, padded to Np; kept per (offset, zero point):
        a layer sees one input zero point."""
        key = (oa, za)
        term = self._columns.get(key)
        if term is None:
            term = np.zeros(self._n_pad, _I32)
            term[:self.n] = (self._base64[oa] + za * self._slope64).astype(_I32)
            self._columns[key] = term
        return term

    def _kernel_product(self, rows: np.ndarray, trim: bool = True) -> np.ndarray:
        """``V = (rows + oa) @ packed`` (int32, M x N, C-contiguous; M x Np, the columns past N
        not sums, when not ``trim``)."""
        c = output_empty((rows.shape[0], self._n_pad), _I32)
        self._run("int32", rows, c, (), ())
        if trim and self._n_pad != self.n:
            return np.ascontiguousarray(c[:, :self.n])
        return c

    def _run(self, epilogue: str, rows: np.ndarray, out: np.ndarray, columns: tuple[int, ...],
             scalars: tuple[float, ...]) -> None:
        """``rows (M, K)`` times the packed weights into ``out (M, Np)`` through ``epilogue``,
        the row tiles split over the threads when the product is large enough."""
        m, k = rows.shape
        k_pad, n_pad = self._k_pad, self._n_pad
        if rows.dtype == _U8 and _padded_rows(rows, k_pad):
            a, lda = rows, rows.strides[0]  # the kernel reads rows where they are
        else:  # K's padding is never read into a sum: B's padded rows are zero
            a, lda = np.empty((m, k_pad), dtype=_U8), k_pad
            if rows.dtype == _I8:
                np.bitwise_xor(rows.view(_U8), np.uint8(0x80), out=a[:, :k])  # a + 128 as uint8
            else:
                a[:, :k] = rows
        head = (a.ctypes.data, self._packed_at, out.ctypes.data, lda, n_pad, k_pad // K_GROUP, n_pad, self._panel)
        _launch(_kernel(epilogue), head, (), m, m * n_pad * k_pad, self.nthreads, columns + scalars)


def _launch(fn: Any, head: tuple[int, ...], middle: tuple[int, ...], m: int, macs: int, nthreads: int,
            tail: tuple[Any, ...]) -> None:
    """``fn(*head, first, last, *middle, *tail)`` over rows [0, m), the row tiles split over up
    to ``nthreads`` threads (the calling one takes the first share) when ``macs`` is large
    enough (MACS_PER_THREAD)."""
    tiles = -(-m // TILE_ROWS)
    count = max(1, min(nthreads, tiles, macs // MACS_PER_THREAD))
    if count == 1:
        fn(*head, 0, m, *middle, *tail)
        return
    bounds = [min(m, TILE_ROWS * (tiles * t // count)) for t in range(count + 1)]
    pool = worker_pool()
    rest = [pool.submit(fn, *head, bounds[t], bounds[t + 1], *middle, *tail) for t in range(1, count)]
    fn(*head, bounds[0], bounds[1], *middle, *tail)
    for done in rest:
        done.result()


class Requantization:
    """QLinearConv's requantization as the GEMM's epilogue reads it: ``bias`` (None or int32 per
    column) and ``scale`` (float64, one or per column) as float64 padded to Np (``biases``,
    ``scales``; also read by the kernels that requantize outside the GEMM), the output zero
    point and its dtype's range as floats (``scalars``), and the epilogue that reads them
    (``epilogue``, its column ``addresses``): ``requantize_f32`` when the scales are float32
    values and the biases within 2**23 (then float32 steps give the float64 codes wherever a
    vector's products are not within their rounding error of a half step: those vectors take
    the float64 steps; ``int8_gemm_ir._store_requantized_f32``), else ``requantize``. Float32
    halves the epilogue's vector work (2-3% on QDQ CNNs, bench/README.md "Session 23")."""

    __slots__ = ("addresses", "biases", "biases32", "dtype", "epilogue", "scalars", "scales", "scales32")

    def __init__(self, n: int, n_pad: int, bias: np.ndarray | None, scale: np.ndarray,
                 y_zero_point: np.ndarray) -> None:
        self.biases = np.zeros(n_pad, np.float64)
        if bias is not None:
            self.biases[:n] = bias.reshape(-1)
        self.scales = np.zeros(n_pad, np.float64)
        self.scales[:n] = scale.reshape(-1)
        self.dtype = np.asarray(y_zero_point).dtype
        info = np.iinfo(self.dtype)
        self.scalars = (float(np.asarray(y_zero_point).reshape(())), float(info.min), float(info.max))
        self.biases32 = self.biases.astype(np.float32)
        self.scales32 = self.scales.astype(np.float32)
        f32 = (bool(np.array_equal(self.scales32.astype(np.float64), self.scales))
               and bool((np.abs(self.biases) < F32_EXACT).all()))
        self.epilogue = "requantize_f32" if f32 else "requantize"
        self.addresses: tuple[int, ...] = (self.biases.ctypes.data, self.scales.ctypes.data)
        if f32:
            self.addresses += (self.biases32.ctypes.data, self.scales32.ctypes.data)


class GroupedInt8Weights:
    """The constant right operands of a grouped product, ``B_g (K, N)`` of 8-bit codes per group
    with their zero points, packed back to back (each as :class:`PackedInt8Weights` packs it) for
    the kernel's grouped entry point, which multiplies every group in one call: a grouped
    convolution's groups are small products (ShuffleNet's: 196 x 68 x 68), where the ~8 us of a
    call from Python per group cost as much as a product."""

    __slots__ = ("_columns", "_packed", "_packed_at", "_panel", "_parts", "groups", "k", "k_pad", "n", "n_pad",
                 "nthreads")

    def __init__(self, bs: list[np.ndarray], zero_points: list[np.ndarray | None], nthreads: int) -> None:
        self._parts = [PackedInt8Weights(b, zp, nthreads) for b, zp in zip(bs, zero_points)]
        first = self._parts[0]
        self.groups, self.k, self.n, self.nthreads = len(bs), first.k, first.n, first.nthreads
        self.k_pad, self.n_pad, self._panel = first._k_pad, first._n_pad, first._panel
        # each part is a whole number of cache lines (Kp a multiple of 4, Np of 16)
        self._packed = np.concatenate([part._packed for part in self._parts],
                                      out=aligned_empty(sum(part._packed.size for part in self._parts), _I8))
        self._packed_at = self._packed.ctypes.data
        self._columns: dict[tuple[int, int], np.ndarray] = {}

    @property
    def row_term(self) -> bool:
        """Whether any group's sums need a row term (:attr:`PackedInt8Weights.row_term`)."""
        return any(part.row_term for part in self._parts)

    def requantization(self, bias: np.ndarray | None, scale: np.ndarray,
                       y_zero_point: np.ndarray) -> Requantization:
        """The epilogue's terms for every group, each group's padded to Np: ``bias`` (None or
        int32) and ``scale`` (one, or per output column of all groups, G * N)."""
        g, n, n_pad = self.groups, self.n, self.n_pad
        scales = np.zeros((g, n_pad), np.float64)
        scales[:, :n] = np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (g * n,)).reshape(g, n)
        biases = None
        if bias is not None:
            biases = np.zeros((g, n_pad), np.float64)
            biases[:, :n] = np.asarray(bias).reshape(g, n)
        return Requantization(g * n_pad, g * n_pad, None if biases is None else biases.reshape(-1),
                              scales.reshape(-1), y_zero_point)

    def requantized(self, a: np.ndarray, zero_point: np.ndarray | None, terms: Requantization) -> np.ndarray | None:
        """QLinearConv's output codes ``(M, G * N)`` for ``a (G, M, K)``, group g's rows ``a[g]``
        (any strides with unit steps along K: a 1x1 layer's groups are column slices of the
        channels-last image), group g's codes in columns ``[g N, (g + 1) N)``. The kernel stores
        whole rows of Np codes, so a group overwrites the start of the next one's columns, which
        that group then writes (groups run in order within a row), and the rows keep Np - N
        columns of room for the last group, dropped by a copy. None for weights with a row term,
        or ``a`` not 8-bit codes of this K with a scalar zero point of its dtype."""
        if self.row_term or a.ndim != 3 or a.shape[0] != self.groups or a.shape[2] != self.k:
            return None
        if a.dtype not in (_U8, _I8) or a.strides[2] != 1:
            return None
        if zero_point is not None and (np.asarray(zero_point).size != 1 or np.asarray(zero_point).dtype != a.dtype):
            return None
        za = 0 if zero_point is None else int(np.asarray(zero_point).reshape(()))
        oa = 128 if a.dtype == _I8 else 0
        g, m, k = a.shape
        if a.dtype == _U8 and _readable(a, self.k_pad):
            rows = a
        else:  # a copy the kernel reads: K padded, int8 codes made unsigned (+128)
            rows = np.empty((g, m, self.k_pad), dtype=_U8)
            if a.dtype == _I8:
                np.bitwise_xor(a.view(_U8), np.uint8(0x80), out=rows[:, :, :k])
            else:
                rows[:, :, :k] = a
        width = g * self.n + self.n_pad - self.n
        y = output_empty((m, width), terms.dtype)
        column = self._column_term(oa, za)
        head = (rows.ctypes.data, self._packed_at, y.ctypes.data, rows.strides[1], width, self.k_pad // K_GROUP,
                self.n_pad, self._panel)
        middle = (g, rows.strides[0], self.k_pad * self.n_pad, self.n)
        _launch(_kernel(f"{terms.epilogue}_groups"), head, middle, m, g * m * self.n_pad * self.k_pad, self.nthreads,
                (column.ctypes.data, *terms.addresses, *terms.scalars))
        # C-ordered rows: the ops after a grouped layer (a channel shuffle's reshapes, a residual
        # add) read channels-last codes fast only when contiguous (ShuffleNet 7.15 -> 6.70 ms)
        return y if width == g * self.n else np.ascontiguousarray(y[:, :g * self.n])

    def _column_term(self, oa: int, za: int) -> np.ndarray:
        """Every group's column term (:meth:`PackedInt8Weights._column_term`), back to back."""
        key = (oa, za)
        term = self._columns.get(key)
        if term is None:
            term = np.concatenate([part._column_term(oa, za) for part in self._parts])
            self._columns[key] = term
        return term


def _readable(a: np.ndarray, k_pad: int) -> bool:
    """Whether the kernel may read every row of ``a (G, M, K)`` ``k_pad`` bytes long in place:
    the last one's bytes past K still inside the array that owns the memory (past K a row
    multiplies B's zero padding: any value adds nothing)."""
    owner = a if a.base is None else a.base
    if a.size == 0 or not isinstance(owner, np.ndarray) or not owner.flags.c_contiguous or min(a.strides) < 0:
        return False
    last = a.ctypes.data + (a.shape[0] - 1) * a.strides[0] + (a.shape[1] - 1) * a.strides[1]
    return bool(last + k_pad <= owner.ctypes.data + owner.nbytes)


def _padded_rows(rows: np.ndarray, k_pad: int) -> bool:
    """Whether the kernel may read ``rows (M, K)`` in place, ``k_pad`` bytes a row: rows
    contiguous, ``k_pad`` apart at least, and the last row's bytes past K inside the buffer
    (they multiply B's zero padding: any value adds nothing)."""
    if rows.strides[1] != 1 or rows.strides[0] < k_pad:
        return False
    if rows.shape[1] == k_pad:
        return True
    owner = rows.base  # numpy keeps the array that owns the memory here
    if not isinstance(owner, np.ndarray) or not owner.flags.c_contiguous:
        return False
    end = owner.ctypes.data + owner.nbytes
    return bool(rows.ctypes.data + (rows.shape[0] - 1) * rows.strides[0] + k_pad <= end)


def _packed_tiles(b: np.ndarray, offset: int) -> np.ndarray:
    """``B (K, N)`` shifted to signed by ``offset`` (128 for uint8 codes), zero padded to
    (Kp, Np) and laid out as the kernel reads it: column tiles of TILE_COLS (the last one
    narrower), tile ``[j, j + w)`` at bytes ``[j Kp, (j + w) Kp)`` as ``(Kp / 4, w, 4)``."""
    k, n = b.shape
    k_pad, n_pad = _round_up(k, K_GROUP), _round_up(n, LANES)
    signed = np.zeros((k_pad, n_pad), dtype=_I8)
    if offset:
        np.bitwise_xor(b, np.uint8(0x80), out=signed[:k, :n].view(_U8))  # b - 128 as int8
    else:
        signed[:k, :n] = b
    packed = aligned_empty(k_pad * n_pad, _I8)  # B's register loads on cache lines
    for first in range(0, n_pad, TILE_COLS):
        width = min(TILE_COLS, n_pad - first)
        tile = signed[:, first:first + width].reshape(k_pad // K_GROUP, K_GROUP, width).transpose(0, 2, 1)
        packed[first * k_pad:(first + width) * k_pad] = tile.reshape(-1)
    return packed
