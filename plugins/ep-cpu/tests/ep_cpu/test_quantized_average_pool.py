"""``com.epoxy.cpu::QuantizedAveragePool`` (the core's QDQAveragePoolPass): a QDQ windowed average
pool on its codes gives each output the exact window mean's code, within one code of the QDQ
graph's float reading (level ``disable``) and of onnxruntime's, equal almost everywhere; for
every geometry (pads with and without count_include_pad, ceil mode, dilations, strides), jit
on and off (the same codes), C-ordered and channels-last codes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _qdq_codes import codes as _codes
from _qdq_codes import run_epoxy as _run
from _qdq_codes import run_ort as _ort
from onnx import TensorProto, helper, numpy_helper

CODES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
GEOMETRIES = [
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "strides": [2, 1], "pads": [1, 0, 0, 2], "dilations": [2, 1], "count_include_pad": 1},
    {"kernel_shape": [5, 5], "strides": [3, 3]},
]


def _pool(x_dtype, y_dtype, shape, attrs, opset=19) -> onnx.ModelProto:
    zx = np.array(7 if np.dtype(x_dtype) == np.uint8 else -9, x_dtype)
    zy = np.array(120 if np.dtype(y_dtype) == np.uint8 else 3, y_dtype)
    inits = {"sx": np.float32(0.043), "zx": zx, "sy": np.float32(0.0317), "zy": zy}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["dx"]),
             helper.make_node("AveragePool", ["dx"], ["p"], name="pool", **attrs),
             helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"])]
    x_info = helper.make_tensor_value_info("x", CODES[np.dtype(x_dtype)], list(shape))
    graph = helper.make_graph(nodes, "pool", [x_info],
                              [helper.make_tensor_value_info("y", CODES[np.dtype(y_dtype)], ["n", "c", "h", "w"])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)],
                         ids=["u8", "s8-u8", "u8-s8"])
@pytest.mark.parametrize("attrs", GEOMETRIES, ids=[str(g) for g in GEOMETRIES])
@pytest.mark.parametrize("layout", ["nchw", "channels-last"])
def test_pool_on_codes_is_the_window_mean_within_one_code_of_the_graph(dtypes, attrs, layout):
    rng = np.random.default_rng(4)
    shape = (2, 24, 13, 15)
    model = _pool(*dtypes, shape, attrs)
    x = _codes(rng, dtypes[0], shape)
    if layout == "channels-last":  # as QLinearConv hands codes on: an NCHW view of NHWC codes
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    feeds = {"x": x}
    graph, graph_ops = _run(model, feeds, "disable")
    fused, fused_ops = _run(model, feeds, "extended")
    numpy_path, _ = _run(model, feeds, "extended", jit=False)
    assert "AveragePool" in graph_ops and fused_ops == ["QuantizedAveragePool"]
    assert fused.dtype == np.dtype(dtypes[1]) and fused.shape == graph.shape
    np.testing.assert_array_equal(numpy_path, fused)  # the same float64 steps on both paths
    others = [graph] + ([_ort(model, feeds)] if dtypes[0] == np.uint8 and "dilations" not in attrs else [])
    for other in others:
        diff = np.abs(fused.astype(np.int32) - other.astype(np.int32))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.9


def test_the_exact_window_mean():
    """Against a direct float64 reference of the definition: (sum - n * x_zp) * x_scale / d."""
    rng = np.random.default_rng(1)
    attrs = GEOMETRIES[1]  # count_include_pad: d is 9 everywhere, n counts the input positions
    model = _pool(np.uint8, np.uint8, (1, 3, 6, 7), attrs)
    x = _codes(rng, np.uint8, (1, 3, 6, 7))
    fused, _ = _run(model, {"x": x}, "extended")
    padded = np.pad(x.astype(np.float64) - 7, ((0, 0), (0, 0), (1, 1), (1, 1)))
    sums = sum(padded[:, :, i:i + 6, j:j + 7] for i in range(3) for j in range(3))
    want = np.clip(np.rint(sums * (float(np.float32(0.043)) / float(np.float32(0.0317)) / 9)) + 120, 0, 255)
    np.testing.assert_array_equal(fused, want.astype(np.uint8))
