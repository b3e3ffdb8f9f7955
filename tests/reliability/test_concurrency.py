"""One session, ``run`` from 8 threads x 1000 runs: outputs bit-identical to serial runs.

Each thread cycles through different inputs, so a run that saw another run's values (a
shared slot table, a kernel cache written per call, a feed written in place) would show
up as a mismatch. See docs/THREADING.md for what is thread-safe.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import seeds

import epoxy

THREADS, RUNS, INPUTS = 8, 1000, 16


def _modes() -> list[str]:
    modes = ["sequential"]
    if hasattr(epoxy.SessionOptions(), "execution_mode"):
        modes.append("parallel")
    return modes


def _hammer(session, feeds_list, expected):
    mismatches: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work(tid: int) -> None:
        try:
            start.wait()
            for i in range(RUNS):
                k = (tid * 7 + i) % INPUTS
                outs = session.run(None, feeds_list[k])
                for j, (got, want) in enumerate(zip(outs, expected[k])):
                    if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
                        mismatches.append(f"thread {tid} run {i} input {k} output {j}")
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert not mismatches, f"{len(mismatches)} mismatching outputs, e.g. {mismatches[:5]}"


@pytest.mark.parametrize("mode", _modes())
@pytest.mark.parametrize("seed", ["conv", "mlp"])
def test_threads_match_serial_runs_bit_for_bit(seed, mode):
    options = epoxy.SessionOptions()
    if mode != "sequential":
        options.execution_mode = mode
    session = epoxy.InferenceSession(seeds.SEEDS[seed](), providers=["cpu"], sess_options=options)
    arg = session.get_inputs()[0]
    shape = [4 if not isinstance(d, int) else d for d in arg.shape]
    rng = np.random.default_rng(0)
    feeds_list = [{arg.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(INPUTS)]
    expected = [session.run(None, f) for f in feeds_list]
    assert len({e[0].tobytes() for e in expected}) == INPUTS  # the inputs really differ
    _hammer(session, feeds_list, expected)
    # and the serial results did not drift after all that
    for f, e in zip(feeds_list, expected):
        assert session.run(None, f)[0].tobytes() == e[0].tobytes()


def test_control_flow_session_is_thread_safe():
    session = epoxy.InferenceSession(seeds.loop(), providers=["cpu"])
    rng = np.random.default_rng(1)
    feeds_list = [{"x": rng.standard_normal(3).astype(np.float32)} for _ in range(INPUTS)]
    expected = [session.run(None, f) for f in feeds_list]
    _hammer(session, feeds_list, expected)
