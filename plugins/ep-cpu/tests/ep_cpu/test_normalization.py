"""Normalization kernels of the cpu provider: BatchNormalization, InstanceNormalization,
LayerNormalization, GroupNormalization, RMSNormalization, LRN, LpNormalization,
MeanVarianceNormalization."""

from __future__ import annotations

import numpy as np
import pytest
from _nn_oracle import RNG, _model, check, f32, run_epoxy  # noqa: E402,F401


def _bn_params(c):
    return f32(c), f32(c), f32(c), (RNG.random(c) + 0.5).astype(np.float32)


@pytest.mark.parametrize("opset", [6, 7, 9, 14, 15])
def test_batch_norm_inference(opset):
    for x, eps in ((f32(2, 3, 4, 5), 1e-3), (f32(4, 3), 1e-5)):
        s, b, m, v = _bn_params(3)
        shape = (1, 3) + (1,) * (x.ndim - 2)
        expected = (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + eps) * s.reshape(shape) + b.reshape(shape)
        attrs = {"epsilon": eps} if opset >= 6 else {}
        check("BatchNormalization", [x, s, b, m, v], attrs, opset=opset, rtol=1e-4, atol=1e-5, expected=[expected])


def test_batch_norm_training_mode():
    x = f32(3, 2, 4)
    got = check(
        "BatchNormalization", [x, *_bn_params(2)], {"training_mode": 1, "momentum": 0.8},
        opset=15, n_out=3, rtol=1e-4, atol=1e-5,
    )
    assert [g.shape for g in got] == [(3, 2, 4), (2,), (2,)]


def test_batch_norm_float16():
    x = f32(1, 3, 4, 4).astype(np.float16)
    params = [p.astype(np.float16) for p in _bn_params(3)]
    got = check("BatchNormalization", [x, *params], opset=15, rtol=1e-2, atol=1e-2)
    assert got[0].dtype == np.float16


def test_instance_norm():
    x = f32(2, 3, 4, 5)
    check("InstanceNormalization", [x, f32(3), f32(3)], {"epsilon": 1e-3}, opset=6, rtol=1e-4, atol=1e-5)
    check("InstanceNormalization", [f32(2, 3, 6), f32(3), f32(3)], opset=22, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("axis", [-1, 1, -2])
def test_layer_norm(axis):
    x = f32(2, 3, 4)
    norm_shape = x.shape[axis:]
    check("LayerNormalization", [x, f32(*norm_shape), f32(*norm_shape)], {"axis": axis}, n_out=3,
          out_dtypes=[np.float32, np.float32, np.float32], rtol=1e-4, atol=1e-5)
    check("LayerNormalization", [x, f32(*norm_shape)], {"axis": axis}, rtol=1e-4, atol=1e-5)


def test_layer_norm_double():
    x = f32(2, 5).astype(np.float64)
    check("LayerNormalization", [x, f32(5).astype(np.float64), f32(5).astype(np.float64)], {"stash_type": 1}, rtol=1e-5)


def test_group_norm_opsets():
    x = f32(2, 4, 3, 3)
    check("GroupNormalization", [x, f32(4), f32(4)], {"num_groups": 2}, opset=21, rtol=1e-4, atol=1e-5)
    s, b = f32(2), f32(2)
    # opset 18: one scale / bias per group
    xg = x.reshape(2, 2, -1)
    norm = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    expected = norm * np.repeat(s, 2).reshape(1, 4, 1, 1) + np.repeat(b, 2).reshape(1, 4, 1, 1)
    # the checker refuses the deprecated opset-18 form in a model: call the kernel directly
    from epoxy.contract import NodeSpec
    from epoxy_ep_cpu.registry import load_kernels

    node = NodeSpec(0, "g", "GroupNormalization", "", 18, ("x", "s", "b"), ("y",), {"num_groups": 2}, (), ())
    factory, reason = load_kernels().lookup(node)
    assert factory is not None, reason
    np.testing.assert_allclose(factory(node)(x, s, b), expected, rtol=1e-4, atol=1e-5)


def test_rms_norm():
    x = f32(2, 3, 4)
    check("RMSNormalization", [x, f32(4)], opset=23, rtol=1e-4, atol=1e-5)
    check("RMSNormalization", [x, f32(3, 4)], {"axis": 1, "epsilon": 1e-3}, opset=23, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn(size):
    x = f32(2, 6, 3, 3)
    sq = np.zeros_like(x)
    lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
    for c in range(6):  # the spec's formula, channel by channel
        sq[:, c] = np.sum(x[:, max(0, c - lo) : min(6, c + hi + 1)] ** 2, axis=1)
    expected = x / (1.5 + 2e-3 / size * sq) ** 0.6
    attrs = {"size": size, "alpha": 2e-3, "beta": 0.6, "bias": 1.5}
    check("LRN", [x], attrs, opset=13, rtol=1e-4, atol=1e-5, expected=[expected])
    check("LRN", [x], {"size": size}, opset=1, rtol=1e-4, atol=1e-5, expected=[x / (1 + 1e-4 / size * sq) ** 0.75])


def test_lp_normalization():
    x = f32(3, 4)
    x[1] = 0
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    expected = np.where(norm == 0, 0, x / np.maximum(norm, 1e-30))
    check("LpNormalization", [x], {"axis": 1, "p": 2}, opset=22, rtol=1e-5, atol=1e-6, expected=[expected])
    y = f32(3, 4)
    check("LpNormalization", [y], {"axis": 0, "p": 1}, opset=1, expected=[y / np.abs(y).sum(0, keepdims=True)])


def test_mean_variance_normalization():
    x = f32(2, 3, 4, 5)
    check("MeanVarianceNormalization", [x], opset=13, rtol=1e-4, atol=1e-5)
    check("MeanVarianceNormalization", [x], {"axes": [1, -1]}, opset=9, rtol=1e-4, atol=1e-5)
