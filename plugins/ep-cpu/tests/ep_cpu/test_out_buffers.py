"""Kernels with ``out=`` write into planned buffers only when the buffer fits exactly."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy
from epoxy.contract import NodeSpec, ValueType
from epoxy_ep_cpu.registry import load_kernels


def _kernel(op: str, n_in: int, opset: int = 17, constants=None):
    node = NodeSpec(0, op.lower(), op, "", opset, tuple(f"x{i}" for i in range(n_in)), ("y",), {},
                    (ValueType(),) * n_in, (ValueType(),), constants or {})
    factory, reason = load_kernels().lookup(node)
    assert factory is not None, reason
    return factory(node)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)])
def test_binary_writes_into_matching_buffer(op, fn):
    k = _kernel(op, 2)
    assert k.supports_out
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((4,)).astype(np.float32) + 3
    out = np.empty((3, 4), np.float32)
    got = k(a, b, out=out)
    assert got is out
    np.testing.assert_allclose(got, fn(a, b), rtol=1e-6)


def test_binary_ignores_buffer_of_wrong_shape_or_dtype():
    k = _kernel("Add", 2)
    a, b = np.ones((3, 1), np.float32), np.ones((1, 4), np.float32)
    wrong_shape = np.empty((4, 4), np.float32)  # broadcastable but not the result's shape
    got = k(a, b, out=wrong_shape)
    assert got is not wrong_shape and got.shape == (3, 4)
    got = k(a.astype(np.float64), b.astype(np.float64), out=np.empty((3, 4), np.float32))
    assert got.dtype == np.float64


def test_relu_and_matmul_into():
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    out = np.empty_like(x)
    assert _kernel("Relu", 1)(x, out=out) is out and (out >= 0).all()
    w = np.random.default_rng(1).standard_normal((5, 6)).astype(np.float32)
    mm = _kernel("MatMul", 2, constants={"x1": w})
    out = np.empty((2, 3, 6), np.float32)
    assert mm(x, w, out=out) is out
    np.testing.assert_allclose(out, x @ w, rtol=1e-5, atol=1e-6)
    assert mm(x, w, out=np.empty((2, 3, 7), np.float32)).shape == (2, 3, 6)


def test_session_uses_arena_for_mlp_and_matches_reference():
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal((16,)).astype(np.float32), "b0"),
             numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "w1")]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["m0"]), helper.make_node("Add", ["m0", "b0"], ["z0"]),
             helper.make_node("Relu", ["z0"], ["h0"]), helper.make_node("MatMul", ["h0", "w1"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 4])], inits),
        opset_imports=[helper.make_opsetid("", 17)])
    # basic: the unfused chain (at "all" MatMul + Add + Relu become one FusedGemm)
    session = epoxy.InferenceSession(model, providers=["cpu"],
                                     sess_options=epoxy.SessionOptions(graph_optimization_level="basic"))
    assert session._plan.arena is not None and len(session._plan.arena.views) == 3
    x = rng.standard_normal((5, 8)).astype(np.float32)
    for _ in range(3):
        (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, ReferenceEvaluator(model).run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)
