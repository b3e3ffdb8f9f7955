"""Gradient (ai.onnx.preview.training) is differentiated by the core: check against
finite differences, with broadcasting and MatMul, and that an op without a rule is declined."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy

F = TensorProto.FLOAT


def _model(nodes, inputs, y, xs, y_shape):
    grads = [f"d_{x}" for x in xs]
    shapes = dict(inputs)
    nodes = nodes + [helper.make_node("Gradient", xs, grads, domain="ai.onnx.preview.training", xs=xs, y=y)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(y, F, y_shape)]
                              + [helper.make_tensor_value_info(g, F, shapes[x]) for g, x in zip(grads, xs)])
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.preview.training", 1)]
    )


def _numeric_grad(f, x, eps=1e-3):
    g = np.zeros_like(x, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        hi, lo = x.astype(np.float64).copy(), x.astype(np.float64).copy()
        hi[idx] += eps
        lo[idx] -= eps
        g[idx] = (f(hi).sum() - f(lo).sum()) / (2 * eps)
    return g


def test_broadcast_matmul_chain_matches_finite_differences():
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["s"]),
        helper.make_node("Tanh", ["s"], ["t"]),
        helper.make_node("Mul", ["t", "t"], ["y"]),
    ]
    model = _model(nodes, [("a", [2, 3]), ("w", [3, 4]), ("b", [4])], "y", ["a", "w", "b"], [2, 4])
    rng = np.random.default_rng(0)
    a, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 4), (4,)))
    session = epoxy.InferenceSession(model, providers=["cpu"])
    y, da, dw, db = session.run(None, {"a": a, "w": w, "b": b})
    assert {d.provider for d in session.partition_report().nodes if d.op_type == "Gradient"} == {"core"}
    forward = lambda a_, w_, b_: np.tanh(a_ @ w_ + b_) ** 2  # noqa: E731
    np.testing.assert_allclose(da, _numeric_grad(lambda v: forward(v, w, b), a), rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(dw, _numeric_grad(lambda v: forward(a, v, b), w), rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(db, _numeric_grad(lambda v: forward(a, w, v), b), rtol=1e-2, atol=1e-3)
    assert db.shape == (4,) and db.dtype == np.float32


def test_op_without_rule_is_declined_with_reason():
    nodes = [helper.make_node("Sin", ["a"], ["y"])]
    model = _model(nodes, [("a", [3])], "y", ["a"], [3])
    with pytest.raises(epoxy.UnsupportedOpError, match="no differentiation rule for Sin"):
        epoxy.InferenceSession(model, providers=["cpu"])


@pytest.mark.parametrize("level", ["basic", "extended", "all"])
def test_optimizer_leaves_the_differentiated_slice_alone(level):
    """Fusions (MatMul+Add -> Gemm, +Relu -> FusedGemm) and folding would rewrite the slice
    into ops without a differentiation rule: with a Gradient node only gradient-safe passes run."""
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["s"]),
        helper.make_node("Relu", ["s"], ["t"]),
        helper.make_node("Identity", ["t"], ["u"]),
        helper.make_node("Mul", ["u", "u"], ["y"]),
    ]
    model = _model(nodes, [("a", [2, 3]), ("w", [3, 4]), ("b", [4])], "y", ["a", "w", "b"], [2, 4])
    rng = np.random.default_rng(1)
    a, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3), (3, 4), (4,)))
    session = epoxy.InferenceSession(model, providers=["cpu"],
                                     sess_options=epoxy.SessionOptions(graph_optimization_level=level))
    assert [n.op_type for n in session._graph.nodes][:5] == ["MatMul", "Add", "Relu", "Identity", "Mul"]
    assert any("Gradient node: optimization passes skipped" in n for n in session.partition_report().notes)
    y, da, dw, db = session.run(None, {"a": a, "w": w, "b": b})
    forward = lambda a_, w_, b_: np.maximum(a_ @ w_ + b_, 0) ** 2  # noqa: E731
    np.testing.assert_allclose(y, forward(a, w, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, _numeric_grad(lambda v: forward(a, v, b), w), rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(db, _numeric_grad(lambda v: forward(a, w, v), b), rtol=1e-2, atol=1e-3)
