"""test_squeezenet, the backend case most sensitive to convolution rounding, under every
``conv_winograd`` mode of ep-cpu.

light_squeezenet expects a uniform softmax (0.001 for each of 1000 classes) of logits near
1e10, where one float32 ulp is ~1e3: it passes only if all 1000 logits round to the same
float. It passes with direct summation (``off``) and F(2x2, 3x3) (``f23``); with the default
(``auto``) it passes because squeezenet's layers are too small for F(4x4, 3x3) to be picked
(``conv.use_f43``): a layer that took F(4x4, 3x3) would make some logits one ulp larger.
"""

from __future__ import annotations

import pytest

from epoxy_sdk.conformance.backend_suite import load_cases, run_case

SQUEEZENET = next(c for c in load_cases("real") if c.name == "test_squeezenet")


@pytest.mark.parametrize("mode", ["auto", "f23", "off"])
def test_squeezenet_passes_in_every_conv_mode(mode):
    run_case(SQUEEZENET, [("cpu", {"conv_winograd": mode})])
