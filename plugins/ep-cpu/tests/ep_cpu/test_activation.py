"""Activation kernels of the cpu provider."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy

BF16 = np.dtype(ml_dtypes.bfloat16)


def _elem(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def make_model(op, inputs, attrs=None, opset=17, out_dtype=None, n_out=1):
    """Single-node model; inputs: list of arrays (None = omitted optional input)."""
    names, vis = [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append(f"x{i}")
        vis.append(helper.make_tensor_value_info(f"x{i}", _elem(x.dtype), x.shape))
    first = next(x for x in inputs if x is not None)
    odt = _elem(out_dtype if out_dtype is not None else first.dtype)
    rank = max(x.ndim for x in inputs if x is not None)
    outs = [helper.make_tensor_value_info(f"y{i}", odt, [f"d{k}" for k in range(rank)]) for i in range(n_out)]
    node = helper.make_node(op, names, [o.name for o in outs], **(attrs or {}))
    graph = helper.make_graph([node], "g", vis, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(op, inputs, attrs=None, opset=17, out_dtype=None):
    model = make_model(op, inputs, attrs, opset, out_dtype)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    (out,) = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    return out


def reference(op, inputs, attrs=None, opset=17, out_dtype=None):
    model = make_model(op, inputs, attrs, opset, out_dtype)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    with np.errstate(all="ignore"):
        (out,) = ReferenceEvaluator(model).run(None, feeds)
    return np.asarray(out)


def check(op, inputs, attrs=None, opset=17, rtol=1e-6, atol=1e-7, out_dtype=None):
    got = run(op, inputs, attrs, opset, out_dtype)
    want = reference(op, inputs, attrs, opset, out_dtype)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return got


RNG = np.random.default_rng(0)



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
