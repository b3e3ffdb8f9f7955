"""ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy

TRAINING = "ai.onnx.preview.training"


def _model(op, feeds, n_out, attrs):  # type: ignore[no-untyped-def]
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    xs = [v for k, v in feeds.items() if k.startswith("X")]
    outputs = []
    for i in range(n_out):
        ref = xs[i % len(xs)]
        outputs.append(helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, [None] * ref.ndim))
    node = helper.make_node(op, list(feeds), [o.name for o in outputs], domain=TRAINING, **attrs)
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 12), helper.make_opsetid(TRAINING, 1)]
    )
    model.ir_version = 7
    return model


def _check(model, feeds) -> None:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
        expected = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


_RNG = np.random.default_rng(0)


def _feeds(roles: list[str], shapes: list[tuple[int, ...]], t: int) -> dict[str, np.ndarray]:
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(t, np.int64)}
    for role in roles:
        for i, shape in enumerate(shapes):
            v = _RNG.standard_normal(shape).astype(np.float32)
            feeds[f"{role}{i}"] = np.abs(v) if role == "H" else v
    return feeds


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad_two_tensors(t: int) -> None:
    feeds = _feeds(["X", "G", "H"], [(3,), (2, 2)], t)
    attrs = {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}
    _check(_model("Adagrad", feeds, 4, attrs), feeds)


@pytest.mark.parametrize("t", [0, 2])
def test_adam_two_tensors(t: int) -> None:
    feeds = _feeds(["X", "G", "V", "H"], [(3,), (2, 2)], t)
    attrs = {"alpha": 0.95, "beta": 0.1, "epsilon": 1e-7, "norm_coefficient": 0.001, "norm_coefficient_post": 0.01}
    _check(_model("Adam", feeds, 6, attrs), feeds)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 5])
def test_momentum(mode: str, t: int) -> None:
    feeds = _feeds(["X", "G", "V"], [(4,), (1, 3)], t)
    attrs = {"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.01, "mode": mode}
    _check(_model("Momentum", feeds, 4, attrs), feeds)


def test_inputs_are_not_modified() -> None:
    feeds = _feeds(["X", "G", "H"], [(3,)], 1)
    before = {k: v.copy() for k, v in feeds.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        epoxy.InferenceSession(_model("Adagrad", feeds, 2, {}), providers=["cpu"]).run(None, feeds)
    for k in feeds:
        np.testing.assert_array_equal(feeds[k], before[k])
