"""Matrix products: Gemm, MatMul, MatMulInteger, QLinearMatMul, Einsum (BLAS via numpy)."""

from __future__ import annotations

import math

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._broadcast import fits_into
from ._dense_weights import DenseWeights, released_when_owned
from ._flags import flag
from ._int_matmul import row_zero_point, weights_product
from ._out import FAST_FLOATS, accepts_out
from ._util import constant_input

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _float_compute(dtype: np.dtype) -> np.dtype | None:
    """Dtype to compute a float matmul in, or None to use the input dtype as is."""
    if dtype in (_F32, _F64) or dtype.kind in "iub" or dtype.kind == "c":
        return None
    return _F32  # float16, bfloat16 and other exotic floats: BLAS in float32


def _rows(shape: tuple[int, ...]) -> int:
    """Number of rows when every axis but the last is flattened into one. Spelled out
    rather than ``reshape(-1, k)``, which numpy refuses as ambiguous when ``k`` is 0
    (``math.prod`` of Python ints: ``np.prod`` costs ~2 us, as much as a small GEMM)."""
    return math.prod(shape[:-1])


def _matmul_2d_weight(a: np.ndarray, b: np.ndarray | DenseWeights) -> np.ndarray:
    """``a (..., K) @ b (K, N)`` as one GEMM over all the leading rows of ``a`` (numpy would
    run one GEMM per leading index); a constant ``b`` comes as its :class:`DenseWeights`."""
    if isinstance(b, DenseWeights):
        if b.owned and a.ndim == 1:  # a vector: one row
            return b.product(a.reshape(1, -1)).reshape(b.shape[-1:])
        if a.ndim > 2 and not a.flags.c_contiguous and b.owned:  # only the packed copy is left
            a = np.ascontiguousarray(a)
        if a.ndim == 2 or (a.ndim > 2 and a.flags.c_contiguous):
            return b.product(a.reshape(_rows(a.shape), a.shape[-1])).reshape(a.shape[:-1] + b.shape[-1:])
        b = b.w
    if a.ndim > 2 and a.flags.c_contiguous:
        return np.matmul(a.reshape(_rows(a.shape), a.shape[-1]), b).reshape(a.shape[:-1] + b.shape[-1:])
    return np.matmul(a, b)


@KERNELS.register("MatMul", (1, 9, 13))
def matmul(node: NodeSpec):
    b_const = constant_input(node, 1)
    packed = None
    if b_const is not None and b_const.ndim == 2 and b_const.dtype.kind == "f":
        # the weight in the dtype and layout the GEMM wants, once
        cdt = _float_compute(b_const.dtype) or b_const.dtype
        packed = (b_const.dtype, DenseWeights(np.ascontiguousarray(b_const, dtype=cdt)))
    label = node.name  # the closures keep no NodeSpec: its constants would keep a released weight

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        dtype = a.dtype
        cdt = _float_compute(dtype)
        if packed is not None and (packed[0] == dtype or packed[1].owned) and a.ndim >= 1:
            if packed[0] != dtype:
                raise TypeError(f"MatMul {label!r}: input A is {dtype}, its constant B {packed[0]}")
            y = _matmul_2d_weight(a if cdt is None else a.astype(cdt), packed[1])
            return y if y.dtype == dtype else y.astype(dtype)
        if cdt is not None:
            y = np.matmul(a.astype(cdt), b.astype(cdt))
            return np.asarray(y).astype(dtype)
        if b.dtype != dtype:
            b = b.astype(dtype)
        if b.ndim == 2 and a.ndim > 2 and dtype.kind == "f":
            return _matmul_2d_weight(a, b)
        return np.asarray(np.matmul(a, b))

    def into(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
        """GEMM straight into the planned buffer: float32/64, 2-D right operand."""
        dense = packed[1] if packed is not None and packed[0] == a.dtype else None
        if dense is None and b is None:  # released to the packed copy, which this A's dtype cannot use
            return None
        w: np.ndarray | DenseWeights = b if dense is None else dense
        if not (a.dtype == w.dtype == out.dtype and out.dtype in FAST_FLOATS and len(w.shape) == 2 and a.ndim >= 2):
            return None
        if out.shape != a.shape[:-1] + (w.shape[1],) or a.shape[-1] != w.shape[0] or not a.flags.c_contiguous:
            return None
        rows = _rows(a.shape)
        a2, out2 = a.reshape(rows, a.shape[-1]), out.reshape(rows, w.shape[1])
        if dense is not None:
            dense.product(a2, out2)
        else:
            np.matmul(a2, w, out=out2)
        return out

    return released_when_owned(accepts_out(run, into), packed[1] if packed is not None else None, 1)


@KERNELS.register("Gemm", (1, 6, 7, 9, 11, 13))
def gemm(node: NodeSpec):
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    trans_a = flag(node, "transA", 0)
    trans_b = flag(node, "transB", 0)
    b_const = constant_input(node, 1)
    dense = None
    if b_const is not None and b_const.ndim == 2 and b_const.dtype in FAST_FLOATS and not trans_a:
        dense = DenseWeights(b_const.T if trans_b else b_const)  # a view: BLAS reads it transposed
    label = node.name  # the closures keep no NodeSpec: its constants would keep a released weight

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        dtype = a.dtype
        cdt = _float_compute(dtype) or dtype
        if dense is not None and dtype == dense.dtype and a.ndim == 2:
            y = dense.product(a)  # a fresh array: scaled and added to in place below
        elif b is None:  # released to the packed copy (epoxy.contract.RELEASED_INPUTS), which this A cannot use
            raise TypeError(f"Gemm {label!r}: input A is {dtype} ({a.ndim}-D), its constant B "
                            f"{dense.dtype if dense is not None else '?'}")
        else:
            a = a.astype(cdt, copy=False)
            b = b.astype(cdt, copy=False)
            if trans_a:
                a = a.T
            if trans_b:
                b = b.T
            y = np.dot(a, b)
        if alpha != 1.0:
            if cdt.kind == "f":
                y *= cdt.type(alpha)
            else:
                y = (y * alpha).astype(cdt)
        if c is not None and beta != 0.0:
            cc = c.astype(cdt, copy=False)
            if beta == 1.0:
                y = np.add(y, cc, out=y) if fits_into(cc.shape, y.shape) else y + cc
            elif cdt.kind == "f":
                y = y + cc * cdt.type(beta)
            else:
                y = (y + cc * beta).astype(cdt)
        return np.asarray(y).astype(dtype, copy=False)

    return released_when_owned(run, dense, 1)


def _row_param(v: np.ndarray | None, a_ndim: int) -> np.ndarray | float:
    """Zero point / scale of the left operand: scalar, or per row (1-D M -> M x 1); 0 when absent."""
    shaped = row_zero_point(v, a_ndim)
    return 0.0 if shaped is None else shaped


def _col_param(v: np.ndarray | None) -> np.ndarray | float:
    if v is None:
        return 0.0
    v = np.asarray(v)
    return v.reshape(()) if v.size == 1 else v


def _float64_matmul(a, b, a_zp, b_zp) -> np.ndarray:
    """Codes that are not 8-bit integers (QLinearMatMul-21's float8): float64 BLAS."""
    af = a.astype(_F64) - np.asarray(_row_param(a_zp, a.ndim), dtype=_F64)
    bf = b.astype(_F64) - np.asarray(_col_param(b_zp), dtype=_F64)
    return np.asarray(np.matmul(af, bf))


def _int32_fallback(a: np.ndarray, b: np.ndarray, a_zp: np.ndarray | None, b_zp: np.ndarray | None) -> np.ndarray:
    """Codes that are not 8-bit (QLinearMatMul-21's float8): float64 BLAS, rounded to int32."""
    return np.rint(_float64_matmul(a, b, a_zp, b_zp)).astype(np.int64).astype(np.int32)


@KERNELS.register("MatMulInteger", 10)
def matmul_integer(node: NodeSpec):
    product = weights_product(node, 1, 3, _int32_fallback)

    def run(a, b, a_zero_point=None, b_zero_point=None):
        return product(a, b, a_zero_point, b_zero_point)

    return run


def _is_int(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


@KERNELS.register("QLinearMatMul", (10, 21))
def qlinear_matmul(node: NodeSpec):
    product = weights_product(node, 3, 5, _int32_fallback)

    def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
        acc = product(a, b, a_zero_point, b_zero_point)
        sa = np.asarray(_row_param(a_scale, a.ndim), dtype=_F32).astype(_F64)
        sb = np.asarray(_col_param(b_scale), dtype=_F32).astype(_F64)
        sy = np.asarray(_col_param(y_scale), dtype=_F32).astype(_F64)
        out_dtype = np.dtype(y_zero_point.dtype)
        zp = np.asarray(_col_param(y_zero_point)).astype(_F64)
        y = acc * (sa * sb) / sy
        if _is_int(out_dtype):
            y = np.rint(y) + zp
            info = np.iinfo(out_dtype)
            return np.asarray(np.clip(y, info.min, info.max).astype(out_dtype))
        return (y + zp).astype(_F32).astype(out_dtype)

    return run


@KERNELS.register("Einsum", (12, 28))
def einsum(node: NodeSpec):
    equation = node.attr("equation", "")
    if isinstance(equation, bytes):
        equation = equation.decode()
    equation = equation.replace(" ", "")

    def run(*inputs: np.ndarray) -> np.ndarray:
        dtype = inputs[0].dtype
        cdt = _float_compute(dtype)
        if cdt is not None:
            inputs = tuple(x.astype(cdt) for x in inputs)
        optimize = len(inputs) >= 2 and all(x.size > 0 for x in inputs)
        y = np.asarray(np.einsum(equation, *inputs, optimize=optimize))
        if any(np.may_share_memory(y, x) for x in inputs):
            y = y.copy()  # "ij->ji" / "ii->i" give views of the input
        return y.astype(dtype, copy=False)

    return run
