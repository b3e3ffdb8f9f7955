"""Random generators: RandomUniform(Like), RandomNormal(Like), Bernoulli, Multinomial."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy


def _session(op, feeds, out_elem, out_rank, attrs, opset=22):  # type: ignore[no-untyped-def]
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    node = helper.make_node(op, list(feeds), ["Y"], **attrs)
    graph = helper.make_graph(
        [node], "g", inputs, [helper.make_tensor_value_info("Y", out_elem, [None] * out_rank)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10 if opset >= 22 else 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"])


def _run(sess, feeds):  # type: ignore[no-untyped-def]
    return sess.run(None, feeds)[0]


@pytest.mark.parametrize(
    "dtype,elem",
    [(np.float32, TensorProto.FLOAT), (np.float64, TensorProto.DOUBLE), (np.float16, TensorProto.FLOAT16)],
)
def test_random_uniform_shape_dtype_bounds(dtype, elem) -> None:  # type: ignore[no-untyped-def]
    sess = _session("RandomUniform", {}, elem, 3, {"shape": [2, 3, 50], "low": -2.0, "high": -1.0, "dtype": elem})
    y = _run(sess, {})
    assert y.shape == (2, 3, 50) and y.dtype == np.dtype(dtype)
    assert (y >= -2).all() and (y <= -1).all()


def test_random_normal_seed_is_deterministic_and_moments() -> None:
    attrs = {"shape": [20000], "mean": 3.0, "scale": 0.5, "seed": 1.5}
    sess = _session("RandomNormal", {}, TensorProto.FLOAT, 1, attrs, opset=1)
    a, b = _run(sess, {}), _run(sess, {})
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean() - 3.0) < 0.05 and abs(a.std() - 0.5) < 0.05
    other = _run(_session("RandomNormal", {}, TensorProto.FLOAT, 1, {**attrs, "seed": 2.5}), {})
    assert not np.array_equal(a, other)


def test_unseeded_runs_differ() -> None:
    sess = _session("RandomUniform", {}, TensorProto.FLOAT, 1, {"shape": [64]})
    assert not np.array_equal(_run(sess, {}), _run(sess, {}))


def test_like_ops_follow_input_shape_and_dtype() -> None:
    x = np.zeros((3, 0, 2), np.float64)
    y = _run(_session("RandomUniformLike", {"X": x}, TensorProto.DOUBLE, 3, {}), {"X": x})
    assert y.shape == (3, 0, 2) and y.dtype == np.float64
    xi = np.zeros((4, 5), np.int32)
    y = _run(_session("RandomNormalLike", {"X": xi}, TensorProto.FLOAT, 2, {"dtype": TensorProto.FLOAT}), {"X": xi})
    assert y.shape == (4, 5) and y.dtype == np.float32


def test_bernoulli_extremes_and_dtype() -> None:
    p = np.array([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]], np.float32)
    y = _run(_session("Bernoulli", {"P": p}, TensorProto.FLOAT, 2, {}, opset=15), {"P": p})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, p)
    y = _run(_session("Bernoulli", {"P": p}, TensorProto.BOOL, 2, {"dtype": TensorProto.BOOL, "seed": 0.0}), {"P": p})
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, p.astype(bool))


def test_multinomial_degenerate_logits_and_dtype() -> None:
    logits = np.array([[-np.inf, 0.0, -np.inf], [-np.inf, -np.inf, 0.0]], np.float32)
    sess = _session("Multinomial", {"L": logits}, TensorProto.INT32, 2, {"sample_size": 7}, opset=7)
    y = _run(sess, {"L": logits})
    assert y.shape == (2, 7) and y.dtype == np.int32
    np.testing.assert_array_equal(y, [[1] * 7, [2] * 7])
    attrs = {"sample_size": 3, "dtype": TensorProto.INT64, "seed": 3.0}
    sess = _session("Multinomial", {"L": logits}, TensorProto.INT64, 2, attrs)
    assert _run(sess, {"L": logits}).dtype == np.int64


def test_multinomial_frequencies() -> None:
    probs = np.array([[0.2, 0.5, 0.3]], np.float64)
    logits = np.log(probs) + 7.0  # unnormalized
    sess = _session("Multinomial", {"L": logits}, TensorProto.INT32, 2, {"sample_size": 20000, "seed": 1.0})
    y = _run(sess, {"L": logits})
    freq = np.bincount(y.ravel(), minlength=3) / y.size
    np.testing.assert_allclose(freq, probs[0], atol=0.02)
