"""Pooling kernels of the cpu provider: MaxPool, AveragePool, LpPool, Global*, MaxUnpool."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy

RNG = np.random.default_rng(0)


def _model(op, inputs, attrs=None, opset=17, n_out=1, out_dtypes=None, out_ranks=None, domain=""):
    """Single-node model; ``inputs`` is a list of arrays, ``None`` for an omitted optional."""
    names, vis = [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append(f"x{i}")
        vis.append(helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
    first = next(x for x in inputs if x is not None)
    out_dtypes = out_dtypes or [first.dtype] * n_out
    out_ranks = out_ranks or [first.ndim] * n_out
    outs = [
        helper.make_tensor_value_info(
            f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), [f"d{i}_{k}" for k in range(r)]
        )
        for i, (d, r) in enumerate(zip(out_dtypes, out_ranks))
    ]
    node = helper.make_node(op, names, [o.name for o in outs], domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "g", vis, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])


def run_epoxy(model, inputs):
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)


def check(
    op, inputs, attrs=None, opset=17, n_out=1, out_dtypes=None, rtol=1e-5, atol=1e-6, expected=None, oracle="ref"
):
    """Run through epoxy and compare with ``expected`` or the oracle (onnx.reference, or
    onnxruntime where the reference gets pooling geometry wrong); returns epoxy's outputs."""
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    if expected is None:
        ref_model = _model(op, inputs, attrs, opset, n_out, out_dtypes)
        if oracle == "ort":
            import onnxruntime

            sess = onnxruntime.InferenceSession(ref_model.SerializeToString(), providers=["CPUExecutionProvider"])
            expected = sess.run(None, feeds)
        else:
            expected = ReferenceEvaluator(ref_model).run(None, feeds)
    expected = [np.asarray(e) for e in expected]
    model = _model(op, inputs, attrs, opset, n_out, out_dtypes, [e.ndim for e in expected])
    got = run_epoxy(model, inputs)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return got


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


IDX = [np.float32, np.int64]

POOL_CASES = [
    ((1, 2, 7), {"kernel_shape": [3]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ((2, 3, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((2, 3, 7, 6), {"kernel_shape": [2, 3], "strides": [2, 1], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 5, 5, 5), {"kernel_shape": [2, 2, 2], "strides": [1, 2, 2], "auto_pad": "VALID"}),
]


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
def test_max_pool(shape, attrs):
    x = f32(*shape)
    check("MaxPool", [x], attrs, opset=12, n_out=2, out_dtypes=[np.float32, np.int64], oracle="ort")
    check("MaxPool", [x], attrs, opset=12, oracle="ort")


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(shape, attrs, include_pad):
    x = f32(*shape)
    check("AveragePool", [x], dict(attrs, count_include_pad=include_pad), opset=19)


@pytest.mark.parametrize("shape,attrs", POOL_CASES[:3])
def test_lp_pool(shape, attrs):
    x = f32(*shape)
    check("LpPool", [x], dict(attrs, p=3), opset=18, rtol=1e-4)
    check("LpPool", [x], dict(attrs, p=2), opset=11, rtol=1e-4)


def test_max_pool_storage_order_and_int():
    x = f32(1, 1, 4, 5)
    model = _model("MaxPool", [x], {"kernel_shape": [2, 2], "storage_order": 1}, opset=12, n_out=2, out_dtypes=IDX)
    got = run_epoxy(model, [x])
    y, idx = got
    # column-major index over the spatial dims: h + w * H
    h, w = idx % 4, idx // 4
    np.testing.assert_array_equal(x[0, 0][h[0, 0], w[0, 0]], y[0, 0])
    xi = RNG.integers(-128, 127, (1, 2, 5, 5)).astype(np.int8)
    check("MaxPool", [xi], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, opset=12, atol=0, oracle="ort")
    xh = x.astype(np.float16)
    check("MaxPool", [xh], {"kernel_shape": [2, 2]}, opset=12, atol=0)
    check("AveragePool", [xh], {"kernel_shape": [2, 2]}, opset=11, rtol=1e-3)


def test_max_pool_indices_batch_offset():
    x = f32(2, 3, 4, 4)
    model = _model("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=12, n_out=2, out_dtypes=IDX)
    y, idx = run_epoxy(model, [x])
    np.testing.assert_array_equal(x.reshape(-1)[idx], y)


def test_global_pools():
    x = f32(2, 3, 4, 5)
    check("GlobalAveragePool", [x], opset=1)
    check("GlobalMaxPool", [x], opset=1)
    expected = [np.sum(np.abs(x) ** 3, axis=(2, 3), keepdims=True) ** (1 / 3)]
    check("GlobalLpPool", [x], {"p": 3}, opset=2, rtol=1e-4, expected=expected)
    check("GlobalAveragePool", [f32(2, 3, 4, 5, 2)], opset=22)


def test_max_unpool_roundtrip():
    x = f32(1, 2, 4, 4)
    model = _model("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=12, n_out=2, out_dtypes=IDX)
    y, idx = run_epoxy(model, [x])
    check("MaxUnpool", [y, idx], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)
    shape = np.array([1, 2, 5, 5], np.int64)
    model = _model("MaxUnpool", [y, idx, shape], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)
    got = run_epoxy(model, [y, idx, shape])[0]
    assert got.shape == (1, 2, 5, 5)
    np.testing.assert_array_equal(np.sort(got[got != 0]), np.sort(y.reshape(-1)))


def test_empty_batch():
    x = f32(0, 2, 4, 4)
    got = run_epoxy(_model("MaxPool", [x], {"kernel_shape": [2, 2]}, opset=12), [x])[0]
    assert got.shape == (0, 2, 3, 3)
    got = run_epoxy(_model("AveragePool", [x], {"kernel_shape": [2, 2]}, opset=12), [x])[0]
    assert got.shape == (0, 2, 3, 3)
