"""Planned ``out=`` buffers: reused by liveness, never aliased wrongly, never handed out."""

from __future__ import annotations

import threading

import numpy as np
from fakes import Factory
from onnx import TensorProto, helper, numpy_helper

from epoxy import InferenceSession
from epoxy.kit import KernelProvider, KernelRegistry

OUT_KERNELS = KernelRegistry()
CALLS_WITH_OUT: list[str] = []


def _ufunc_kernel(ufunc):
    def factory(node):
        def run(*args, out=None):
            if out is not None:
                CALLS_WITH_OUT.append(node.name)
                return ufunc(*args, out=out, casting="no")
            return ufunc(*args)

        run.supports_out = True
        return run

    return factory


OUT_KERNELS.register("Add", (7, 13, 14))(_ufunc_kernel(np.add))
OUT_KERNELS.register("Neg", (6, 13))(_ufunc_kernel(np.negative))
# Identity returns its input itself: a may-alias kernel (no out=)
OUT_KERNELS.register("Identity", (1, 13, 14, 16))(lambda node: lambda x: x)


def _registry(make_registry):
    return make_registry(Factory("outcpu", lambda d, o: KernelProvider("outcpu", d, OUT_KERNELS, o), 10))


def _model():
    """x -> Neg a -> Add b (a + c) -> Identity v (alias of b) -> Neg d -> Add y (d + v)."""
    nodes = [
        helper.make_node("Neg", ["x"], ["a"], name="a"),
        helper.make_node("Add", ["a", "c"], ["b"], name="b"),
        helper.make_node("Identity", ["b"], ["v"], name="v"),
        helper.make_node("Neg", ["v"], ["d"], name="d"),
        helper.make_node("Neg", ["d"], ["e"], name="e"),
        helper.make_node("Add", ["e", "v"], ["y"], name="y"),
    ]
    graph = helper.make_graph(nodes, "arena", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
                              [numpy_helper.from_array(np.arange(64, dtype=np.float32), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def expected(x):
    b = -x + np.arange(64, dtype=np.float32)
    return b + b


def test_outputs_written_into_reused_buffers(make_registry):
    session = InferenceSession(_model(), providers=["outcpu"], registry=_registry(make_registry))
    layout = session._plan.arena
    planned = {session._plan.slot_names[slot] for slot, *_ in layout.views}
    assert planned == {"a", "b", "d", "e"}          # y is a graph output: never arena memory
    assert len(layout.buffer_sizes) < len(planned)  # liveness reuse
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    CALLS_WITH_OUT.clear()
    first = session.run(None, {"x": x})[0]
    assert sorted(CALLS_WITH_OUT) == ["a", "b", "d", "e"]
    np.testing.assert_allclose(first, expected(x))
    kept = first.copy()
    session.run(None, {"x": -x})
    np.testing.assert_array_equal(first, kept)  # the next run did not overwrite a returned output


def test_alias_keeps_the_buffer_alive(make_registry):
    # v (Identity) aliases b; b's buffer must not be reused until v's last reader (y) ran
    session = InferenceSession(_model(), providers=["outcpu"], registry=_registry(make_registry))
    layout = session._plan.arena
    buffer_of = {session._plan.slot_names[slot]: buf for slot, buf, *_ in layout.views}
    assert buffer_of["b"] not in (buffer_of["d"], buffer_of["e"])


def test_concurrent_runs_use_separate_arenas(make_registry):
    session = InferenceSession(_model(), providers=["outcpu"], registry=_registry(make_registry))
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(64).astype(np.float32) for _ in range(8)]
    errors = []

    def worker(x):
        for _ in range(200):
            got = session.run(None, {"x": x})[0]
            if not np.allclose(got, expected(x)):
                errors.append("mismatch")

    threads = [threading.Thread(target=worker, args=(x,)) for x in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_arena_or_memory_pattern_off_means_no_planned_buffers(make_registry):
    """onnxruntime's enable_cpu_mem_arena / enable_mem_pattern / enable_mem_reuse take effect."""
    from epoxy import SessionOptions

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    CALLS_WITH_OUT.clear()
    InferenceSession(_model(), providers=["outcpu"], registry=_registry(make_registry)).run(None, {"x": x})
    assert CALLS_WITH_OUT  # the default plans buffers
    for flag in ("enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse"):
        session = InferenceSession(_model(), providers=["outcpu"], registry=_registry(make_registry),
                                   sess_options=SessionOptions(**{flag: False}))
        CALLS_WITH_OUT.clear()
        (y,) = session.run(None, {"x": x})
        assert CALLS_WITH_OUT == [], flag
        np.testing.assert_allclose(y, expected(x))
