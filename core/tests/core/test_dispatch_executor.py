"""The sequential executor's per-step dispatch (issue #17): arguments read by arity (none, one
inline, several through one ``itemgetter``), outputs stored and freed, the arena's ``out=``
path, and errors/stops naming the step they happened at. Plans are built by hand, so every
arity and output form is exercised against a plain Python evaluation of the same steps. Every
test runs twice: on the interpreted plan and on the plan generated as straight-line code."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from epoxy.errors import KernelError, RunTerminatedError
from epoxy.plan.arena import ArenaLayout
from epoxy.run.executor import ExecutionPlan, SequentialExecutor, Step


@pytest.fixture(autouse=True, params=["interpreted", "generated"])
def executor_form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Interpret every run, or generate the plan as code from the first run on."""
    monkeypatch.setattr(SequentialExecutor, "interpreted_runs", 10**9 if request.param == "interpreted" else 0)
    return str(request.param)


def _step(fn, inputs, outputs, label="s"):  # type: ignore[no-untyped-def]
    return Step(fn=fn, inputs=tuple(inputs), outputs=tuple(outputs), provider="cpu", label=label, op_type="T")


def _plan(steps, n_slots, frees=None, initial=None, arena=None):  # type: ignore[no-untyped-def]
    initial = initial if initial is not None else [None] * n_slots
    return ExecutionPlan(steps=steps, slot_names=[f"v{i}" for i in range(n_slots)], initial=initial,
                         input_slots={"v0": 0}, output_slots={}, arena=arena,
                         frees=frees if frees is not None else [() for _ in steps])


def test_every_arity_and_output_form_matches_a_plain_evaluation() -> None:
    # slots: 0 input, 1 constant, 2..9 computed
    steps = [
        _step(lambda: 7, [], [2]),                                  # no input
        _step(lambda a: a + 1, [0], [3]),                           # one input (inline read)
        _step(lambda a, b: a * b, [3, 1], [4]),                     # two
        _step(lambda a, b, c: a - b - c, [4, 2, 0], [5]),           # three
        _step(lambda a, b: (a, b, a + b), [5, 0], [6, -1, 7]),      # multi-output, one unread
        _step(lambda a: (a, -a), [7], [8, 9]),                      # one input, two outputs
        _step(lambda a, b, c, d: a + b + c + d, [6, 7, 8, 9], [2]),  # four, overwriting a slot
    ]
    ex = SequentialExecutor(_plan(steps, 10, initial=[None, 3] + [None] * 8))
    for x in (0, 5, -2):
        got = ex.run([(0, x)], [2, 3, 4, 5, 6, 7, 8, 9])
        s3 = x + 1
        s4 = s3 * 3
        s5 = s4 - 7 - x
        s7 = s5 + x
        assert got == [s5 + s7 + s7 - s7, s3, s4, s5, s5, s7, s7, -s7]


def test_frees_release_values_and_fetch_reads_after_the_run() -> None:
    seen = []
    steps = [_step(lambda a: a * 2, [0], [1]), _step(lambda a: seen.append(a) or a + 1, [1], [2])]
    ex = SequentialExecutor(_plan(steps, 3, frees=[(), (1,)]))
    assert ex.run([(0, 4)], [1, 2]) == [None, 9]
    assert seen == [8]


def test_a_short_multi_output_result_is_refused() -> None:
    ex = SequentialExecutor(_plan([_step(lambda a: (a,), [0], [1, 2], label="two")], 3))
    with pytest.raises(KernelError, match="'two'.*expected a tuple of 2"):
        ex.run([(0, 1)], [1])


def test_errors_name_the_failing_step_at_any_position() -> None:
    def boom(*_args):  # type: ignore[no-untyped-def]
        raise ValueError("bad")

    for where in range(4):
        steps = [_step(boom if i == where else (lambda a: a), [i], [i + 1], label=f"n{i}") for i in range(4)]
        with pytest.raises(KernelError, match=f"node 'n{where}'"):
            SequentialExecutor(_plan(steps, 5)).run([(0, 1)], [4])


def test_stop_is_checked_before_each_step() -> None:
    stop = threading.Event()
    calls = []

    def second(a):  # type: ignore[no-untyped-def]
        calls.append(a)
        stop.set()
        return a

    steps = [_step(second, [0], [1], "first"), _step(lambda a: a, [1], [2], "after")]
    with pytest.raises(RunTerminatedError, match="'after'"):
        SequentialExecutor(_plan(steps, 3)).run([(0, 1)], [2], stop)
    assert calls == [1]


def _out_kernel(log):  # type: ignore[no-untyped-def]
    def add(a, b, out=None):  # type: ignore[no-untyped-def]
        log.append(out is not None)
        return np.add(a, b, out) if out is not None else np.add(a, b)

    add.supports_out = True  # type: ignore[attr-defined]
    return add


def test_planned_views_are_used_and_dropped_when_the_shape_differs() -> None:
    log: list[bool] = []
    layout = ArenaLayout(buffer_sizes=(64,), views=((1, 0, np.dtype(np.float32), (4,)),))
    steps = [_step(_out_kernel(log), [0, 0], [1]), _step(lambda a: a * 1, [1], [2])]
    ex = SequentialExecutor(_plan(steps, 3, arena=layout))
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(ex.run([(0, x)], [2])[0], 2 * x)
    assert log == [True]
    # another shape: the view is refused (numpy raises), the kernel runs again without it, and
    # the slot is not offered a view any more
    y = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(ex.run([(0, y)], [2])[0], 2 * y)
    np.testing.assert_array_equal(ex.run([(0, x)], [2])[0], 2 * x)
    assert log == [True, True, False, False]


def test_a_kernel_that_ignores_its_view_for_another_shape_is_not_offered_it_again() -> None:
    offered: list[bool] = []

    def grow(a, out=None):  # type: ignore[no-untyped-def]
        offered.append(out is not None)
        return np.concatenate([a, a])  # never the view, and not its shape

    grow.supports_out = True  # type: ignore[attr-defined]
    layout = ArenaLayout(buffer_sizes=(64,), views=((1, 0, np.dtype(np.float32), (2,)),))
    ex = SequentialExecutor(_plan([_step(grow, [0], [1])], 2, arena=layout))
    x = np.ones(2, np.float32)
    for _ in range(3):
        assert ex.run([(0, x)], [1])[0].shape == (4,)
    assert offered == [True, False, False]


def test_the_generated_plan_names_the_failing_step_and_its_line(executor_form: str) -> None:
    def boom(a):  # type: ignore[no-untyped-def]
        raise ValueError("bad")

    steps = [_step(lambda a: (a, a), [0], [1, 2], "split"), _step(lambda a, b: a + b, [1, 2], [3], "add"),
             _step(boom, [3], [4], "boom"), _step(lambda a: a, [4], [5], "tail")]
    ex = SequentialExecutor(_plan(steps, 6, frees=[(), (1, 2), (3,), ()]))
    for _ in range(2):  # the same answer on every run, before and after a failure
        with pytest.raises(KernelError, match="node 'boom'.*ValueError: bad") as info:
            ex.run([(0, 1)], [5])
        assert info.value.node == "boom"
    if executor_form == "generated":
        assert ex._programs, "the plan was generated as code"


def test_a_plan_with_no_steps_runs() -> None:
    ex = SequentialExecutor(_plan([], 1))
    assert ex.run([(0, 5)], [0]) == [5]
    assert ex.run([(0, 6)], [0]) == [6]
