"""``--mode auto``'s candidate list: the whole int8 chain is measured beside the target's default
op set where that default is narrower (cpu) and the user named no op types."""

from __future__ import annotations

from epoxy.quantization import auto
from epoxy.quantization.qdq import OPENVINO_OP_TYPES
from epoxy.quantization.schemes import SchemeOptions

WHOLE = "static per-channel, whole int8 chain"


def _labels(providers, **options):
    found = auto.candidates(SchemeOptions(providers=providers, **options), providers, frozenset(),
                            {"static", "dynamic"}, True)
    return {c.label: c for c in found}


def test_cpu_measures_the_whole_chain_too():
    found = _labels(("cpu",))
    assert {"static per-channel", "static per-tensor", WHOLE, "dynamic"} <= set(found)
    assert found[WHOLE].options.op_types == OPENVINO_OP_TYPES and found[WHOLE].options.per_channel
    assert found["static per-channel"].options.op_types is None  # the target's default


def test_no_whole_chain_twin_where_the_default_is_the_chain_or_the_user_chose():
    assert WHOLE not in _labels(("openvino", "cpu"))
    assert WHOLE not in _labels(("cpu",), op_types=("Conv",))


def test_no_static_candidates_without_calibration():
    found = auto.candidates(SchemeOptions(), ("cpu",), frozenset(), {"static", "dynamic"}, False)
    assert [c.label for c in found if c.mode == "static"] == []
