"""Partitioning: priority, fallback, convexity, copies across devices, the report."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import fuser_factory, sim_factory
from models import chain, diamond

from epoxy import InferenceSession, SessionOptions, UnsupportedOpError


def test_sim_device_takes_its_ops_and_copies_are_inserted(make_registry):
    registry = make_registry(sim_factory(ops=("Relu", "Neg")))
    session = InferenceSession(chain(["Add", "Relu", "Neg", "Mul"]), providers=["sim", "cpu"], registry=registry)
    placed = {d.node: d.provider for d in session.partition_report().nodes}
    assert placed == {"n0_add": "cpu", "n1_relu": "sim", "n2_neg": "sim", "n3_mul": "cpu"}
    x = np.array([[-5, 0, 1], [2, -3, 4]], np.float32)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, -np.maximum(x + 1, 0) * 4)
    copies = [s.label for s in session._plan.steps if s.provider == "copy"]
    assert copies == ["copy:v0:host->sim:sim:0", "copy:v2:sim:sim:0->host"]
    sim = dict(session._providers)["sim"]
    assert (sim.allocator.copies_in, sim.allocator.copies_out) == (1, 1)


def test_graph_output_on_device_is_copied_back_to_host(make_registry):
    registry = make_registry(sim_factory(ops=("Relu",)))
    session = InferenceSession(chain(["Relu"]), providers=["sim", "cpu"], registry=registry)
    (y,) = session.run(None, {"x": np.array([[-1, 2, 3], [4, -5, 6]], np.float32)})
    assert isinstance(y, np.ndarray)
    np.testing.assert_array_equal(y, [[0, 2, 3], [4, 0, 6]])


def test_constants_are_copied_to_device_once_at_creation(make_registry):
    registry = make_registry(sim_factory(ops=("Add",)))
    session = InferenceSession(chain(["Add"]), providers=["sim", "cpu"], registry=registry)
    sim = dict(session._providers)["sim"]
    copies_after_creation = sim.allocator.copies_in
    assert copies_after_creation == 1  # the constant c0
    for _ in range(3):
        session.run(None, {"x": np.zeros((2, 3), np.float32)})
    assert sim.allocator.copies_in == copies_after_creation + 3  # only x, once per run


def test_report_says_why_higher_priority_declined(make_registry):
    registry = make_registry(sim_factory(ops=("Relu",)))
    session = InferenceSession(chain(["Add", "Relu"]), providers=["sim", "cpu"], registry=registry)
    add = next(d for d in session.partition_report().nodes if d.node == "n0_add")
    assert add.provider == "cpu"
    assert add.declined == [("sim", "sim device has no Add")]
    text = str(session.partition_report())
    assert "sim device has no Add" in text and "1 / 2 nodes" in text


def test_fallback_disabled_unclaimed_node_is_an_error_naming_it(make_registry):
    registry = make_registry(sim_factory(ops=("Relu",)))
    with pytest.raises(UnsupportedOpError, match="n0_add") as info:
        InferenceSession(chain(["Add", "Relu"]), providers=["sim"], registry=registry,
                         sess_options=SessionOptions(disable_fallback=True))
    assert info.value.node == "n0_add" and info.value.op_type == "Add"


def test_fallback_appends_cpu(make_registry):
    registry = make_registry(sim_factory(ops=("Relu",)))
    session = InferenceSession(chain(["Add", "Relu"]), providers=["sim"], registry=registry)
    assert session.get_providers() == ["sim", "cpu"]


def test_convex_group_is_fused(make_registry):
    registry = make_registry(fuser_factory([["n0_add", "n1_relu"]]))
    session = InferenceSession(chain(["Add", "Relu", "Neg"]), providers=["fuser", "cpu"], registry=registry)
    report = session.partition_report()
    assert report.groups == {"fused0": ["n0_add", "n1_relu"]}
    assert [s.op_type for s in session._plan.steps] == ["FusedGroup", "Neg"]
    (y,) = session.run(None, {"x": np.array([[-3, 0, 1], [2, 3, -4]], np.float32)})
    np.testing.assert_array_equal(y, -np.maximum(np.array([[-3, 0, 1], [2, 3, -4]], np.float32) + 1, 0))


def test_non_convex_group_is_rejected_with_reason(make_registry):
    registry = make_registry(fuser_factory([["a", "c"]]))
    session = InferenceSession(diamond(), providers=["fuser", "cpu"], registry=registry)
    decisions = {d.node: d for d in session.partition_report().nodes}
    assert all(d.provider == "cpu" for d in decisions.values())
    assert "not convex" in decisions["a"].declined[0][1]
    (y,) = session.run(None, {"x": np.array([1, -2, 3, -4], np.float32)})
    a = -np.array([1, -2, 3, -4], np.float32)
    np.testing.assert_array_equal(y, a + np.maximum(a, 0))


def test_two_groups_that_would_deadlock_are_not_both_taken(make_registry):
    # a -> b -> c with groups {a, c} (non-convex on its own) rejected; {a, b} accepted
    registry = make_registry(fuser_factory([["a", "b"], ["a", "c"]]))
    session = InferenceSession(diamond(), providers=["fuser", "cpu"], registry=registry)
    assert session.partition_report().groups == {"fused0": ["a", "b"]}
    (y,) = session.run(None, {"x": np.array([1, -2], np.float32).repeat(2)})
    assert y.shape == (4,)
