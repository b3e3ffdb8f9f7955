"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the cpu provider (oracle: onnx.reference)."""

from __future__ import annotations

import numpy as np
import pytest
from _reduction_oracle import _check, _elem, _model, _reference, _run  # noqa: E402,F401

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
