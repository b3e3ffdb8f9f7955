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


def test_profiling_records_every_step_and_writes_onnxruntimes_trace_format(make_registry, tmp_path):
    session = InferenceSession(branchy(2), providers=["cpu"], registry=make_registry(),
                               sess_options=SessionOptions(enable_profiling=True))
    x = np.ones((16, 16), np.float32)
    for _ in range(3):
        session.run(None, {"x": x})
    assert session.profile_summary()  # before end_profiling, which stops profiling
    top = session.profile_summary()
    assert {r["op_type"] for r in top} >= {"MatMul", "Neg", "Relu"}
    assert abs(sum(r["share"] for r in top) - 1) < 1e-6
    path = session.end_profiling(str(tmp_path / "trace.json"))
    trace = json.loads(open(path).read())  # onnxruntime writes a JSON list of events
    assert isinstance(trace, list)
    nodes = [e for e in trace if e["cat"] == "Node"]
    runs = [e for e in trace if e["cat"] == "Session" and e["name"] == "model_run"]
    steps = len(session._plan.steps)
    assert len(nodes) == 3 * steps and len(runs) == 3
    assert {e["name"] for e in trace if e["cat"] == "Session"} == {"model_loading_uri", "session_initialization",
                                                                    "model_run"}
    assert all(e["name"].endswith("_kernel_time") and e["args"]["provider"] == "cpu" for e in nodes)
    assert {e["args"]["op_name"] for e in nodes} >= {"MatMul", "Neg", "Relu"}
    assert all(e["ph"] == "X" and e["dur"] >= 0 and isinstance(e["ts"], int) for e in trace)
    assert [e["ts"] for e in trace] == sorted(e["ts"] for e in trace)
    # profiling has ended: the session runs on, unprofiled; a second end_profiling writes nothing
    session.run(None, {"x": x})
    assert session.end_profiling() == ""


def test_end_profiling_without_profiling_returns_empty_name(make_registry):
    session = InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry())
    assert session.end_profiling() == ""  # as onnxruntime
    with pytest.raises(InvalidArgumentError, match="profiling is off"):
        session.profile_summary()


def test_bad_execution_mode():
    with pytest.raises(InvalidArgumentError, match="execution_mode"):
        SessionOptions(execution_mode="fast").validate()


def test_intra_op_threads_limit_blas(make_registry):
    from epoxy.run.threads import blas_threads

    InferenceSession(chain(["Relu"]), providers=["cpu"], registry=make_registry(),
                     sess_options=SessionOptions(intra_op_num_threads=1))
    assert all(info["threads"] == 1 for info in blas_threads())
