"""``QDQMatMulToIntegerPass`` (optimize/passes/qdq_matmul.py): which QDQ linear layers (MatMul,
Gemm) become ``MatMulInteger -> Cast -> Mul(Mul(x_scale, W_scale)) [-> Add(bias)]``, checked
against onnx.reference on the graph before and after: the rewritten layer's sum is exact and
scaled once, so the outputs agree within float32 rounding of the float reading's sums."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _pass_run import rewrite
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy.optimize.passes import qdq_matmul
from epoxy.optimize.passes.qdq_matmul import QDQMatMulToIntegerPass

K, N = 24, 10


@pytest.fixture
def any_size(monkeypatch):
    """The 24 x 10 weights here count as large enough (MIN_WEIGHTS)."""
    monkeypatch.setattr(qdq_matmul, "MIN_WEIGHTS", 0)


def _model(*, op: str = "MatMul", per_channel: bool = True, x_dtype=np.uint8, x_zp: bool = True,
           trans_b: bool = False, bias: str = "none", alpha: float = 1.0, w_axis: int | None = None,
           extra_reader: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x -> Q -> DQ -> MatMul/Gemm(DQ(W) [, bias]) -> y, weights s8 (per column or per tensor)."""
    rng = np.random.default_rng(seed)
    shape = [K, N] if not trans_b else [N, K]
    w = rng.integers(-127, 128, shape).astype(np.int8)
    channel_axis = 0 if trans_b else 1
    ws = (rng.uniform(0.002, 0.01, N) if per_channel else np.array(0.005)).astype(np.float32)
    xs = np.array(np.float32(0.03))
    inits = {"xs": xs, "w": w, "ws": ws, "wz": np.zeros(ws.shape, np.int8)}
    q_in = ["x", "xs"]
    if x_zp:
        inits["xz"] = np.array(100 if x_dtype == np.uint8 else 3, x_dtype)
        q_in.append("xz")
    axis = channel_axis if w_axis is None else w_axis
    nodes = [helper.make_node("QuantizeLinear", q_in, ["xq"]),
             helper.make_node("DequantizeLinear", ["xq"] + q_in[1:], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=axis)]
    layer_in = ["xd", "wd"]
    if bias == "float":
        inits["b"] = rng.standard_normal(N).astype(np.float32)
        layer_in.append("b")
    elif bias == "int32":
        inits.update(bq=rng.integers(-3000, 3000, N).astype(np.int32), bs=(xs * ws).astype(np.float32))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0))
        layer_in.append("bd")
    x_shape = [3, 5, K] if op == "MatMul" else [7, K]
    if op == "MatMul":
        nodes.append(helper.make_node("MatMul", layer_in, ["y"]))
    else:
        nodes.append(helper.make_node("Gemm", layer_in, ["y"], transB=int(trans_b), alpha=alpha))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape[:-1] + [N])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("xd", TensorProto.FLOAT, x_shape))
    graph = helper.make_graph(nodes, "qdq_linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _rewrite(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    return rewrite(QDQMatMulToIntegerPass(), model)


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, {"x": x})


def _feed(model: onnx.ModelProto, seed: int = 1) -> np.ndarray:
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(dims).astype(np.float32)


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


CASES = {
    "matmul per column, u8 x": {},
    "matmul per tensor": {"per_channel": False},
    "matmul s8 x, no zero point": {"x_dtype": np.int8, "x_zp": False},
    "gemm transB, float bias": {"op": "Gemm", "trans_b": True, "bias": "float"},
    "gemm int32 bias": {"op": "Gemm", "bias": "int32"},
    "gemm no bias": {"op": "Gemm", "trans_b": True},
}


@pytest.mark.parametrize("kwargs", CASES.values(), ids=CASES.keys())
def test_rewritten_layers_keep_their_values(any_size, kwargs):
    model = _model(**kwargs)
    new, count = _rewrite(model)
    assert count == 1
    ops = _ops(new)
    assert {"MatMulInteger", "Cast", "Mul"} <= set(ops) and not {"MatMul", "Gemm", "DequantizeLinear"} & set(ops)
    assert ("Add" in ops) == (kwargs.get("bias", "none") != "none")
    x = _feed(model)
    want, got = _run(model, x)[0], _run(new, x)[0]
    assert got.shape == want.shape and got.dtype == np.float32
    # exact integer sums scaled once against float32 sums of dequantized values: float rounding
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_the_integer_sum_is_exact():
    """The rewritten layer against the product computed in float64 from the codes."""
    model = _model(seed=5)
    qdq_matmul.MIN_WEIGHTS, saved = 0, qdq_matmul.MIN_WEIGHTS
    try:
        new, _ = _rewrite(model)
    finally:
        qdq_matmul.MIN_WEIGHTS = saved
    x = _feed(model, seed=6)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    xq = _run(helper.make_model(helper.make_graph([model.graph.node[0]], "q", list(model.graph.input),
                                                  [helper.make_tensor_value_info("xq", TensorProto.UINT8, None)],
                                                  list(model.graph.initializer)),
                                opset_imports=[helper.make_opsetid("", 19)], ir_version=9), x)[0]
    acc = (xq.astype(np.float64) - float(inits["xz"])) @ inits["w"].astype(np.float64)
    exact = acc.astype(np.float32) * (inits["xs"] * inits["ws"]).astype(np.float32)
    np.testing.assert_array_equal(_run(new, x)[0], exact)


STAYS = {
    "gemm alpha != 1": {"op": "Gemm", "alpha": 0.5},
    "weights per row": {"w_axis": 0},
}


@pytest.mark.parametrize("kwargs", STAYS.values(), ids=STAYS.keys())
def test_layers_that_do_not_fit_stay_as_written(any_size, kwargs):
    model = _model(**kwargs)
    new, count = _rewrite(model)
    assert count == 0 and _ops(new) == _ops(model)


def test_small_weights_keep_the_float_reading():
    new, count = _rewrite(_model())
    assert count == 0 and "MatMul" in _ops(new)


def test_a_dequantized_input_read_elsewhere_stays(any_size):
    model = _model(extra_reader=True)
    new, count = _rewrite(model)
    assert count == 1
    assert _ops(new).count("DequantizeLinear") == 1  # the input's: the weights' went with the layer
    x = _feed(model)
    want, got = _run(model, x), _run(new, x)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5 * float(np.abs(want[0]).max()))


def test_activation_by_activation_products_stay(any_size):
    """Both inputs dequantized activations (attention scores): no constant weights, no rewrite."""
    q = [helper.make_node("QuantizeLinear", [v, "s", "z"], [f"{v}q"]) for v in ("a", "b")]
    dq = [helper.make_node("DequantizeLinear", [f"{v}q", "s", "z"], [f"{v}d"]) for v in ("a", "b")]
    graph = helper.make_graph(q + dq + [helper.make_node("MatMul", ["ad", "bd"], ["y"])], "aa",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 8]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [8, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
                              [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                               numpy_helper.from_array(np.array(128, np.uint8), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)
    new, count = _rewrite(model)
    assert count == 0 and "MatMul" in _ops(new)
