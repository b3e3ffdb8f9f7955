"""Activation kernels of the cpu provider."""

from __future__ import annotations

import numpy as np
import pytest
from _elementwise_oracle import BF16, RNG, _elem, check, make_model, reference, run  # noqa: E402,F401

_ACTS = [
    ("Relu", {}, 14), ("LeakyRelu", {"alpha": 0.1}, 16), ("LeakyRelu", {}, 6), ("Elu", {"alpha": 0.7}, 22),
    ("Selu", {}, 22), ("Selu", {"alpha": 2.0, "gamma": 3.0}, 6), ("Celu", {"alpha": 2.0}, 12), ("Sigmoid", {}, 13),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 22), ("HardSwish", {}, 14), ("Softplus", {}, 22),
    ("Softsign", {}, 22), ("Tanh", {}, 13), ("ThresholdedRelu", {"alpha": 0.5}, 22), ("ThresholdedRelu", {}, 10),
    ("Shrink", {"lambd": 1.0, "bias": 0.3}, 9), ("Shrink", {}, 9), ("Mish", {}, 22), ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20), ("Swish", {}, 24), ("Swish", {"alpha": 0.5}, 24),
]


@pytest.mark.parametrize("op,attrs,opset", _ACTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_activation(op, attrs, opset, dtype):
    x = np.concatenate([RNG.uniform(-6, 6, 40), [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 50.0, -50.0]]).astype(dtype)
    x = x.reshape(4, 12)
    tol = 2e-3 if dtype == np.float16 else 1e-5
    check(op, [x], attrs, opset, rtol=tol, atol=tol)


@pytest.mark.parametrize("op,attrs,opset", _ACTS)
def test_activation_bf16_nan_empty(op, attrs, opset):
    x = np.array([-3.0, -0.25, 0.0, 0.75, 4.0], np.float32)
    got = run(op, [x.astype(BF16)], attrs, opset)
    assert got.dtype == BF16
    want = run(op, [x], attrs, opset)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=1e-2)
    e = np.zeros((0, 3), np.float32)
    assert run(op, [e], attrs, opset).shape == (0, 3)
    if op not in ("Relu", "ThresholdedRelu", "Shrink", "HardSigmoid"):
        assert np.isnan(run(op, [np.array([np.nan], np.float32)], attrs, opset)[0])


def test_extremes_do_not_overflow():
    x = np.array([-1000.0, 1000.0, -80.0, 80.0], np.float32)
    np.testing.assert_allclose(run("Sigmoid", [x]), [0.0, 1.0, 0.0, 1.0], atol=1e-30)
    np.testing.assert_allclose(run("Softplus", [x]), [0.0, 1000.0, 0.0, 80.0], atol=1e-30)
    np.testing.assert_allclose(run("Mish", [x], opset=18), [0.0, 1000.0, 0.0, 80.0], atol=1e-30)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_relu_int(dtype):
    check("Relu", [np.array([-5, 0, 7], dtype)], opset=14)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_shrink_int(dtype):
    x = np.array([0, 1, 2, 5, 9], dtype) if np.dtype(dtype).kind == "u" else np.array([-9, -2, -1, 0, 1, 2, 9], dtype)
    check("Shrink", [x], {"lambd": 1.5, "bias": 1.0}, opset=9)


def test_prelu_broadcast():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    slope = RNG.random((3, 1, 1)).astype(np.float32)
    check("PRelu", [x, slope], opset=16)
    check("PRelu", [x, RNG.random((5,)).astype(np.float32)], opset=9)
    check("PRelu", [x, np.array([0.25], np.float32)], opset=7)
    xi = np.array([-4, -1, 0, 3], np.int32)
    np.testing.assert_array_equal(run("PRelu", [xi, np.array([2], np.int32)], opset=16), [-8, -2, 0, 3])


def test_prelu_legacy_per_channel():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    slope = RNG.random((3,)).astype(np.float32)
    got = run("PRelu", [x, slope], opset=6)
    np.testing.assert_allclose(got, np.where(x >= 0, x, x * slope[:, None, None]))
