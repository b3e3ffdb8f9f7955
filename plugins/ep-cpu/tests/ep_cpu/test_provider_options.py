"""The cpu provider's options: validated at session creation, and they reach the kernels."""

from __future__ import annotations

import numpy as np
import pytest
from _calls import counting  # noqa: E402
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_ep_cpu.ops import _conv_tuning as conv_tuning
from epoxy_ep_cpu.ops import conv as conv_ops

RNG = np.random.default_rng(3)
# the numpy paths' choice (with the jit tier on, layers whose choice is im2col run as its
# grid GEMM instead: test_jit_conv.py covers that)
HEURISTIC = {"conv_algo_search": "heuristic", "jit": False}  # the path from fixed thresholds (the default)
MEASURE = {"conv_algo_search": "measure", "jit": False}
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
    options = HEURISTIC if option is None else {"conv_winograd": option, **HEURISTIC}
    providers = [("cpu", options)]
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
    off = epoxy.InferenceSession(model, providers=[("cpu", {"conv_winograd": "off", **HEURISTIC})])
    auto = epoxy.InferenceSession(model, providers=[("cpu", HEURISTIC)])
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32)
    off.run(None, {"x": x})
    assert calls["conv_nd"] and not calls["conv_f43"]
    auto.run(None, {"x": x})
    assert calls["conv_f43"]


@pytest.mark.parametrize(
    "options,match",
    [({"conv_winograd": "fast"}, r"conv_winograd='fast'; expected one of \['auto', 'f23', 'off'\]"),
     ({"conv_algo_search": ["measure"]}, r"conv_algo_search=\['measure'\]; expected one of \['heuristic', 'measure'\]"),
     ({"threads": 2}, r"unknown options \['threads'\]")],
)
def test_bad_options_are_clear_errors(options, match):
    model, _ = conv_model()
    with pytest.raises(epoxy.errors.EpoxyError, match=match):
        epoxy.InferenceSession(model, providers=[("cpu", options)])


# -- conv_algo_search="measure" ---------------------------------------------------------------


@pytest.fixture
def fresh_timings():
    """Every test here times its layer shapes anew (choices are cached for the process)."""
    conv_tuning.forget()
    yield
    conv_tuning.forget()


def _slow_except(monkeypatch, fast: str) -> list[str]:
    """Time layers on a fake clock on which ``fast`` takes 1 unit a call and every other
    path 10 (real timings depend on the machine and its load); returns the paths timed."""
    timed: list[str] = []
    clock = [0.0]
    real = conv_ops._run_path

    def run_path(path, *args):  # type: ignore[no-untyped-def]
        timed.append(path)
        clock[0] += 1e-4 if path == fast else 1e-3
        return real(path, *args)

    monkeypatch.setattr(conv_ops, "_run_path", run_path)
    monkeypatch.setattr(conv_tuning, "_clock", lambda: clock[0])
    return timed


@pytest.mark.parametrize("fast,ran", [("row-shift", "conv_row_shift"), ("F(2,3)", "conv_winograd"),
                                      ("F(4,3)", "conv_f43"), ("im2col", "conv_nd")])
def test_measure_keeps_the_fastest_path(fast, ran, monkeypatch, fresh_timings):
    timed = _slow_except(monkeypatch, fast)
    model, w = conv_model()
    sess = epoxy.InferenceSession(model, providers=[("cpu", MEASURE)])
    assert set(timed) == {"im2col", "row-shift", "F(4,3)", "F(2,3)"}
    monkeypatch.undo()
    calls = {name: _count(monkeypatch, name) for name in ("conv_row_shift", "conv_winograd", "conv_f43", "conv_nd")}
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    want = _CONV_ND(x.astype(np.float64), w.astype(np.float64), 1, (1, 1), (1, 1), [1, 1], [1, 1], [24, 24])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-4)
    assert [k for k, v in calls.items() if v] == [ran]


def test_measure_respects_conv_winograd(monkeypatch, fresh_timings):
    timed = _slow_except(monkeypatch, "row-shift")
    model, _ = conv_model()
    epoxy.InferenceSession(model, providers=[("cpu", {"conv_winograd": "off", **MEASURE})])
    assert set(timed) == {"im2col", "row-shift"}


def test_a_layer_shape_is_timed_once_per_process(monkeypatch, fresh_timings):
    timed = _slow_except(monkeypatch, "im2col")
    model, _ = conv_model()
    epoxy.InferenceSession(model, providers=[("cpu", MEASURE)])
    first = len(timed)
    assert first >= 4
    epoxy.InferenceSession(model, providers=[("cpu", MEASURE)])
    assert len(timed) == first
    epoxy.InferenceSession(conv_model(hw=20)[0], providers=[("cpu", MEASURE)])  # another shape: timed
    assert len(timed) > first


@pytest.mark.parametrize("providers", [[("cpu", {"jit": False})], [("cpu", HEURISTIC)]], ids=["default", "heuristic"])
def test_heuristic_times_nothing(providers, monkeypatch, fresh_timings):
    """The default search (heuristic) runs the one path ``pick_path`` names, untimed. On the
    numpy paths: with jit on, the compiled F(4,3) or grid GEMM runs such a layer
    (test_jit_winograd.py)."""
    timed = _slow_except(monkeypatch, "im2col")
    model, _ = conv_model(hw=40)
    sess = epoxy.InferenceSession(model, providers=providers)
    assert timed == []
    sess.run(None, {"x": RNG.standard_normal((1, 64, 40, 40)).astype(np.float32)})
    assert len(timed) == 1


@pytest.mark.parametrize("fast,compiled", [("im2col", "grid"), ("row-shift", None), ("F(4,3)", "winograd")])
def test_measure_with_the_jit_tier_runs_an_im2col_choice_as_the_grid_gemm(fast, compiled, monkeypatch,
                                                                         fresh_timings):
    """With jit on, a layer timed fastest on im2col runs on its compiled twin (grid im2col +
    GEMM, kernels_conv_gemm), one timed fastest on F(4,3) on the compiled F(4,3)
    (kernels_winograd); row-shift is kept as timed."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_conv_gemm, kernels_winograd

    _slow_except(monkeypatch, fast)
    model, w = conv_model()
    sess = epoxy.InferenceSession(model, providers=[("cpu", {"conv_algo_search": "measure", "jit": True})])
    monkeypatch.undo()
    from epoxy_ep_cpu.jit import kernels_conv_implicit

    monkeypatch.setattr(kernels_conv_implicit, "gains", lambda *args: False)  # its own tests: test_jit_conv_implicit
    calls = {name: _count(monkeypatch, name) for name in ("conv_row_shift", "conv_f43", "conv_nd")}
    grid_calls = counting(monkeypatch, kernels_conv_gemm.GridConvCall, "__call__")
    f43_calls = counting(monkeypatch, kernels_winograd.WinogradCall, "__call__")
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    want = _CONV_ND(x.astype(np.float64), w.astype(np.float64), 1, (1, 1), (1, 1), [1, 1], [1, 1], [24, 24])
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-4)
    assert (bool(grid_calls), bool(f43_calls)) == (compiled == "grid", compiled == "winograd")
    assert [k for k, v in calls.items() if v] == ([] if compiled else ["conv_row_shift"])
