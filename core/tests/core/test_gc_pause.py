"""The cycle collector is paused while a session is built (epoxy.plan.gc_pause) and restored
afterwards: after a failed build too, left off when the caller had it off, and kept paused
until the last of several concurrent builds ends."""

from __future__ import annotations

import gc
import threading

import pytest
from onnx import TensorProto, helper

import epoxy
from epoxy.plan import gc_pause


def _model() -> bytes:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]).SerializeToString()


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_during_the_build_and_enabled_after(collector_on, monkeypatch, make_registry):
    seen: list[bool] = []
    real = epoxy.InferenceSession._build_through_cache

    def spy(self, *args, **kwargs):
        seen.append(gc.isenabled())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(epoxy.InferenceSession, "_build_through_cache", spy)
    sess = epoxy.InferenceSession(_model(), providers=["cpu"], registry=make_registry())
    assert seen == [False] and gc.isenabled()
    seen.clear()
    monkeypatch.setattr(epoxy.InferenceSession, "_build", lambda self, *a, **k: seen.append(gc.isenabled()))
    sess.set_providers(["cpu"])
    assert seen == [False] and gc.isenabled()


def test_enabled_again_after_a_failed_build(collector_on, make_registry):
    with pytest.raises(epoxy.EpoxyError):
        epoxy.InferenceSession(b"not a model", providers=["cpu"], registry=make_registry())
    assert gc.isenabled()


def test_left_off_when_the_caller_had_it_off(make_registry):
    was = gc.isenabled()
    gc.disable()
    try:
        epoxy.InferenceSession(_model(), providers=["cpu"], registry=make_registry())
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_concurrent_builds_restore_it_once_the_last_ends(collector_on):
    inside, release = threading.Event(), threading.Event()
    states: list[bool] = []

    def first() -> None:
        with gc_pause.collector_paused():
            inside.set()
            release.wait(10)

    worker = threading.Thread(target=first)
    worker.start()
    assert inside.wait(10)
    with gc_pause.collector_paused():
        states.append(gc.isenabled())
    states.append(gc.isenabled())  # the first build still runs
    release.set()
    worker.join(10)
    states.append(gc.isenabled())
    assert states == [False, False, True]
