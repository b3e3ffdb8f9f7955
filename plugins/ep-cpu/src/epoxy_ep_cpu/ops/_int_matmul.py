"""Exact 8-bit integer matrix products on float32 BLAS (MatMulInteger, QLinearMatMul).

Why float32: every integer of magnitude <= 2**24 is exact in float32, so a GEMM whose
partial sums can never pass 2**24 returns the exact integer result whatever order BLAS adds
in, at sgemm speed (about twice dgemm's, which the previous float64 path used). The
reduction axis K is cut into chunks of ``2**24 // (max|a'| * max|b'|)`` (a' = a - a_zp,
b' = b - b_zp: 512 for uint8 activations against symmetric int8 weights), and the chunks'
exact results are added in int32 (int64 when K is long enough to overflow int32, then
wrapped to int32 as an int32 accumulator would).

A constant right operand (weights) is shifted by its zero point and converted once, when the
kernel is built (:func:`shift_b`), and its bound is read from its values rather than its dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ._util import constant_input

_F32 = np.dtype(np.float32)
_I32 = np.dtype(np.int32)
_I64 = np.dtype(np.int64)
#: largest magnitude up to which every integer is exact in float32
EXACT_F32 = 1 << 24
_I32_MAX = (1 << 31) - 1
#: dtypes this path is exact for (8-bit codes); others use the caller's fallback
INT8_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


@dataclass(frozen=True)
class Shifted:
    """An operand with its zero point subtracted, in float32, and a bound on its magnitude."""

    values: np.ndarray
    bound: int


def row_zero_point(zp: np.ndarray | None, a_ndim: int) -> np.ndarray | None:
    """The left operand's zero point shaped to broadcast against ``(..., M, K)``: a scalar,
    an M-vector (per row, 2-D ``a``) or the spec's ``(..., M, 1)`` tensor; None when absent."""
    if zp is None:
        return None
    zp = np.asarray(zp)
    if zp.size == 1:
        return zp.reshape(())
    if zp.ndim == 1 and a_ndim >= 2:
        return zp.reshape(-1, 1)
    return zp


def col_zero_point(zp: np.ndarray | None) -> np.ndarray | None:
    """The right operand's zero point: a scalar, an N-vector (per column) or ``(..., 1, N)``."""
    if zp is None:
        return None
    zp = np.asarray(zp)
    return zp.reshape(()) if zp.size == 1 else zp


def _shift(x: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    if zp is None or not zp.any():
        return x.astype(_F32)
    return np.subtract(x, zp, dtype=_F32)  # one pass: both cast to float32, then subtracted


def _dtype_bound(dtype: np.dtype, zp: np.ndarray | None) -> int:
    """Largest ``|code - zp|`` any code of ``dtype`` can give."""
    info = np.iinfo(dtype)
    if zp is None or zp.size == 0:
        return max(-int(info.min), int(info.max))
    return max(int(info.max) - int(zp.min()), int(zp.max()) - int(info.min))


def shift_a(a: np.ndarray, zp: np.ndarray | None) -> Shifted:
    """The left operand (activations, new each run): bound from its dtype, no data scan."""
    zp = row_zero_point(zp, a.ndim)
    return Shifted(_shift(a, zp), _dtype_bound(a.dtype, zp))


def shift_b(b: np.ndarray, zp: np.ndarray | None, *, constant: bool = False) -> Shifted:
    """The right operand. A constant one (packed once) is scanned for its true bound: symmetric
    int8 weights (|w| <= 127) then allow longer chunks than the dtype's range would."""
    zp = col_zero_point(zp)
    values = np.ascontiguousarray(_shift(b, zp))
    if constant:
        bound = int(np.abs(values).max()) if values.size else 0
    else:
        bound = _dtype_bound(b.dtype, zp)
    return Shifted(values, bound)


def chunk_length(bound_a: int, bound_b: int) -> int:
    """Longest K slice whose float32 partial sums stay exact (``k * |a'| * |b'| <= 2**24``)."""
    per_term = bound_a * bound_b
    return EXACT_F32 // per_term if per_term else 1 << 62


def _gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a (..., M, K) @ b``; with a 2-D ``b`` all of ``a``'s rows go to one GEMM (numpy
    would run one per leading index)."""
    if b.ndim == 2 and a.ndim > 2 and a.flags.c_contiguous:
        rows = math.prod(a.shape[:-1])
        return np.matmul(a.reshape(rows, a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[-1:])
    return np.asarray(np.matmul(a, b))  # 1-D @ 1-D gives a numpy scalar


def matmul_exact(a: Shifted, b: Shifted) -> np.ndarray:
    """``a' @ b'`` as int32, bit-identical to an int64 product wrapped to int32."""
    k = a.values.shape[-1]
    step = chunk_length(a.bound, b.bound)
    if k <= step:  # one GEMM, exact as it stands
        return _gemm(a.values, b.values).astype(_I32)
    wide = k * a.bound * b.bound > _I32_MAX
    acc: np.ndarray | None = None
    b_k = b.values.ndim - 2 if b.values.ndim >= 2 else 0  # a 1-D right operand is all K
    for k0 in range(0, k, step):
        rows = (slice(None),) * b_k + (slice(k0, k0 + step),)
        part = _gemm(a.values[..., k0:k0 + step], b.values[rows])
        if acc is None:
            acc = part.astype(_I64 if wide else _I32)
        else:  # exact: |part| <= 2**24 and the running sum fits the accumulator
            np.add(acc, part, out=acc, casting="unsafe")
    assert acc is not None  # k > step >= 1: the loop ran
    return acc.astype(_I32) if wide else acc


def is_int8(*dtypes: np.dtype) -> bool:
    """Whether every dtype is int8 or uint8 (the codes this module is exact for)."""
    return all(np.dtype(d) in INT8_TYPES for d in dtypes)


def _absent(node: NodeSpec, index: int) -> bool:
    return index >= len(node.inputs) or not node.inputs[index]


def packed_right(node: NodeSpec, b_index: int, zp_index: int) -> Shifted | None:
    """The right operand shifted and in float32, once, when it and its zero point are
    constants (the weights of MatMulInteger, QLinearMatMul, DynamicQuantizeMatMul...)."""
    b = constant_input(node, b_index)
    zp = None if _absent(node, zp_index) else constant_input(node, zp_index)
    if b is None or not is_int8(b.dtype) or (zp is None and not _absent(node, zp_index)):
        return None
    return shift_b(b, zp, constant=True)


Product = Callable[[np.ndarray, np.ndarray, "np.ndarray | None", "np.ndarray | None"], np.ndarray]


def exact_product(packed: Shifted | None, fallback: Product) -> Product:
    """``(a - a_zp) @ (b - b_zp)`` as int32 on the float32-chunk path for 8-bit codes (with
    the packed weights when given); ``fallback(a, b, a_zp, b_zp)`` for other codes."""

    def product(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None, b_zp: np.ndarray | None) -> np.ndarray:
        if not is_int8(a.dtype, b.dtype):
            return fallback(a, b, a_zp, b_zp)
        right = packed if packed is not None else shift_b(b, b_zp)
        return matmul_exact(shift_a(a, a_zp), right)

    return product


def weights_product(node: NodeSpec, b_index: int, zp_index: int, fallback: Product) -> Product:
    """The node's integer product with its right operand (the weights) prepared once when
    constant: for the jit tier's int8 GEMM (``jit/kernels_int8_gemm.py``, AVX512-VNNI) when
    it runs here, which takes the products large enough to gain and leaves the rest (and
    per-row activation zero points) to the float32-chunk path; that path's float32 copy of
    the weights is then made at its first use, not at session creation."""
    fast = _int8_gemm_weights(node, b_index, zp_index)
    if fast is None:
        return exact_product(packed_right(node, b_index, zp_index), fallback)
    lazy: list[Shifted] = []

    def float_path(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None, b_zp: np.ndarray | None) -> np.ndarray:
        if not lazy:
            packed = packed_right(node, b_index, zp_index)
            assert packed is not None  # the int8 GEMM took the same constant 8-bit weights
            lazy.append(packed)
        return matmul_exact(shift_a(a, a_zp), lazy[0])

    def product(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None, b_zp: np.ndarray | None) -> np.ndarray:
        done = fast.matmul(a, a_zp)
        if done is not None:
            return done  # type: ignore[no-any-return]
        if not is_int8(a.dtype, b.dtype):
            return fallback(a, b, a_zp, b_zp)
        return float_path(a, b, a_zp, b_zp)

    return product


def _int8_gemm_weights(node: NodeSpec, b_index: int, zp_index: int) -> Any:
    """The constant weights packed for the jit tier's int8 GEMM, or None (jit off, no
    AVX512-VNNI here, fed or unsuitable weights)."""
    module = jit.kernels("int8_gemm")
    if module is None or module.support() is not None:
        return None
    b = constant_input(node, b_index)
    zp = None if _absent(node, zp_index) else constant_input(node, zp_index)
    if b is None or (zp is None and not _absent(node, zp_index)) or not module.PackedInt8Weights.fits(b, zp):
        return None
    return module.PackedInt8Weights(b, zp, jit.thread_count())
