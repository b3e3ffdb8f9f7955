"""epoxy.kit.float_errors: runs neither warn nor raise on IEEE results, whatever numpy error
state the caller set, and leave the caller's state as it was (also after a failing run and
in concurrent threads)."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy
from epoxy.kit import float_errors
from epoxy.kit.float_errors import quiet_floats


def _multiply_model() -> bytes:
    graph = helper.make_graph([helper.make_node("Mul", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("state", ["raise", "warn", "ignore"])
def test_a_run_ignores_float_errors_and_restores_the_callers_state(state: str, make_registry) -> None:  # type: ignore[no-untyped-def]
    session = epoxy.InferenceSession(_multiply_model(), providers=["cpu"], registry=make_registry())
    # inf * 0: invalid; 1e38 * 1e38: overflow (numpy raises or warns on both outside the run)
    feeds = {"a": np.array([np.inf, 1e38, -2.0], np.float32), "b": np.array([0.0, 1e38, 3.0], np.float32)}
    with np.errstate(all=state), warnings.catch_warnings():
        warnings.simplefilter("error")
        before = np.geterr()
        got = session.run(None, feeds)[0]
        assert np.geterr() == before
    np.testing.assert_array_equal(got, [np.nan, np.inf, -6.0])


def test_the_state_follows_the_callers_current_one() -> None:
    for state in ("raise", "ignore", "raise"):  # the made state is remade when the caller's changes
        with np.errstate(all=state):
            with quiet_floats():
                assert set(np.geterr().values()) == {"ignore"}
                assert np.isnan(np.float32(0) / np.float32(0))
            assert set(np.geterr().values()) == {state}


def test_restored_after_an_exception() -> None:
    with np.errstate(all="raise"):
        with pytest.raises(KeyError), quiet_floats():
            raise KeyError("x")
        assert set(np.geterr().values()) == {"raise"}


def test_threads_keep_their_own_state() -> None:
    seen: dict[str, set[str]] = {}
    barrier = threading.Barrier(2)

    def worker(name: str, state: str) -> None:
        with np.errstate(all=state):
            barrier.wait()
            for _ in range(200):
                with quiet_floats():
                    assert set(np.geterr().values()) == {"ignore"}
            seen[name] = set(np.geterr().values())

    threads = [threading.Thread(target=worker, args=(n, s)) for n, s in (("a", "raise"), ("b", "warn"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": {"raise"}, "b": {"warn"}}


def test_the_public_errstate_where_numpy_internals_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(float_errors, "_INTERNALS", None)
    context = quiet_floats()
    assert isinstance(context, np.errstate)
    with np.errstate(all="raise"), context:
        assert set(np.geterr().values()) == {"ignore"}
