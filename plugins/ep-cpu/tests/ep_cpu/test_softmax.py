"""Softmax, LogSoftmax and Hardmax kernels of the cpu provider (opset < 13: coerced to 2-D)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy

RNG = np.random.default_rng(0)


def _model(op, inputs, attrs=None, opset=17, n_out=1, out_dtypes=None, out_ranks=None, domain=""):
    """Single-node model; ``inputs`` is a list of arrays, ``None`` for an omitted optional."""
    names, vis = [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        names.append(f"x{i}")
        vis.append(helper.make_tensor_value_info(f"x{i}", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
    first = next(x for x in inputs if x is not None)
    out_dtypes = out_dtypes or [first.dtype] * n_out
    out_ranks = out_ranks or [first.ndim] * n_out
    outs = [
        helper.make_tensor_value_info(
            f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), [f"d{i}_{k}" for k in range(r)]
        )
        for i, (d, r) in enumerate(zip(out_dtypes, out_ranks))
    ]
    node = helper.make_node(op, names, [o.name for o in outs], domain=domain, **(attrs or {}))
    graph = helper.make_graph([node], "g", vis, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)])


def run_epoxy(model, inputs):
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)


def check(op, inputs, attrs=None, opset=17, n_out=1, out_dtypes=None, rtol=1e-5, atol=1e-6, expected=None):
    """Run through epoxy and compare with ``expected`` or onnx.reference; returns epoxy's outputs."""
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    if expected is None:
        ref_model = _model(op, inputs, attrs, opset, n_out, out_dtypes)
        if opset < 13:  # onnx.reference ignores the legacy 2-D coercion; onnxruntime has it
            import onnxruntime

            sess = onnxruntime.InferenceSession(ref_model.SerializeToString(), providers=["CPUExecutionProvider"])
            expected = sess.run(None, feeds)
        else:
            expected = ReferenceEvaluator(ref_model).run(None, feeds)
    expected = [np.asarray(e) for e in expected]
    model = _model(op, inputs, attrs, opset, n_out, out_dtypes, [e.ndim for e in expected])
    got = run_epoxy(model, inputs)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype, (g.dtype, e.dtype)
        assert g.shape == e.shape, (g.shape, e.shape)
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)
    return got


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_family(op, opset, axis):
    x = f32(2, 3, 4) * 3
    attrs = {} if axis is None else {"axis": axis}
    if opset < 11 and axis is not None and axis < 0:
        return
    check(op, [x], attrs, opset=opset, rtol=1e-5, atol=1e-6)


def test_softmax_legacy_coercion():
    x = f32(2, 3, 4)
    flat = x.reshape(2, 12)
    e = np.exp(flat - flat.max(1, keepdims=True))
    expected = (e / e.sum(1, keepdims=True)).reshape(x.shape)
    check("Softmax", [x], {}, opset=11, expected=[expected])


def test_softmax_extremes_and_dtypes():
    x = np.array([[1000.0, 0.0, -1000.0], [-np.inf, 0.0, 1.0], [np.nan, 1.0, 2.0]], np.float32)
    got = run_epoxy(_model("Softmax", [x], opset=13), [x])[0]
    np.testing.assert_allclose(got[0], [1, 0, 0], atol=1e-7)
    assert got[1, 0] == 0 and np.isnan(got[2]).all()
    got = run_epoxy(_model("LogSoftmax", [x], opset=13), [x])[0]
    assert got[0, 0] == 0 and got[1, 0] == -np.inf
    for dtype in (np.float16, np.float64):
        y = f32(3, 5).astype(dtype)
        out = check("Softmax", [y], opset=13, rtol=1e-3, atol=1e-3)
        assert out[0].dtype == dtype


def test_hardmax_ties_and_empty():
    x = np.array([[1, 3, 3], [2, 2, 2]], np.float32)
    got = run_epoxy(_model("Hardmax", [x], opset=13), [x])[0]
    np.testing.assert_array_equal(got, [[0, 1, 0], [1, 0, 0]])
    e = np.zeros((0, 3), np.float32)
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        assert run_epoxy(_model(op, [e], opset=13), [e])[0].shape == (0, 3)
