"""``com.epoxy.cpu::QuantizedGlobalAveragePool`` (the core's QDQGlobalAveragePoolPass): a QDQ
global average pool on the codes gives each output the exact mean's code, within one code of
the QDQ graph's float reading (level ``disable``) and of onnxruntime's, and equal to it almost
everywhere; C-ordered and channels-last codes alike, jit on and off; wrong inputs are named."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _qdq_codes import StubNode
from _qdq_codes import codes as _codes
from _qdq_codes import run_epoxy as _run
from _qdq_codes import run_ort as _ort
from onnx import TensorProto, helper, numpy_helper

CODES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _pool(x_dtype, y_dtype, shape, prefix=()) -> onnx.ModelProto:
    zx = np.array(7 if np.dtype(x_dtype) == np.uint8 else -9, x_dtype)
    zy = np.array(120 if np.dtype(y_dtype) == np.uint8 else 3, y_dtype)
    inits = {"sx": np.float32(0.043), "zx": zx, "sy": np.float32(0.0117), "zy": zy}
    nodes = list(prefix)
    source = nodes[-1].output[0] if nodes else "x"
    nodes += [helper.make_node("DequantizeLinear", [source, "sx", "zx"], ["dx"]),
              helper.make_node("GlobalAveragePool", ["dx"], ["p"], name="pool"),
              helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"])]
    out_shape = list(shape[:2]) + [1] * (len(shape) - 2)
    graph = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", CODES[np.dtype(x_dtype)], list(shape))],
                              [helper.make_tensor_value_info("y", CODES[np.dtype(y_dtype)], out_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _exact_mean_codes(x, zx, sx, sy, zy, dtype):
    axes = tuple(range(2, x.ndim))
    mean = (x.astype(np.float64) - float(zx)).mean(axis=axes, keepdims=True) * float(sx)
    info = np.iinfo(dtype)
    return np.clip(np.rint(mean / float(sy)) + float(zy), info.min, info.max).astype(dtype)


@pytest.mark.parametrize("dtypes", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)],
                         ids=["u8", "s8-u8", "u8-s8"])
@pytest.mark.parametrize("shape", [(2, 24, 29, 31), (3, 40, 50)], ids=["2d", "1d"])
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_pool_on_codes_is_the_exact_mean_within_one_code_of_the_graph(dtypes, shape, jit):
    rng = np.random.default_rng(9)
    model = _pool(*dtypes, shape)
    x = _codes(rng, dtypes[0], shape)
    feeds = {"x": x}
    graph, graph_ops = _run(model, feeds, "disable", jit)
    fused, fused_ops = _run(model, feeds, "extended", jit)
    assert "GlobalAveragePool" in graph_ops and fused_ops == ["QuantizedGlobalAveragePool"]
    assert fused.dtype == np.dtype(dtypes[1]) and fused.shape == graph.shape
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(fused, _exact_mean_codes(x, init["zx"], init["sx"], init["sy"], init["zy"],
                                                           dtypes[1]))
    for other in (graph, _ort(model, feeds)):
        diff = np.abs(fused.astype(np.int32) - other.astype(np.int32))
        assert diff.max() <= 1 and (diff == 0).mean() >= 0.9


def test_channels_last_codes_from_qlinear_conv_are_summed_as_they_lie(monkeypatch):
    from epoxy_ep_cpu.jit import kernels_int8_gemm, kernels_quantize

    seen: list[bool] = []
    real = kernels_quantize.run_channel_means
    monkeypatch.setattr(kernels_quantize, "run_channel_means",
                        lambda x, *rest: seen.append(x.flags.c_contiguous) or real(x, *rest))
    rng = np.random.default_rng(2)
    params = {"cs": np.float32(0.043), "cz": np.uint8(7), "w": _codes(rng, np.int8, (64, 64, 1, 1)),
              "ws": np.float32(0.01), "wz": np.int8(0), "os": np.float32(0.05), "oz": np.uint8(7)}
    conv = helper.make_node("QLinearConv", ["x", "cs", "cz", "w", "ws", "wz", "os", "oz"], ["c"])
    shape = (1, 64, 66, 66)  # above the int8 GEMM's smallest layer
    model = _pool(np.uint8, np.uint8, shape, prefix=[conv])
    model.graph.initializer.extend(numpy_helper.from_array(np.asarray(v), k) for k, v in params.items())
    model.graph.node[1].input[1:] = ["os", "oz"]  # the pool's DQ reads the conv's output parameters
    feeds = {"x": _codes(rng, np.uint8, shape)}
    fused, ops = _run(model, feeds, "extended")
    assert ops == ["QLinearConv", "QuantizedGlobalAveragePool"]
    assert seen == [kernels_int8_gemm.support() is not None]  # channels-last (not C order) where the GEMM ran
    graph = _run(model, feeds, "disable")[0]
    assert np.abs(fused.astype(np.int32) - graph.astype(np.int32)).max() <= 1


def test_wrong_inputs_are_named():
    from epoxy_ep_cpu.ops.quantized_pool import QuantizedPoolError, quantized_global_average_pool

    run = quantized_global_average_pool(StubNode("pool", "QuantizedGlobalAveragePool"))
    s, z = np.float32(0.1), np.uint8(3)
    with pytest.raises(QuantizedPoolError, match="input x must be 8-bit codes of rank 3 or more"):
        run(np.zeros((1, 4), np.uint8), s, z, s, z)
    with pytest.raises(QuantizedPoolError, match="y_scale must be a scalar float32"):
        run(np.zeros((1, 4, 2, 2), np.uint8), s, z, np.ones(2, np.float32), z)
