"""ReduceMean over every axis after the first two (a CNN's global pool as the dynamo exporter
writes it) on GlobalAveragePool's compiled kernel: the same values as the numpy path (both sum
in float64) and the ONNX reference, with and without keepdims, axes as an input or an
attribute, NaN and inf; other axes, float16 and empty maps stay on the numpy path."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_reference
from _jit_cases import close, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_pool  # noqa: E402

RNG = np.random.default_rng(8)


@pytest.fixture
def pooled_calls(monkeypatch):  # type: ignore[no-untyped-def]
    """The shapes the compiled global average computed (so a test sees which path ran)."""
    calls = []
    real = kernels_pool.run_global_avg

    def counted(x, nthreads):  # type: ignore[no-untyped-def]
        y = real(x, nthreads)
        if y is not None:
            calls.append(x.shape)
        return y

    monkeypatch.setattr(kernels_pool, "run_global_avg", counted)
    return calls


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("shape,axes", [((1, 24, 16, 16), [2, 3]), ((2, 5, 3, 4), [-2, -1]), ((2, 3, 7), [2]),
                                        ((1, 2, 3, 4, 5), [2, 3, 4])])
def test_spatial_mean_on_the_pool_kernel(shape, axes, keepdims, dtype, pooled_calls) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal(shape).astype(dtype)
    x.reshape(-1)[:3] = [np.nan, np.inf, -np.inf]  # the first plane's mean is NaN, as numpy's
    case = one_node("ReduceMean", [x, In(np.array(axes, np.int64), const=True)], {"keepdims": keepdims}, opset=18)
    got = run_cpu(case, jit=True, runs=2)
    assert len(pooled_calls) == 2
    tol = {np.float32: 1e-6, np.float64: 1e-13}[dtype]
    close(got, run_cpu(case, jit=False), rtol=tol, atol=tol)
    close(got, run_reference(case), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axes,dtype", [((2, 3, 4, 5), [1, 2, 3], np.float32), ((2, 3, 4, 5), [3], np.float32),
                                              ((2, 3, 4, 5), [2, 3], np.float16), ((2, 3, 0, 5), [2, 3], np.float32)])
def test_other_means_stay_on_the_numpy_path(shape, axes, dtype, pooled_calls) -> None:  # type: ignore[no-untyped-def]
    x = RNG.standard_normal(shape).astype(dtype)
    case = one_node("ReduceMean", [x], {"keepdims": 1, "axes": axes}, opset=13)
    got = run_cpu(case, jit=True)
    assert not pooled_calls
    tol = 1e-3 if dtype == np.float16 else 1e-5
    close(got, run_reference(case), rtol=tol, atol=tol)
