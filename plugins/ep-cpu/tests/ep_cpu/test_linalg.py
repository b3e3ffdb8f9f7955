"""Matrix-product kernels of the cpu provider: Gemm, MatMul, MatMulInteger, QLinearMatMul, Einsum."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from _nn_oracle import RNG, _model, check, f32, run_epoxy  # noqa: E402,F401


@pytest.mark.parametrize(
    "sa,sb",
    [
        ((3, 4), (4, 5)),
        ((4,), (4, 5)),
        ((3, 4), (4,)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((2, 3, 4), (4, 2)),
        ((0, 4), (4, 3)),
        ((3, 0), (0, 2)),
    ],
)
def test_matmul_shapes(sa, sb):
    a, b = f32(*sa), f32(*sb)
    check("MatMul", [a, b], opset=13, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int32, np.int64, np.uint32, ml_dtypes.bfloat16])
def test_matmul_dtypes(dtype):
    low = 0 if np.dtype(dtype).kind == "u" else -3
    a = RNG.integers(low, 4, (2, 3, 4)).astype(dtype)
    b = RNG.integers(low, 4, (4, 5)).astype(dtype)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    got = check("MatMul", [a, b], opset=13, atol=0, expected=[expected])
    assert got[0].dtype == np.dtype(dtype)


@pytest.mark.parametrize("opset", [6, 7, 9, 11, 13])
@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm(opset, ta, tb):
    a = f32(4, 3) if ta else f32(3, 4)
    b = f32(5, 4) if tb else f32(4, 5)
    for c in (f32(3, 5), f32(5), f32(1, 1), f32(3, 1)):
        attrs = {"transA": ta, "transB": tb, "alpha": 0.5, "beta": 2.0}
        if opset < 7:
            attrs["broadcast"] = 1
        check("Gemm", [a, b, c], attrs, opset=opset, rtol=1e-5, atol=1e-5)
    if opset >= 11:
        check("Gemm", [a, b], {"transA": ta, "transB": tb}, opset=opset, rtol=1e-5, atol=1e-5)


def test_gemm_int_and_double():
    a, b, c = (RNG.integers(-5, 5, s).astype(np.int32) for s in ((3, 4), (4, 2), (2,)))
    check("Gemm", [a, b, c], opset=13, atol=0)
    a, b = f32(3, 4).astype(np.float64), f32(4, 2).astype(np.float64)
    check("Gemm", [a, b], {"alpha": 3.0}, opset=13)


def test_gemm_does_not_modify_c():
    a, b, c = f32(3, 4), f32(4, 5), f32(3, 5)
    c0 = c.copy()
    run_epoxy(_model("Gemm", [a, b, c], opset=13), [a, b, c])
    np.testing.assert_array_equal(c, c0)


def test_matmul_integer():
    a = RNG.integers(0, 255, (3, 4)).astype(np.uint8)
    b = RNG.integers(-128, 127, (4, 5)).astype(np.int8)
    zps = [np.array(12, np.uint8), np.array(-3, np.int8)]
    check("MatMulInteger", [a, b, *zps], opset=10, out_dtypes=[np.int32], atol=0)
    check("MatMulInteger", [a, b], opset=10, out_dtypes=[np.int32], atol=0)
    # per-row / per-column zero points
    azp = RNG.integers(0, 255, 3).astype(np.uint8)
    bzp = RNG.integers(-128, 127, 5).astype(np.int8)
    expected = (a.astype(np.int64) - azp.reshape(-1, 1)) @ (b.astype(np.int64) - bzp)
    expected = [expected.astype(np.int32)]
    check("MatMulInteger", [a, b, azp, bzp], opset=10, out_dtypes=[np.int32], atol=0, expected=expected)
    a3 = RNG.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    check("MatMulInteger", [a3, b.astype(np.uint8)], opset=10, out_dtypes=[np.int32], atol=0)


@pytest.mark.parametrize("opset", [10, 21])
def test_qlinear_matmul(opset):
    a = RNG.integers(0, 255, (2, 3, 4)).astype(np.uint8)
    b = RNG.integers(0, 255, (4, 5)).astype(np.uint8)
    sa, sb, sy = np.array(0.05, np.float32), np.array(0.02, np.float32), np.array(0.3, np.float32)
    args = [a, sa, np.array(113, np.uint8), b, sb, np.array(114, np.uint8), sy, np.array(118, np.uint8)]
    got = check("QLinearMatMul", args, opset=opset, out_dtypes=[np.uint8], atol=1)
    assert got[0].dtype == np.uint8
    a8 = (a.astype(np.int16) - 128).astype(np.int8)
    args_i8 = [a8, sa, np.array(-15, np.int8), b, sb, args[5], sy, np.array(-3, np.int8)]
    check("QLinearMatMul", args_i8, opset=opset, out_dtypes=[np.int8], atol=1)


@pytest.mark.parametrize(
    "eq,shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bij, bjk -> bik", [(2, 3, 4), (2, 4, 5)]),
        ("ii->i", [(4, 4)]),
        ("ij->", [(3, 4)]),
        ("...ij,...jk", [(2, 3, 4), (4, 2)]),
        ("i,j,k->ijk", [(2,), (3,), (4,)]),
        ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ],
)
def test_einsum(eq, shapes):
    inputs = [f32(*s) for s in shapes]
    check("Einsum", inputs, {"equation": eq}, opset=12, rtol=1e-5, atol=1e-5)


def test_einsum_int():
    a, b = RNG.integers(-4, 4, (3, 4)).astype(np.int64), RNG.integers(-4, 4, (4,)).astype(np.int64)
    check("Einsum", [a, b], {"equation": "ij,j->i"}, opset=12, atol=0)


def test_einsum_view_results_are_copies():
    x = f32(3, 3)
    for eq in ("ij->ji", "ii->i", "ij->ij"):
        got = check("Einsum", [x], {"equation": eq}, opset=12)[0]
        assert not np.may_share_memory(got, x)
