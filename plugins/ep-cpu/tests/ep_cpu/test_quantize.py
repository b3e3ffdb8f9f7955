"""QuantizeLinear / DequantizeLinear / DynamicQuantizeLinear kernels of the cpu provider."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from _single_node import node_inputs  # noqa: E402
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _model(op, inputs, attrs=None, opset=21, n_out=1):
    names, vis = node_inputs(inputs)
    outs = []
    for i in range(n_out):
        vi = onnx.ValueInfoProto()
        vi.name = f"y{i}"
        outs.append(vi)
    node = helper.make_node(op, names, [o.name for o in outs], **(attrs or {}))
    model = helper.make_model(helper.make_graph([node], "g", vis, outs), opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _both(op, inputs, attrs=None, opset=21, n_out=1):
    model = _model(op, inputs, attrs, opset, n_out)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    with np.errstate(all="ignore"):
        want = ReferenceEvaluator(model).run(None, feeds)
    return got, want


def _same(got, want, exact=True):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    if exact:
        np.testing.assert_array_equal(g, w)
    else:
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-6)


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("opset", [10, 13, 19, 21, 23, 25])
@pytest.mark.parametrize("zp_dtype", [np.uint8, np.int8])
def test_quantize_per_tensor_opsets(opset, zp_dtype):
    x = (RNG.standard_normal((3, 5)) * 40).astype(np.float32)
    x[0, 0] = 0.5  # ties round to even
    x[0, 1] = 1.5
    x[0, 2] = 1e9  # saturates
    zp = np.array(3, dtype=zp_dtype)
    got, want = _both("QuantizeLinear", [x, np.array(1.0, np.float32), zp], opset=opset)
    _same(got[0], want[0])


def test_quantize_default_uint8_without_zero_point():
    x = np.array([-3.0, 0.0, 2.5, 3.5, 600.0], np.float32)
    got, want = _both("QuantizeLinear", [x, np.array(2.0, np.float32)])
    assert got[0].dtype == np.uint8
    _same(got[0], want[0])


@pytest.mark.parametrize("axis", [1, -1, 0])
def test_quantize_per_axis(axis):
    x = RNG.standard_normal((4, 3, 5)).astype(np.float32)
    n = x.shape[axis]
    scale = RNG.uniform(0.01, 0.1, n).astype(np.float32)
    zp = RNG.integers(-5, 5, n).astype(np.int8)
    got, want = _both("QuantizeLinear", [x, scale, zp], {"axis": axis})
    _same(got[0], want[0])
    got, want = _both("DequantizeLinear", [got[0], scale, zp], {"axis": axis})
    _same(got[0], want[0], exact=False)


@pytest.mark.parametrize("block", [2, 3])
def test_blocked_uneven(block):
    x = RNG.standard_normal((3, 7)).astype(np.float32)
    nb = -(-7 // block)
    scale = RNG.uniform(0.01, 0.1, (3, nb)).astype(np.float32)
    zp = RNG.integers(0, 10, (3, nb)).astype(np.uint8)
    got, want = _both("QuantizeLinear", [x, scale, zp], {"axis": 1, "block_size": block})
    _same(got[0], want[0])
    got, want = _both("DequantizeLinear", [got[0], scale, zp], {"axis": 1, "block_size": block})
    _same(got[0], want[0], exact=False)


@pytest.mark.parametrize(
    "dtype",
    [ml_dtypes.int4, ml_dtypes.uint4, np.int16, np.uint16],
)
def test_small_int_roundtrip(dtype):
    x = (RNG.standard_normal((2, 6)) * 10).astype(np.float32)
    zp = np.array([1, 2], dtype=dtype)
    scale = np.array([0.5, 2.0], np.float32)
    got, want = _both("QuantizeLinear", [x, scale, zp], {"axis": 0})
    assert got[0].dtype == np.dtype(dtype)
    _same(got[0], want[0])
    got, want = _both("DequantizeLinear", [got[0], scale, zp], {"axis": 0})
    _same(got[0], want[0])


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E4M3FNUZ])
def test_quantize_float8_saturate(saturate, dtype):
    x = np.array([0.0, -0.0, 1.3, -7.1, 500.0, -1e6, np.inf, -np.inf, 100000.0], np.float32)
    got, want = _both("QuantizeLinear", [x, np.array(1.0, np.float32)], {"saturate": saturate, "output_dtype": dtype})
    g, w = got[0].astype(np.float32), want[0].astype(np.float32)
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(g, w)


def test_quantize_output_dtype_float4():
    x = np.array([0.2, 1.1, -2.9, 5.0, 100.0, -100.0], np.float32)
    attrs = {"output_dtype": TensorProto.FLOAT4E2M1}
    got, want = _both("QuantizeLinear", [x, np.array(1.0, np.float32)], attrs, opset=23)
    assert got[0].dtype == np.dtype(ml_dtypes.float4_e2m1fn)
    np.testing.assert_array_equal(got[0].astype(np.float32), want[0].astype(np.float32))


def test_quantize_float16_input_and_int32_input():
    x = np.array([1.0, 2.5, -3.75, 100.0], np.float16)
    got, want = _both("QuantizeLinear", [x, np.array(0.5, np.float16), np.array(0, np.int8)])
    _same(got[0], want[0])
    xi = np.array([-1000, 3, 7, 1000], np.int32)
    got, want = _both("QuantizeLinear", [xi, np.array(2.0, np.float32), np.array(10, np.uint8)])
    _same(got[0], want[0])


def test_quantize_precision_attribute():
    x = np.array([1.0, 3.0, 1000.1, -2.2], np.float32)
    got, _ = _both("QuantizeLinear", [x, np.array(3.0, np.float32), np.array(0, np.int16)],
                   {"precision": TensorProto.FLOAT16}, opset=25)
    # division done in float16: 1000.1 -> 1000 -> /3 = 333.25 -> 333
    np.testing.assert_array_equal(got[0], np.array([0, 1, 333, -1], np.int16))


def test_quantize_dequantize_empty():
    x = np.zeros((0, 3), np.float32)
    got, want = _both("QuantizeLinear", [x, np.array(1.0, np.float32), np.array(0, np.uint8)])
    assert got[0].shape == (0, 3) and got[0].dtype == np.uint8
    got, want = _both("DequantizeLinear", [np.zeros((2, 0), np.int8), np.array(1.0, np.float32)])
    assert got[0].shape == (2, 0) and got[0].dtype == np.float32


def test_dequantize_output_dtype_and_float16_scale():
    x = np.array([[-128, 0, 127], [5, 6, 7]], np.int8)
    got, want = _both("DequantizeLinear", [x, np.array(0.5, np.float32), np.array(1, np.int8)],
                      {"output_dtype": TensorProto.FLOAT16}, opset=23)
    assert got[0].dtype == np.float16
    _same(got[0], want[0], exact=False)
    got, want = _both("DequantizeLinear", [x, np.array(0.25, np.float16)])
    _same(got[0], want[0], exact=False)


def test_dequantize_int32_and_float8():
    x = np.array([-(2**30), 0, 12345], np.int32)
    got, want = _both("DequantizeLinear", [x, np.array(0.5, np.float32)], opset=19)
    _same(got[0], want[0], exact=False)
    f8 = np.array([0.5, -2.0, 448.0], np.float32).astype(ml_dtypes.float8_e4m3fn)
    got, want = _both("DequantizeLinear", [f8, np.array(2.0, np.float32)], opset=19)
    _same(got[0], want[0])


@pytest.mark.parametrize(
    "x",
    [
        np.array([0.0, 2.0, -3.0, -2.5, 1.34, 0.5], np.float32),
        np.array([1.0, 2.0, 3.0], np.float32),  # all positive -> min adjusted to 0
        np.array([-1.0, -2.0, -3.0], np.float32),  # all negative -> max adjusted to 0
        RNG.standard_normal((3, 4)).astype(np.float32),
    ],
)
def test_dynamic_quantize(x):
    got, want = _both("DynamicQuantizeLinear", [x], opset=11, n_out=3)
    for g, w in zip(got, want):
        _same(np.asarray(g), np.asarray(w), exact=False)


def test_dynamic_quantize_all_zero():
    got = epoxy.InferenceSession(_model("DynamicQuantizeLinear", [np.zeros(4, np.float32)], opset=11, n_out=3),
                                 providers=["cpu"]).run(None, {"x0": np.zeros(4, np.float32)})
    np.testing.assert_array_equal(got[0], np.zeros(4, np.uint8))
    assert got[1].dtype == np.float32 and got[2].dtype == np.uint8
