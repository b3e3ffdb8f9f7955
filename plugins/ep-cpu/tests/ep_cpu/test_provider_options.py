"""The cpu provider's options: validated at session creation, and they reach the kernels."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _calls import counting  # noqa: E402

import epoxy
from epoxy_ep_cpu.ops import conv as conv_ops

RNG = np.random.default_rng(3)
_CONV_ND = conv_ops.conv_nd  # the oracle, in float64, before any test counts calls


def conv_model(c: int = 64, m: int = 96, hw: int = 24) -> tuple[bytes, np.ndarray]:
    w = (RNG.standard_normal((m, c, 3, 3)) * 0.1).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, hw, hw])], [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString(), w


def _count(monkeypatch, name):
    return counting(monkeypatch, conv_ops, name)


@pytest.mark.parametrize(
    "option,path",
    [(None, "conv_f43"), ("auto", "conv_f43"), ("f23", "conv_winograd"), ("off", "conv_nd")],
)
def test_conv_winograd_option_picks_the_path(option, path, monkeypatch):
    calls = {name: _count(monkeypatch, name) for name in ("conv_f43", "conv_winograd", "conv_nd")}
    model, w = conv_model()
    providers = ["cpu"] if option is None else [("cpu", {"conv_winograd": option})]
    sess = epoxy.InferenceSession(model, providers=providers)
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    want = _CONV_ND(x.astype(np.float64), w.astype(np.float64), 1, (1, 1), (1, 1), [1, 1], [1, 1], [24, 24])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-4)
    assert calls[path], f"{path} did not run"
    assert all(not v for k, v in calls.items() if k != path)


def test_sessions_with_different_options_do_not_mix(monkeypatch):
    calls = {name: _count(monkeypatch, name) for name in ("conv_f43", "conv_nd")}
    model, _ = conv_model()
    off = epoxy.InferenceSession(model, providers=[("cpu", {"conv_winograd": "off"})])
    auto = epoxy.InferenceSession(model, providers=["cpu"])
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32)
    off.run(None, {"x": x})
    assert calls["conv_nd"] and not calls["conv_f43"]
    auto.run(None, {"x": x})
    assert calls["conv_f43"]


@pytest.mark.parametrize(
    "options,match",
    [({"conv_winograd": "fast"}, r"conv_winograd='fast'; expected one of \['auto', 'f23', 'off'\]"),
     ({"threads": 2}, r"unknown options \['threads'\]")],
)
def test_bad_options_are_clear_errors(options, match):
    model, _ = conv_model()
    with pytest.raises(epoxy.errors.EpoxyError, match=match):
        epoxy.InferenceSession(model, providers=[("cpu", options)])
