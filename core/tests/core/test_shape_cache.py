"""The shape cache: which values follow from the input shapes, and runs that reuse them.

The provider here is a test registry counting kernel calls, so a test can see which steps
ran; the same behaviour on ep-cpu with exporter-shaped graphs is in
tests/integration/test_shape_cache_cpu.py.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from fakes import Factory
from onnx import TensorProto, helper

from epoxy import InferenceSession, SessionOptions
from epoxy.graph.graph_spec import CoreGraph
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.load.loader import load_model
from epoxy.plan.shape_values import shape_fixed_values
from epoxy.run import shape_cache
from epoxy.run.shape_cache import ShapeCachingExecutor
from epoxy.testing import registry_with

CALLS: Counter[str] = Counter()
KERNELS = KernelRegistry()


def _counted(op: str, fn: Any) -> Any:
    def run(*args: Any) -> Any:
        CALLS[op] += 1
        return fn(*args)

    return run


def _ints(a: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(a).reshape(-1)]


KERNELS.register("Shape", (1, 13, 15, 19, 21))(lambda node: _counted("Shape", lambda x: np.array(x.shape, np.int64)))
KERNELS.register("Gather", (1, 11, 13))(
    lambda node: _counted("Gather", lambda d, i: np.take(d, i, axis=node.attr("axis", 0))))
KERNELS.register("Unsqueeze", (13, 21))(
    lambda node: _counted("Unsqueeze", lambda x, a: np.expand_dims(x, tuple(_ints(a)))))
KERNELS.register("Concat", (4, 11, 13))(
    lambda node: _counted("Concat", lambda *xs: np.concatenate(xs, axis=node.attr("axis"))))
KERNELS.register("Reshape", (5, 13, 14, 19, 21))(lambda node: _counted("Reshape", lambda x, s: x.reshape(_ints(s))))
KERNELS.register("Mul", (7, 13, 14))(lambda node: _counted("Mul", np.multiply))
KERNELS.register("Add", (7, 13, 14))(lambda node: _counted("Add", np.add))
KERNELS.register("Relu", (6, 13, 14))(lambda node: _counted("Relu", lambda x: np.maximum(x, 0)))
KERNELS.register("Identity", (13, 14, 16, 19, 21))(lambda node: _counted("Identity", lambda x: x))
KERNELS.register("NonZero", (9, 13))(lambda node: _counted("NonZero", lambda x: np.array(np.nonzero(x), np.int64)))
KERNELS.register("RandomNormalLike", (1,))(
    lambda node: _counted("RandomNormalLike", lambda x: np.random.standard_normal(x.shape).astype(np.float32)))


def _session(model: Any, options: SessionOptions | None = None, **fields: Any) -> InferenceSession:
    factory = Factory("counted", lambda d, o: KernelProvider("counted", d, KERNELS, o))
    factory.supported_ops = KERNELS.ops  # type: ignore[method-assign]
    registry = registry_with(factory, plugin_name="shape-cache-tests")
    return InferenceSession(model.SerializeToString(), options or SessionOptions(**fields), providers=["counted"],
                            registry=registry)


def _model(nodes: list, inputs: list, outputs: list, inits: list = ()) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _flatten_model(shape_of_a_copy: bool = False) -> Any:
    """y = Reshape(Relu(x), [batch, -1]) with the target computed the TorchScript way;
    ``shape_of_a_copy``: the Shape reads ``Identity(Relu(x))`` (a value nothing else reads)."""
    i0 = helper.make_tensor("i0", TensorProto.INT64, [], [0])
    ax = helper.make_tensor("ax", TensorProto.INT64, [1], [0])
    minus1 = helper.make_tensor("m1", TensorProto.INT64, [1], [-1])
    copy = [helper.make_node("Identity", ["r"], ["v"])] if shape_of_a_copy else []
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        *copy,
        helper.make_node("Shape", ["v" if shape_of_a_copy else "r"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        helper.make_node("Concat", ["b1", "m1"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "w"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "m"])
    return _model(nodes, [x], [y], [i0, ax, minus1])


def test_analysis_marks_the_shape_arithmetic_and_nothing_that_reads_data() -> None:
    loaded = load_model(_flatten_model())
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    assert shape_fixed_values(graph) == {"s", "b", "b1", "target"}


def test_analysis_stops_at_data_dependent_shapes_random_ops_and_unknown_domains() -> None:
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Shape", ["nz"], ["s_nz"]),          # NonZero's size depends on the data
        helper.make_node("Shape", ["x"], ["s_x"]),
        helper.make_node("Custom", ["s_x"], ["c"], domain="my.ops"),   # not a pure domain
        helper.make_node("RandomNormalLike", ["s_x"], ["rnd"], dtype=TensorProto.FLOAT),
        helper.make_node("Shape", ["rnd"], ["s_rnd"]),        # random values, but a fixed shape
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("s_nz", "c", "s_rnd")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
    loaded = load_model(model, check="off")
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    assert shape_fixed_values(graph) == {"s_x", "s_rnd"}


def test_an_overridable_initializer_is_not_a_fixed_value() -> None:
    w = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    nodes = [helper.make_node("Shape", ["w"], ["sw"]), helper.make_node("Mul", ["w", "w"], ["ww"])]
    w_in = helper.make_tensor_value_info("w", TensorProto.FLOAT, [None])
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("sw", "ww")]
    model = _model(nodes, [w_in], outs, [w])
    loaded = load_model(model)
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    assert shape_fixed_values(graph, ["w"]) == {"sw"}  # its shape is keyed; its contents are not


def test_third_run_of_a_shape_skips_the_shape_steps_and_matches_the_full_plan() -> None:
    sess = _session(_flatten_model())
    plain = _session(_flatten_model(), shape_cache=False)
    assert isinstance(sess._executor, ShapeCachingExecutor) and sess._executor.skipped == 4
    assert not isinstance(plain._executor, ShapeCachingExecutor)
    rng = np.random.default_rng(0)
    for run in range(5):
        x = rng.standard_normal((2, 3, 4)).astype(np.float32)
        CALLS.clear()
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, plain.run(None, {"x": x})[0])
        assert y.shape == (2, 12)
        shape_steps = CALLS["Shape"] + CALLS["Gather"] + CALLS["Unsqueeze"] + CALLS["Concat"]
        # plain counts itself too: full runs show 8 shape calls, reduced runs only plain's 4
        assert shape_steps == (8 if run < 2 else 4), (run, dict(CALLS))


def test_a_value_only_cached_steps_read_is_not_computed_in_the_reduced_plan() -> None:
    """``v = Identity(Relu(x))`` read only by Shape (whose result is cached): after the second
    run of a shape the Identity computes for nothing and the reduced plan drops it too."""
    model = _flatten_model(shape_of_a_copy=True)
    sess = _session(model, graph_optimization_level="disable")  # the Identity stays a step
    assert isinstance(sess._executor, ShapeCachingExecutor)
    x_value = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    for run in range(4):
        CALLS.clear()
        (out,) = sess.run(None, {"x": x_value})
        np.testing.assert_array_equal(out, np.maximum(x_value, 0).reshape(2, 12))
        assert CALLS["Identity"] == (1 if run < 2 else 0), (run, dict(CALLS))
    assert [step.op_type for step in sess._executor.reduced_plan.steps] == ["Relu", "Reshape"]


def test_alternating_shapes_each_get_their_own_values() -> None:
    sess = _session(_flatten_model())
    rng = np.random.default_rng(1)
    for run in range(12):
        shape = [(1, 3, 5), (4, 3, 2), (2, 3, 7)][run % 3]
        x = rng.standard_normal(shape).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0).reshape(shape[0], -1))


def test_results_that_view_a_snapshot_are_copies_the_caller_may_write() -> None:
    one = helper.make_tensor("one", TensorProto.INT64, [2], [1, 1])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["s", "one"], ["s_out"]),
             helper.make_node("Relu", ["x"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    outs = [helper.make_tensor_value_info("s_out", TensorProto.INT64, [1, 1]),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])]
    sess = _session(_model(nodes, [x], outs, [one]))
    assert sess._executor.skipped == 1  # Shape; the Reshape returning a view of its snapshot runs
    feeds = {"x": np.ones(3, np.float32)}
    for _ in range(3):
        shape_out, _y = sess.run(None, feeds)
        shape_out[0, 0] = 99  # a caller writing into its result must not change the next run's
    assert sess.run(None, feeds)[0].tolist() == [[3]]


def test_random_and_data_dependent_values_are_recomputed_every_run() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("RandomNormalLike", ["x"], ["noise"], dtype=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "noise"], ["y"]),
             helper.make_node("NonZero", ["x"], ["nz"]), helper.make_node("Shape", ["nz"], ["snz"]),
             helper.make_node("Identity", ["snz"], ["count"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
            helper.make_tensor_value_info("count", TensorProto.INT64, [2])]
    sess = _session(_model(nodes, [x], outs))
    seen = []
    for run in range(5):
        x_value = np.array([0, 1, 0, 0], np.float32) if run < 4 else np.array([1, 1, 1, 0], np.float32)
        y, count = sess.run(None, {"x": x_value})
        seen.append(y.copy())
        assert count.tolist() == [1, 1 if run < 4 else 3]
    assert not np.array_equal(seen[2], seen[3])  # noise drawn again on reduced runs


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shape_cache, "MAX_SHAPES", 2)
    sess = _session(_flatten_model())
    ex = sess._executor
    for n in range(1, 8):
        for _ in range(3):
            sess.run(None, {"x": np.ones((n, 3, 2), np.float32)})
    assert len(ex._cache) <= 2 and len(ex._seen) <= 2


def test_a_key_whose_snapshots_are_too_large_runs_the_full_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shape_cache, "MAX_BYTES", 8)  # the 2-int64 target is 16 bytes
    sess = _session(_flatten_model())
    for _ in range(4):
        CALLS.clear()
        (y,) = sess.run(None, {"x": np.ones((2, 3, 2), np.float32)})
        assert y.shape == (2, 6) and CALLS["Concat"] == 1


def test_the_config_entry_turns_it_off() -> None:
    opts = SessionOptions()
    opts.add_session_config_entry("epoxy.shape_cache", "0")
    assert opts.shape_cache is False
    sess = _session(_flatten_model(), opts)
    assert not isinstance(sess._executor, ShapeCachingExecutor)


def test_profiling_and_parallel_sessions_run_every_step(tmp_path: Any) -> None:
    profiled = {"enable_profiling": True, "profile_file_prefix": str(tmp_path / "p")}
    for options in (profiled, {"execution_mode": "parallel"}):
        sess = _session(_flatten_model(), **options)
        assert not isinstance(sess._executor, ShapeCachingExecutor)
        for _ in range(3):
            CALLS.clear()
            sess.run(None, {"x": np.ones((2, 3, 2), np.float32)})
            assert CALLS["Shape"] == 1
        if options is profiled:
            sess.end_profiling()
