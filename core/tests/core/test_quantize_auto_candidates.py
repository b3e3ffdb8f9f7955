"""``--mode auto``'s candidate list: the other op set is measured beside the target's default
(the weighted layers alone where the default is the whole int8 chain, as on cpu and openvino;
the whole chain where it is the weighted layers) when the user named no op types."""

from __future__ import annotations

from epoxy.quantization import auto
from epoxy.quantization.qdq import CHAIN_OP_TYPES, DEFAULT_OP_TYPES, default_op_types
from epoxy.quantization.schemes import SchemeOptions

WEIGHTED = "static per-channel, weighted layers only"
WHOLE = "static per-channel, whole int8 chain"


def _labels(providers, **options):
    found = auto.candidates(SchemeOptions(providers=providers, **options), providers, frozenset(),
                            {"static", "dynamic"}, True)
    return {c.label: c for c in found}


def test_cpu_defaults_to_the_whole_chain_and_measures_the_weighted_layers_too():
    assert default_op_types(("cpu",)) == CHAIN_OP_TYPES
    found = _labels(("cpu",))
    assert {"static per-channel", "static per-tensor", WEIGHTED, "dynamic"} <= set(found)
    assert WHOLE not in found
    assert found[WEIGHTED].options.op_types == DEFAULT_OP_TYPES and found[WEIGHTED].options.per_channel
    assert found["static per-channel"].options.op_types is None  # the target's default


def test_a_provider_defaulting_to_the_weighted_layers_gets_the_whole_chain_twin():
    found = _labels(("vendor-npu",))
    assert default_op_types(("vendor-npu",)) == DEFAULT_OP_TYPES
    assert found[WHOLE].options.op_types == CHAIN_OP_TYPES and WEIGHTED not in found


def test_no_twin_where_the_user_chose_the_op_types():
    found = _labels(("cpu",), op_types=("Conv",))
    assert WEIGHTED not in found and WHOLE not in found


def test_no_static_candidates_without_calibration():
    found = auto.candidates(SchemeOptions(), ("cpu",), frozenset(), {"static", "dynamic"}, False)
    assert [c.label for c in found if c.mode == "static"] == []
