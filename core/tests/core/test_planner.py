"""Memory planner: buffers are reused once their last reader ran."""

from __future__ import annotations

from models import chain

from epoxy import InferenceSession
from epoxy.plan.planner import PlannedValue, plan_memory


def test_chain_reuses_two_buffers():
    # v0 lives [0,1], v1 [1,2], v2 [2,3], v3 [3,4]: ping-pong between two buffers
    values = [PlannedValue(i, "host", 100, i, i + 1) for i in range(4)]
    plan = plan_memory(values)
    host = plan.devices["host"]
    assert len(host.buffer_sizes) == 2
    assert plan.planned_peak_bytes == 200
    assert host.live_peak_bytes == 200


def test_best_fit_and_dynamic_values():
    values = [
        PlannedValue(0, "host", 400, 0, 1),
        PlannedValue(1, "host", 100, 0, 3),
        PlannedValue(2, "host", 300, 2, 3),  # reuses the 400-byte buffer freed at step 1
        PlannedValue(3, "host", None, 0, 3),
        PlannedValue(4, "dev", 50, 0, 1),
    ]
    plan = plan_memory(values)
    assert plan.devices["host"].buffer_sizes == [400, 100]
    assert plan.devices["host"].dynamic_values == 1
    assert plan.devices["dev"].planned_peak_bytes == 50
    assert plan.planned_peak_bytes == 550


def test_session_reports_planned_peak(make_registry):
    session = InferenceSession(chain(["Relu", "Neg", "Relu", "Neg"], shape=(10, 10)), providers=["cpu"],
                               registry=make_registry())
    # 400-byte tensors; a chain never needs more than two (input/output of the running step)
    assert session.planned_peak_bytes == 800
    summary = session.memory_plan()
    assert summary["devices"]["host"]["buffers"] == 2
