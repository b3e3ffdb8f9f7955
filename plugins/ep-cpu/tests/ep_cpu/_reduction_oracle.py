"""Shared by test_loss.py, test_reduce.py, test_signal.py: build one-node models and compare epoxy with its oracle."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _elem(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _model(op, opset, inputs, n_out=1, out_elem=None, **attrs):  # type: ignore[no-untyped-def]
    names = [n if v is not None else "" for n, v in inputs]
    node = helper.make_node(op, names, [f"y{i}" for i in range(n_out)], **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(n, _elem(v.dtype), v.shape) for n, v in inputs if v is not None
    ]
    elem = out_elem if out_elem is not None else _elem(next(v for _, v in inputs if v is not None).dtype)
    # the checker wants output shapes: take them from onnx shape inference (rank-only if unknown)
    outputs = [helper.make_tensor_value_info(f"y{i}", elem, None) for i in range(n_out)]
    graph = helper.make_graph([node], "g", graph_inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    ranks = None
    for i, out in enumerate(model.graph.output):
        src = known.get(out.name)
        if src is not None and src.type.tensor_type.HasField("shape"):
            out.type.CopyFrom(src.type)
            continue
        if ranks is None:  # rank depends on a runtime input: ask the reference for it
            ranks = [np.ndim(v) for v in _reference(model, inputs)]
        for k in range(ranks[i]):
            out.type.tensor_type.shape.dim.add().dim_param = f"d{k}"
        out.type.tensor_type.shape.SetInParent()
    return model


def _run(model, inputs):  # type: ignore[no-untyped-def]
    feeds = {n: v for n, v in inputs if v is not None}
    with np.errstate(all="ignore"):
        got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    return got


def _reference(model, inputs):  # type: ignore[no-untyped-def]
    feeds = {n: v for n, v in inputs if v is not None}
    with np.errstate(all="ignore"):
        return ReferenceEvaluator(model).run(None, feeds)


def _check(op, opset, inputs, rtol=1e-5, atol=1e-6, **attrs):  # type: ignore[no-untyped-def]
    model = _model(op, opset, inputs, **attrs)
    got = _run(model, inputs)
    want = _reference(model, inputs)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return got
