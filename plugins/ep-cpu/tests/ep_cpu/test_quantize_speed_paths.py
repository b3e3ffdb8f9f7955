"""The float32 fast paths of QuantizeLinear / DequantizeLinear and the fused
``com.epoxy.cpu::QuantizeDequantizeLinear`` (written by the core's QuantizeDequantizePairPass)
are bit-identical to onnx.reference, onnxruntime and the float64 formula: halves round to even,
codes saturate, +-inf saturate, NaN quantizes to code 0 (onnxruntime writes the type's minimum
there, the spec is silent: the float64 twin below is the oracle for it). A QDQ model's outputs
with the pass equal the unoptimized run's, bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _jit_cases import small_layers_sum_as_blas
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy

F = TensorProto.FLOAT
CODES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
         np.dtype(np.int16): TensorProto.INT16, np.dtype(np.uint16): TensorProto.UINT16}
SHAPE = (2, 3, 5, 7)
RNG = np.random.default_rng(19)


def _params(code: np.dtype, per_axis: bool) -> tuple[np.ndarray, np.ndarray]:
    n = SHAPE[1] if per_axis else 1
    scale = np.array([0.25, 0.0173, 3.0][:n], dtype=np.float32)  # 0.25: x/scale halves are exact
    info = np.iinfo(code)
    zp = np.array([info.min + 3, 0, info.max - 7][:n]).astype(code)  # off-centre: saturation shows
    return (scale, zp) if per_axis else (scale.reshape(()), zp.reshape(()))


def _data(scale: np.ndarray, code: np.dtype, specials: tuple[float, ...] = ()) -> np.ndarray:
    """Random values, exact halves of the scale and far out-of-range values, plus ``specials``."""
    s = np.broadcast_to(scale.reshape(-1, 1, 1) if scale.ndim else scale, SHAPE[1:])
    span = float(int(np.iinfo(code).max) - int(np.iinfo(code).min)) * 1.2  # past both ends, whatever the zero point
    x = (RNG.uniform(-span, span, SHAPE) * s).astype(np.float32)
    halves = (RNG.integers(-300, 300, SHAPE) + 0.5).astype(np.float32) * s.astype(np.float32)
    x = np.where(RNG.random(SHAPE) < 0.4, halves, x).astype(np.float32)
    flat = x.reshape(-1)
    flat[: len(specials)] = specials
    return x


def _model(nodes: list[onnx.NodeProto], out_type: int, inits: dict[str, np.ndarray],
           opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, SHAPE)],
                              [helper.make_tensor_value_info("y", out_type, SHAPE)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _q_model(scale: np.ndarray, zp: np.ndarray) -> onnx.ModelProto:
    return _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)], CODES[zp.dtype],
                  {"s": scale, "z": zp})


def _qdq_model(scale: np.ndarray, zp: np.ndarray, opset: int = 21) -> onnx.ModelProto:
    return _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
                   helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1),
                   helper.make_node("Identity", ["d"], ["y"])], F, {"s": scale, "z": zp}, opset)


def _epoxy(model: onnx.ModelProto, x: np.ndarray, level: str = "disable") -> tuple[np.ndarray, epoxy.InferenceSession]:
    sess = epoxy.InferenceSession(model, providers=["cpu"],
                                  sess_options=epoxy.SessionOptions(graph_optimization_level=level))
    return sess.run(None, {"x": x})[0], sess


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # keep ORT's own Q/DQ kernels
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _float64_quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray, axis_shape: tuple[int, ...]) -> np.ndarray:
    """The spec's formula in float64 after the float32 division (the kernel's former path)."""
    s, z = scale.reshape(axis_shape), zp.reshape(axis_shape).astype(np.float64)
    info = np.iinfo(zp.dtype)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint((x / s).astype(np.float64)) + z, info.min, info.max)
    return np.nan_to_num(q, nan=0.0).astype(zp.dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32) if a.dtype == np.float32 else a


CASES = [pytest.param(np.dtype(c), axis, id=f"{np.dtype(c).name}-{'axis' if axis else 'tensor'}")
         for c in (np.uint8, np.int8, np.int16, np.uint16) for axis in (False, True)]


@pytest.mark.parametrize(("code", "per_axis"), CASES)
def test_quantize_equals_reference_and_onnxruntime(code, per_axis):
    scale, zp = _params(code, per_axis)
    x = _data(scale, code)
    model = _q_model(scale, zp)
    got, _ = _epoxy(model, x)
    assert got.dtype == code
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
    np.testing.assert_array_equal(got, _ort(model, x))
    info = np.iinfo(code)
    assert (got == info.min).any() and (got == info.max).any()  # the data reaches saturation


@pytest.mark.parametrize(("code", "per_axis"), CASES)
def test_quantize_inf_saturates_and_nan_is_code_zero(code, per_axis):
    scale, zp = _params(code, per_axis)
    x = _data(scale, code, specials=(np.inf, -np.inf, np.nan, 0.0))
    model = _q_model(scale, zp)
    got, _ = _epoxy(model, x)
    axis_shape = (1, -1, 1, 1) if per_axis else ()
    np.testing.assert_array_equal(got, _float64_quantize(x, scale, zp, axis_shape))
    info = np.iinfo(code)
    assert got.reshape(-1)[:3].tolist() == [info.max, info.min, 0]
    finite = _ort(model, x).reshape(-1)  # onnxruntime agrees everywhere but at the NaN
    np.testing.assert_array_equal(np.delete(got.reshape(-1), 2), np.delete(finite, 2))


@pytest.mark.parametrize(("code", "per_axis"), CASES)
def test_dequantize_equals_reference_and_onnxruntime(code, per_axis):
    scale, zp = _params(code, per_axis)
    info = np.iinfo(code)
    codes = RNG.integers(info.min, int(info.max) + 1, SHAPE).astype(code)
    graph = helper.make_graph([helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)], "g",
                              [helper.make_tensor_value_info("x", CODES[code], SHAPE)],
                              [helper.make_tensor_value_info("y", F, SHAPE)],
                              [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zp, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    got, _ = _epoxy(model, codes)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(_bits(got), _bits(ReferenceEvaluator(model).run(None, {"x": codes})[0]))
    np.testing.assert_array_equal(_bits(got), _bits(_ort(model, codes)))


@pytest.mark.parametrize(("code", "per_axis"), CASES)
def test_fused_pair_equals_the_pair_bit_for_bit(code, per_axis):
    scale, zp = _params(code, per_axis)
    x = _data(scale, code, specials=(np.inf, -np.inf, np.nan, -0.0))
    model = _qdq_model(scale, zp)
    fused, sess = _epoxy(model, x, level="extended")
    assert "QuantizeDequantizePairPass" in sess.applied_passes
    assert "QuantizeDequantizeLinear" in [n.op_type for n in sess._graph.nodes]
    pair, plain = _epoxy(model, x)
    assert "QuantizeLinear" in [n.op_type for n in plain._graph.nodes]
    np.testing.assert_array_equal(_bits(fused), _bits(pair))
    keep = np.ones(x.size, bool)
    keep[2] = False  # onnxruntime's NaN code differs (see the module docstring)
    np.testing.assert_array_equal(_bits(fused).reshape(-1)[keep], _bits(_ort(model, x)).reshape(-1)[keep])


def test_fused_op_refuses_other_types_naming_the_node():
    scale, zp = _params(np.dtype(np.int8), False)
    model = _qdq_model(scale, zp)
    _, sess = _epoxy(model, _data(scale, np.dtype(np.int8)), level="extended")
    (node,) = [n for n in sess._graph.nodes if n.op_type == "QuantizeDequantizeLinear"]
    from epoxy_ep_cpu.ops.fake_quant import QuantizeDequantizeError, quantize_dequantize_linear

    run = quantize_dequantize_linear(node)
    with pytest.raises(QuantizeDequantizeError, match=node.name):
        run(np.zeros(SHAPE, np.float64), scale, zp)


def _qdq_cnn():
    """Conv -> Relu -> Conv -> Add quantized by epoxy.quantization.quantize_static; returns
    the QDQ model, an input, its default-level and unoptimized sessions, and conv2's weights."""
    from epoxy.quantization import quantize_static

    g = numpy_helper.from_array
    w1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = RNG.standard_normal((4, 8, 3, 3)).astype(np.float32) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "c2"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", F, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", F, [1, 4, 16, 16])], [g(w1, "w1"), g(w2, "w2")])
    fp32 = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = [{"x": RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    qdq = quantize_static(fp32, feeds)
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32) * 1.5
    fast = epoxy.InferenceSession(qdq, providers=["cpu"])
    plain = epoxy.InferenceSession(qdq, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    return qdq, x, fast, plain, w2


def test_qdq_cnn_outputs_equal_the_unoptimized_run(monkeypatch):
    """A static QDQ CNN of layers too small to run on codes (qdq_qlinear.MIN_MACS): every
    activation pair is fused and the outputs equal the unoptimized run's bit for bit (whose
    weights are dequantized at run time: its convolutions sum on BLAS)."""
    small_layers_sum_as_blas(monkeypatch)
    _, x, fast, plain, _ = _qdq_cnn()
    ops = [n.op_type for n in fast._graph.nodes]
    assert "QuantizeLinear" not in ops and ops.count("QuantizeDequantizeLinear") >= 2
    np.testing.assert_array_equal(_bits(fast.run(None, {"x": x})[0]), _bits(plain.run(None, {"x": x})[0]))


def test_qdq_cnn_runs_its_convolution_on_codes(monkeypatch):
    """The same CNN with its layers counted as large: the Conv -> Relu -> Q becomes a
    QLinearConv on the codes (core pass qdq_qlinear), reading the input's codes; its Relu needs
    no Max, since r1's range starts at 0 (uint8 zero point 0: no code below it); the
    second Conv (no Q after it: its output is read as float) runs on codes too, as
    ConvIntegerToFloat (core pass qdq_conv_integer, fused by ep-cpu). The outputs stay within
    one code step of r1 (propagated through conv2 and the Add) of the unoptimized run: only
    where the int8 rounding falls differs."""
    from epoxy.optimize.passes import qdq_qlinear

    monkeypatch.setattr(qdq_qlinear, "MIN_MACS", 0)
    monkeypatch.setattr(qdq_qlinear, "MIN_CHANNELS", 0)
    qdq, x, fast, plain, w2 = _qdq_cnn()
    ops = [n.op_type for n in fast._graph.nodes]
    assert ops == ["QuantizeLinear", "QLinearConv", "ConvIntegerToFloat", "Add"]
    r1_zero_point = next(i for i in qdq.graph.initializer if i.name == "r1_zero_point")
    assert numpy_helper.to_array(r1_zero_point) == 0
    step = float(numpy_helper.to_array(next(i for i in qdq.graph.initializer if i.name == "r1_scale")))
    bound = 2 * step * float(np.abs(w2).sum(axis=(1, 2, 3)).max()) * 1.05
    got, want = fast.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
    assert 0 < np.abs(want).max() and np.abs(got - want).max() <= bound


def test_shared_codes_and_per_axis_pairs_equal_the_unoptimized_run():
    """One Q read by two DQs, a per-axis int8 pair after Relu, and +-inf/NaN in the input: both
    pairs are fused and the outputs equal the unoptimized run's bit for bit."""
    shape = [1, 4, 6, 6]
    params = {"s": np.float32(0.05), "z": np.uint8(128),
              "sc": np.array([0.05, 0.1, 0.2, 0.4], np.float32), "zc": np.array([1, 2, 3, 4], np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d1"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d2"]),
             helper.make_node("Relu", ["d1"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sc", "zc"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "sc", "zc"], ["d3"]),
             helper.make_node("Add", ["d2", "d3"], ["y"])]
    graph = helper.make_graph(nodes, "pairs", [helper.make_tensor_value_info("x", F, shape)],
                              [helper.make_tensor_value_info("y", F, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in params.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    x = (RNG.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1)[:3] = [np.inf, -np.inf, np.nan]
    fast = epoxy.InferenceSession(proto, providers=["cpu"])
    plain = epoxy.InferenceSession(proto, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    assert [n.op_type for n in fast._graph.nodes].count("QuantizeDequantizeLinear") == 2
    np.testing.assert_array_equal(_bits(fast.run(None, {"x": x})[0]), _bits(plain.run(None, {"x": x})[0]))


@pytest.mark.parametrize(("code", "per_axis"), CASES)
def test_in_range_data_equals_the_pair_and_onnxruntime(code, per_axis):
    """Data inside the codes' range (the calibrated case: no clip runs) with halves, -0.0 and
    small negatives that round to -0.0."""
    scale, zp = _params(code, per_axis)
    s = np.broadcast_to(scale.reshape(-1, 1, 1) if scale.ndim else scale, SHAPE[1:]).astype(np.float32)
    x = (RNG.integers(-2, 3, SHAPE) + RNG.choice([0.5, -0.2, 0.0, 0.25], SHAPE)).astype(np.float32) * s
    x.reshape(-1)[:2] = [-0.0, -0.1 * float(s.reshape(-1)[1])]
    q_model, qdq_model = _q_model(scale, zp), _qdq_model(scale, zp)
    np.testing.assert_array_equal(_epoxy(q_model, x)[0], _ort(q_model, x))
    fused, sess = _epoxy(qdq_model, x, level="extended")
    assert "QuantizeDequantizeLinear" in [n.op_type for n in sess._graph.nodes]
    np.testing.assert_array_equal(_bits(fused), _bits(_epoxy(qdq_model, x)[0]))
    np.testing.assert_array_equal(_bits(fused), _bits(_ort(qdq_model, x)))


@pytest.mark.parametrize("jit", ["on", "off"])
def test_nan_with_a_zero_zero_point_is_plus_zero(jit):
    """A NaN's code is the zero point 0 here: the pair gives (0 - 0) * s = +0.0, never -0.0."""
    scale, zp = np.float32(0.1), np.uint8(0)
    x = _data(np.asarray(scale), np.dtype(np.uint8), specials=(np.nan, -0.0, -0.01, np.inf, -np.inf))
    model = _qdq_model(np.asarray(scale), np.asarray(zp))
    sess = epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})])
    fused = sess.run(None, {"x": x})[0]
    assert "QuantizeDequantizeLinear" in [n.op_type for n in sess._graph.nodes]
    np.testing.assert_array_equal(_bits(fused), _bits(_epoxy(model, x)[0]))
    assert _bits(fused).reshape(-1)[:3].tolist() == [0, 0, 0]


@pytest.mark.parametrize(("code", "per_axis"), CASES)
def test_compiled_and_numpy_fused_paths_agree(code, per_axis):
    scale, zp = _params(code, per_axis)
    x = _data(scale, code, specials=(np.inf, -np.inf, np.nan, -0.0))
    model = _qdq_model(scale, zp)
    out = {}
    for jit in ("on", "off"):
        sess = epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})])
        assert "QuantizeDequantizeLinear" in [n.op_type for n in sess._graph.nodes]
        out[jit] = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(_bits(out["on"]), _bits(out["off"]))
    np.testing.assert_array_equal(_bits(out["on"]), _bits(_epoxy(model, x)[0]))


@pytest.mark.parametrize("axis", [None, 1])
def test_compiled_kernel_blocks_cover_every_element(axis):
    """Rows longer than one parallel block (CHUNK) and several channels: the parallel kernel and
    its serial twin equal the numpy path element for element."""
    kq = pytest.importorskip("epoxy_ep_cpu.jit.kernels_quantize")
    from epoxy_ep_cpu.ops.fake_quant import fake_quantize

    shape = (2, 3, kq.CHUNK * 2 + 77)
    x = (RNG.standard_normal(shape) * 40).astype(np.float32)
    x.reshape(-1)[[0, kq.CHUNK, x.size - 1]] = [np.nan, np.inf, -0.0]
    scale = np.array([0.25, 0.1, 0.3], np.float32)[: 1 if axis is None else 3]
    zp = np.array([5, 0, 250], np.uint8)[: scale.size]
    bshape = () if axis is None else (1, 3, 1)
    want = fake_quantize(x, scale.reshape(bshape), zp.reshape(bshape))
    channels = 1 if axis is None else 3
    inner = x.size if axis is None else shape[2]
    zf = zp.astype(np.float32)
    for kernel in (kq.fake_quant, kq.fake_quant_serial):
        y = np.full(x.size, 7.0, np.float32)  # no element may keep this
        kernel(x.reshape(-1), channels, inner, scale, np.float32(0) - zf,
               np.float32(255) - zf, np.float32(0) - zf, y)
        np.testing.assert_array_equal(_bits(y.reshape(shape)), _bits(want))
    got = kq.run_fake_quant(x, scale, zp, 0, 255, axis, 2)
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("code", [np.dtype(np.uint8), np.dtype(np.int8)], ids=["uint8", "int8"])
@pytest.mark.parametrize("with_zp", [True, False], ids=["zp", "no-zp"])
def test_compiled_quantize_linear_equals_the_numpy_path(code, with_zp, monkeypatch):
    """A per-tensor QuantizeLinear (a static QDQ activation's codes) runs as one compiled pass
    under jit=on: the same codes as jit=off element for element, over several parallel blocks,
    halves, saturation, +-inf and NaN included; and the compiled pass did run."""
    kq = pytest.importorskip("epoxy_ep_cpu.jit.kernels_quantize")
    calls: list[np.dtype] = []
    real = kq.run_codes
    monkeypatch.setattr(kq, "run_codes", lambda x, s, z, dtype, n: calls.append(dtype) or real(x, s, z, dtype, n))
    shape = (2, kq.CHUNK + 333)
    scale = np.array(0.25, np.float32)
    x = (RNG.uniform(-200, 200, shape) * scale).astype(np.float32)
    x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 0.125]
    inputs, inits = ["x", "s"], {"s": scale}
    if with_zp:
        inputs.append("z")
        inits["z"] = np.array(7 if code == np.uint8 else -5, code)
    graph = helper.make_graph([helper.make_node("QuantizeLinear", inputs, ["y"])], "q",
                              [helper.make_tensor_value_info("x", F, shape)],
                              [helper.make_tensor_value_info("y", CODES[code] if with_zp else TensorProto.UINT8,
                                                             shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    out = {jit: epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})]).run(None, {"x": x})[0]
           for jit in ("on", "off")}
    want_type = code if with_zp else np.dtype(np.uint8)
    assert calls == [want_type] and out["on"].dtype == want_type
    np.testing.assert_array_equal(out["on"], out["off"])
    reference = ReferenceEvaluator(model).run(None, {"x": x})[0].reshape(-1)
    got = out["on"].reshape(-1)
    info = np.iinfo(want_type)
    # +-inf saturate and NaN is code 0, as the module docstring says (onnx.reference casts them)
    assert got[:3].tolist() == [info.max, info.min, 0]
    np.testing.assert_array_equal(got[3:], reference[3:])
