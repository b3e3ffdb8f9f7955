"""Softmax, LogSoftmax and Hardmax kernels of the cpu provider (opset < 13: coerced to 2-D)."""

from __future__ import annotations

import numpy as np
import pytest
from _nn_oracle import RNG, _model, check, f32, run_epoxy  # noqa: F401


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_family(op, opset, axis):
    x = f32(2, 3, 4) * 3
    attrs = {} if axis is None else {"axis": axis}
    if opset < 11 and axis is not None and axis < 0:
        return
    check(op, [x], attrs, opset=opset, rtol=1e-5, atol=1e-6, oracle="ort" if opset < 13 else "ref")


def test_softmax_legacy_coercion():
    x = f32(2, 3, 4)
    flat = x.reshape(2, 12)
    e = np.exp(flat - flat.max(1, keepdims=True))
    expected = (e / e.sum(1, keepdims=True)).reshape(x.shape)
    check("Softmax", [x], {}, opset=11, expected=[expected])


def test_softmax_extremes_and_dtypes():
    x = np.array([[1000.0, 0.0, -1000.0], [-np.inf, 0.0, 1.0], [np.nan, 1.0, 2.0]], np.float32)
    got = run_epoxy(_model("Softmax", [x], opset=13), [x])[0]
    np.testing.assert_allclose(got[0], [1, 0, 0], atol=1e-7)
    assert got[1, 0] == 0 and np.isnan(got[2]).all()
    got = run_epoxy(_model("LogSoftmax", [x], opset=13), [x])[0]
    assert got[0, 0] == 0 and got[1, 0] == -np.inf
    for dtype in (np.float16, np.float64):
        y = f32(3, 5).astype(dtype)
        out = check("Softmax", [y], opset=13, rtol=1e-3, atol=1e-3)
        assert out[0].dtype == dtype


def test_hardmax_ties_and_empty():
    x = np.array([[1, 3, 3], [2, 2, 2]], np.float32)
    got = run_epoxy(_model("Hardmax", [x], opset=13), [x])[0]
    np.testing.assert_array_equal(got, [[0, 1, 0], [1, 0, 0]])
    e = np.zeros((0, 3), np.float32)
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        assert run_epoxy(_model(op, [e], opset=13), [e])[0].shape == (0, 3)


@pytest.mark.parametrize("native", [True, False], ids=["native-pool", "executor"])
def test_attention_softmax_numerators_split_over_threads(monkeypatch, native):
    """FusedAttention's compiled numerators (``kernels_softmax.ExpRows``): ``exp(s - rowmax)``
    in place and the row sums, as numpy's passes give them (a row all -inf: zeros, sum 0; a
    row holding NaN or +inf: NaN after the division), and on two threads (the rows in two
    shares) the one-thread bits."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_softmax, threads

    if native and not threads.native():
        pytest.skip("no native pool here (a BLAS other than OpenBLAS)")
    monkeypatch.setattr(threads, "_NATIVE", native)
    monkeypatch.setattr(threads, "SHARE_GRAIN", 1)
    monkeypatch.setattr(threads, "GRAIN", 1)
    s0 = (RNG.standard_normal((2, 3, 5, 37)) * 4).astype(np.float32)
    s0[0, 0, 1] = -np.inf
    s0[0, 1, 2, 3] = np.nan
    s0[1, 2, 4, 0] = np.inf
    want = s0.astype(np.float64)
    m = want.max(axis=-1, keepdims=True)
    e = np.exp(want - np.where(np.isfinite(m), m, 0))
    want_p = e / e.sum(axis=-1, keepdims=True)
    got = {}
    for count in (1, 2):
        s = s0.copy()
        z = kernels_softmax.ExpRows(s.shape, count)(s)
        assert z.shape == s.shape[:-1] + (1,) and z.dtype == np.float32
        assert (kernels_softmax.ExpRows(s.shape, count)._split is not None) == (count == 2)
        with np.errstate(invalid="ignore", divide="ignore"):
            got[count] = s / z
    np.testing.assert_array_equal(got[2], got[1])
    np.testing.assert_array_equal(np.isnan(got[1]), np.isnan(want_p))
    ok = ~np.isnan(want_p)
    np.testing.assert_allclose(got[1][ok], want_p[ok], rtol=1e-5, atol=1e-7)
