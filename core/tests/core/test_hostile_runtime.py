"""Hostile models at run time (issue #16), core only, test-only providers.

- control flow the spec does not allow is refused at session creation (a Loop whose
  condition is a float would otherwise run for ever), naming the node and what was expected;
- a run has a bound: ``RunOptions.terminate`` and the time bound ``epoxy.run_timeout_s`` are
  honored between steps, inside control-flow bodies and at every iteration, and the session
  stays usable after;
- a declared shape that is wrong (a value_info inference cannot contradict) does not size
  buffers it cannot fit: the planner skips absurd or overflowing sizes, a kernel that does
  not fit its planned view allocates instead; a kernel's MemoryError is a
  ``ResourceLimitError`` naming the node and its output.

Every model is a minimal reproducer built here with onnx.helper.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import onnx
import pytest
from fakes import Factory
from onnx import TensorProto, helper, numpy_helper

from epoxy import InferenceSession, RunOptions, SessionOptions
from epoxy.errors import (
    InvalidArgumentError,
    InvalidGraphError,
    KernelError,
    ProviderError,
    ResourceLimitError,
    RunTerminatedError,
)
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.plan.arena import ArenaLayout, ArenaPool

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
LONG = np.array(10**9, np.int64)  # a trip count no test waits for


def vi(name: str, elem: int = F, shape: Any = ()) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def seq_vi(name: str, elem: int = F, shape: Any = ()) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, shape)))


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: tuple[Any, ...] = (), value_info: tuple[Any, ...] = (), opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, initializer=list(inits), value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def session(make_registry: Any, proto: onnx.ModelProto, *extra: Any, **kw: Any) -> InferenceSession:
    providers = [f.name for f in extra] + ["cpu"]
    return InferenceSession(proto, providers=providers, registry=make_registry(*extra), **kw)


# -- 1. control flow the spec does not allow: refused at creation ---------------------------------
def counting_body(cond_in: int = B, cond_out: str = "cond", iteration: int = I64) -> onnx.GraphProto:
    """acc += 1 each iteration; the body's condition output is ``cond_out`` passed through."""
    return helper.make_graph(
        [helper.make_node("Identity", [cond_out], ["cond_out"], name="pass_cond"),
         helper.make_node("Add", ["acc", "one"], ["acc_out"], name="count")],
        "body", [vi("i", iteration), vi("cond", cond_in), vi("acc", F, [1])],
        [vi("cond_out", F if cond_out == "f" else cond_in), vi("acc_out", F, [1])])


def loop_model(cond_type: int = B, body: onnx.GraphProto | None = None, outputs: int = 1) -> onnx.ModelProto:
    """Loop 'theloop' with no trip count: it stops only when its condition turns false."""
    loop = helper.make_node("Loop", ["", "c", "acc0"], ["acc", "extra"][:outputs], body=body or counting_body(),
                            name="theloop")
    return model([loop], [vi("c", cond_type), vi("acc0", F, [1]), vi("f", F)],
                 [vi("acc", F, [1]), vi("extra", F, [1])][:outputs],
                 inits=(numpy_helper.from_array(np.ones(1, np.float32), "one"),))


def test_loop_whose_condition_input_is_a_float_is_refused_at_creation(make_registry):
    # issue #16: a float 1.0 condition is truthy and the body passes it on: the run never ended
    started = time.monotonic()
    with pytest.raises(InvalidGraphError, match=r"Loop node 'theloop': input 1 \(cond\) 'c' is tensor\(float\); "
                                                r"the spec \(ONNX Loop-16\) allows tensor\(bool\)") as info:
        session(make_registry, loop_model(cond_type=F))
    assert info.value.node == "theloop"
    assert time.monotonic() - started < 10


def test_loop_whose_body_condition_output_is_a_float_is_refused(make_registry):
    # the node's condition is bool, but the body hands back a float (an outer value, 1.0)
    proto = loop_model(body=counting_body(cond_out="f"))
    with pytest.raises(InvalidGraphError, match=r"theloop.*body output 0 \(condition\) 'cond_out' is tensor\(float\)"
                                                r".*allows tensor\(bool\)") as info:
        session(make_registry, proto)
    assert info.value.node == "theloop"


def test_loop_whose_body_iteration_number_is_not_int64_is_refused(make_registry):
    with pytest.raises(InvalidGraphError, match=r"theloop.*body input 0 \(iteration number\) 'i' is tensor\(float\)"
                                                r".*allows tensor\(int64\)"):
        session(make_registry, loop_model(body=counting_body(iteration=F)))


def test_loop_trip_count_must_be_int64(make_registry):
    proto = loop_model()
    proto.graph.node[0].input[0] = "f"  # a float trip count
    with pytest.raises(InvalidGraphError, match=r"theloop.*input 0 \(M\) 'f' is tensor\(float\).*tensor\(int64\)"):
        session(make_registry, proto)


def test_loop_body_with_too_few_outputs_or_inputs_is_refused(make_registry):
    short = counting_body()
    del short.output[1]  # the carried value is never produced
    with pytest.raises(InvalidGraphError, match=r"theloop.*body's output list has 1, the spec .* at least 2"):
        session(make_registry, loop_model(body=short))
    extra = counting_body()
    extra.input.append(vi("stray", F, [1]))
    with pytest.raises(InvalidGraphError, match=r"theloop.*body's input list has 4, the spec .* requires 3"):
        session(make_registry, loop_model(body=extra))


def test_loop_node_with_more_outputs_than_its_body_makes_is_refused(make_registry):
    with pytest.raises(InvalidGraphError, match=r"theloop.*has 2 outputs but its body produces 1"):
        session(make_registry, loop_model(outputs=2))


def test_loop_carried_value_changing_type_is_refused(make_registry):
    body = counting_body()
    body.output[1].type.tensor_type.elem_type = TensorProto.DOUBLE
    with pytest.raises(InvalidGraphError, match=r"theloop.*loop-carried value 0 changes type.*'acc_out' is "
                                                r"tensor\(double\)"):
        session(make_registry, loop_model(body=body))


def if_model(cond_type: int = B, else_outputs: int = 1) -> onnx.ModelProto:
    def branch(name: str, n: int) -> onnx.GraphProto:
        nodes = [helper.make_node("Neg", ["x"], [f"{name}{k}"]) for k in range(n)]
        return helper.make_graph(nodes, name, [], [vi(f"{name}{k}", F, [2]) for k in range(n)])

    node = helper.make_node("If", ["c"], ["y"], then_branch=branch("t", 1), else_branch=branch("e", else_outputs),
                            name="choose")
    return model([node], [vi("c", cond_type), vi("x", F, [2])], [vi("y", F, [2])])


def test_if_whose_condition_is_a_float_is_refused(make_registry):
    with pytest.raises(InvalidGraphError, match=r"If node 'choose': input 0 \(cond\) 'c' is tensor\(float\); "
                                                r"the spec \(ONNX If-16\) allows tensor\(bool\)") as info:
        session(make_registry, if_model(cond_type=F))
    assert info.value.node == "choose"


def test_if_branch_with_another_output_count_is_refused(make_registry):
    with pytest.raises(InvalidGraphError, match=r"If node 'choose': its else_branch's output list has 2, the spec "
                                                r"\(ONNX If-16\) requires 1"):
        session(make_registry, if_model(else_outputs=2))


def test_a_bad_loop_nested_in_a_branch_is_refused_naming_both(make_registry):
    inner = loop_model(cond_type=F).graph.node[0]
    then = helper.make_graph([inner], "then", [], [vi("acc", F, [1])])
    other = helper.make_graph([helper.make_node("Identity", ["acc0"], ["z"])], "else", [], [vi("z", F, [1])])
    node = helper.make_node("If", ["b"], ["y"], then_branch=then, else_branch=other, name="outer")
    proto = model([node], [vi("b", B), vi("c", F), vi("acc0", F, [1])], [vi("y", F, [1])],
                  inits=(numpy_helper.from_array(np.ones(1, np.float32), "one"),))
    with pytest.raises(InvalidGraphError, match=r"in then_branch of If node 'outer': Loop node 'theloop': input 1 "
                                                r"\(cond\) 'c' is tensor\(float\)") as info:
        session(make_registry, proto)
    assert info.value.node == "theloop"


def scan_model(body_inputs: int = 2, num_scan_inputs: int = 1, axes: tuple[int, ...] = (0,)) -> onnx.ModelProto:
    """Scan-16 'scan': a running sum over x's first axis."""
    inputs = [vi("s", F, [2]), vi("x_t", F, [2])] + [vi(f"extra{k}", F, [2]) for k in range(body_inputs - 2)]
    body = helper.make_graph([helper.make_node("Add", ["s", "x_t"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["o"])],
                             "body", inputs, [vi("s_out", F, [2]), vi("o", F, [2])])
    node = helper.make_node("Scan", ["s0", "x"], ["s_final", "o_all"], body=body, num_scan_inputs=num_scan_inputs,
                            scan_input_axes=list(axes), name="scan")
    return model([node], [vi("s0", F, [2]), vi("x", F, [None, 2])], [vi("s_final", F, [2]), vi("o_all", F, [None, 2])])


def test_scan_body_whose_input_count_does_not_match_is_refused(make_registry):
    with pytest.raises(InvalidGraphError, match=r"Scan node 'scan': its body's input list has 3, the spec "
                                                r"\(ONNX Scan-16\) requires 2") as info:
        session(make_registry, scan_model(body_inputs=3))
    assert info.value.node == "scan"


def test_scan_whose_num_scan_inputs_does_not_fit_is_refused(make_registry):
    with pytest.raises(InvalidGraphError, match=r"Scan node 'scan': num_scan_inputs=3 does not fit its 2 inputs"):
        session(make_registry, scan_model(num_scan_inputs=3))
    with pytest.raises(InvalidGraphError, match=r"Scan node 'scan': attribute scan_input_axes has 2, .* requires 1"):
        session(make_registry, scan_model(axes=(0, 0)))


def test_sequence_map_body_whose_counts_do_not_match_is_refused(make_registry):
    body = helper.make_graph([helper.make_node("Identity", ["e"], ["o"])], "body",
                             [vi("e", F, [2]), vi("stray", F, [2])], [vi("o", F, [2])])
    node = helper.make_node("SequenceMap", ["seq"], ["out"], body=body, name="smap")
    proto = model([node], [seq_vi("seq", F, [2])], [seq_vi("out", F, [2])])
    with pytest.raises(InvalidGraphError, match=r"SequenceMap node 'smap': its body's input list has 2, the spec "
                                                r"\(ONNX SequenceMap-17\) requires 1"):
        session(make_registry, proto)


def test_a_condition_whose_type_was_unknown_at_creation_must_be_bool_at_run_time(make_registry):
    # no shape inference: 'c' (Identity of a float) has no type until it runs
    proto = loop_model()
    proto.graph.node.insert(0, helper.make_node("Identity", ["f"], ["c"], name="make_cond"))
    del proto.graph.input[0]
    sess = session(make_registry, proto, sess_options=SessionOptions(infer_shapes=False,
                                                                     graph_optimization_level="disable"))
    with pytest.raises(KernelError, match=r"node 'theloop' \(Loop\).*Loop cond must be a bool tensor.*float32") as info:
        sess.run(None, {"f": np.array(1.0, np.float32), "acc0": np.zeros(1, np.float32)})
    assert info.value.node == "theloop"


def test_a_valid_loop_still_runs(make_registry):
    (acc,) = session(make_registry, counted_loop()).run(None, {"n": np.array(4, np.int64),
                                                               "acc0": np.zeros(1, np.float32)})
    np.testing.assert_array_equal(acc, [4.0])


# -- 2. run bounds ---------------------------------------------------------------------------------
def counted_loop() -> onnx.ModelProto:
    """acc += 1, n times: as long as asked."""
    node = helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=counting_body(), name="theloop")
    return model([node], [vi("n", I64), vi("acc0", F, [1])], [vi("acc", F, [1])],
                 inits=(numpy_helper.from_array(np.ones(1, np.float32), "one"),))


LOOP_FEEDS = {"n": LONG, "acc0": np.zeros(1, np.float32)}


def stopped(sess: InferenceSession, feeds: dict[str, Any], options: RunOptions | None = None,
            watchdog: float = 30.0) -> tuple[RunTerminatedError, float]:
    """Run expecting a stop; a watchdog sets ``terminate`` so a broken bound fails the test
    (its message then names terminate, not the time bound) instead of hanging it."""
    options = options or RunOptions()
    timer = threading.Timer(watchdog, lambda: setattr(options, "terminate", True))
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(RunTerminatedError) as info:
            sess.run(None, feeds, options)
    finally:
        timer.cancel()
    return info.value, time.monotonic() - started


def test_run_timeout_from_run_options_stops_a_huge_loop_and_the_session_stays_usable(make_registry):
    sess = session(make_registry, counted_loop())
    options = RunOptions()
    options.add_run_config_entry("epoxy.run_timeout_s", "0.2")
    assert options.run_timeout_s == 0.2 and options.unused_config_keys() == []
    error, took = stopped(sess, LOOP_FEEDS, options)
    message = str(error)
    assert "epoxy.run_timeout_s=0.2 s" in message and "set by the run config entry" in message
    assert "Loop 'theloop' iteration" in message
    assert took < 10
    (acc,) = sess.run(None, {"n": np.array(3, np.int64), "acc0": np.zeros(1, np.float32)}, options)
    np.testing.assert_array_equal(acc, [3.0])  # same options, a short run: fine


@pytest.mark.parametrize("how", ["attribute", "config entry"])
def test_session_run_timeout_bounds_every_run(make_registry, how):
    so = SessionOptions()
    if how == "attribute":
        so.run_timeout_s = 0.2
    else:
        so.add_session_config_entry("epoxy.run_timeout_s", "0.2")
    assert so.run_timeout_s == 0.2
    sess = session(make_registry, counted_loop(), sess_options=so)
    error, took = stopped(sess, LOOP_FEEDS)
    assert "epoxy.run_timeout_s=0.2 s (set by SessionOptions.run_timeout_s)" in str(error)
    assert took < 10
    timer = threading.Timer(30, lambda: None)  # a plain run (no RunOptions) is bounded too
    timer.start()
    try:
        with pytest.raises(RunTerminatedError, match="Loop 'theloop' iteration"):
            sess.run(None, LOOP_FEEDS)
    finally:
        timer.cancel()
    (acc,) = sess.run(None, {"n": np.array(2, np.int64), "acc0": np.zeros(1, np.float32)})
    np.testing.assert_array_equal(acc, [2.0])


def test_run_options_timeout_replaces_the_sessions(make_registry):
    sess = session(make_registry, counted_loop(), sess_options=SessionOptions(run_timeout_s=3600))
    options = RunOptions()
    options.run_timeout_s = 0.2
    error, took = stopped(sess, LOOP_FEEDS, options)
    assert "epoxy.run_timeout_s=0.2 s (set by the run config entry)" in str(error) and took < 10
    options.run_timeout_s = None
    assert options.run_timeout_s is None and "epoxy.run_timeout_s" not in options._config


def test_no_time_bound_by_default():
    assert SessionOptions().run_timeout_s is None and RunOptions().run_timeout_s is None


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon"])
def test_invalid_time_bounds_are_refused(bad):
    with pytest.raises(InvalidArgumentError, match="epoxy.run_timeout_s"):
        RunOptions().add_run_config_entry("epoxy.run_timeout_s", bad)
    with pytest.raises(InvalidArgumentError, match="epoxy.run_timeout_s"):
        SessionOptions().add_session_config_entry("epoxy.run_timeout_s", bad)
    with pytest.raises(InvalidArgumentError, match="run_timeout_s must be a positive number of seconds"):
        SessionOptions(run_timeout_s=float(bad) if bad not in ("soon",) else bad)


def test_run_timeout_in_parallel_mode(make_registry):
    so = SessionOptions(execution_mode="parallel", run_timeout_s=0.2)
    error, took = stopped(session(make_registry, counted_loop(), sess_options=so), LOOP_FEEDS)
    assert "Loop 'theloop' iteration" in str(error) and "run_timeout_s" in str(error) and took < 10


SLOW = KernelRegistry()


@SLOW.register("Relu", (6, 13, 14))
def _slow_relu(node: Any) -> Any:
    def run(x: np.ndarray) -> np.ndarray:
        time.sleep(0.05)
        return np.maximum(x, 0)

    return run


def slow_factory() -> Factory:
    return Factory("slow", lambda d, o: KernelProvider("slow", d, SLOW, o), 10)


def relu_chain(n: int, prefix: str = "r", first: str = "x", last: str = "y") -> list[onnx.NodeProto]:
    names = [first] + [f"{prefix}{k}" for k in range(n - 1)] + [last]
    return [helper.make_node("Relu", [names[k]], [names[k + 1]], name=f"{prefix}{k}") for k in range(n)]


def test_run_timeout_stops_a_chain_between_top_level_steps(make_registry):
    proto = model(relu_chain(40), [vi("x", F, [2])], [vi("y", F, [2])])
    sess = session(make_registry, proto, slow_factory(), sess_options=SessionOptions(run_timeout_s=0.3))
    error, took = stopped(sess, {"x": np.ones(2, np.float32)})
    assert "before node 'r" in str(error) and "(Relu)" in str(error) and took < 1.5


def test_terminate_is_honored_between_the_steps_of_a_loop_body(make_registry):
    # one iteration whose body is a long chain: the stop comes inside it, not at the next iteration
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), *relu_chain(12, "b", "acc", "acc_out")],
        "body", [vi("i", I64), vi("cond", B), vi("acc", F, [2])], [vi("cond_out", B), vi("acc_out", F, [2])])
    node = helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body, name="theloop")
    proto = model([node], [vi("n", I64), vi("acc0", F, [2])], [vi("acc", F, [2])])
    sess = session(make_registry, proto, slow_factory())
    options = RunOptions()
    timer = threading.Timer(0.15, lambda: setattr(options, "terminate", True))  # the body takes 0.6 s
    timer.start()
    error, took = stopped(sess, {"n": np.array(1, np.int64), "acc0": np.ones(2, np.float32)}, options)
    timer.cancel()
    assert "RunOptions.terminate was set" in str(error)
    assert "before node 'b" in str(error) and "(in Loop 'theloop' iteration 0)" in str(error)
    assert took < 0.5
    options.terminate = False
    (acc,) = sess.run(None, {"n": np.array(1, np.int64), "acc0": np.ones(2, np.float32)}, options)
    np.testing.assert_array_equal(acc, [1.0, 1.0])


def test_run_timeout_is_honored_at_every_scan_step(make_registry):
    sess = session(make_registry, scan_model(), sess_options=SessionOptions(run_timeout_s=0.2))
    x = np.ones((2_000_000, 2), np.float32)
    error, took = stopped(sess, {"s0": np.zeros(2, np.float32), "x": x})
    assert "in Scan 'scan' step" in str(error) and took < 10


def test_run_timeout_is_honored_at_every_scan8_step(make_registry):
    body = helper.make_graph([helper.make_node("Add", ["s", "x_t"], ["s_out"]),
                              helper.make_node("Identity", ["s_out"], ["o"])],
                             "body", [vi("s", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("o", F, [2])])
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "o_all"], body=body, num_scan_inputs=1, name="scan8")
    proto = model([node], [vi("s0", F, [1, 2]), vi("x", F, [1, None, 2])],
                  [vi("s", F, [1, 2]), vi("o_all", F, [1, None, 2])], opset=8)
    sess = session(make_registry, proto, sess_options=SessionOptions(run_timeout_s=0.2))
    error, took = stopped(sess, {"s0": np.zeros((1, 2), np.float32), "x": np.ones((1, 2_000_000, 2), np.float32)})
    assert "in Scan 'scan8' batch 0 step" in str(error) and took < 10


def test_run_timeout_is_honored_at_every_sequence_map_element(make_registry):
    body = helper.make_graph([helper.make_node("Relu", ["e"], ["o"], name="slow")], "body", [vi("e", F, [2])],
                             [vi("o", F, [2])])
    node = helper.make_node("SequenceMap", ["seq"], ["out"], body=body, name="smap")
    proto = model([node], [seq_vi("seq", F, [2])], [seq_vi("out", F, [2])])
    sess = session(make_registry, proto, slow_factory(), sess_options=SessionOptions(run_timeout_s=0.2))
    error, took = stopped(sess, {"seq": [np.ones(2, np.float32)] * 200})  # 50 ms an element
    assert "SequenceMap 'smap' element" in str(error) and took < 1.5


# -- 3. declared shapes that are wrong must not size buffers ------------------------------------
STRICT_OUT = KernelRegistry()
OUT_CALLS: list[str] = []


def _strict_ufunc(ufunc: np.ufunc) -> Any:
    """A kernel that writes into ``out`` without checking it fits: numpy raises when it does not."""

    def factory(node: Any) -> Any:
        def run(*args: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            if out is not None:
                OUT_CALLS.append(node.name)
                return ufunc(*args, out=out)
            return ufunc(*args)

        run.supports_out = True  # type: ignore[attr-defined]
        return run

    return factory


STRICT_OUT.register("Neg", (6, 13))(_strict_ufunc(np.negative))
STRICT_OUT.register("Add", (7, 13, 14))(_strict_ufunc(np.add))


def strict_factory() -> Factory:
    return Factory("strict", lambda d, o: KernelProvider("strict", d, STRICT_OUT, o), 10)


def declared_model(declared: list[Any]) -> onnx.ModelProto:
    """x [N, M] -> Neg 'a' -> Neg 'b' -> Add 'y' (a + b); the intermediates a and b are declared
    ``declared`` (inference cannot contradict a static shape against symbolic dims)."""
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="neg_a"), helper.make_node("Neg", ["a"], ["b"], name="neg_b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add_y")]
    return model(nodes, [vi("x", F, ["N", "M"])], [vi("y", F, ["N", "M"])],
                 value_info=(vi("a", F, declared), vi("b", F, declared)))


NO_PASSES = {"sess_options": SessionOptions(graph_optimization_level="disable")}


def test_a_kernel_that_does_not_fit_its_planned_buffer_allocates_instead(make_registry):
    sess = session(make_registry, declared_model([1, 1]), strict_factory(), **NO_PASSES)
    planned = {sess._plan.slot_names[slot] for slot, *_ in sess._plan.arena.views}
    assert planned == {"a", "b"}  # sized [1] from the declarations
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    OUT_CALLS.clear()
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.zeros_like(x))  # -x + x
    assert OUT_CALLS == ["neg_a", "neg_b"]  # offered, refused by numpy, retried without
    OUT_CALLS.clear()
    (y,) = sess.run(None, {"x": x + 1})
    np.testing.assert_array_equal(y, np.zeros_like(x))
    assert OUT_CALLS == []  # slots that did not fit are not offered again


def test_fitting_planned_buffers_are_still_used(make_registry):
    sess = session(make_registry, declared_model([3, 4]), strict_factory(), **NO_PASSES)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for _ in range(2):
        OUT_CALLS.clear()
        (y,) = sess.run(None, {"x": x})
        assert OUT_CALLS == ["neg_a", "neg_b"]
        np.testing.assert_array_equal(y, np.zeros_like(x))


@pytest.mark.parametrize("declared", [[1_000_000, 1_000_000], [2**62, 3], [5, 2**61 + 1], [-3, 4]],
                         ids=["absurd", "int64-wraps-to-negative", "int64-wraps", "negative"])
def test_absurd_or_overflowing_declared_shapes_are_not_planned(make_registry, declared):
    # before: buffers sized from these reached numpy (MemoryError, "Maximum allowed dimension
    # exceeded", "cannot reshape array of size 0") as bare exceptions at run()
    sess = session(make_registry, declared_model(declared), strict_factory(), **NO_PASSES)
    assert sess._plan.arena is None
    summary = sess.memory_plan()
    assert 0 <= summary["planned_peak_bytes"] < 1 << 20
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.zeros_like(x))


def test_an_arena_buffer_the_process_cannot_get_is_skipped():
    layout = ArenaLayout((16, 1 << 62), ((0, 0, np.dtype(np.float32), (4,)), (1, 1, np.dtype(np.uint8), (1 << 62,))))
    views = ArenaPool(layout, 2).acquire()
    assert views[0] is not None and views[0].shape == (4,)
    assert views[1] is None  # its kernel allocates


OOM = KernelRegistry()


@OOM.register("Relu", (6, 13, 14))
def _oom_relu(node: Any) -> Any:
    def run(x: np.ndarray) -> np.ndarray:
        raise MemoryError("Unable to allocate 3.64 TiB for an array with shape (1000000, 1000000)")

    return run


@OOM.register("Neg", (6, 13))
def _failing_neg(node: Any) -> Any:
    def run(x: np.ndarray) -> np.ndarray:
        raise IndexError("index 7 is out of bounds for axis 0 with size 2")

    return run


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_kernels_memory_error_is_a_resource_limit_error_naming_node_and_output(make_registry, mode):
    proto = model([helper.make_node("Relu", ["x"], ["big"], name="grow"), helper.make_node("Add", ["big", "x"], ["y"])],
                  [vi("x", F, [2])], [vi("y", F, [2])])
    oom = Factory("oom", lambda d, o: KernelProvider("oom", d, OOM, o), 10)
    sess = session(make_registry, proto, oom, sess_options=SessionOptions(execution_mode=mode))
    with pytest.raises(ResourceLimitError, match=r"node 'grow' \(Relu\) on provider 'oom' ran out of memory computing "
                                                 r"'big': Unable to allocate") as info:
        sess.run(None, {"x": np.ones(2, np.float32)})
    assert info.value.value == "big"
    assert isinstance(info.value.__cause__, MemoryError)


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_a_kernels_bare_exception_is_a_kernel_error_naming_node_and_output(make_registry, mode):
    proto = model([helper.make_node("Neg", ["x"], ["t"], name="flip")], [vi("x", F, [2])], [vi("t", F, [2])])
    bad = Factory("bad", lambda d, o: KernelProvider("bad", d, OOM, o), 10)
    sess = session(make_registry, proto, bad, sess_options=SessionOptions(execution_mode=mode))
    with pytest.raises(KernelError, match=r"node 'flip' \(Neg\) failed on provider 'bad': IndexError: index 7 .* "
                                          r"\(computing 't'\)") as info:
        sess.run(None, {"x": np.ones(2, np.float32)})
    assert info.value.node == "flip"


# -- a provider refusing the model itself at kernel creation ---------------------------------
REFUSING = KernelRegistry()


@REFUSING.register("Relu", (6, 13, 14))
def _refusing_relu(node: Any) -> Any:
    raise InvalidGraphError(f"node {node.name!r} (Relu): attribute 'alpha' = 7 is outside [0, 1]")


@REFUSING.register("Neg", (6, 13))
def _too_big_neg(node: Any) -> Any:
    raise ResourceLimitError(f"node {node.name!r} (Neg): output would need 4.0 TiB, more than the memory limit")


@pytest.mark.parametrize(("op", "error"), [("Relu", InvalidGraphError), ("Neg", ResourceLimitError)])
def test_the_fallback_refusing_the_model_raises_the_models_error_unwrapped(make_registry, op, error):
    """The fallback's kernel factory says the model is wrong: the user gets that error, not a
    ProviderError about the provider (the provider did not fail, the model did)."""
    proto = model([helper.make_node(op, ["x"], ["y"], name="n0")], [vi("x", shape=[2])], [vi("y", shape=[2])])
    refusing_cpu = Factory("cpu", lambda d, o: KernelProvider("cpu", d, REFUSING, o))
    with pytest.raises(error, match=r"node 'n0'") as info:
        InferenceSession(proto.SerializeToString(), providers=["cpu"],
                         registry=make_registry(refusing_cpu, with_cpu=False))
    assert not isinstance(info.value, ProviderError)


def test_another_provider_refusing_the_model_is_skipped_and_the_fallback_decides(make_registry):
    """A non-fallback provider's refusal drops that provider only (a plugin never takes the
    session down): the fallback runs the node."""
    proto = model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", shape=[2])], [vi("y", shape=[2])])
    refusing = Factory("refusing", lambda d, o: KernelProvider("refusing", d, REFUSING, o), 10)
    with pytest.warns(RuntimeWarning, match="'refusing' skipped"):
        sess = InferenceSession(proto.SerializeToString(), providers=["refusing", "cpu"],
                                registry=make_registry(refusing))
    assert {d.provider for d in sess.partition_report().nodes} == {"cpu"}
    np.testing.assert_array_equal(sess.run(None, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])


def test_a_python_list_feed_too_big_to_convert_is_a_resource_limit_error(make_registry, monkeypatch):
    """A huge nested list fed as an input: numpy's MemoryError converting it (seen by the
    fuzzer under a 1 GiB cap) reaches the user as a ResourceLimitError naming the input."""
    from epoxy.run import feeds

    def out_of_memory(name: str, value: Any, vt: Any) -> Any:
        raise MemoryError("Unable to allocate 512. MiB for an array with shape (134217728,)")

    monkeypatch.setattr(feeds, "_from_python", out_of_memory)
    proto = model([helper.make_node("Relu", ["x"], ["y"], name="n0")], [vi("x", shape=["n"])], [vi("y", shape=["n"])])
    sess = session(make_registry, proto)
    with pytest.raises(ResourceLimitError, match=r"input 'x'.*too large") as info:
        sess.run(None, {"x": [1.0, 2.0]})
    assert isinstance(info.value.__cause__, MemoryError)
