"""Weight-only int8/int4 quantization (epoxy.quantization.weight_only) on ep-cpu and onnxruntime.

Small models with fixed seeds (an MLP MatMul+Add+Relu+MatMul and a Gemm with transB=1, K a
multiple of 128 so every block size applies): the output passes the checker, runs on both
runtimes with the same result, stores its weights as real int8 / packed int4 initializers,
and stays close to fp32.

Error bounds vs fp32 (relative L2, two quantized products in a row): int8 <= 2 %, 4-bit
<= 25 %. Why: a weight rounded to a step of ``absmax / levels`` carries noise of RMS
``step / sqrt(12)``. With 127 levels and a Gaussian-like channel whose absmax is 3-4 sigma,
that is about 0.8 % of the weights' RMS per product (measured 0.7-1.0 % for the pair); with
int4's 7 levels it is 12-16 % per product, and a block of 32 (absmax about 2.5 sigma) about
10 % (measured 13-19 % for the pair, 13-15 % with blocks of 32). 4-bit is for large models whose errors average out,
not for 64-wide toys: the bound says "this is 4-bit noise", not "this is good".
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quantization_checks import rel, run_epoxy, run_ort, xy_model

from epoxy.quantization.qdq import QuantizationError
from epoxy.quantization.weight_only import quantize_weights, quantize_weights_report

ort = pytest.importorskip("onnxruntime")

BOUND = {"int8": 0.02, "uint8": 0.02, "int4": 0.25, "uint4": 0.25}  # see the module docstring
K = 128


def mlp(seed: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = {"w1": rng.normal(0, 0.1, (K, 256)), "b1": rng.normal(0, 0.1, 256), "w2": rng.normal(0, 0.1, (256, 16))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["y"], name="mm2")]
    return xy_model(nodes, inits, ["N", K], ["N", 16])


def gemm(seed: int = 2) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = {"wa": rng.normal(0, 0.1, (K, K)), "ba": rng.normal(0, 0.1, K), "wb": rng.normal(0, 0.1, (16, K))}
    nodes = [helper.make_node("Gemm", ["x", "wa", "ba"], ["g"], name="fc1", transB=1),
             helper.make_node("Relu", ["g"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "wb"], ["y"], name="fc2", transB=1, alpha=0.5)]
    return xy_model(nodes, inits, ["N", K], ["N", 16])


X = {"x": np.random.default_rng(99).normal(size=(8, K)).astype(np.float32)}
SCHEMES = [("int8", None), ("int8", 32), ("uint8", 64), ("int4", None), ("int4", 32), ("uint4", 128)]


@pytest.mark.parametrize("build", [mlp, gemm], ids=["mlp", "gemm"])
@pytest.mark.parametrize(("dtype", "block_size"), SCHEMES)
def test_runs_alike_on_both_runtimes_and_stays_close(build, dtype, block_size):
    model = build()
    q, report = quantize_weights_report(model, dtype=dtype, block_size=block_size)
    onnx.checker.check_model(q, full_check=True)
    assert len(report.quantized) == 2 and report.kept_float == ()
    fp32 = run_ort(model, X, optimize=False)
    ours = run_epoxy(q, X)
    np.testing.assert_allclose(ours, run_ort(q, X, optimize=False), rtol=1e-4, atol=1e-5 * float(np.abs(fp32).max()))
    # onnxruntime's optimizer may fuse DQ->MatMul into an integer kernel: same model, its own noise
    assert rel(run_ort(q, X, optimize=True), fp32) <= BOUND[dtype]
    assert 0 < rel(ours, fp32) <= BOUND[dtype]
    if dtype in ("int4", "uint4") or block_size:
        assert max(i.version for i in q.opset_import if i.domain == "") >= 21


@pytest.mark.parametrize(("dtype", "onnx_type", "np_type"), [("int4", TensorProto.INT4, ml_dtypes.int4),
                                                             ("uint4", TensorProto.UINT4, ml_dtypes.uint4)])
def test_4bit_weights_are_packed_blocks_along_k(dtype, onnx_type, np_type):
    model = mlp()
    q, report = quantize_weights_report(model, dtype=dtype, block_size=32)
    inits = {i.name: i for i in q.graph.initializer}
    assert not {"w1", "w2"} & set(inits), "float weights left behind"
    w1 = inits["w1_quantized"]
    assert w1.data_type == onnx_type and tuple(w1.dims) == (K, 256)
    assert len(w1.raw_data) == K * 256 // 2  # two 4-bit values per byte, as onnx stores them
    assert numpy_helper.to_array(w1).dtype == np.dtype(np_type)
    dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "w1_quantized")
    assert {a.name: a.i for a in dq.attribute} == {"axis": 0, "block_size": 32}
    assert tuple(inits[dq.input[1]].dims) == (K // 32, 256)
    assert inits[dq.input[2]].data_type == onnx_type
    # 4 bits per weight plus a float scale and a 4-bit zero point per 32: about 6x smaller
    assert report.size_after < report.size_before / 5, (report.size_before, report.size_after)


def test_gemm_trans_b_blocks_run_along_its_k_axis():
    q = quantize_weights(gemm(), dtype="int4", block_size=32)
    dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "wa_quantized")
    assert {a.name: a.i for a in dq.attribute} == {"axis": 1, "block_size": 32}  # wa is [N, K]
    inits = {i.name: i for i in q.graph.initializer}
    assert tuple(inits[dq.input[1]].dims) == (K, K // 32)


def test_int8_per_channel_weights_are_int8_initializers():
    q = quantize_weights(mlp())
    inits = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    assert inits["w1_quantized"].dtype == np.int8 and inits["w1_scale"].shape == (256,)
    assert np.abs(inits["w1_quantized"]).max(axis=0).min() == 127  # every channel uses its full range
    assert max(i.version for i in q.opset_import if i.domain == "") >= 13


def _outlier_weight() -> np.ndarray:
    """[512, 32] Gaussian weights with one value 20x larger in each column: the block holding
    it gets a scale 20x coarser, so the fewer weights share that block, the fewer are
    rounded coarsely (per channel: the whole column)."""
    rng = np.random.default_rng(5)
    w = rng.normal(0, 0.05, (512, 32)).astype(np.float32)
    w[rng.integers(0, 512, 32), np.arange(32)] = 1.0
    return w


def test_smaller_blocks_give_smaller_error_on_outlier_blocks():
    w = _outlier_weight()
    model = xy_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"w": w}, ["N", 512], ["N", 32])
    x = {"x": np.random.default_rng(6).normal(size=(16, 512)).astype(np.float32)}
    fp32 = run_ort(model, x, optimize=False)
    errors = {bs: rel(run_epoxy(quantize_weights(model, dtype="int4", block_size=bs), x), fp32)
              for bs in (32, 64, 128)}
    errors[None] = rel(run_epoxy(quantize_weights(model, dtype="int4"), x), fp32)  # per channel
    assert errors[32] < errors[64] < errors[128] < errors[None], errors


def test_non_constant_weights_stay_float_unless_named():
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
             helper.make_node("Transpose", ["h"], ["ht"], name="t"),
             helper.make_node("MatMul", ["h", "ht"], ["y"], name="gram")]
    model = xy_model(nodes, {"w": rng.normal(size=(K, 8))}, [4, K], [4, 4])
    q, report = quantize_weights_report(model, dtype="int4", block_size=32)
    assert report.quantized == ("proj",)
    assert "not a constant" in report.kept["gram"]
    rows = {"x": X["x"][:4]}
    np.testing.assert_allclose(run_epoxy(q, rows), run_ort(q, rows, optimize=False), rtol=1e-4, atol=1e-4)
    with pytest.raises(QuantizationError, match="gram") as info:
        quantize_weights(model, dtype="int4", block_size=32, nodes_to_include=["gram"])
    assert info.value.node == "gram" and info.value.op_type == "MatMul"


def test_excluded_nodes_stay_float():
    q, report = quantize_weights_report(mlp(), dtype="int4", block_size=32, nodes_to_exclude=["mm2"])
    assert report.quantized == ("mm1",) and report.kept == {"mm2": "excluded by name"}
    mm2 = next(n for n in q.graph.node if n.name == "mm2")
    assert list(mm2.input) == ["r1", "w2"]
    assert next(i for i in q.graph.initializer if i.name == "w2").data_type == TensorProto.FLOAT


def test_a_shared_weight_is_quantized_once():
    rng = np.random.default_rng(8)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="a"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="b")]
    model = xy_model(nodes, {"w": rng.normal(size=(K, K))}, ["N", K], ["N", K])
    q = quantize_weights(model, dtype="int4", block_size=64)
    assert [n.op_type for n in q.graph.node].count("DequantizeLinear") == 1
    np.testing.assert_allclose(run_epoxy(q, X), run_ort(q, X, optimize=False), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"dtype": "int3"}, ValueError, "dtype"),
    ({"block_size": 48}, ValueError, "power of two"),
    ({"block_size": 8}, ValueError, "block_size"),
    ({"block_size": 0}, ValueError, "block_size"),
    ({"op_types": ("Conv",)}, ValueError, "Conv"),
    ({"nodes_to_exclude": ["nope"]}, ValueError, "nope"),
    ({"dtype": "int4", "block_size": 256}, QuantizationError, "mm1.*128.*256"),  # K=128 is not a multiple
])
def test_invalid_requests_raise_clearly(kwargs, error, match):
    with pytest.raises(error, match=match):
        quantize_weights(mlp(), **kwargs)
