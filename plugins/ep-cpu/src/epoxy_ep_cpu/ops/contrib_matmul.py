"""onnxruntime contrib (``com.microsoft``) float matrix products: MatMulNBits, FusedMatMul.

MatMulNBits is what onnxruntime's ``MatMulNBitsQuantizer`` and quantized LLM exports emit:
``Y = A @ dequant(B)^T (+ bias)`` with ``B`` of shape ``(N, k_blocks, blob)``, ``bits``-wide
codes packed low bits first along K, one scale (and optional zero point) per block of
``block_size`` values of K. Zero points are either packed like ``B`` (uint8, rows of
``ceil(k_blocks * bits / 8)`` bytes) or unpacked in the scales' float type; absent, they
default to ``2 ** (bits - 1)``. ``g_idx`` (deprecated, GPTQ act-order) maps each k to its
block. When the weight inputs are constants the dequantized, transposed weight is built once
in the factory, so a run is a single BLAS GEMM in float32 (float64 for float64 inputs).

``accuracy_level`` 4 (int8 compute) is what onnxruntime's 4-bit quantizer writes by default;
onnxruntime's cpu kernel then quantizes each ``block_size`` run of A's K axis symmetrically
to int8 (``scale = max|a| / 127``) before its integer dot products, which moves results by
about 1% of their magnitude. We reproduce that rounding of A (then one float GEMM on the
dequantized weight, equal to its per-block integer sums scaled) in exactly the cases where
onnxruntime (1.32, x86) takes its int8 path: float32 A, constant weights, no or uint8 zero
points, no g_idx, and for 2 bits a block_size of at least 32. Other levels (0 unset, 1 fp32,
2 fp16, 3 bf16) run in full float32.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._util import constant_input

DOMAIN = "com.microsoft"
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    return _F64 if dtype == _F64 else _F32


def _unpack(packed: np.ndarray, bits: int, rows: int, count: int) -> np.ndarray:
    """``bits``-wide codes of a uint8 array, low bits first, as ``(rows, count)`` uint8."""
    flat = np.asarray(packed, dtype=np.uint8).reshape(rows, -1)
    if bits == 8:
        codes = flat
    else:
        per_byte = 8 // bits
        shifts = (np.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
        codes = ((flat[:, :, None] >> shifts) & np.uint8((1 << bits) - 1)).reshape(rows, -1)
    if codes.shape[1] < count:
        raise ValueError(f"packed data holds {codes.shape[1]} codes per row, needs {count}")
    return codes[:, :count]


def dequantize_nbits(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None,
                     g_idx: np.ndarray | None, *, k: int, n: int, bits: int, block_size: int,
                     dtype: np.dtype) -> np.ndarray:
    """The float weight ``(N, K)`` of MatMulNBits' packed inputs, in ``dtype``."""
    k_blocks = -(-k // block_size)
    codes = _unpack(b, bits, n, k_blocks * block_size)[:, :k].astype(dtype)
    scale = np.asarray(scales).astype(dtype).reshape(n, k_blocks)
    if zero_points is None:
        zp = np.full((n, k_blocks), float(1 << (bits - 1)), dtype=dtype)
    elif np.asarray(zero_points).dtype == np.uint8:
        zp = _unpack(zero_points, bits, n, k_blocks).astype(dtype)
    else:
        zp = np.asarray(zero_points).astype(dtype).reshape(n, k_blocks)
    if g_idx is not None and g_idx.size == k:
        group = np.asarray(g_idx, dtype=np.int64).reshape(k)
    else:
        group = np.arange(k, dtype=np.int64) // block_size
    return (codes - zp[:, group]) * scale[:, group]


def _int8_blocks(a: np.ndarray, block_size: int) -> np.ndarray:
    """``a (M, K)`` rounded as onnxruntime's int8 compute path sees it: each block of
    ``block_size`` along K as ``rint(a / s) * s`` with ``s = max|a| / 127`` (float32)."""
    m, k = a.shape
    k_blocks = -(-k // block_size)
    padded = np.zeros((m, k_blocks * block_size), dtype=np.float32)
    padded[:, :k] = a
    blocks = padded.reshape(m, k_blocks, block_size)
    scale = np.abs(blocks).max(axis=-1, keepdims=True) / np.float32(127.0)
    safe = np.where(scale > 0, scale, np.float32(1.0))
    q = np.rint(blocks / safe)
    return (q * scale).reshape(m, -1)[:, :k]


def _rows(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


@KERNELS.register("MatMulNBits", 1, domain=DOMAIN)
def matmul_nbits(node: NodeSpec):
    k = int(node.attr("K", 0))
    n = int(node.attr("N", 0))
    bits = int(node.attr("bits", 4))
    block_size = int(node.attr("block_size", 0))
    if bits not in (2, 4, 8):
        raise Unsupported(f"MatMulNBits bits={bits} (2, 4 or 8 supported)")
    if block_size < 1 or k < 0 or n < 0:
        raise Unsupported(f"MatMulNBits needs positive block_size, K, N (got {block_size}, {k}, {n})")
    shape = {"k": k, "n": n, "bits": bits, "block_size": block_size}

    accuracy_level = int(node.attr("accuracy_level", 0))
    consts = [constant_input(node, i) for i in range(5)]
    present = [i < len(node.inputs) and bool(node.inputs[i]) for i in range(5)]
    cached: dict[np.dtype, np.ndarray] = {}
    weights_const = all(consts[i] is not None for i in range(1, 5) if present[i])
    int8_a = (accuracy_level == 4 and weights_const and not present[4]
              and (consts[3] is None or consts[3].dtype == np.uint8)
              and not (bits == 2 and block_size < 32))  # onnxruntime has no int8 2-bit kernel for those
    if weights_const:
        # weights are initializers: dequantize and transpose once, in the compute dtype of A
        a_dtype = node.input_types[0].dtype if node.input_types and node.input_types[0] is not None else _F32
        cdt = _compute_dtype(np.dtype(a_dtype) if a_dtype is not None else _F32)
        w = dequantize_nbits(consts[1], consts[2], consts[3], consts[4], dtype=cdt, **shape)
        cached[cdt] = np.ascontiguousarray(w.T)

    def run(a, b, scales, zero_points=None, g_idx=None, bias=None):
        if a.shape[-1] != k:
            raise ValueError(f"MatMulNBits: A's last dim {a.shape[-1]} != K={k}")
        cdt = _compute_dtype(a.dtype)
        wt = cached.get(cdt)
        if wt is None:
            wt = np.ascontiguousarray(dequantize_nbits(b, scales, zero_points, g_idx, dtype=cdt, **shape).T)
        a2 = np.ascontiguousarray(a, dtype=cdt).reshape(_rows(a.shape), k)
        if int8_a and a.dtype == _F32:
            a2 = _int8_blocks(a2, block_size)
        y = a2 @ wt
        if bias is not None:
            y += bias.astype(cdt)
        return y.reshape(a.shape[:-1] + (n,)).astype(a.dtype, copy=False)

    return run


def _batch_transposed(x: np.ndarray, trans: bool, trans_batch: bool) -> np.ndarray:
    """FusedMatMul's view of an operand: ``transBatch`` moves the leading axis between the
    batch axes and the last one; ``trans`` then swaps the two matrix axes."""
    if x.ndim >= 3 and trans_batch:
        r = x.ndim
        x = x.transpose(tuple(range(1, r - 1)) + (0, r - 1))
    if x.ndim >= 2 and trans:
        x = np.swapaxes(x, -1, -2)
    return x


@KERNELS.register("FusedMatMul", 1, domain=DOMAIN)
def fused_matmul(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    trans_a = bool(node.attr("transA", 0))
    trans_b = bool(node.attr("transB", 0))
    trans_batch_a = bool(node.attr("transBatchA", 0))
    trans_batch_b = bool(node.attr("transBatchB", 0))

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = a.dtype
        cdt = _compute_dtype(dtype)
        aa = _batch_transposed(a.astype(cdt, copy=False), trans_a, trans_batch_a)
        bb = _batch_transposed(b.astype(cdt, copy=False), trans_b, trans_batch_b)
        y = np.matmul(aa, bb)
        if alpha != 1.0:
            y = np.multiply(y, cdt.type(alpha), out=y if isinstance(y, np.ndarray) and y.ndim else None)
        return np.asarray(y).astype(dtype, copy=False)

    return run
