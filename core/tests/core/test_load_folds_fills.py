"""What loading folds of the optimizer's ConstantOfShape fills and what it leaves to the
pass (and to the checks); the optimized graph, the applied passes and the checks' warnings
are compared with the passes' own in tests/integration/test_load_time_passes.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from load_time_models import fills_model
from onnx import helper

import epoxy
from epoxy.kit.passes import PASS_MADE
from epoxy.load.constant_fills import fold_constant_fills
from epoxy.load.loader import load_model


def test_what_is_folded_while_loading_and_what_is_left():
    loaded = load_model(fills_model(), fold_fills=1 << 28, lift_constants=True, drop_unread=True)
    assert loaded.folded_fills == 4
    # the folded fills' shapes nothing else reads are gone (out_shape feeds a fill left to the pass)
    assert loaded.dropped_initializers == 4
    assert not {"w_shape", "zeros_shape", "ints_shape", "const_shape"} & set(loaded.model.graph.initializers)
    assert "out_shape" in loaded.model.graph.initializers
    graph = loaded.model.graph
    left = sorted(n.outputs[0].name for n in graph if n.op_type == "ConstantOfShape")
    assert left == ["as_output", "from_concat", "overridable"]
    w = graph.initializers["w"].const_value
    assert w.meta.get(PASS_MADE) and w.numpy().dtype == np.float32 and (w.numpy() == np.float32(0.02)).all()
    zeros, ints = graph.initializers["zeros"].const_value.numpy(), graph.initializers["ints"].const_value.numpy()
    assert zeros.dtype == np.float32 and zeros.shape == (2, 3) and not zeros.any()
    assert ints.dtype == np.int64 and ints.tolist() == [7] * 5
    limited = load_model(fills_model(), fold_fills=27, lift_constants=True)  # w has 108 elements
    assert "w" not in limited.model.graph.initializers and limited.folded_fills == 3
    assert limited.dropped_initializers == 0 and "zeros_shape" in limited.model.graph.initializers


def test_nodes_the_checks_would_report_are_left_to_them():
    """A ConstantOfShape in an opset-8 model (the op is opset 9) stays for the checker to
    report; a Constant or ConstantOfShape spelled in a domain "ai.onnx" the model does not
    import stays for the graph checks, which refuse it as before."""
    old = fills_model()
    old.opset_import[0].version = 8
    loaded = load_model(old, fold_fills=1 << 28, lift_constants=True, check="warn")
    assert loaded.folded_fills == 0
    assert any("No Op registered for ConstantOfShape with domain_version of 8" in w for w in loaded.warnings)
    spelled = fills_model()
    for node in spelled.graph.node:
        if node.op_type in ("ConstantOfShape", "Constant"):
            node.domain = "ai.onnx"
    with pytest.raises(epoxy.InvalidGraphError, match="No opset import for domain 'ai.onnx'"):
        load_model(spelled.SerializeToString(), fold_fills=1 << 28, lift_constants=True)


def test_nothing_is_folded_in_a_model_with_a_gradient_or_in_a_callers_proto():
    proto = fills_model()
    gradient = helper.make_node("Gradient", ["x"], ["dx"], domain="ai.onnx.preview.training", xs=["x"], y="bn")
    with_gradient = onnx.ModelProto()
    with_gradient.CopyFrom(proto)
    with_gradient.graph.node.append(gradient)
    assert fold_constant_fills(with_gradient, 1 << 28, drop_unread=True) == ({}, 0)
    before = proto.SerializeToString()
    unowned = load_model(proto, fold_fills=1 << 28, infer_shapes=False, check="off")
    assert unowned.folded_fills == 0 and proto.SerializeToString() == before


def test_load_time_work_follows_the_optimization_level():
    from epoxy.optimize import LoadTimePasses
    from epoxy.plugins import default_registry

    passes = default_registry().passes()
    basic = LoadTimePasses.of(passes, "basic")
    assert basic == LoadTimePasses("LiftConstantsPass", "LegacyInitializerInputsPass",
                                   ("ConstantFoldingPass", 1 << 28), "DeadNodeRemovalPass")
    assert LoadTimePasses.of(passes, "all") == basic
    assert LoadTimePasses.of(passes, "disable") == LoadTimePasses()
