"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the cpu provider (oracle: onnx.reference)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
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


RNG = np.random.default_rng(1)


def _scores(shape, dtype=np.float32):  # type: ignore[no-untyped-def]
    return RNG.standard_normal(shape).astype(dtype)


def _labels(shape, classes, ignore=None):  # type: ignore[no-untyped-def]
    t = RNG.integers(0, classes, size=shape).astype(np.int64)
    if ignore is not None:
        t.reshape(-1)[::3] = ignore
    return t


CONFIGS = [
    # (input shape, with weight, ignore_index)
    ((3, 5), False, None),
    ((3, 5), True, None),
    ((2, 4, 3), False, 1),
    ((2, 4, 3, 2), True, 0),
    ((2, 4, 3), True, -1),
    ((2, 4, 3), False, 4),
]


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("shape", "weighted", "ignore"), CONFIGS)
@pytest.mark.parametrize("opset", [12, 13, 22])
def test_nll_loss(reduction: str, shape, weighted: bool, ignore, opset: int) -> None:  # type: ignore[no-untyped-def]
    x = _scores(shape)
    target = _labels((shape[0],) + shape[2:], shape[1], ignore)
    w = RNG.uniform(0.1, 1.0, size=shape[1]).astype(np.float32) if weighted else None
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    _check("NegativeLogLikelihoodLoss", opset, [("x", x), ("t", target), ("w", w)], **attrs)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("shape", "weighted", "ignore"), CONFIGS)
@pytest.mark.parametrize("log_prob", [False, True])
def test_softmax_cross_entropy(reduction: str, shape, weighted: bool, ignore, log_prob: bool) -> None:  # type: ignore[no-untyped-def]
    x = _scores(shape)
    labels = _labels((shape[0],) + shape[2:], shape[1], ignore).astype(np.int32)
    w = RNG.uniform(0.1, 1.0, size=shape[1]).astype(np.float32) if weighted else None
    attrs = {"reduction": reduction}
    if ignore is not None:
        attrs["ignore_index"] = ignore
    got = _check(
        "SoftmaxCrossEntropyLoss", 13, [("x", x), ("t", labels), ("w", w)], n_out=2 if log_prob else 1, **attrs
    )
    if log_prob:
        assert got[1].shape == x.shape


def test_nll_mean_ignores_ignored_samples_in_denominator() -> None:
    x = np.log(np.array([[0.5, 0.5], [0.25, 0.75], [0.9, 0.1]], dtype=np.float32))
    t = np.array([0, 1, -100], dtype=np.int64)
    inputs = [("x", x), ("t", t)]
    got = _run(_model("NegativeLogLikelihoodLoss", 13, inputs, ignore_index=-100), inputs)[0]
    assert got.shape == () and got.dtype == np.float32
    np.testing.assert_allclose(got, -(np.log(0.5) + np.log(0.75)) / 2, rtol=1e-6)


def test_sce_large_scores_are_stable_and_float64() -> None:
    x = np.array([[1000.0, 0.0, -1000.0], [5.0, 5.0, 5.0]], dtype=np.float64)
    t = np.array([0, 2], dtype=np.int64)
    inputs = [("x", x), ("t", t)]
    loss, logp = _run(_model("SoftmaxCrossEntropyLoss", 13, inputs, n_out=2, reduction="none"), inputs)
    assert loss.dtype == np.float64 and logp.dtype == np.float64
    np.testing.assert_allclose(loss, [0.0, np.log(3.0)], atol=1e-12)
    assert np.all(np.isfinite(logp[0, :2]))


def test_sce_float16() -> None:
    x = _scores((3, 4), np.float16)
    t = np.array([0, 3, 1], dtype=np.int64)
    got = _check("SoftmaxCrossEntropyLoss", 13, [("x", x), ("t", t)], rtol=2e-3, atol=2e-3)
    assert got[0].dtype == np.float16
