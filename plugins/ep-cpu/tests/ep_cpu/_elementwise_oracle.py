"""Shared by test_activation.py, test_elementwise.py, test_logical.py: build one-node models and
compare epoxy with its oracle."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from _single_node import node_inputs  # noqa: E402
from onnx import helper
from onnx.reference import ReferenceEvaluator

import epoxy

BF16 = np.dtype(ml_dtypes.bfloat16)


def _elem(dtype: np.dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def make_model(op, inputs, attrs=None, opset=17, out_dtype=None, n_out=1):
    """Single-node model; inputs: list of arrays (None = omitted optional input)."""
    names, vis = node_inputs(inputs, _elem)
    first = next(x for x in inputs if x is not None)
    odt = _elem(out_dtype if out_dtype is not None else first.dtype)
    rank = max(x.ndim for x in inputs if x is not None)
    outs = [helper.make_tensor_value_info(f"y{i}", odt, [f"d{k}" for k in range(rank)]) for i in range(n_out)]
    node = helper.make_node(op, names, [o.name for o in outs], **(attrs or {}))
    graph = helper.make_graph([node], "g", vis, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(op, inputs, attrs=None, opset=17, out_dtype=None):
    model = make_model(op, inputs, attrs, opset, out_dtype)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    (out,) = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    return out


def reference(op, inputs, attrs=None, opset=17, out_dtype=None):
    model = make_model(op, inputs, attrs, opset, out_dtype)
    feeds = {f"x{i}": x for i, x in enumerate(inputs) if x is not None}
    with np.errstate(all="ignore"):
        (out,) = ReferenceEvaluator(model).run(None, feeds)
    return np.asarray(out)


def check(op, inputs, attrs=None, opset=17, rtol=1e-6, atol=1e-7, out_dtype=None):
    got = run(op, inputs, attrs, opset, out_dtype)
    want = reference(op, inputs, attrs, opset, out_dtype)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    return got


RNG = np.random.default_rng(0)
