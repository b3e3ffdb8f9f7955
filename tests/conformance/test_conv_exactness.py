"""The one backend case the default fast convolutions fail passes with exact summation.

``test_squeezenet`` is listed in ``expected_failures.txt`` because ep-cpu's default Winograd
F(4x4, 3x3) rounds differently from direct summation on an ill-conditioned model; this checks
that reason: with ``conv_winograd="f23"`` (or ``"off"``) the case passes, and with the
default it still fails (if it starts passing, the list entry must go).
"""

from __future__ import annotations

import pytest

from epoxy_sdk.conformance.backend_suite import load_cases, run_case

SQUEEZENET = next(c for c in load_cases("real") if c.name == "test_squeezenet")


@pytest.mark.parametrize("mode", ["f23", "off"])
def test_squeezenet_passes_with_exact_convolutions(mode):
    run_case(SQUEEZENET, [("cpu", {"conv_winograd": mode})])


def test_squeezenet_fails_with_default_f43_rounding():
    with pytest.raises(AssertionError):
        run_case(SQUEEZENET, ["cpu"])
