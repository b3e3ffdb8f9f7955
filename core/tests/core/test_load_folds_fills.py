"""What loading folds of the optimizer's ConstantOfShape fills and what it leaves to the
pass (and to the checks); the optimized graph, the applied passes and the checks' warnings
are compared with the passes' own in tests/integration/test_load_time_passes.py."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from load_time_models import fills_model, reshaped_fills_model
from onnx import helper

import epoxy
from epoxy.kit.passes import PASS_MADE
from epoxy.load.constant_fills import FoldedFills, fold_constant_fills
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


@pytest.mark.parametrize("opset", [11, 17])
def test_a_reshaped_fill_is_a_fill(opset):
    """The pass's reshaping folds of a fill are folded with it (axes as an attribute before
    opset 13, as an initializer from 13); a reshape whose axes a feed may override and one
    whose axes the rule refuses stay, and so does a fill one of them still reads; a fill an
    Identity reads is left to the passes; the shapes and axes nothing reads any more go."""
    loaded = load_model(reshaped_fills_model(opset), fold_fills=1 << 28, lift_constants=True, drop_unread=True)
    graph = loaded.model.graph
    left = [n.op_type + ":" + n.outputs[0].name for n in graph]
    assert left == ["Mul:scaled", "Add:plus"] + (["Unsqueeze:by_feed"] if opset >= 13 else []) + [
        "Neg:negated", "ConstantOfShape:row", "Identity:row_out", "Unsqueeze:bad_axes"]
    # 2 ConstantOfShape, Unsqueeze, Squeeze, Reshape, Transpose (+ by_feed's Unsqueeze before 13)
    assert loaded.folded_fills == (6 if opset >= 13 else 7)
    fills = {name: graph.initializers[name].const_value for name in ("scale_chw", "grid_t")}
    assert fills["scale_chw"].numpy().shape == (4, 1, 1) and (fills["scale_chw"].numpy() == np.float32(0.5)).all()
    assert fills["grid_t"].numpy().shape == (3, 2) and (fills["grid_t"].numpy() == np.float32(2)).all()
    assert all(tensor.meta.get(PASS_MADE) for tensor in fills.values())
    gone = {"plane", "squeezed", "grid", "scale_shape", "plane_shape", "to_2x3"}
    gone |= {"axes_12", "axes_02"} if opset >= 13 else {"scale"}  # before 13 the axes were never read
    assert not gone & set(graph.initializers)
    assert ("scale" in graph.initializers) == (opset >= 13)  # by_feed still reads it


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
    assert fold_constant_fills(with_gradient, 1 << 28, drop_unread=True) == FoldedFills()
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
