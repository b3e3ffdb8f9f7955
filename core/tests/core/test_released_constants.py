"""Constants whose kernels keep their own copy (``contract.RELEASED_INPUTS``): the session drops
the plan's, the graph spec's and the model's references, and only when nothing else can use
them (epoxy/plan/released_constants.py)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import onnx
import pytest
from fakes import Factory
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.contract import RELEASED_INPUTS
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.testing import watch_constant_buffers

PACKING = KernelRegistry()


@PACKING.register("MatMul", (1, 9, 13))
def _packing_matmul(node):  # type: ignore[no-untyped-def]
    """A MatMul that copies its constant B when built (a "packed" weight) and then never reads
    the plan's B: it declares input 1 released."""
    const = node.constants.get(node.inputs[1])
    if const is None:
        return lambda a, b: a @ b
    packed = np.array(const)  # its own copy

    def run(a: np.ndarray, b: Any) -> np.ndarray:
        assert b is None or b is const_ref()  # the plan passes None once released
        return a @ packed

    const_ref = weakref.ref(const) if _weakrefable(const) else (lambda: const)
    setattr(run, RELEASED_INPUTS, frozenset({1}))
    return run


def _weakrefable(value: Any) -> bool:
    try:
        weakref.ref(value)
    except TypeError:
        return False
    return True


def _packing_factory() -> Factory:
    return Factory("packer", lambda d, o: KernelProvider("packer", d, PACKING, o), priority=100)


W = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
X = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)


def _model(*, w_output: bool = False, w_also_added: bool = False, w_input: bool = False) -> bytes:
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])]
    if w_output:
        nodes.append(helper.make_node("Identity", ["W"], ["w_out"]))
        outputs.append(helper.make_tensor_value_info("w_out", TensorProto.FLOAT, [8, 4]))
    if w_also_added:  # a second reader whose kernel keeps no copy
        nodes.append(helper.make_node("Add", ["W", "W"], ["w2"]))
        outputs.append(helper.make_tensor_value_info("w2", TensorProto.FLOAT, [8, 4]))
    if w_input:  # an initializer that is also a graph input: a feed may override it
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [8, 4]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(W, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


@pytest.fixture
def spied(monkeypatch) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Weak references to every constant array the graph spec makes (and its base buffer)."""
    return watch_constant_buffers(monkeypatch)


def _session(make_registry, data: bytes, **options: Any) -> epoxy.InferenceSession:  # type: ignore[no-untyped-def]
    so = epoxy.SessionOptions()
    for key, value in options.items():
        setattr(so, key, value)
    return epoxy.InferenceSession(data, so, providers=["packer", "cpu"], registry=make_registry(_packing_factory()))


def test_a_constant_every_reader_keeps_is_dropped_everywhere_and_freed(make_registry, spied) -> None:
    sess = _session(make_registry, _model())
    assert sess.partition_report().nodes[0].provider == "packer"
    assert sess._released_constants == ["W"]
    slot = sess._plan.slot_names.index("W")
    assert sess._plan.initial[slot] is None
    assert "W" not in sess._graph.constants() and sess._graph.constant("W") is None
    assert sess._graph.nodes[0].constants == {}
    assert sess._model.graph.initializers["W"].const_value is None
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], X @ W, rtol=1e-6)
    gc.collect()
    assert spied["W"]() is None  # nothing holds the original's memory any more
    assert any("held only by the kernels" in n for n in sess.partition_report().notes)


@pytest.mark.parametrize("case", ["w_output", "w_also_added", "w_input"])
def test_a_constant_something_else_may_read_is_kept(make_registry, case: str) -> None:
    sess = _session(make_registry, _model(**{case: True}))
    assert sess._released_constants == []
    assert sess._plan.initial[sess._plan.slot_names.index("W")] is not None
    outs = sess.run(None, {"x": X})
    np.testing.assert_allclose(outs[0], X @ W, rtol=1e-6)


def test_a_kernel_that_keeps_no_copy_releases_nothing(make_registry) -> None:
    sess = epoxy.InferenceSession(_model(), providers=["cpu"], registry=make_registry())
    assert sess._released_constants == []


def test_the_session_cache_stores_the_whole_model_and_a_hit_releases(make_registry, tmp_path) -> None:
    data = _model()
    first = _session(make_registry, data, session_cache_dir=str(tmp_path))
    assert first._released_constants == ["W"]  # after the model was stored
    stored = [p for p in tmp_path.rglob("*.onnx")]
    assert stored
    weights = {i.name: numpy_helper.to_array(i) for m in stored for i in onnx.load(str(m)).graph.initializer}
    np.testing.assert_array_equal(weights["W"], W)
    hit = _session(make_registry, data, session_cache_dir=str(tmp_path))
    assert any("session cache" in n for n in hit.partition_report().notes)
    assert hit._released_constants == ["W"]
    np.testing.assert_allclose(hit.run(None, {"x": X})[0], X @ W, rtol=1e-6)


def test_a_context_model_is_written_whole_before_the_release(make_registry, tmp_path) -> None:
    target = tmp_path / "m_ctx.onnx"
    sess = _session(make_registry, _model(), context_enable=True, context_file_path=str(target))
    assert sess._released_constants == ["W"]
    written = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(target)).graph.initializer}
    np.testing.assert_array_equal(written["W"], W)


def test_writing_a_released_sessions_model_is_refused_with_the_reason(make_registry, tmp_path) -> None:
    from epoxy.aot.writer import write_compiled

    sess = _session(make_registry, _model())
    with pytest.raises(RuntimeError, match="the kernels hold the only copies"):
        write_compiled(sess, [], str(tmp_path / "out.onnx"))
