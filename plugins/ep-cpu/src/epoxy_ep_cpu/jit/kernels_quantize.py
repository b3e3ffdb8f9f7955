"""Compiled ``QuantizeDequantizeLinear`` (a fused activation Q -> DQ pair) over float32.

Why compiled: the numpy path is five whole-array passes (divide, rint, +0, range check,
multiply; the clip and NaN scan on top when values leave the range), this is one read and one
write. Exact as the numpy path: float32 division (no fastmath, no reciprocal), ``rint`` half to
even, the clip to ``[lo - zp, hi - zp]``, NaN to ``-zp``, ``+ 0.0`` so a rounded -0.0 is the
pair's +0.0, then the float32 multiply (``epoxy_ep_cpu/ops/fake_quant.py`` says why it equals
the pair)."""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import kernel_cache  # noqa: F401 - the kernels' cache folder (numba picks it per kernel, at its definition)
from .threads import pick, serial_twin

#: elements one parallel iteration takes along the innermost axis
CHUNK = 1 << 14


@njit(cache=True, nogil=True, error_model="numpy")
def _span(x, start, stop, s, a, h, nan, y):  # pragma: no cover - compiled
    # selects, not branches, over slices indexed from 0: LLVM vectorizes this loop (8 float32 a
    # step); indexed from ``start`` it did not (4x slower, numba 0.68)
    zero = np.float32(0.0)
    xs = x[start:stop]
    ys = y[start:stop]
    for i in range(xs.shape[0]):
        v = np.rint(xs[i] / s)
        v = a if v < a else v
        v = h if v > h else v
        v = nan if v != v else v
        ys[i] = (v + zero) * s


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def fake_quant(x, channels, inner, scale, lo, hi, nan, y):  # pragma: no cover - compiled
    """``x``/``y`` flat, read as [outer, channels, inner]; parameters one per channel."""
    blocks = (inner + CHUNK - 1) // CHUNK
    for b in prange(x.shape[0] // inner * blocks):
        row = b // blocks
        c = row % channels
        start = row * inner + (b - row * blocks) * CHUNK
        stop = min(start + CHUNK, (row + 1) * inner)
        _span(x, start, stop, scale[c], lo[c], hi[c], nan[c], y)


fake_quant_serial = serial_twin(fake_quant)


def run_fake_quant(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, lo: int, hi: int, axis: int | None,
                   nthreads: int) -> np.ndarray:
    """``dequantize(quantize(x))`` for float32 ``x``; ``scale``/``zero_point`` hold one value
    (``axis`` None) or one per index of ``axis``."""
    channels = 1 if axis is None else x.shape[axis]
    inner = x.size if axis is None else int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    flat = np.ascontiguousarray(x).reshape(-1)
    zp = zero_point.reshape(-1).astype(np.float32)
    s = np.ascontiguousarray(scale.reshape(-1), dtype=np.float32)
    y = np.empty(flat.shape, np.float32)
    kernel = pick(fake_quant, fake_quant_serial, nthreads, x.size)
    # 0 - zp, not -zp: a NaN's value is (code 0 - zp) * s, +0.0 when zp is 0
    kernel(flat, channels, inner, s, np.float32(lo) - zp, np.float32(hi) - zp, np.float32(0.0) - zp, y)
    return y.reshape(x.shape)


#: how many memory-bound elements one element of the codes pass weighs (its float32 division)
DIVISION_WEIGHT = 8


@njit(cache=True, nogil=True, error_model="numpy")
def _codes_span(x, start, stop, s, zp, lo, hi, q):  # pragma: no cover - compiled
    # QuantizeLinear's steps in the numpy path's order, each in float32: the spec's division
    # (no reciprocal), rint half to even, + zero point, clip to [lo, hi], NaN to code 0
    xs = x[start:stop]
    qs = q[start:stop]
    zero = np.float32(0.0)
    for i in range(xs.shape[0]):
        v = np.rint(xs[i] / s) + zp
        v = lo if v < lo else v
        v = hi if v > hi else v
        v = zero if v != v else v
        qs[i] = v


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def codes(x, s, zp, lo, hi, q):  # pragma: no cover - compiled
    """``q = sat(rint(x / s) + zp)`` (8-bit ``q``) over flat float32 ``x``, in CHUNK-element spans."""
    n = x.shape[0]
    for b in prange((n + CHUNK - 1) // CHUNK):
        start = b * CHUNK
        _codes_span(x, start, min(start + CHUNK, n), s, zp, lo, hi, q)


codes_serial = serial_twin(codes)
#: the 8-bit code types and their ranges
CODE_RANGES = {np.dtype(np.uint8): (0.0, 255.0), np.dtype(np.int8): (-128.0, 127.0)}


def run_codes(x: np.ndarray, scale: np.float32, zero_point: np.float32, dtype: np.dtype, nthreads: int) -> np.ndarray:
    """QuantizeLinear's per-tensor codes (``dtype`` uint8 or int8) of float32 ``x`` for a
    float32 ``scale`` and integral float32 ``zero_point``: one pass instead of numpy's five
    (divide, rint, add, clip, cast). DynamicQuantizeLinear's codes too (uint8)."""
    flat = np.ascontiguousarray(x).reshape(-1)
    q = np.empty(flat.shape, dtype)
    lo, hi = CODE_RANGES[np.dtype(dtype)]
    # each element costs a vector division (~0.55 ns here, ~8x a memory-bound pass's): weighed
    # so, [128, 3072] gets a second thread (measured 240 -> 191 us; [128, 768] stays on one)
    work = x.size * DIVISION_WEIGHT
    pick(codes, codes_serial, nthreads, work)(flat, np.float32(scale), np.float32(zero_point), np.float32(lo),
                                              np.float32(hi), q)
    return q.reshape(x.shape)


def run_uint8_codes(x: np.ndarray, scale: np.float32, zero_point: np.float32, nthreads: int) -> np.ndarray:
    """DynamicQuantizeLinear's codes of float32 ``x`` for its computed ``scale`` and (float32,
    integral) ``zero_point``."""
    return run_codes(x, scale, zero_point, np.dtype(np.uint8), nthreads)


@njit(cache=True, nogil=True, error_model="numpy")
def _scale_rows(acc, scale, bias, y, first, last):  # pragma: no cover - compiled
    # float32(acc) * scale then + bias, two roundings as the unfused Cast -> Mul -> Add (no FMA)
    n = acc.shape[1]
    has_bias = bias.shape[0] > 0
    for r in range(first, last):
        a = acc[r]
        out = y[r]
        if has_bias:
            for j in range(n):
                out[j] = np.float32(a[j]) * scale[j] + bias[j]
        else:
            for j in range(n):
                out[j] = np.float32(a[j]) * scale[j]


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def scale_columns(acc, scale, bias, y):  # pragma: no cover - compiled
    """``y = float32(acc) * scale (+ bias)``, one value of each per column, over int32 ``acc``
    (M, N); rows in blocks of 64."""
    m = acc.shape[0]
    for b in prange((m + 63) // 64):
        _scale_rows(acc, scale, bias, y, b * 64, min(b * 64 + 64, m))


scale_columns_serial = serial_twin(scale_columns)
_NO_BIAS = np.empty(0, np.float32)


def run_scale_columns(acc: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, nthreads: int) -> np.ndarray:
    """MatMulIntegerToFloat's tail in one pass: ``float32(acc) * scale + bias`` for int32 ``acc``
    (..., N) and float32 ``scale`` / ``bias`` of one value or N (broadcast here)."""
    n = acc.shape[-1]
    rows = acc.reshape(-1, n) if acc.ndim != 2 else acc
    rows = np.ascontiguousarray(rows)
    s = np.ascontiguousarray(np.broadcast_to(scale.reshape(-1), (n,)), dtype=np.float32)
    b = _NO_BIAS if bias is None else np.ascontiguousarray(np.broadcast_to(bias.reshape(-1), (n,)), dtype=np.float32)
    y = np.empty(rows.shape, np.float32)
    pick(scale_columns, scale_columns_serial, nthreads, acc.size)(rows, s, b, y)
    return y.reshape(acc.shape)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _binary_code(va, vb, relu, mul, sy, zy, lo, hi):  # pragma: no cover - compiled
    # the sum or product of two dequantized values, its Relu, then QuantizeLinear's division,
    # rounding and saturation (NaN to code 0), all in float32; selects, not branches, so the
    # loops that call it (inlined) vectorize
    zero = np.float32(0.0)
    v = va * vb if mul else va + vb
    if relu:
        v = zero if v < zero else v
    q = np.rint(v / sy) + zy
    q = lo if q < lo else q
    q = hi if q > hi else q
    return zero if q != q else q


@njit(cache=True, nogil=True, error_model="numpy")
def _binary_span(a, b, start, stop, params, relu, mul, y):  # pragma: no cover - compiled
    # QuantizedAdd's / QuantizedMul's steps, each in float32 as the QDQ graph's ops take them
    # (ops/quantized_add.py); ``mul`` is the same for the whole call, so LLVM unswitches it
    za, sa, zb, sb, sy, zy, lo, hi = (params[0], params[1], params[2], params[3], params[4], params[5], params[6],
                                      params[7])
    xa, xb, ys = a[start:stop], b[start:stop], y[start:stop]  # slices: indexing from 0 vectorizes (9x)
    for i in range(ys.shape[0]):
        ys[i] = _binary_code((np.float32(xa[i]) - za) * sa, (np.float32(xb[i]) - zb) * sb, relu, mul, sy, zy, lo, hi)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def quantized_binary(a, b, params, relu, mul, y):  # pragma: no cover - compiled
    """``y = Q(max?(DQ(a) + DQ(b)))`` (``mul``: ``DQ(a) * DQ(b)``) over flat 8-bit ``a``, ``b``,
    ``y``; ``params`` float32 (a_zp, a_scale, b_zp, b_scale, y_scale, y_zp, lo, hi); CHUNK-element
    spans."""
    n = y.shape[0]
    for c in prange((n + CHUNK - 1) // CHUNK):
        _binary_span(a, b, c * CHUNK, min(c * CHUNK + CHUNK, n), params, relu, mul, y)


quantized_binary_serial = serial_twin(quantized_binary)


def run_quantized_binary(a: np.ndarray, b: np.ndarray, params: np.ndarray, relu: bool, mul: bool, dtype: np.dtype,
                         nthreads: int) -> np.ndarray:
    """:func:`quantized_binary` over two same-shape arrays. When either holds the channels-last
    codes QLinearConv writes, both are read channels last (the other copied so once) and the
    result is laid out the same way: a residual chain's codes then stay channels last from block
    to block, and each block's convolution reads them without a transpose."""
    channels_last = a.ndim == 4 and any(not x.flags.c_contiguous and _channels_last(x) for x in (a, b))
    if channels_last:
        a, b = (np.ascontiguousarray(x.transpose(0, 2, 3, 1)) for x in (a, b))
    else:
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    y = np.empty(a.shape, dtype)
    pick(quantized_binary, quantized_binary_serial, nthreads, y.size)(a.reshape(-1), b.reshape(-1), params, relu, mul,
                                                                     y.reshape(-1))
    return y.transpose(0, 3, 1, 2) if channels_last else y


def _channels_last(x: np.ndarray) -> bool:
    return bool(x.transpose(0, 2, 3, 1).flags.c_contiguous)


@njit(parallel=True, cache=True, nogil=True, error_model="numpy")
def quantized_binary_rows(a, b, params, relu, mul, y):  # pragma: no cover - compiled
    """:func:`quantized_binary` with ``b`` one value per row of ``a`` / ``y`` [rows, inner]: a
    per-channel gate ``[N, C, H, W] * [N, C, 1, 1]`` read as rows of N * C planes."""
    za, sa, zb, sb, sy, zy, lo, hi = (params[0], params[1], params[2], params[3], params[4], params[5], params[6],
                                      params[7])
    for r in prange(a.shape[0]):
        vb = (np.float32(b[r]) - zb) * sb
        xa, ys = a[r], y[r]
        for i in range(ys.shape[0]):
            ys[i] = _binary_code((np.float32(xa[i]) - za) * sa, vb, relu, mul, sy, zy, lo, hi)


quantized_binary_rows_serial = serial_twin(quantized_binary_rows)


def run_quantized_binary_rows(a: np.ndarray, b: np.ndarray, params: np.ndarray, relu: bool, mul: bool,
                              dtype: np.dtype, nthreads: int) -> np.ndarray:
    """``a`` [N, C, ...] with ``b`` [N, C, 1, ...] (one value per channel plane), in C order."""
    a = np.ascontiguousarray(a)
    rows = a.shape[0] * a.shape[1]
    y = np.empty(a.shape, dtype)
    pick(quantized_binary_rows, quantized_binary_rows_serial, nthreads, y.size)(
        a.reshape(rows, -1), np.ascontiguousarray(b).reshape(rows), params, relu, mul, y.reshape(rows, -1))
    return y


@njit(cache=True, nogil=True)
def _lookup_span(codes, table, start, stop, y):  # pragma: no cover - compiled
    xs, ys = codes[start:stop], y[start:stop]
    for i in range(ys.shape[0]):
        ys[i] = table[xs[i]]


@njit(parallel=True, cache=True, nogil=True)
def lookup(codes, table, y):  # pragma: no cover - compiled
    """``y[i] = table[codes[i]]`` over flat uint8 ``codes`` / ``y`` and a 256-byte ``table``."""
    n = y.shape[0]
    for c in prange((n + CHUNK - 1) // CHUNK):
        _lookup_span(codes, table, c * CHUNK, min(c * CHUNK + CHUNK, n), y)


lookup_serial = serial_twin(lookup)


def run_lookup(codes: np.ndarray, table: np.ndarray, nthreads: int) -> np.ndarray:
    """:func:`lookup` over ``codes`` of any layout whose elements are one dense block (C order,
    or the channels-last codes QLinearConv hands on): the result has the same strides, so a
    chain of int8 layers stays channels last. ``table`` 256 codes in bit-pattern order."""
    order = np.argsort([-s for s in codes.strides], kind="stable")
    dense = codes.transpose(order)
    if not dense.flags.c_contiguous:
        dense, order = np.ascontiguousarray(codes), np.arange(codes.ndim)
    y = np.empty(dense.shape, table.dtype)
    pick(lookup, lookup_serial, nthreads, y.size)(dense.reshape(-1).view(np.uint8), table.view(np.uint8),
                                                 y.reshape(-1).view(np.uint8))
    return y.transpose(np.argsort(order))


@njit(parallel=True, cache=True, nogil=True)
def lookup_planes(codes, tables, y):  # pragma: no cover - compiled
    """``y[r, i] = tables[r % C, codes[r, i]]`` over (N*C, P) uint8 planes: plane r is channel r % C."""
    planes = codes.shape[0]
    c = tables.shape[0]
    for r in prange(planes):
        table, src, dst = tables[r % c], codes[r], y[r]
        for i in range(src.shape[0]):
            dst[i] = table[src[i]]


lookup_planes_serial = serial_twin(lookup_planes)


@njit(parallel=True, cache=True, nogil=True)
def lookup_rows(codes, tables, y):  # pragma: no cover - compiled
    """``y[p, c] = tables[c * 256 + codes[p, c]]`` over (P, C) uint8 channels-last rows."""
    for r in prange(codes.shape[0]):
        src, dst = codes[r], y[r]
        for ci in range(src.shape[0]):
            dst[ci] = tables[ci * 256 + src[ci]]


lookup_rows_serial = serial_twin(lookup_rows)


def run_channel_lookup(codes: np.ndarray, tables: np.ndarray, nthreads: int) -> np.ndarray:
    """Per-channel lookups (axis 1, ``tables`` (C, 256) in bit-pattern order): channels-last
    codes (an NCHW view, as QLinearConv hands them on) by rows, written channels last; others
    by planes, in C order."""
    c = codes.shape[1]
    tables8 = np.ascontiguousarray(tables).view(np.uint8)
    nhwc = codes.transpose(0, *range(2, codes.ndim), 1) if codes.ndim >= 3 else None
    if nhwc is not None and nhwc.flags.c_contiguous and not codes.flags.c_contiguous:
        y = np.empty(nhwc.shape, tables.dtype)
        pick(lookup_rows, lookup_rows_serial, nthreads, y.size)(
            nhwc.reshape(-1, c).view(np.uint8), tables8.reshape(-1), y.reshape(-1, c).view(np.uint8))
        return y.transpose(0, codes.ndim - 1, *range(1, codes.ndim - 1))
    dense = np.ascontiguousarray(codes)
    y = np.empty(dense.shape, tables.dtype)
    planes = dense.shape[0] * c
    pick(lookup_planes, lookup_planes_serial, nthreads, y.size)(
        dense.reshape(planes, -1).view(np.uint8), tables8.reshape(c, 256), y.reshape(planes, -1).view(np.uint8))
    return y


@njit(cache=True, nogil=True, error_model="numpy")
def _mean_code(total, count, params, dtype_lo, dtype_hi):  # pragma: no cover - compiled
    # (sum - count * x_zp) exact in int64, then one float64 rounding: the exact mean's code
    centred = np.float64(np.int64(total) - np.int64(count) * np.int64(params[0]))
    q = np.rint(centred * params[1]) + params[2]
    return dtype_lo if q < dtype_lo else (dtype_hi if q > dtype_hi else q)


@njit(parallel=True, cache=True, nogil=True)
def mean_rows(x, params, out):  # pragma: no cover - compiled
    """``out[r]``: the code of the mean of 8-bit row ``x[r, :]``; ``params`` float64 (x_zp,
    x_scale / (y_scale * count), y_zp, lo, hi); sums exact in int32 (rows up to 8M elements)."""
    for r in prange(x.shape[0]):
        acc = np.int32(0)
        row = x[r]
        for i in range(row.shape[0]):
            acc += np.int32(row[i])
        out[r] = _mean_code(acc, row.shape[0], params, params[3], params[4])


@njit(parallel=True, cache=True, nogil=True)
def mean_positions(x, params, out):  # pragma: no cover - compiled
    """``out[n, c]``: the code of the mean of ``x[n, :, c]`` over a channels-last 8-bit block
    [N, positions, C]; ``params`` as :func:`mean_rows`."""
    for n in prange(x.shape[0]):
        acc = np.zeros(x.shape[2], np.int32)
        for p in range(x.shape[1]):
            row = x[n, p]
            for c in range(row.shape[0]):
                acc[c] += np.int32(row[c])
        for c in range(x.shape[2]):
            out[n, c] = _mean_code(acc[c], x.shape[1], params, params[3], params[4])


mean_rows_serial = serial_twin(mean_rows)
mean_positions_serial = serial_twin(mean_positions)


def run_channel_means(codes: np.ndarray, params: np.ndarray, dtype: np.dtype, nthreads: int) -> np.ndarray:
    """The [N, C] codes (of ``dtype``) of the means of 8-bit ``codes`` [N, C, spatial...] over
    their spatial axes, read in the order they lie (C order, or the channels-last codes
    QLinearConv hands on); ``params`` as :func:`mean_rows`."""
    n, c = codes.shape[:2]
    out = np.empty((n, c), dtype)
    if codes.ndim > 2 and not codes.flags.c_contiguous:
        last = codes.transpose(0, *range(2, codes.ndim), 1)
        if last.flags.c_contiguous:
            pick(mean_positions, mean_positions_serial, nthreads, codes.size)(last.reshape(n, -1, c), params, out)
            return out
    rows = np.ascontiguousarray(codes).reshape(n * c, -1)
    pick(mean_rows, mean_rows_serial, nthreads, codes.size)(rows, params, out.reshape(-1))
    return out
