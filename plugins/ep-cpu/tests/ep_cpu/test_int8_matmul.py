"""8-bit integer products on ep-cpu (MatMulInteger, QLinearMatMul through ``_int_matmul``'s
float32 K-chunks) are bit-identical to an int64 numpy product, wrapped to int32: random codes,
extremes (-128, 255 against shifted zero points), long K, per-row / per-column / batched zero
points, constant (prepacked) and fed right operands. And a QDQ model's constant weight DQ is
folded on cpu with outputs equal to the unoptimized run."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy import SessionOptions
from epoxy_ep_cpu.ops._int_matmul import EXACT_F32, chunk_length, matmul_exact, shift_a, shift_b

RNG = np.random.default_rng(3)
U8, S8 = np.dtype(np.uint8), np.dtype(np.int8)


def codes(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return RNG.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


def reference(a, b, a_zp=None, b_zp=None) -> np.ndarray:
    """int64 product of the shifted codes, wrapped to int32 as an int32 accumulator wraps."""
    a64 = a.astype(np.int64)
    b64 = b.astype(np.int64)
    if a_zp is not None:
        zp = np.asarray(a_zp).astype(np.int64)
        a64 = a64 - (zp.reshape(-1, 1) if zp.ndim == 1 and zp.size > 1 else zp)
    if b_zp is not None:
        b64 = b64 - np.asarray(b_zp).astype(np.int64)
    return np.matmul(a64, b64).astype(np.int32)


def _vi(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))


def run_op(op: str, args: list[np.ndarray | None], constants: set[int], out_dtype: np.dtype, opset: int = 13):
    """One-node model; inputs at ``constants`` are initializers (the kernel prepacks them)."""
    names = [f"i{k}" if v is not None else "" for k, v in enumerate(args)]
    inputs = [_vi(n, v) for k, (n, v) in enumerate(zip(names, args)) if v is not None and k not in constants]
    inits = [numpy_helper.from_array(v, n) for k, (n, v) in enumerate(zip(names, args))
             if v is not None and k in constants]
    a, b = args[0], args[1 if op == "MatMulInteger" else 3]
    assert a is not None and b is not None
    rank = np.matmul(np.zeros(a.shape), np.zeros(b.shape)).ndim
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(out_dtype), [f"d{i}" for i in range(rank)])
    graph = helper.make_graph([helper.make_node(op, names, ["y"])], "g", inputs, [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    feeds = {n: v for k, (n, v) in enumerate(zip(names, args)) if v is not None and k not in constants}
    return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)[0]


def matmul_integer(a, b, a_zp=None, b_zp=None, constant_b: bool = True) -> np.ndarray:
    constants = {1, 3} if constant_b else set()
    constants |= {2} if a_zp is not None else set()
    y = run_op("MatMulInteger", [a, b, a_zp, b_zp], constants, np.dtype(np.int32), opset=10)
    assert y.dtype == np.int32
    return y


PAIRS = [(U8, S8), (U8, U8), (S8, S8), (S8, U8)]


@pytest.mark.parametrize("da,db", PAIRS)
@pytest.mark.parametrize("constant_b", [True, False])
def test_random_codes_with_zero_points(da, db, constant_b):
    a, b = codes(da, (7, 300)), codes(db, (300, 9))
    a_zp, b_zp = codes(da, ()), codes(db, ())
    np.testing.assert_array_equal(matmul_integer(a, b, np.asarray(a_zp), np.asarray(b_zp), constant_b),
                                  reference(a, b, a_zp, b_zp))
    np.testing.assert_array_equal(matmul_integer(a, b, constant_b=constant_b), reference(a, b))


@pytest.mark.parametrize("constant_b", [True, False])
def test_extremes_over_long_k(constant_b):
    """Every product at its largest magnitude (255 * 255 after the zero points shift the codes),
    K = 4096: a float32 GEMM over K would round (sums past 2**24), the chunks must not."""
    k = 4096
    a = np.full((3, k), 255, np.uint8)
    a[1] = 0
    a[2, ::2] = 0
    b = np.full((k, 4), -128, np.int8)
    b[:, 1] = 127
    b[::3, 2] = 127
    a_zp, b_zp = np.array(0, np.uint8), np.array(127, np.int8)  # b - b_zp reaches -255
    expected = reference(a, b, a_zp, b_zp)
    assert np.abs(expected.astype(np.int64)).max() > EXACT_F32  # the case float32 alone gets wrong
    np.testing.assert_array_equal(matmul_integer(a, b, a_zp, b_zp, constant_b), expected)


@pytest.mark.parametrize("da,db", PAIRS)
def test_random_long_k(da, db):
    a, b = codes(da, (5, 4096)), codes(db, (4096, 6))
    a_zp, b_zp = codes(da, ()), codes(db, ())
    for constant_b in (True, False):
        np.testing.assert_array_equal(matmul_integer(a, b, np.asarray(a_zp), np.asarray(b_zp), constant_b),
                                      reference(a, b, a_zp, b_zp))


def test_sums_past_int32_wrap_like_an_int32_accumulator() -> None:
    k = 40000  # 40000 * 255 * 255 > 2**31
    a, b = np.full((1, k), 255, np.uint8), np.full((k, 2), 255, np.uint8)
    b[:, 1] = 0
    expected = reference(a, b)
    assert expected[0, 0] != 40000 * 255 * 255  # it wrapped
    np.testing.assert_array_equal(matmul_integer(a, b), expected)


@pytest.mark.parametrize("constant_b", [True, False])
def test_per_row_and_per_column_zero_points(constant_b):
    a, b = codes(U8, (6, 700)), codes(S8, (700, 5))
    a_zp, b_zp = codes(U8, (6,)), codes(S8, (5,))
    np.testing.assert_array_equal(matmul_integer(a, b, a_zp, b_zp, constant_b), reference(a, b, a_zp, b_zp))


@pytest.mark.parametrize("constant_b", [True, False])
def test_batched_three_d(constant_b):
    """3-D A against 2-D B (one GEMM over all rows) and against 3-D B, with the spec's
    (D, M, 1) / (D, 1, N) zero points."""
    a = codes(U8, (3, 4, 1100))
    b2, b3 = codes(S8, (1100, 5)), codes(S8, (3, 1100, 5))
    a_zp = codes(U8, (3, 4, 1))
    b_zp3 = codes(S8, (3, 1, 5))
    np.testing.assert_array_equal(matmul_integer(a, b2, a_zp, np.array(-7, np.int8), constant_b),
                                  reference(a, b2, a_zp, np.int8(-7)))
    np.testing.assert_array_equal(matmul_integer(a, b3, a_zp, b_zp3, constant_b), reference(a, b3, a_zp, b_zp3))


@pytest.mark.parametrize("constant_b", [True, False])
def test_one_d_operands_like_numpy_matmul(constant_b):
    a1, a2 = codes(U8, (1300,)), codes(U8, (3, 1300))
    b1, b2 = codes(S8, (1300,)), codes(S8, (1300, 4))
    for a, b in ((a1, b2), (a2, b1), (a1, b1)):
        np.testing.assert_array_equal(matmul_integer(a, b, np.array(5, np.uint8), np.array(-2, np.int8), constant_b),
                                      reference(a, b, np.uint8(5), np.int8(-2)))


def test_empty_k_gives_zeros() -> None:
    a, b = np.zeros((3, 0), np.uint8), np.zeros((0, 4), np.int8)
    np.testing.assert_array_equal(matmul_integer(a, b), np.zeros((3, 4), np.int32))


def test_chunk_lengths_follow_the_operands_bounds() -> None:
    """uint8 activations (zero point 0: up to 255) against symmetric int8 weights (|w| <= 127,
    read from the packed values) take 518-long chunks; a fed int8 operand is bounded by its dtype."""
    w = codes(S8, (64, 8)).clip(-127, 127)
    w[0, 0] = 127
    packed, fed = shift_b(w, None, constant=True), shift_b(w, None)
    act = shift_a(codes(U8, (2, 64)), np.array(0, np.uint8))
    assert (act.bound, packed.bound, fed.bound) == (255, 127, 128)
    assert chunk_length(act.bound, packed.bound) == EXACT_F32 // (255 * 127) == 518
    assert chunk_length(act.bound, fed.bound) == 514
    shifted = shift_a(codes(U8, (2, 64)), np.array(100, np.uint8))
    assert shifted.bound == 155


def test_matmul_exact_directly_on_a_chunked_case() -> None:
    a, b = codes(U8, (4, 2000)), codes(U8, (2000, 3))
    a_zp, b_zp = np.array(0, np.uint8), np.array(255, np.uint8)
    got = matmul_exact(shift_a(a, a_zp), shift_b(b, b_zp, constant=True))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, reference(a, b, a_zp, b_zp))


def _requantize(acc: np.ndarray, sa, sb, sy, zy: np.ndarray) -> np.ndarray:
    y = np.rint(acc.astype(np.float64) * (np.float64(sa) * np.float64(sb)) / np.float64(sy)) + float(zy)
    info = np.iinfo(zy.dtype)
    return np.clip(y, info.min, info.max).astype(zy.dtype)


@pytest.mark.parametrize("da,db", PAIRS)
@pytest.mark.parametrize("constant_b", [True, False])
def test_qlinear_matmul_matches_int64_accumulation(da, db, constant_b):
    a, b = codes(da, (2, 6, 1500)), codes(db, (1500, 7))
    a_zp, b_zp = np.asarray(codes(da, ())), np.asarray(codes(db, ()))
    sa, sb = np.array(0.02, np.float32), np.array(0.003, np.float32)
    sy, zy = np.array(4.0, np.float32), np.asarray(codes(da, ()))
    args = [a, sa, a_zp, b, sb, b_zp, sy, zy]
    constants = {1, 2, 3, 4, 5, 6, 7} if constant_b else {1, 2, 4, 5, 6, 7}
    got = run_op("QLinearMatMul", args, constants, da, opset=10)
    assert got.dtype == da
    expected = _requantize(reference(a, b, a_zp, b_zp), sa, sb, sy, zy)
    np.testing.assert_array_equal(got, expected)
    assert len(np.unique(got)) > 10  # not saturated to a constant


def test_qlinear_matmul_of_two_vectors_is_a_scalar():
    a, b = codes(U8, (900,)), codes(S8, (900,))
    sa, sb, sy = np.array(0.1, np.float32), np.array(0.01, np.float32), np.array(50.0, np.float32)
    a_zp, b_zp, zy = np.array(3, np.uint8), np.array(0, np.int8), np.array(128, np.uint8)
    got = run_op("QLinearMatMul", [a, sa, a_zp, b, sb, b_zp, sy, zy], {1, 2, 3, 4, 5, 6, 7}, U8, opset=10)
    assert got.shape == ()
    np.testing.assert_array_equal(got, _requantize(reference(a, b, a_zp, b_zp), sa, sb, sy, zy))


# -- QDQ on cpu: the constant weight DQ is folded ----------------------------------------------------
def _qdq_conv_model() -> onnx.ModelProto:
    w = codes(S8, (8, 3, 3, 3)).clip(-127, 127)
    bias = RNG.integers(-500, 500, (8,)).astype(np.int32)
    w_scale = RNG.uniform(0.005, 0.02, 8).astype(np.float32)
    inits = {"s_x": np.float32(0.03), "z_x": np.uint8(120), "w_q": w, "w_s": w_scale, "b_q": bias,
             "b_s": (w_scale * np.float32(0.03)).astype(np.float32), "s_y": np.float32(0.05), "z_y": np.uint8(100),
             "wg_q": codes(S8, (10, 8 * 6 * 6)), "wg_s": np.float32(0.01)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_x", "z_x"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_x", "z_x"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], axis=0),
             helper.make_node("Conv", ["xd", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "s_y", "z_y"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "s_y", "z_y"], ["cd"]),
             helper.make_node("Flatten", ["cd"], ["f"]),
             helper.make_node("DequantizeLinear", ["wg_q", "wg_s"], ["wg"]),
             helper.make_node("Gemm", ["f", "wg"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_qdq_weights_folded_on_cpu_with_the_unoptimized_outputs(tmp_path):
    model = _qdq_conv_model()
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    written = tmp_path / "optimized.onnx"
    optimized = epoxy.InferenceSession(model, providers=["cpu"],
                                       sess_options=SessionOptions(optimized_model_filepath=str(written)))
    plain = epoxy.InferenceSession(model, providers=["cpu"],
                                   sess_options=SessionOptions(graph_optimization_level="disable"))
    assert "DequantizeWeightsPass" in optimized.applied_passes
    # weight DQs are gone from the graph the kernels were built from; the activation pairs stay
    # pairs, each fused into one node by QuantizeDequantizePairPass
    ops = [n.op_type for n in onnx.load(str(written)).graph.node]
    assert "DequantizeLinear" not in ops and ops.count("QuantizeDequantizeLinear") == 2
    got, want = optimized.run(None, {"x": x})[0], plain.run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


# -- DynamicQuantizeLinear: the in-place body gives the reference's codes -----------------------------
@pytest.mark.parametrize("jit", [True, False], ids=["jit", "numpy"])
@pytest.mark.parametrize("case", ["normal", "halves", "positive", "tiny", "large"])
def test_dynamic_quantize_linear_matches_the_reference(case, jit):
    """Both paths (the jit tier's one compiled pass, the numpy passes) give the reference's
    codes, scale and zero point; "large" spans several parallel chunks."""
    from onnx.reference import ReferenceEvaluator

    x = {"normal": RNG.standard_normal((4, 300)).astype(np.float32) * 3,
         # values on the rounding midpoints of their own scale: half-to-even decides
         "halves": (np.arange(-255, 256, dtype=np.float32) * np.float32(0.5)).reshape(1, -1),
         "positive": RNG.uniform(0.5, 9.0, (3, 50)).astype(np.float32),
         "tiny": RNG.uniform(-1e-30, 1e-30, (2, 20)).astype(np.float32),
         "large": RNG.standard_normal((256, 3072)).astype(np.float32)}[case]
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g",
                              [_vi("x", x)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, list(x.shape)),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    got = epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})]).run(None, {"x": x})
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_array_equal(g, w)
    assert len(np.unique(got[0])) > 10


def test_dynamic_quantize_linear_runs_the_compiled_pass_with_jit(monkeypatch):
    """The comparison above would pass vacuously if jit=on quietly ran the numpy passes."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_quantize

    calls: list[tuple[int, ...]] = []
    real = kernels_quantize.run_uint8_codes
    monkeypatch.setattr(kernels_quantize, "run_uint8_codes",
                        lambda x, *args: calls.append(x.shape) or real(x, *args))
    x = RNG.standard_normal((8, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], "g", [_vi("x", x)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [8, 64]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("z", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    off = epoxy.InferenceSession(model, providers=[("cpu", {"jit": False})]).run(None, {"x": x})
    assert calls == []
    on = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True})]).run(None, {"x": x})
    assert calls == [(8, 64)]
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)
