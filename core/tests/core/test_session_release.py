"""Dropping the last reference to a session frees its weights at once, not at the garbage
collector's next full pass (the ``onnx_ir`` model is cyclic; ``epoxy.graph.constant_data``),
and nothing else the session builds keeps it in a reference cycle."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.plan.gc_pause import collector_paused
from epoxy.testing import watch_constant_buffers

W = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)


def _model(*, in_subgraph: bool = False) -> bytes:
    """``y = x @ W``; with ``in_subgraph`` W lives in an If branch's graph instead."""
    vi = helper.make_tensor_value_info
    weight = numpy_helper.from_array(W, "W")
    if in_subgraph:
        branch = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["yb"])], "branch", [],
                                   [vi("yb", TensorProto.FLOAT, [3, 32])], [weight])
        nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)]
        inputs = [vi("x", TensorProto.FLOAT, [3, 64]), vi("cond", TensorProto.BOOL, [])]
        inits = []
    else:
        nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
        inputs = [vi("x", TensorProto.FLOAT, [3, 64])]
        inits = [weight]
    graph = helper.make_graph(nodes, "g", inputs, [vi("y", TensorProto.FLOAT, [3, 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@contextmanager
def collector_off() -> Iterator[None]:
    """Only reference counting frees anything inside (what earlier steps left for the
    collector, e.g. the optimizer's discarded graphs, is collected first)."""
    gc.collect()
    with collector_paused():
        yield


@pytest.fixture
def weight_buffers(monkeypatch) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Weak references to the buffers behind every constant array the graph spec reads."""
    return watch_constant_buffers(monkeypatch)


@pytest.mark.parametrize("in_subgraph", [False, True])
def test_dropping_a_session_frees_its_weights_without_a_collection(make_registry, weight_buffers,
                                                                   in_subgraph: bool) -> None:
    sess = epoxy.InferenceSession(_model(in_subgraph=in_subgraph), providers=["cpu"], registry=make_registry())
    feeds = {"x": X, **({"cond": np.array(True)} if in_subgraph else {})}
    np.testing.assert_allclose(sess.run(None, feeds)[0], X @ W, rtol=1e-5)
    held = [ref for ref in weight_buffers.values() if ref() is not None]
    assert held, "the spy saw no weight"
    session_ref = weakref.ref(sess)
    with collector_off():
        del sess
        assert session_ref() is None, "the session is in a reference cycle"
        assert all(ref() is None for ref in held), "a weight outlived its session"


def test_a_session_that_routed_device_io_is_freed_too(make_registry) -> None:
    # io binding builds device-I/O variants through the session's executor factory
    sess = epoxy.InferenceSession(_model(), providers=["cpu"], registry=make_registry())
    binding = sess.io_binding()
    binding.bind_cpu_input("x", X)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], X @ W, rtol=1e-5)
    session_ref = weakref.ref(sess)
    with collector_off():
        del sess, binding
        assert session_ref() is None, "the session is in a reference cycle"
