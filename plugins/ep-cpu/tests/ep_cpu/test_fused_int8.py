"""``MatMulInteger -> Cast -> Mul(scale) [-> Add(bias)]`` -> ``MatMulIntegerToFloat`` (ops/fused_int8.py)
on models written by epoxy's and onnxruntime's ``quantize_dynamic``: the fused graph's outputs
equal the unfused chain's bit for bit (jit on and off), and onnxruntime's run of the same file
within its float rounding."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.quantization import quantize_dynamic
from epoxy_sdk.conformance.onnxruntime_oracle import reduce_range


def _mlp(seed: int, bias_as: str) -> onnx.ModelProto:
    """x [b, 16, 64] -> MatMul(64x96) [+ bias] -> Relu -> MatMul(96x32) [+ bias]: the dense
    layers a transformer's exporter writes (MatMul + Add) or Gemm-free variants."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((64, 96)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((96, 32)).astype(np.float32) * 0.2
    b1 = rng.standard_normal(96).astype(np.float32)
    b2 = rng.standard_normal(32).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"])]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    if bias_as == "add":
        nodes.append(helper.make_node("Add", ["h0", "b1"], ["h1"]))
        inits += [numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(b2, "b2")]
    else:
        nodes.append(helper.make_node("Identity", ["h0"], ["h1"]))
    nodes += [helper.make_node("Relu", ["h1"], ["h2"]), helper.make_node("MatMul", ["h2", "w2"], ["y0"])]
    nodes.append(helper.make_node("Add", ["b2", "y0"], ["y"]) if bias_as == "add" else
                 helper.make_node("Identity", ["y0"], ["y"]))
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 16, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 16, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(session: epoxy.InferenceSession) -> list[str]:
    return [n.op_type for n in session._graph.nodes]


def _session(model: bytes, level: str, jit: bool) -> epoxy.InferenceSession:
    return epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})],
                                  sess_options=epoxy.SessionOptions(graph_optimization_level=level))


@pytest.mark.parametrize("bias_as", ["add", "none"])
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_epoxy_dynamic_models_fuse_and_keep_their_values(bias_as, jit):
    model = quantize_dynamic(_mlp(1, bias_as), per_channel=True).SerializeToString()
    x = np.random.default_rng(2).standard_normal((3, 16, 64)).astype(np.float32)
    plain, fused = _session(model, "basic", jit), _session(model, "extended", jit)
    assert "MatMulInteger" in _ops(plain) and "MatMulIntegerToFloat" not in _ops(plain)
    ops = _ops(fused)
    assert ops.count("MatMulIntegerToFloat") == 2 and not {"MatMulInteger", "Cast", "Mul"} & set(ops)
    assert "Add" not in ops  # every bias went into the fused nodes
    want, got = plain.run(None, {"x": x})[0], fused.run(None, {"x": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_onnxruntime_dynamic_models_fuse_too(tmp_path):
    """onnxruntime's tool writes the same chain (per-tensor weights here): fused, and equal to
    the unfused run and (within its float rounding) to onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as ort_quantize_dynamic

    src, dst = tmp_path / "mlp.onnx", tmp_path / "mlp.int8.onnx"
    onnx.save(_mlp(3, "add"), str(src))
    ort_quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    model = dst.read_bytes()
    x = np.random.default_rng(4).standard_normal((2, 16, 64)).astype(np.float32)
    plain, fused = _session(model, "basic", True), _session(model, "extended", True)
    assert _ops(fused).count("MatMulIntegerToFloat") == 2
    got = fused.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, plain.run(None, {"x": x})[0])
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4 * float(np.abs(reference).max()))


def test_chains_that_differ_stay_as_written():
    """The first product cast through float16, the second's int32 product also a graph
    output: neither is fused, and the values stay the unfused run's."""
    model = quantize_dynamic(_mlp(5, "add"), per_channel=True)
    graph = model.graph
    products = [n for n in graph.node if n.op_type == "MatMulInteger"]
    cast = next(n for n in graph.node if n.op_type == "Cast" and n.input[0] == products[0].output[0])
    cast.attribute[0].i = TensorProto.FLOAT16
    widen = helper.make_node("Cast", ["narrow"], ["wide"], to=TensorProto.FLOAT)
    mul = next(n for n in graph.node if n.op_type == "Mul" and cast.output[0] in n.input)
    mul.input[list(mul.input).index(cast.output[0])] = "wide"
    cast.output[0] = "narrow"
    graph.node.insert(list(graph.node).index(mul), widen)
    graph.output.append(helper.make_tensor_value_info(products[1].output[0], TensorProto.INT32, None))
    raw = model.SerializeToString()
    fused, plain = _session(raw, "extended", True), _session(raw, "basic", True)
    assert "MatMulIntegerToFloat" not in _ops(fused) and _ops(fused).count("MatMulInteger") == 2
    x = np.random.default_rng(6).standard_normal((1, 16, 64)).astype(np.float32)
    for a, b in zip(fused.run(None, {"x": x}), plain.run(None, {"x": x})):
        np.testing.assert_array_equal(a, b)


def test_the_fused_tail_runs_compiled_with_jit(monkeypatch):
    """The equalities above would hold vacuously if jit=on ran the numpy tail."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_quantize

    calls: list[tuple[int, ...]] = []
    real = kernels_quantize.run_scale_columns
    monkeypatch.setattr(kernels_quantize, "run_scale_columns",
                        lambda acc, *args: calls.append(acc.shape) or real(acc, *args))
    model = quantize_dynamic(_mlp(7, "add"), per_channel=True).SerializeToString()
    x = np.random.default_rng(8).standard_normal((2, 16, 64)).astype(np.float32)
    on, off = _session(model, "extended", True), _session(model, "extended", False)
    np.testing.assert_array_equal(on.run(None, {"x": x})[0], off.run(None, {"x": x})[0])
    assert calls == [(2, 16, 96), (2, 16, 32)]


# -- static QDQ layers: the core's QDQMatMulToIntegerPass writes the chain, fused here ---------------
@pytest.fixture
def any_size(monkeypatch):
    """The MLP's 64 x 96 weights count as large enough for the core pass (MIN_WEIGHTS)."""
    from epoxy.optimize.passes import qdq_matmul

    monkeypatch.setattr(qdq_matmul, "MIN_WEIGHTS", 0)


def _static(seed: int, activation_dtype: str = "uint8") -> bytes:
    from epoxy.quantization import quantize_static

    rng = np.random.default_rng(seed)
    calib = [{"x": rng.standard_normal((2, 16, 64)).astype(np.float32)} for _ in range(3)]
    return quantize_static(_mlp(seed, "add"), calib, op_types=("MatMul",), activation_dtype=activation_dtype,
                           per_channel=True, reduce_range=reduce_range()).SerializeToString()


@pytest.mark.parametrize("activation_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_static_qdq_layers_run_on_codes(any_size, activation_dtype, jit):
    """epoxy's quantize_static MLP at level extended: both layers run as MatMulIntegerToFloat
    with their biases (the partition report: on cpu), within float rounding of the float
    reading (level basic) and of onnxruntime's run of the same file."""
    model = _static(9, activation_dtype)
    plain, fused = _session(model, "basic", jit), _session(model, "extended", jit)
    assert "MatMulIntegerToFloat" not in _ops(plain) and _ops(plain).count("MatMul") == 2
    ops = _ops(fused)
    assert ops.count("MatMulIntegerToFloat") == 2 and not {"MatMul", "MatMulInteger", "Add"} & set(ops)
    placed = {d.node: d.provider for d in fused.partition_report().nodes if d.op_type == "MatMulIntegerToFloat"}
    assert len(placed) == 2 and set(placed.values()) == {"cpu"}
    x = np.random.default_rng(10).standard_normal((3, 16, 64)).astype(np.float32)
    want, got = plain.run(None, {"x": x})[0], fused.run(None, {"x": x})[0]
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    ort = pytest.importorskip("onnxruntime")
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4 * scale)


def test_static_qdq_layers_below_the_size_stay_float():
    """Without the fixture the MLP's weights are below MIN_WEIGHTS: the float reading stays."""
    fused = _session(_static(11), "extended", True)
    assert not {"MatMulIntegerToFloat", "MatMulInteger"} & set(_ops(fused))
    assert _ops(fused).count("FusedMatMul") == 2  # the float products with their bias (and Relu)


# -- static QDQ convolutions read as float: the core's QDQConvToIntegerPass writes ConvInteger and
# its tail, fused here into ConvIntegerToFloat --------------------------------------------------------
def _residual_block(seed: int) -> onnx.ModelProto:
    """x [1, 32, 56, 56] -> Conv 3x3 -> Relu -> Conv 3x3 -> Add(x) -> Relu: the second Conv's
    output is read by the float Add (a resnet block's last layer); 29 M multiply-adds each, as
    large as the int8 GEMM takes."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32), f"w{i}")
             for i in (1, 2)]
    inits += [numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), f"b{i}") for i in (1, 2)]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 56, 56])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 56, 56])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
def test_static_qdq_convolutions_read_as_float_run_on_codes(monkeypatch, jit):
    """epoxy's quantize_static (Conv) of the block at level extended: the Conv the float Add
    reads runs as ConvIntegerToFloat on cpu (partition report), within int8 rounding of the
    float reading (level basic) and of onnxruntime's run of the same file; with jit on and
    AVX512-VNNI here, through the int8 GEMM's one-pass float store (not the numpy fallback)."""
    from epoxy.quantization import quantize_static
    from epoxy_ep_cpu.jit import kernels_int8_conv, kernels_int8_gemm

    rng = np.random.default_rng(12)
    calib = [{"x": rng.standard_normal((1, 32, 56, 56)).astype(np.float32)} for _ in range(2)]
    model = quantize_static(_residual_block(12), calib, per_channel=True,
                            reduce_range=reduce_range()).SerializeToString()
    stores = []
    real = kernels_int8_conv.PackedInt8Conv.scaled
    monkeypatch.setattr(kernels_int8_conv.PackedInt8Conv, "scaled",
                        lambda self, *a: stores.append(1) or real(self, *a))
    plain, fused = _session(model, "basic", jit), _session(model, "extended", jit)
    assert "ConvIntegerToFloat" not in _ops(plain)
    ops = _ops(fused)
    assert ops.count("ConvIntegerToFloat") == 1 and not {"ConvInteger", "Cast"} & set(ops)
    placed = {d.node: d.provider for d in fused.partition_report().nodes if d.op_type == "ConvIntegerToFloat"}
    assert list(placed.values()) == ["cpu"]
    x = rng.standard_normal((1, 32, 56, 56)).astype(np.float32)
    want, got = plain.run(None, {"x": x})[0], fused.run(None, {"x": x})[0]
    scale = float(np.abs(want).max())
    # int8 rounding: the conv before reads codes either way; the sums differ in float rounding only,
    # but a code at a rounding boundary of the first layer's output moves by one step
    np.testing.assert_allclose(got, want, rtol=0, atol=0.02 * scale)
    ort = pytest.importorskip("onnxruntime")
    reference = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, reference, rtol=0, atol=0.02 * scale)
    compiled = jit and kernels_int8_gemm.support() is None
    assert bool(stores) == compiled


@pytest.mark.parametrize(("batch", "hw"), [(1, 56), (3, 7)], ids=["one-image", "tiles-across-images"])
def test_conv_integer_to_float_equals_the_chain_bit_for_bit(monkeypatch, batch, hw):
    """The fused node's value is the unfused ConvInteger -> Cast -> Mul -> Add chain's exactly
    (both run on cpu; the chain at level basic, fused at extended), through the int8 GEMM's
    store (forced on for the small batch-3 layer, whose 64-pixel tiles span two images)."""
    from epoxy_ep_cpu.jit import kernels_int8_conv, kernels_int8_gemm

    monkeypatch.setattr(kernels_int8_conv, "MIN_MACS", 0)
    monkeypatch.setattr(kernels_int8_gemm, "MIN_MACS", 0)
    stored = []
    real = kernels_int8_conv.PackedInt8Conv.scaled
    monkeypatch.setattr(kernels_int8_conv.PackedInt8Conv, "scaled",
                        lambda self, *a: (lambda y: stored.append(y is not None) or y)(real(self, *a)))
    rng = np.random.default_rng(13)
    w = rng.integers(-127, 128, (32, 32, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(7, np.uint8), "xz"),
             numpy_helper.from_array(rng.uniform(1e-4, 1e-3, (32, 1, 1)).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal((32, 1, 1)).astype(np.float32), "b")]
    nodes = [helper.make_node("ConvInteger", ["x", "w", "xz"], ["i"], pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["f", "s"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    shape = [batch, 32, hw, hw]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.integers(0, 256, shape).astype(np.uint8)
    plain, fused = _session(model, "basic", True), _session(model, "extended", True)
    assert _ops(fused) == ["ConvIntegerToFloat"]
    np.testing.assert_array_equal(fused.run(None, {"x": x})[0], plain.run(None, {"x": x})[0])
    assert stored == ([True] if kernels_int8_gemm.support() is None else [])
