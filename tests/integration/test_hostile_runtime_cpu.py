"""Hostile models at run time with ep-cpu (issue #16): the minimal reproducers of the fuzz
findings about control flow, run bounds and wrong declared shapes, compared with
onnxruntime and onnx.reference where those run the model.

- a Loop whose condition is a float tensor ran for ever; now refused at creation, as
  onnxruntime refuses it;
- a Loop with a huge trip count ran until killed; ``epoxy.run_timeout_s`` stops it, and the
  session then runs the same model normally;
- a value_info on an intermediate value that inference cannot contradict sized planned
  buffers: ``run()`` raised a bare MemoryError/ValueError, while onnxruntime runs the model;
  now epoxy runs it too and gives the reference's answer.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.errors import InvalidGraphError, RunTerminatedError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name: str, elem: int = F, shape: Any = ()) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def mk(nodes: list[onnx.NodeProto], inputs: list[Any], outputs: list[Any], value_info: tuple[Any, ...] = (),
       opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "hostile", inputs, outputs, value_info=list(value_info))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort_session(model: onnx.ModelProto) -> Any:
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def accumulate_body(cond_type: int = B, t_declared: Any = None) -> onnx.GraphProto:
    """acc = Relu(acc + x) with x from the enclosing graph; the condition passes through.
    ``t_declared``: a value_info for the body's intermediate ``t`` (the loader settles the
    main graph's declarations, not a body's: what the planner sees there is what is declared)."""
    return helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"], name="pass_cond"),
         helper.make_node("Add", ["acc", "x"], ["t"], name="body_add"),
         helper.make_node("Relu", ["t"], ["acc_out"], name="body_relu")],
        "body", [vi("i", I64), vi("cond", cond_type), vi("acc", F, [3, 4])],
        [vi("cond_out", cond_type), vi("acc_out", F, [3, 4])],
        value_info=[] if t_declared is None else [vi("t", F, t_declared)])


def loop_model(cond_type: int = B, t_declared: Any = None) -> onnx.ModelProto:
    node = helper.make_node("Loop", ["n", "c", "acc0"], ["acc"], body=accumulate_body(cond_type, t_declared),
                            name="theloop")
    return mk([node], [vi("n", I64), vi("c", cond_type), vi("acc0", F, [3, 4]), vi("x", F, [3, 4])],
              [vi("acc", F, [3, 4])])


X = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def feeds(n: int, cond: Any = True) -> dict[str, np.ndarray]:
    return {"n": np.array(n, np.int64), "c": np.array(cond), "acc0": np.zeros((3, 4), np.float32), "x": X}


# -- Loop conditions the spec does not allow -----------------------------------------------------
def test_float_condition_loop_is_refused_at_creation_as_onnxruntime_refuses_it():
    model = loop_model(cond_type=F)  # cond 1.0, passed through by the body: it never ended
    started = time.monotonic()
    with pytest.raises(InvalidGraphError, match=r"Loop node 'theloop': input 1 \(cond\) 'c' is tensor\(float\); "
                                                r"the spec \(ONNX Loop-16\) allows tensor\(bool\)") as info:
        epoxy.InferenceSession(model, providers=["cpu"])
    assert info.value.node == "theloop" and time.monotonic() - started < 10
    with pytest.raises(Exception, match="tensor\\(float\\)"):  # the oracle refuses it too
        ort_session(model)


def test_the_same_loop_with_a_bool_condition_runs_like_the_reference():
    model = loop_model()
    (acc,) = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds(3))
    np.testing.assert_allclose(acc, ReferenceEvaluator(model).run(None, feeds(3))[0], rtol=1e-6)
    np.testing.assert_allclose(acc, ort_session(model).run(None, feeds(3))[0], rtol=1e-6)


# -- a bound for a run that would not end --------------------------------------------------------
def test_run_timeout_stops_a_huge_trip_count_and_the_session_stays_usable():
    sess = epoxy.InferenceSession(loop_model(), providers=["cpu"])
    options = epoxy.RunOptions()
    options.add_run_config_entry("epoxy.run_timeout_s", "0.3")
    watchdog = threading.Timer(60, lambda: setattr(options, "terminate", True))  # a broken bound fails, not hangs
    watchdog.start()
    started = time.monotonic()
    try:
        with pytest.raises(RunTerminatedError, match=r"past its time bound epoxy.run_timeout_s=0.3 s") as info:
            sess.run(None, feeds(10**12), options)
    finally:
        watchdog.cancel()
    assert "Loop 'theloop' iteration" in str(info.value)
    assert time.monotonic() - started < 20
    (acc,) = sess.run(None, feeds(4), options)  # same session, same options, a short run
    np.testing.assert_allclose(acc, ReferenceEvaluator(loop_model()).run(None, feeds(4))[0], rtol=1e-6)


def test_session_default_run_timeout_bounds_runs_without_run_options():
    so = epoxy.SessionOptions()
    so.add_session_config_entry("epoxy.run_timeout_s", "0.3")
    sess = epoxy.InferenceSession(loop_model(), so, providers=["cpu"])
    started = time.monotonic()
    with pytest.raises(RunTerminatedError, match=r"set by SessionOptions.run_timeout_s"):
        sess.run(None, feeds(10**12))
    assert time.monotonic() - started < 20
    (acc,) = sess.run(None, feeds(2))
    np.testing.assert_allclose(acc, ReferenceEvaluator(loop_model()).run(None, feeds(2))[0], rtol=1e-6)


# -- declared shapes that contradict what runs ----------------------------------------------------
def add_relu(input_shape: Any, declared: Any) -> onnx.ModelProto:
    """Add -> Relu -> Neg; the intermediates t and u are declared ``declared`` while the real
    shape is [3, 4] (inputs of unknown rank or symbolic dims: inference cannot object)."""
    nodes = [helper.make_node("Add", ["x", "y"], ["t"], name="add"),
             helper.make_node("Relu", ["t"], ["u"], name="relu"),
             helper.make_node("Neg", ["u"], ["z"], name="neg")]
    return mk(nodes, [vi("x", F, input_shape), vi("y", F, input_shape)], [vi("z", F, None)],
              value_info=(vi("t", F, declared), vi("u", F, declared)))


DECLARED = {"one": [1], "1e8": [100_000_000], "4TB": [1_000_000, 1_000_000], "wraps": [2**62, 3],
            "negative": [-3, 4], "other": [3, 5]}


@pytest.mark.parametrize("input_shape", [None, ["N", "M"]], ids=["unknown-rank", "symbolic"])
@pytest.mark.parametrize("declared", list(DECLARED.values()), ids=list(DECLARED))
def test_a_wrong_value_info_does_not_size_buffers_and_the_model_runs_like_the_reference(input_shape, declared):
    model = add_relu(input_shape, declared)
    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((3, 4)).astype(np.float32), "y": rng.standard_normal((3, 4)).astype(np.float32)}
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    assert sess.memory_plan()["planned_peak_bytes"] <= 16 * 2**30  # an int64 product wrapped here before
    want = ReferenceEvaluator(model).run(None, inputs)[0]
    for _ in range(2):  # the second run uses what the first learnt about the planned slots
        (got,) = sess.run(None, inputs)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, ort_session(model).run(None, inputs)[0], rtol=1e-6)


@pytest.mark.parametrize("declared", [[1], [1_000_000, 1_000_000], [2**62, 3]], ids=["one", "4TB", "wraps"])
def test_a_wrong_value_info_inside_a_loop_body_runs_like_onnxruntime(declared):
    # before: run() failed with MemoryError / "cannot reshape array of size 0" from the arena
    model = loop_model(t_declared=declared)
    (acc,) = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds(3))
    np.testing.assert_allclose(acc, ReferenceEvaluator(loop_model()).run(None, feeds(3))[0], rtol=1e-6)
    np.testing.assert_allclose(acc, ort_session(model).run(None, feeds(3))[0], rtol=1e-6)
