"""FusedMatMul's dense-layer path (constant 2-D weight, constant bias): same results as
MatMul + Add (+ activation) run node by node and as onnxruntime, and the general path
whenever its conditions do not hold (a fed weight, a non-contiguous input, other dtypes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

ort = pytest.importorskip("onnxruntime")


def _dense_model(dtype: Any, with_bias: bool, relu: bool, rank: int, weight_input: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    w = rng.standard_normal((8, 5)).astype(dtype)
    b = rng.standard_normal(5).astype(dtype)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"])]
    last = "m"
    if with_bias:
        nodes.append(helper.make_node("Add", [last, "B"], ["a"]))
        last = "a"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    dims = ["d0", "d1", "d2"][: rank - 1] + [8]
    inputs = [helper.make_tensor_value_info("x", elem, dims)]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("W", elem, [8, 5]))
    inits = [numpy_helper.from_array(w, "W")] + ([numpy_helper.from_array(b, "B")] if with_bias else [])
    graph = helper.make_graph(nodes, "dense", inputs, [helper.make_tensor_value_info("y", elem, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _run_both(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, Any]:
    data = model.SerializeToString()
    sess = epoxy.InferenceSession(data, providers=["cpu"])
    reference = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0], reference.run(None, feeds)[0], sess


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_dense_layers_match_onnxruntime(dtype: Any, with_bias: bool, relu: bool, rank: int) -> None:
    model = _dense_model(dtype, with_bias, relu, rank)
    shape = (3, 2, 4, 8)[-rank:]
    x = np.random.default_rng(rank).standard_normal(shape).astype(dtype)
    got, want, sess = _run_both(model, {"x": x})
    if rank > 2 and (with_bias or relu):  # rank 2 becomes a Gemm, a bare MatMul stays one
        assert [s.op_type for s in sess._plan.steps] == ["FusedMatMul"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    got[...] = 0  # a fresh array: a second run is unchanged
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)


def test_a_fed_weight_and_a_strided_input_take_the_general_path() -> None:
    model = _dense_model(np.float32, True, True, 3, weight_input=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 16)).astype(np.float32)[:, :, ::2]  # not contiguous
    w = rng.standard_normal((8, 5)).astype(np.float32)
    for feeds in ({"x": x}, {"x": np.ascontiguousarray(x), "W": w}, {"x": x, "W": w}):
        got, want, _ = _run_both(model, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("residual_shape", [(2, 4, 5), (4, 5), (5,)])
def test_a_fed_residual_is_added_whatever_its_broadcast(residual_shape: tuple[int, ...]) -> None:
    """A residual of exactly the output's shape takes the dense path; others the general one."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((8, 5)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "r"], ["y"])]
    graph = helper.make_graph(
        nodes, "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b", 8]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, list(residual_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    feeds = {"x": rng.standard_normal((2, 4, 8)).astype(np.float32),
             "r": rng.standard_normal(residual_shape).astype(np.float32)}
    got, want, sess = _run_both(model, feeds)
    assert [s.op_type for s in sess._plan.steps] == ["FusedMatMul"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.shares_memory(got, feeds["r"])


@pytest.mark.parametrize("owned", [False, True], ids=["dense", "owned-weights"])
def test_a_dense_layers_bias_and_gelu_run_in_one_pass_with_the_two_passes_bits(monkeypatch, owned: bool) -> None:
    """FusedMatMul(x, W, B) + Gelu (erf) on float32 adds the bias inside the compiled GELU's
    pass (``kernels_special.bias_in_place``): the same bits as the layer without the GELU (its
    bias added by numpy) followed by the in-place GELU, on the dense path and on the
    owned-weights one; NaN and products far into GELU's negative tail included."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_sgemm, kernels_special

    monkeypatch.setattr(kernels_sgemm, "MIN_OWNED_WEIGHTS", 0 if owned else 1 << 40)
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((16, 48)).astype(np.float32), rng.standard_normal(48).astype(np.float32)

    def model(gelu: bool) -> bytes:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]),
                 helper.make_node("Add", ["m", "B"], ["a" if gelu else "y"])]
        nodes += [helper.make_node("Gelu", ["a"], ["y"])] if gelu else []
        graph = helper.make_graph(nodes, "ffn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 16])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9).SerializeToString()

    x = rng.standard_normal((2, 5, 16)).astype(np.float32)
    x[0, 0, 0] = np.nan
    x[1, 2] *= 40.0
    passes: list[str] = []
    for table, name in ((kernels_special.F32_BIAS_IN_PLACE, "gelu_f32_bias_in_place"),
                        (kernels_special.F32_IN_PLACE, "gelu_f32_in_place")):
        real = getattr(kernels_special, name)
        monkeypatch.setitem(table, "gelu", lambda *a, _r=real, _n=name: passes.append(_n) or _r(*a))
    one = epoxy.SessionOptions(intra_op_num_threads=1)
    sess = epoxy.InferenceSession(model(True), providers=["cpu"], sess_options=one)
    assert [s.op_type for s in sess._plan.steps] == ["FusedMatMul"]
    (got,) = sess.run(None, {"x": x})
    assert passes == ["gelu_f32_bias_in_place"]
    (linear,) = epoxy.InferenceSession(model(False), providers=["cpu"], sess_options=one).run(None, {"x": x})
    kernels_special.gelu_f32_in_place(linear.reshape(-1))
    np.testing.assert_array_equal(got, linear)
    assert np.isnan(got[0, 0]).all() and not np.isnan(got[1]).any()
