"""Parallel executor and profiling give the same answers as the sequential executor."""

from __future__ import annotations

import json

import numpy as np
import pytest
from models import chain
from onnx import TensorProto, helper

from epoxy import InferenceSession, InvalidArgumentError, KernelError, SessionOptions


def branchy(width: int = 6):
    """x -> width independent Neg/Relu/Mul branches -> summed: lots of inter-op parallelism."""
    nodes, outs = [], []
    for b in range(width):
        nodes += [helper.make_node("Neg", ["x"], [f"n{b}"], name=f"neg{b}"),
                  helper.make_node("Relu", [f"n{b}"], [f"r{b}"], name=f"relu{b}"),
                  helper.make_node("MatMul", [f"r{b}", "x"], [f"m{b}"], name=f"mm{b}")]
        outs.append(f"m{b}")
    acc = outs[0]
    for b, name in enumerate(outs[1:]):
        nodes.append(helper.make_node("Add", [acc, name], [f"s{b}"], name=f"sum{b}"))
        acc = f"s{b}"
    nodes.append(helper.make_node("Identity", [acc], ["y"], name="out"))
    graph = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_parallel_matches_sequential(make_registry):
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    seq = InferenceSession(branchy(), providers=["cpu"], registry=make_registry())
    par = InferenceSession(branchy(), providers=["cpu"], registry=make_registry(),
                           sess_options=SessionOptions(execution_mode="parallel", inter_op_num_threads=4))
    (expected,) = seq.run(None, {"x": x})
    for _ in range(20):
        (got,) = par.run(None, {"x": x})
        np.testing.assert_array_equal(got, expected)


def test_parallel_kernel_error_names_node(make_registry):
    bad = chain(["Relu"])
    bad.graph.node[0].op_type = "MatMul"
    bad.graph.node[0].input.append("x")
    session = InferenceSession(bad, providers=["cpu"], registry=make_registry(),
                               sess_options=SessionOptions(execution_mode="parallel"))
    with pytest.raises(KernelError, match="n0_relu"):
        session.run(None, {"x": np.ones((2, 3), np.float32)})


def test_profiling_records_every_step_and_writes_a_chrome_trace(make_registry, tmp_path):
    session = InferenceSession(branchy(2), providers=["cpu"], registry=make_registry(),
                               sess_options=SessionOptions(enable_profiling=True))
    x = np.ones((16, 16), np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    path = session.end_profiling(str(tmp_path / "trace.json"))
    trace = json.loads(open(path).read())["traceEvents"]
    steps = len(session._plan.steps)
    assert len(trace) == 3 * steps
    assert {e["args"]["run"] for e in trace} == {1, 2, 3}
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in trace)
    top = session.profile_summary()
    assert {r["op_type"] for r in top} >= {"MatMul", "Neg", "Relu"}
    assert abs(sum(r["share"] for r in top) - 1) < 1e-6


def test_end_profiling_without_profiling_is_an_error(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry())
    with pytest.raises(InvalidArgumentError, match="profiling is off"):
        session.end_profiling()


def test_bad_execution_mode():
    with pytest.raises(InvalidArgumentError, match="execution_mode"):
        SessionOptions(execution_mode="fast").validate()


def test_intra_op_threads_limit_blas(make_registry):
    from epoxy.threads import blas_threads

    InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry(),
                     sess_options=SessionOptions(intra_op_num_threads=1))
    assert all(info["threads"] == 1 for info in blas_threads())
