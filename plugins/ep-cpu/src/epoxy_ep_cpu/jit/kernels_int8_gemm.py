"""An exact 8-bit integer GEMM on AVX512-VNNI, for the integer products with constant weights
(MatMulInteger, QLinearMatMul, DynamicQuantizeMatMul, MatMulIntegerToFloat; ConvInteger and
QLinearConv through ``kernels_int8_conv``).

Why: numpy and OpenBLAS have no integer GEMM, so the integer kernels compute exactly on float32
BLAS (``ops/_int_matmul.py``) and an int8 model ran at best at float32 speed. One VNNI
instruction (``vpdpbusd``) multiplies 64 unsigned by 64 signed bytes and adds them into 16 int32
lanes; numba cannot emit it (it widens integer arithmetic to int64), so the microkernel is
written here in LLVM IR and compiled by llvmlite (numba's own code generator) for this CPU,
once per process, at the first integer product big enough to use it.

The kernel multiplies ``A (Mp, Kp) uint8`` by ``B (Np, Kp) int8`` (weights transposed and packed
once: rows padded to a multiple of 4, K to a multiple of 64 with zeros, so padding adds
nothing) in tiles of 4 rows x 4 columns: 16 accumulators of 16 int32 lanes stay in registers
while K is walked 64 bytes at a time; the tile's sixteen accumulators are then summed by one
shuffle tree (``_tile_totals_ir``) and stored four lanes per row. The columns are
walked in blocks of ``BLOCK_COLS`` so a block of B stays in cache while every row tile reads it.
Measured on this kind of machine (1 thread, padding copies and zero-point terms included):
128 x 768 x 768 in 0.83 ms and 128 x 768 x 3072 in 2.82 ms (107 GMAC/s), against 2.17 and
10.7 ms on the float32-chunk path and 1.70 / 9.7 ms for plain sgemm.
With the shuffle-tree totals (session 19, same shapes, zero-point terms included): 0.42 and
1.63 ms (181-185 GMAC/s).

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
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

#: rows and columns of one register tile; bytes of K per step (one zmm register)
TILE_ROWS, TILE_COLS, K_STEP = 4, 4, 64
#: columns of B one pass over the rows reads (32 x 768 int8 = 24 KB: B's block stays in L1/L2
#: while every row tile reads it; a whole 768 x 3072 B streamed from L3 per row tile made the
#: kernel memory-bound)
BLOCK_COLS = 32
#: longest K whose kernel sums cannot overflow int32 (K * 255 * 128 < 2**31)
MAX_K = 1 << 16
#: multiply-adds below which the float32-chunk path is faster: a call's fixed cost is ~18 us
#: (the ctypes call 3, each buffer address 2, the padding copy and the zero-point terms);
#: 64 x 64 x 64 (0.26 M) ran at 0.84x that path's speed, 64 x 256 x 256 (4.2 M) at 1.44x
MIN_MACS = 1 << 20
#: multiply-adds per thread below which a product runs on fewer threads. Measured on this
#: 2-vCPU machine (session 19): 128 x 768 x 3072 runs 1.58x faster on two threads, 512 x 768 x
#: 3072 1.78x, but a resnet layer's 3136 x 576 x 64 only 1.19x alone, and inside a model the
#: hand-off to the worker made the 2-thread QDQ resnet50 slower than serial GEMMs (39.7 vs
#: 37.1 ms); at 2**26 the conv layers stay serial (38.0 ms) and transformer-sized products split
MACS_PER_THREAD = 1 << 26

_REQUIRED_FEATURES = ("avx512f", "avx512bw", "avx512vnni")
_U8, _I8, _I32, _I64 = np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)


@functools.cache
def support() -> str | None:
    """None when the kernel can run here, else why not (no llvmlite, or a CPU without
    AVX512-VNNI: the float32-BLAS path runs then). Probed once; compiles nothing."""
    try:
        import llvmlite.binding as llvm
    except Exception as exc:  # noqa: BLE001 - an ImportError or a broken llvmlite
        return f"llvmlite cannot be imported: {type(exc).__name__}: {exc}"
    try:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        features = llvm.get_host_cpu_features()
    except Exception as exc:  # noqa: BLE001 - no native target
        return f"llvmlite has no native target: {type(exc).__name__}: {exc}"
    missing = [f for f in _REQUIRED_FEATURES if not features.get(f)]
    return f"this CPU lacks {', '.join(missing)}" if missing else None


def _tile_ir() -> str:
    """LLVM IR of ``gemm_u8s8(A, B, C, np, kp, first, last)``: rows [first, last) of
    ``C (., np) = A (., kp) @ B (np, kp).T`` (first, last, np multiples of the tile, kp of
    K_STEP). Typed-pointer syntax, which every llvmlite numba supports reads."""
    rows, cols = range(TILE_ROWS), range(TILE_COLS)
    vec = "<16 x i32>"
    out = [
        f"declare {vec} @llvm.x86.avx512.vpdpbusd.512({vec}, {vec}, {vec})",
        "define void @gemm_u8s8(i8* noalias nocapture readonly %A, i8* noalias nocapture readonly %B, "
        "i32* noalias nocapture %C, i64 %np, i64 %kp, i64 %first, i64 %last) {",
        "entry:", "  br label %blocks",
        # column blocks of BLOCK_COLS: a block of B stays in cache while every row tile reads it
        "blocks:", "  %jb = phi i64 [0, %entry], [%jb.next, %rows.done]",
        f"  %jb.next = add i64 %jb, {BLOCK_COLS}",
        "  %jb.past = icmp ugt i64 %jb.next, %np",
        "  %jb.end = select i1 %jb.past, i64 %np, i64 %jb.next",
        "  br label %rows",
        "rows:", "  %i = phi i64 [%first, %blocks], [%i.next, %cols.done]",
    ]
    for r in rows:
        out += [f"  %row{r} = add i64 %i, {r}", f"  %a.base{r} = mul i64 %row{r}, %kp"]
    out += ["  br label %cols", "cols:", "  %j = phi i64 [%jb, %rows], [%j.next, %k.done]"]
    for c in cols:
        out += [f"  %col{c} = add i64 %j, {c}", f"  %b.base{c} = mul i64 %col{c}, %kp"]
    out += ["  br label %k.loop", "k.loop:", "  %k = phi i64 [0, %cols], [%k.next, %k.loop]"]
    out += [f"  %acc{r}{c} = phi {vec} [zeroinitializer, %cols], [%sum{r}{c}, %k.loop]" for r in rows for c in cols]
    for name, base, ptr, count in (("a", "a.base", "%A", rows), ("b", "b.base", "%B", cols)):
        for t in count:
            out += [f"  %{name}.at{t} = add i64 %{base}{t}, %k",
                    f"  %{name}.p{t} = getelementptr i8, i8* {ptr}, i64 %{name}.at{t}",
                    f"  %{name}.q{t} = bitcast i8* %{name}.p{t} to {vec}*",
                    f"  %{name}{t} = load {vec}, {vec}* %{name}.q{t}, align 1"]
    out += [f"  %sum{r}{c} = call {vec} @llvm.x86.avx512.vpdpbusd.512({vec} %acc{r}{c}, {vec} %a{r}, {vec} %b{c})"
            for r in rows for c in cols]
    out += [f"  %k.next = add i64 %k, {K_STEP}", "  %k.end = icmp uge i64 %k.next, %kp",
            "  br i1 %k.end, label %k.done, label %k.loop", "k.done:"]
    out += _tile_totals_ir([f"%sum{r}{c}" for r in rows for c in cols])
    for r in rows:  # the totals vector holds the tile row by row: one 4-lane store per row
        lanes = ", ".join(f"i32 {TILE_COLS * r + c}" for c in cols)
        out += [f"  %c.row{r} = mul i64 %row{r}, %np",
                f"  %c.at{r} = add i64 %c.row{r}, %j",
                f"  %c.p{r} = getelementptr i32, i32* %C, i64 %c.at{r}",
                f"  %c.q{r} = bitcast i32* %c.p{r} to <{TILE_COLS} x i32>*",
                f"  %c.v{r} = shufflevector {vec} %totals, {vec} undef, <{TILE_COLS} x i32> <{lanes}>",
                f"  store <{TILE_COLS} x i32> %c.v{r}, <{TILE_COLS} x i32>* %c.q{r}, align 4"]
    out += [f"  %j.next = add i64 %j, {TILE_COLS}", "  %j.end = icmp uge i64 %j.next, %jb.end",
            "  br i1 %j.end, label %cols.done, label %cols",
            "cols.done:", f"  %i.next = add i64 %i, {TILE_ROWS}", "  %i.end = icmp uge i64 %i.next, %last",
            "  br i1 %i.end, label %rows.done, label %rows",
            "rows.done:", "  %blocks.end = icmp uge i64 %jb.next, %np",
            "  br i1 %blocks.end, label %exit, label %blocks", "exit:", "  ret void", "}"]
    return "\n".join(out)


def _tile_totals_ir(accumulators: list[str]) -> list[str]:
    """IR summing each of 16 accumulators' 16 lanes into one vector ``%totals`` (lane j: the total
    of accumulator j). Why not a ``vector.reduce.add`` per accumulator: with K = 64 (a 64-channel
    1x1 convolution) a tile's sixteen reductions cost several times its one step of dot products.
    A tree halves the lanes at each level: two vectors whose lanes hold groups of partial sums
    are split into the first and second halves of every group and added, so each level halves
    the partials per accumulator and doubles the accumulators per vector (45 shuffles and adds
    in all, against ~130). int32 addition wraps, so any order gives the same totals."""
    vec = "<16 x i32>"
    level, out, group = list(accumulators), [], 16
    for depth in range(4):
        half, merged = group // 2, []
        for pair in range(len(level) // 2):
            first: list[int] = []
            second: list[int] = []
            for start in range(0, 32, group):  # each group of either vector: its two halves
                first += range(start, start + half)
                second += range(start + half, start + group)
            name = f"%tree{depth}.{pair}"
            for tag, lanes in (("lo", first), ("hi", second)):
                mask = ", ".join(f"i32 {lane}" for lane in lanes)
                out.append(f"  {name}.{tag} = shufflevector {vec} {level[2 * pair]}, {vec} {level[2 * pair + 1]}, "
                           f"<16 x i32> <{mask}>")
            out.append(f"  {name} = add {vec} {name}.lo, {name}.hi")
            merged.append(name)
        level, group = merged, half
    out.append(f"  %totals = add {vec} {level[0]}, zeroinitializer")
    return out


_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def _kernel() -> Any:
    """The compiled ``gemm_u8s8`` as a ctypes function (it releases the GIL while it runs);
    compiled at the first call in a process (~0.1 s), kept with its engine."""
    fn = _compiled.get("fn")
    if fn is not None:
        return fn
    reason = support()  # also sets up llvmlite's native target
    if reason is not None:
        raise RuntimeError(f"the int8 GEMM cannot run here: {reason}")
    with _lock:
        if "fn" not in _compiled:
            import llvmlite.binding as llvm

            target = llvm.Target.from_default_triple()
            machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                                   features=llvm.get_host_cpu_features().flatten(), opt=3)
            module = llvm.parse_assembly(_tile_ir())
            module.verify()
            engine = llvm.create_mcjit_compiler(module, machine)
            engine.finalize_object()
            signature = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)
            _compiled["engine"] = engine  # the code lives as long as its engine
            _compiled["fn"] = signature(engine.get_function_address("gemm_u8s8"))
        return _compiled["fn"]


_pool: ThreadPoolExecutor | None = None


def _workers() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(thread_name_prefix="epoxy-int8-gemm")
        return _pool


def _forget_workers() -> None:
    """In a forked child the parent's workers do not exist, but its executor would count
    them as idle and queue work for nobody: the child starts a pool of its own."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_workers)


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


class PackedInt8Weights:
    """A constant right operand ``B (K, N)`` of 8-bit codes with its zero point (None, a
    scalar or one per column), packed once for the kernel: transposed to (Np, Kp) int8,
    shifted to signed (``ob``), zero padded; with its column sums and zero points as int64."""

    __slots__ = ("_base", "_base64", "_offset", "_packed", "_packed_at", "_row_factor", "_slope", "_slope64", "k", "n",
                 "nthreads")

    def __init__(self, b: np.ndarray, zero_point: np.ndarray | None, nthreads: int) -> None:
        k, n = b.shape
        self.k, self.n, self.nthreads = k, n, max(1, nthreads)
        self._offset = 128 if b.dtype == _U8 else 0
        packed = np.zeros((_round_up(n, TILE_COLS), _round_up(k, K_STEP)), dtype=_I8)
        if self._offset:
            np.bitwise_xor(b.T, np.uint8(0x80), out=packed[:n, :k].view(_U8))  # b - 128 as int8
        else:
            packed[:n, :k] = b.T
        self._packed = packed
        self._packed_at = packed.ctypes.data
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
        """``(V, column_term)`` for 2-D ``a (M, K)``: the kernel's int32 product ``V (Mp, Np)``
        (padded; rows and columns past M and N are not sums) and the int64 per-column term, so
        that :meth:`matmul` is ``int32(V[:M, :N] + column_term)``. For an epilogue that reads
        ``V`` once (requantization) instead of two more int32 passes here. None where
        :meth:`matmul` is None or has a row term (weights with a zero point off their offset)."""
        if self._row_factor is not None or a.ndim != 2:
            return None
        taken = self._taken(a, zero_point)
        if taken is None:
            return None
        rows, za = taken
        oa = 128 if a.dtype == _I8 else 0
        return self._kernel_product(rows, trim=False), self._base64[oa] + za * self._slope64

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

    def _kernel_product(self, rows: np.ndarray, trim: bool = True) -> np.ndarray:
        """``V = (rows + oa) @ packed.T`` (int32, M x N, C-contiguous; padded to the tiles when
        not ``trim``)."""
        m, k = rows.shape
        n_pad, k_pad = self._packed.shape
        m_pad = _round_up(m, TILE_ROWS)
        if rows.dtype == _U8 and (m_pad, k_pad) == (m, k) and rows.flags.c_contiguous:
            a = rows
        else:  # the padding is never read into a kept sum: B's padded columns are zero
            a = np.empty((m_pad, k_pad), dtype=_U8)
            if rows.dtype == _I8:
                np.bitwise_xor(rows.view(_U8), np.uint8(0x80), out=a[:m, :k])  # a + 128 as uint8
            else:
                a[:m, :k] = rows
        c = np.empty((m_pad, n_pad), dtype=_I32)
        fn = _kernel()
        tiles = m_pad // TILE_ROWS
        count = max(1, min(self.nthreads, tiles, (m * n_pad * k_pad) // MACS_PER_THREAD))
        args = (a.ctypes.data, self._packed_at, c.ctypes.data, n_pad, k_pad)
        if count == 1:
            fn(*args, 0, m_pad)
        else:
            bounds = [TILE_ROWS * (tiles * t // count) for t in range(count + 1)]
            pool = _workers()
            rest = [pool.submit(fn, *args, bounds[t], bounds[t + 1]) for t in range(1, count)]
            fn(*args, bounds[0], bounds[1])
            for done in rest:
                done.result()
        if trim and (m_pad, n_pad) != (m, self.n):
            return np.ascontiguousarray(c[:m, :self.n])
        return c
