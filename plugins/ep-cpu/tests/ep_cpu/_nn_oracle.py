"""Shared by the nn-family tests (conv, linalg, normalization, pool, softmax): build
one-node models and compare epoxy with its oracle."""

from __future__ import annotations

import numpy as np
from _single_node import node_inputs  # noqa: E402
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy

RNG = np.random.default_rng(0)


def _model(op, inputs, attrs=None, opset=17, n_out=1, out_dtypes=None, out_ranks=None, domain=""):
    """Single-node model; ``inputs`` is a list of arrays, ``None`` for an omitted optional."""
    names, vis = node_inputs(inputs)
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


def check(
    op, inputs, attrs=None, opset=17, n_out=1, out_dtypes=None, rtol=1e-5, atol=1e-6, expected=None, oracle="ref"
):
    """Run through epoxy and compare with ``expected`` or the oracle: onnx.reference, or
    onnxruntime (``oracle="ort"``) where the reference gets the semantics wrong (pooling
    geometry, Softmax's pre-13 2-D coercion); returns epoxy's outputs."""
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    if expected is None:
        ref_model = _model(op, inputs, attrs, opset, n_out, out_dtypes)
        if oracle == "ort":
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
