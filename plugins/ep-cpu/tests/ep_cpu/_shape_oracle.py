"""Shared by test_cast.py, test_creation.py, test_indexing.py, test_shape.py: build one-node models
and compare epoxy with its oracle."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _elem(dtype) -> int:  # type: ignore[no-untyped-def]
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _build(op, inputs, n_out=1, opset=21, **attrs):  # type: ignore[no-untyped-def]
    """One-node model; ``inputs`` is a list of (name, array or None for an omitted input)."""
    names = [n if v is not None else "" for n, v in inputs]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, _elem(v.dtype), v.shape) for n, v in inputs if v is not None]
    outs = [helper.make_value_info(f"y{i}", onnx.TypeProto()) for i in range(n_out)]
    graph = helper.make_graph([node], "g", graph_inputs, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _as_f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if a.dtype.type.__module__.startswith("ml_dtypes") else a


def run_both(op, inputs, n_out=1, opset=21, expected=None, **attrs):  # type: ignore[no-untyped-def]
    """(epoxy outputs, reference outputs) of a one-node model (reference: onnx.reference)."""
    model = _build(op, inputs, n_out, opset, **attrs)
    feeds = {n: v for n, v in inputs if v is not None}
    with np.errstate(all="ignore"):
        ref = expected if expected is not None else ReferenceEvaluator(model).run(None, feeds)
    ref = [np.asarray(r) for r in ref]
    for out, v in zip(model.graph.output, ref):
        out.type.CopyFrom(helper.make_tensor_type_proto(_elem(v.dtype), [f"d{k}" for k in range(v.ndim)]))
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    with np.errstate(all="ignore"):
        got = sess.run(None, feeds)
    return got, ref


def check(op, inputs, n_out=1, opset=21, expected=None, **attrs):  # type: ignore[no-untyped-def]
    got, ref = run_both(op, inputs, n_out, opset, expected, **attrs)
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert isinstance(g, np.ndarray), type(g)
        assert g.dtype == r.dtype, (g.dtype, r.dtype)
        assert g.shape == r.shape, (g.shape, r.shape)
        if r.dtype == object:
            assert g.tolist() == r.tolist()
        else:
            np.testing.assert_array_equal(_as_f64(g), _as_f64(r))
    return got
