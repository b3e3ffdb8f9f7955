"""The compiled kernels against their oracles: the numpy path (jit off) and the ONNX
reference (onnxruntime for legacy Softmax), on random shapes (one row, one element, empty,
NaN/Inf rows), both dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import one_node, run_onnxruntime
from _jit_cases import close, run_cpu, three_ways

pytest.importorskip("numba")

_TOL = {np.float32: (2e-5, 2e-6), np.float64: (1e-12, 1e-13)}
INF, NAN = np.inf, np.nan


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check(case, dtype, ref_rtol=None, ref_case=None, oracle=None):
    """jit on == jit off (tight) == the reference, or ``oracle`` (looser: a different order)."""
    if oracle is not None:
        on, off, ref = run_cpu(case, True), run_cpu(case, False), oracle(case)
    else:
        on, off, ref = three_ways(case, ref_case)
    rtol, atol = _TOL[dtype]
    close(on, off, rtol, atol)
    close(on, ref, ref_rtol or max(rtol, 1e-5), max(atol, 1e-6))


# -- LayerNormalization -----------------------------------------------------------------------
LN_SHAPES = [((1, 1, 32), -1), ((2, 5, 16), -1), ((4, 3, 8), 1), ((1, 7), -1), ((3, 1), -1), ((6,), 0),
             ((2, 3, 4, 5), 2), ((1, 1), -1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis"), LN_SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_out", [1, 3])
def test_layer_norm(shape, axis, dtype, bias, n_out):
    rng = _rng(len(shape) * 10 + axis + 5)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    tail = shape[axis:]
    inputs = [x, rng.standard_normal(tail).astype(dtype)] + ([rng.standard_normal(tail).astype(dtype)] if bias else [])
    attrs = {"axis": axis, "epsilon": 1e-3}
    # float64 with stash_type 1 computes in float32 (the numpy path's reading); 11 computes in
    # float64, which the reference does not implement: its oracle is the stash_type 1 twin
    stash = 11 if dtype == np.float64 else 1
    case = one_node("LayerNormalization", inputs, {**attrs, "stash_type": stash}, 17, n_out)
    _check(case, dtype, ref_rtol=1e-4, ref_case=one_node("LayerNormalization", inputs, attrs, 17, n_out))


def test_layer_norm_nan_and_inf_rows():
    x = np.array([[1, 2, NAN, 4], [1, INF, 2, 3], [1, 2, 3, 4], [-INF, 0, 0, 0]], np.float32)
    scale = np.ones(4, np.float32)
    case = one_node("LayerNormalization", [x, scale], {"axis": -1}, 17, 3)
    on, off, _ = three_ways(case)
    close(on, off, 1e-5, 1e-6)
    assert np.isnan(on[0][:2]).all() and np.isfinite(on[0][2]).all()


def test_layer_norm_empty_and_broadcast_scale_take_the_numpy_path():
    empty = one_node("LayerNormalization", [np.zeros((0, 4), np.float32), np.ones(4, np.float32)], {}, 17)
    close(run_cpu(empty, True), run_cpu(empty, False), 0, 0)
    x = _rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    broadcast = one_node("LayerNormalization", [x, np.ones((1, 4), np.float32)], {"axis": 1}, 17)
    close(run_cpu(broadcast, True), run_cpu(broadcast, False), 0, 0)


def _count_layer_norm_calls(monkeypatch) -> list[tuple[int, ...]]:
    from epoxy_ep_cpu.jit import kernels_normalization

    seen: list[tuple[int, ...]] = []
    real = kernels_normalization.LayerNormCall._run  # both entry points (with and without statistics)
    monkeypatch.setattr(kernels_normalization.LayerNormCall, "_run",
                        lambda self, x, mean, inv: seen.append(x.shape) or real(self, x, mean, inv))
    return seen


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis"), [((2, 5, 16), -1), ((4, 3, 8), 1), ((1, 1), -1)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_out", [1, 3])
def test_layer_norm_with_constant_parameters_takes_prepared_calls(monkeypatch, shape, axis, dtype, bias, n_out):
    """Constant scale and bias (the exporters' case): each run of the shape goes through the
    prepared call (counted), with the values of the numpy path and of every later run."""
    from _hostile import In

    seen = _count_layer_norm_calls(monkeypatch)
    rng = _rng(len(shape) + axis + 40)
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    tail = shape[axis:]
    params = [In(rng.standard_normal(tail).astype(dtype), const=True)]
    if bias:
        params.append(In(rng.standard_normal(tail).astype(dtype), const=True))
    stash = 11 if dtype == np.float64 else 1
    case = one_node("LayerNormalization", [x, *params], {"axis": axis, "epsilon": 1e-3, "stash_type": stash}, 17, n_out)
    on, off = run_cpu(case, True, runs=3), run_cpu(case, False)
    assert seen == [shape] * 3
    close(on, off, *_TOL[dtype])


def test_layer_norm_prepared_calls_follow_the_shape_and_keep_the_stash_type(monkeypatch):
    """A dynamic axis: one call per shape; float64 with stash_type 1 (computed in float32 by
    the numpy path) is never prepared."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import epoxy

    seen = _count_layer_norm_calls(monkeypatch)

    def model(elem: int, dtype: type, stash: int) -> bytes:
        rng = _rng(elem)
        graph = helper.make_graph(
            [helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1, stash_type=stash)], "g",
            [helper.make_tensor_value_info("x", elem, ["batch", "seq", 8])],
            [helper.make_tensor_value_info("y", elem, ["batch", "seq", 8])],
            [numpy_helper.from_array(rng.standard_normal(8).astype(dtype), "s"),
             numpy_helper.from_array(rng.standard_normal(8).astype(dtype), "b")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(proto)
        return proto.SerializeToString()

    f32 = model(TensorProto.FLOAT, np.float32, 1)
    on, off = (epoxy.InferenceSession(f32, providers=[("cpu", {"jit": j})]) for j in (True, False))
    rng = _rng(9)
    for shape in ((1, 4, 8), (1, 4, 8), (2, 3, 8), (1, 4, 8)):
        x = rng.standard_normal(shape).astype(np.float32)
        close(on.run(None, {"x": x}), off.run(None, {"x": x}), *_TOL[np.float32])
    assert seen == [(1, 4, 8), (1, 4, 8), (2, 3, 8), (1, 4, 8)]
    seen.clear()
    f64 = model(TensorProto.DOUBLE, np.float64, 1)
    on, off = (epoxy.InferenceSession(f64, providers=[("cpu", {"jit": j})]) for j in (True, False))
    x = rng.standard_normal((2, 3, 8))
    close(on.run(None, {"x": x}), off.run(None, {"x": x}), 0, 0)
    assert seen == []


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 16, 1, 1), (3, 4), (1, 2, 3, 2, 2)])
def test_batch_norm_with_constant_parameters_equals_the_numpy_path(monkeypatch, shape, dtype):
    """Inference BatchNormalization on the compiled affine pass (counted): bit for bit the
    numpy path's values (same two roundings), NaN and infinities included."""
    from _hostile import In

    from epoxy_ep_cpu.jit import kernels_normalization

    calls: list[tuple[int, ...]] = []
    real = kernels_normalization.BatchNormKernel.__call__
    monkeypatch.setattr(kernels_normalization.BatchNormKernel, "__call__",
                        lambda self, x, out=None: calls.append(x.shape) or real(self, x, out))
    rng = _rng(sum(shape))
    x = (rng.standard_normal(shape) * 2).astype(dtype)
    x.reshape(-1)[:3] = [NAN, INF, -INF]
    c = shape[1]
    params = [In((rng.standard_normal(c) + 1.5).astype(dtype), const=True),
              In(rng.standard_normal(c).astype(dtype), const=True),
              In(rng.standard_normal(c).astype(dtype), const=True),
              In(rng.random(c).astype(dtype) + 0.1, const=True)]
    case = one_node("BatchNormalization", [x, *params], {"epsilon": 1e-3}, 15)
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert calls == [shape] * 2
    np.testing.assert_array_equal(on[0], off[0])


def test_batch_norm_parallel_variant_and_fed_parameters(monkeypatch):
    """Forced onto two threads (grain 1: two shares of planes, ``threads.Split``) the values do
    not change; parameters fed at run time take the numpy path."""
    from _hostile import In

    from epoxy_ep_cpu.jit import threads

    launches: list[int] = []
    real = threads.Split
    monkeypatch.setattr(threads, "Split",
                        lambda kernel, fn, args, total, count: launches.append(count) or real(kernel, fn, args, total,
                                                                                             count))
    rng = _rng(77)
    x = rng.standard_normal((2, 8, 6, 6)).astype(np.float32)
    raw = [rng.standard_normal(8).astype(np.float32) + 2, rng.standard_normal(8).astype(np.float32),
           rng.standard_normal(8).astype(np.float32), rng.random(8).astype(np.float32) + 0.5]
    const = one_node("BatchNormalization", [x, *(In(p, const=True) for p in raw)], {}, 15)
    want = run_cpu(const, False)
    monkeypatch.setattr(threads, "SHARE_GRAIN", 1)
    monkeypatch.setattr(threads, "GRAIN", 1)
    np.testing.assert_array_equal(run_cpu(const, True, jit_threads=2)[0], want[0])
    assert launches == [2]
    fed = one_node("BatchNormalization", [x, *raw], {}, 15)
    np.testing.assert_array_equal(run_cpu(fed, True)[0], want[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis"), [((2, 5, 16), -1), ((3, 4, 6), 1), ((1, 1), -1), ((4, 33), -1)])
def test_rms_norm_with_a_constant_scale_takes_prepared_calls(monkeypatch, shape, axis, dtype):
    """RMSNormalization (what the core fuses Llama's decomposed RMSNorm into): the compiled
    call runs every run (counted), within rounding of the numpy path and of the definition."""
    from _hostile import In

    from epoxy_ep_cpu.jit import kernels_normalization

    seen: list[tuple[int, ...]] = []
    real = kernels_normalization.RMSNormCall.__call__
    monkeypatch.setattr(kernels_normalization.RMSNormCall, "__call__",
                        lambda self, x: seen.append(x.shape) or real(self, x))
    rng = _rng(sum(shape) + 60)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    scale = rng.standard_normal(shape[axis:]).astype(dtype)
    stash = 11 if dtype == np.float64 else 1
    case = one_node("RMSNormalization", [x, In(scale, const=True)], {"axis": axis, "epsilon": 1e-4,
                                                                     "stash_type": stash}, 23)
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert seen == [shape] * 2
    close(on, off, *_TOL[dtype])
    axes = tuple(range(axis % len(shape), len(shape)))
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt(np.mean(x64 * x64, axis=axes, keepdims=True) + 1e-4) * scale
    close(on, [want.astype(dtype)], *_TOL[dtype])


def test_rms_norm_fed_or_broadcast_scale_and_float64_stash_1_keep_numpy(monkeypatch):
    from _hostile import In

    from epoxy_ep_cpu.jit import kernels_normalization

    monkeypatch.setattr(kernels_normalization.RMSNormCall, "__call__", lambda *a: pytest.fail("compiled ran"))
    x = _rng(61).standard_normal((2, 3, 8)).astype(np.float32)
    for scale, attrs in ((x[0, 0].copy(), {}), (In(np.ones((1, 8), np.float32), const=True), {})):
        case = one_node("RMSNormalization", [x, scale], attrs, 23)
        close(run_cpu(case, True), run_cpu(case, False), 0, 0)
    x64 = x.astype(np.float64)
    case = one_node("RMSNormalization", [x64, In(np.ones(8), const=True)], {"stash_type": 1}, 23)
    close(run_cpu(case, True), run_cpu(case, False), 0, 0)


# -- Where (attention masks) -----------------------------------------------------------------
WHERE = [  # (cond shape, x, y): x / y as an array of the shape, or a scalar value
    ((4, 4, 32, 32), "scalar", "full"),  # llama's mask: where(mask, -inf, scores)
    ((2, 1, 64, 64), "scalar", "scalar"),
    ((3, 50, 40), "full", "full"),
    ((3, 50, 40), "full", "scalar"),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.bool_])
@pytest.mark.parametrize(("shape", "xk", "yk"), WHERE, ids=[str(w) for w in WHERE])
def test_where_on_the_compiled_select_equals_numpy(monkeypatch, shape, xk, yk, dtype):
    from epoxy_ep_cpu.jit import kernels_where

    done: list[bool] = []
    real = kernels_where.run_where

    def spy(*args):  # type: ignore[no-untyped-def]
        result = real(*args)
        done.append(result is not None)
        return result

    monkeypatch.setattr(kernels_where, "run_where", spy)
    rng = _rng(sum(shape))
    cond = np.tril(np.ones(shape[-2:], bool)) & (rng.random(shape) > 0.3)  # structure and noise

    def value(kind: str, seed: int) -> np.ndarray:
        v = (_rng(seed).standard_normal(shape if kind == "full" else ()) * 10).astype(dtype)
        if kind == "scalar" and dtype == np.float32:
            v = np.array(-np.inf, np.float32)
        return v

    x, y = value(xk, 1), value(yk, 2)
    if dtype == np.float64 and xk == "full":
        x.reshape(-1)[:2] = [np.nan, np.inf]
    case = one_node("Where", [cond, x, y], {}, 16)
    on, off = run_cpu(case, True), run_cpu(case, False)
    assert done == [True]  # the compiled select ran (jit off never calls it)
    np.testing.assert_array_equal(on[0], off[0])
    np.testing.assert_array_equal(on[0], np.where(cond, x, y))


def test_where_broadcasting_and_small_tensors_keep_numpy():
    from epoxy_ep_cpu.jit import kernels_where

    rng = _rng(5)
    cond = rng.random((1, 64, 64)) > 0.5
    x = rng.standard_normal((4, 64, 64)).astype(np.float32)
    assert kernels_where.run_where(cond, x, np.float32(0) + np.zeros((), np.float32)) is None  # cond broadcasts
    small = rng.random((4, 8)) > 0.5
    assert kernels_where.run_where(small, np.zeros((4, 8), np.float32), np.ones((4, 8), np.float32)) is None
    half = np.zeros((64, 64), np.float16)
    assert kernels_where.run_where(rng.random((64, 64)) > 0.5, half, half) is None
    case = one_node("Where", [cond, x, np.zeros((), np.float32)], {}, 16)
    np.testing.assert_array_equal(run_cpu(case, True)[0], run_cpu(case, False)[0])


# -- Softmax / LogSoftmax ---------------------------------------------------------------------
SM_SHAPES = [((1, 1, 32), -1), ((3, 7), 1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((5,), 0), ((1, 12, 1, 9), -1),
             ((4, 1), -1), ((2, 0, 3), -1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("shape", "axis"), SM_SHAPES)
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax(op, shape, axis, dtype, opset):
    x = (_rng(len(shape) + axis + 7).standard_normal(shape) * 4).astype(dtype)
    # before opset 13 the input is coerced to 2-D at axis; onnx.reference reads it as opset 13
    _check(one_node(op, [x], {"axis": axis}, opset), dtype, oracle=run_onnxruntime if opset < 13 else None)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_nan_inf_rows_on_both_paths(op):
    """A row holding +inf or NaN, or only -inf, is all NaN; -inf elsewhere gives 0 (or -inf)."""
    rows = np.array([[1, INF, 2, 3], [1, 2, NAN, 3], [-INF, 1, 2, 3], [INF, INF, 1, 1],
                     [-INF, -INF, -INF, -INF], [NAN, 1, 2, 3], [1, 2, 3, 4]], np.float32)
    on, off, ref = three_ways(one_node(op, [rows], {"axis": 1}, 13))
    close(on, off, 1e-6, 1e-7)
    close(on, ref, 1e-5, 1e-6)
    assert np.isnan(on[0][[0, 1, 3, 4, 5]]).all() and not np.isnan(on[0][[2, 6]]).any()


# -- pools ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 8, 16, 16), (2, 3, 1, 1), (1, 1, 7), (2, 2, 3, 4, 5)])
def test_global_average_pool(shape, dtype):
    x = _rng(len(shape)).standard_normal(shape).astype(dtype)
    _check(one_node("GlobalAveragePool", [x], {}, 22), dtype)


def test_global_average_pool_of_an_empty_batch():
    """The reference divides by zero here; both paths give an empty (0, 3, 1, 1)."""
    case = one_node("GlobalAveragePool", [np.zeros((0, 3, 4, 4), np.float32)], {}, 22)
    on, off = run_cpu(case, True), run_cpu(case, False)
    close(on, off, 0, 0)
    assert on[0].shape == (0, 3, 1, 1)


def test_non_float_cases_keep_the_numpy_path():
    x = np.arange(2 * 3 * 5 * 5, dtype=np.int8).reshape(2, 3, 5, 5)
    case = one_node("GlobalAveragePool", [x.astype(np.float16)], {}, 22)
    close(run_cpu(case, True), run_cpu(case, False), 0, 0)
    half = one_node("Softmax", [_rng(3).standard_normal((2, 5)).astype(np.float16)], {}, 13)
    close(run_cpu(half, True), run_cpu(half, False), 0, 0)


DISPATCH = [
    ("normalization", "run_layer_norm", "LayerNormalization", [np.ones((2, 4), np.float32), np.ones(4, np.float32)],
     {}, 17),
    ("softmax", "run_softmax", "LogSoftmax", [np.ones((2, 4), np.float32)], {}, 13),
    ("pool", "run_global_avg", "GlobalAveragePool", [np.ones((1, 2, 4, 4), np.float32)], {}, 22),
]


@pytest.mark.parametrize(("module", "name", "op", "inputs", "attrs", "opset"), DISPATCH, ids=[d[2] for d in DISPATCH])
def test_jit_on_dispatches_to_the_compiled_kernel(monkeypatch, module, name, op, inputs, attrs, opset):
    """The comparisons above would pass vacuously if jit=on quietly ran the numpy path."""
    import importlib

    mod = importlib.import_module(f"epoxy_ep_cpu.jit.kernels_{module}")
    real, results = getattr(mod, name), []

    def spy(*args):
        results.append(real(*args))
        return results[-1]

    monkeypatch.setattr(mod, name, spy)
    case = one_node(op, inputs, attrs, opset)
    run_cpu(case, False)
    assert results == []
    run_cpu(case, True)
    assert len(results) == 1 and results[0] is not None


def test_large_softmax_routes_by_dtype_and_layout_and_agrees():
    """float32 over the last axis (attention): the row kernel on fast_math's exp, at any size;
    float64, or float32 over an inner axis, past SMALL: the numpy path. The row kernel takes
    x - max in float64 (numpy's float32 difference loses up to |x - max| * 2**-24 relative in
    exp), so it is checked against the float64 softmax within 2 ulp, and against the numpy
    path within that path's error."""
    from epoxy_ep_cpu.jit import kernels_softmax

    x = _rng(9).standard_normal((4, kernels_softmax.SMALL)).astype(np.float32) * 4
    assert kernels_softmax.run_softmax(x, 1, False, 1) is not None
    assert kernels_softmax.run_softmax(x.astype(np.float64), 1, False, 1) is None
    assert kernels_softmax.run_softmax(np.ascontiguousarray(x.T), 0, False, 1) is None
    assert kernels_softmax.run_softmax(x[:1, :kernels_softmax.SMALL].astype(np.float64), 1, False, 1) is not None
    x64 = x.astype(np.float64)
    shifted = x64 - x64.max(axis=1, keepdims=True)
    exact = {"Softmax": np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True),
             "LogSoftmax": shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))}
    for op in ("Softmax", "LogSoftmax"):
        on, off = three_ways(one_node(op, [x], {}, 13))[:2]
        np.testing.assert_allclose(on[0], exact[op], rtol=2.4e-7, atol=1e-30)
        close(on, off, 4e-6, 1e-12)
