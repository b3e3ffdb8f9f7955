"""Pooling kernels of the cpu provider: MaxPool, AveragePool, LpPool, Global*, MaxUnpool."""

from __future__ import annotations

import numpy as np
import pytest
from _nn_oracle import RNG, _model, check, f32, run_epoxy  # noqa: F401

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
