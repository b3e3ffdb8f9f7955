"""The optimizer's first passes done on the protobuf while loading (ConstantOfShape fills,
before the checks, an IR < 4 model's initializer inputs, Constant nodes) give the optimized
graph the passes give, the checks say the same of the model, and the session reports the
passes as applied; ConstantOfShape fills are left to the pass wherever its rule would not
fold them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from test_load_lifts_constants import _model as _constants_model

import epoxy
import epoxy.session as session_module
from epoxy.kit.passes import PASS_MADE
from epoxy.load.constant_fills import fold_constant_fills
from epoxy.load.loader import load_model

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
F = TensorProto.FLOAT


def _one(value: float, dtype: type) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array([value], dtype))


def _fills_model(ir_version: int = 8) -> onnx.ModelProto:
    """Fills folded while loading (no value: float zero; an int64 fill; a shape given by a
    Constant node; a weight a Conv+BN fold scales) and fills left to the pass (a shape a feed
    may override, a graph output, a shape made by Concat)."""
    i64 = TensorProto.INT64
    inits = [numpy_helper.from_array(np.array(s, np.int64), n) for n, s in (
        ("w_shape", [4, 3, 3, 3]), ("zeros_shape", [2, 3]), ("ints_shape", [5]), ("out_shape", [2]),
        ("half", [2]))] + [numpy_helper.from_array(np.full(4, v, np.float32), n)
                           for n, v in (("gamma", 1.5), ("beta", 0.1), ("mean", 0.2), ("var", 0.9))]
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=_one(0.02, np.float32)),
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("ConstantOfShape", ["zeros_shape"], ["zeros"]),
        helper.make_node("Add", ["zeros", "feed"], ["plus"]),
        helper.make_node("ConstantOfShape", ["ints_shape"], ["ints"], value=_one(7, np.int64)),
        helper.make_node("Constant", [], ["const_shape"], value=numpy_helper.from_array(np.array([3], np.int64))),
        helper.make_node("ConstantOfShape", ["const_shape"], ["from_constant"]),
        helper.make_node("Mul", ["ints", "ints"], ["ints_squared"]),
        helper.make_node("Neg", ["from_constant"], ["negated"]),
        helper.make_node("ConstantOfShape", ["override_shape"], ["overridable"]),
        helper.make_node("ConstantOfShape", ["out_shape"], ["as_output"]),
        helper.make_node("Concat", ["half", "half"], ["concat_shape"], axis=0),
        helper.make_node("ConstantOfShape", ["concat_shape"], ["from_concat"]),
    ]
    graph = helper.make_graph(
        nodes, "fills", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                         helper.make_tensor_value_info("feed", TensorProto.FLOAT, [2, 3]),
                         helper.make_tensor_value_info("override_shape", i64, [1])],
        [helper.make_tensor_value_info(n, t, None) for n, t in (
            ("bn", F), ("plus", F), ("ints_squared", i64), ("negated", F), ("overridable", F), ("as_output", F),
            ("from_concat", F))],
        initializer=inits + [numpy_helper.from_array(np.array([2], np.int64), "override_shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)


def _optimized(model: Path | bytes, tmp_path: Path, name: str, monkeypatch, on_protobuf: bool
               ) -> tuple[onnx.ModelProto, list[str], list[str]]:
    if not on_protobuf:  # the passes do all the work
        monkeypatch.setattr(session_module.LoadTimePasses, "of", classmethod(lambda cls, passes, level: cls()))
    options = epoxy.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / f"{name}.onnx")
    session = epoxy.InferenceSession(model if isinstance(model, bytes) else str(model), options,
                                     providers=["cpu"])
    monkeypatch.undo()
    warned = [w.replace(str(tmp_path), "") for w in session._load_warnings]
    return onnx.load(options.optimized_model_filepath), session.applied_passes, warned


def _canonical(proto: onnx.ModelProto) -> tuple:
    graph = proto.graph
    nodes = [(n.op_type, n.domain, tuple(n.input), tuple(n.output), n.name,
              tuple(a.SerializeToString(deterministic=True) for a in n.attribute)) for n in graph.node]
    inits = {t.name: (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes()) for t in graph.initializer}
    values = {v.name: v.SerializeToString(deterministic=True) for v in (*graph.value_info, *graph.output)}
    return proto.ir_version, nodes, inits, [i.name for i in graph.input], values


@pytest.mark.parametrize("model", ["fills", "fills_ir3", "fills_ir3_partial", "constants", "constants_ir3",
                                   "shufflenet", "squeezenet", "inception_v1"])
def test_the_optimized_graph_is_the_passes_graph(model, tmp_path, monkeypatch):
    if model.startswith("constants"):  # Constant nodes in the main graph and in an If branch
        proto = _constants_model()
        proto.ir_version = 3 if model == "constants_ir3" else proto.ir_version  # lifted after the checks
        source: Path | bytes = proto.SerializeToString()
    elif model.startswith("fills"):
        proto = _fills_model(ir_version=8 if model == "fills" else 3)
        # IR 3: every initializer is a graph input too; "partial": some are not (the graph
        # checks repair that and say so, the same either way)
        declared = [t for t in proto.graph.initializer if t.name != "override_shape"]
        if model == "fills_ir3_partial":
            declared = declared[::2]
        if model.startswith("fills_ir3"):
            proto.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                     for t in declared)
        source = proto.SerializeToString()
    else:
        source = LIGHT / f"light_{model}.onnx"
    early, early_passes, early_warnings = _optimized(source, tmp_path, "early", monkeypatch, on_protobuf=True)
    late, late_passes, late_warnings = _optimized(source, tmp_path, "late", monkeypatch, on_protobuf=False)
    assert _canonical(early) == _canonical(late)
    assert early_passes == late_passes
    assert early_warnings == late_warnings  # the checks say the same of the model
    folds = {"ConstantFoldingPass", "DeadNodeRemovalPass"}
    assert ({"LiftConstantsPass"} if model.startswith("constants") else folds) <= set(early_passes)


def test_what_is_folded_while_loading_and_what_is_left():
    loaded = load_model(_fills_model(), fold_fills=1 << 28, lift_constants=True, drop_unread=True)
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
    limited = load_model(_fills_model(), fold_fills=27, lift_constants=True)  # w has 108 elements
    assert "w" not in limited.model.graph.initializers and limited.folded_fills == 3
    assert limited.dropped_initializers == 0 and "zeros_shape" in limited.model.graph.initializers


def test_nodes_the_checks_would_report_are_left_to_them():
    """A ConstantOfShape in an opset-8 model (the op is opset 9) stays for the checker to
    report; a Constant or ConstantOfShape spelled in a domain "ai.onnx" the model does not
    import stays for the graph checks, which refuse it as before."""
    old = _fills_model()
    old.opset_import[0].version = 8
    loaded = load_model(old, fold_fills=1 << 28, lift_constants=True, check="warn")
    assert loaded.folded_fills == 0
    assert any("No Op registered for ConstantOfShape with domain_version of 8" in w for w in loaded.warnings)
    spelled = _fills_model()
    for node in spelled.graph.node:
        if node.op_type in ("ConstantOfShape", "Constant"):
            node.domain = "ai.onnx"
    with pytest.raises(epoxy.InvalidGraphError, match="No opset import for domain 'ai.onnx'"):
        load_model(spelled.SerializeToString(), fold_fills=1 << 28, lift_constants=True)


def test_nothing_is_folded_in_a_model_with_a_gradient_or_in_a_callers_proto():
    proto = _fills_model()
    gradient = helper.make_node("Gradient", ["x"], ["dx"], domain="ai.onnx.preview.training", xs=["x"], y="bn")
    with_gradient = onnx.ModelProto()
    with_gradient.CopyFrom(proto)
    with_gradient.graph.node.append(gradient)
    assert fold_constant_fills(with_gradient, 1 << 28, drop_unread=True) == ({}, 0)
    before = proto.SerializeToString()
    unowned = load_model(proto, fold_fills=1 << 28, infer_shapes=False, check="off")
    assert unowned.folded_fills == 0 and proto.SerializeToString() == before


def test_a_folded_fill_runs_as_the_pass_would(tmp_path):
    """The session's outputs with the load-time folds equal onnxruntime's on the fills model."""
    ort = pytest.importorskip("onnxruntime")
    proto = _fills_model()
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 8, 8), np.float32),
             "feed": np.ones((2, 3), np.float32), "override_shape": np.array([4], np.int64)}
    ours = epoxy.InferenceSession(proto.SerializeToString(), providers=["cpu"]).run(None, feeds)
    theirs = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_load_time_work_follows_the_optimization_level():
    from epoxy.optimize import LoadTimePasses
    from epoxy.plugins import default_registry

    passes = default_registry().passes()
    basic = LoadTimePasses.of(passes, "basic")
    assert basic == LoadTimePasses("LiftConstantsPass", "LegacyInitializerInputsPass",
                                   ("ConstantFoldingPass", 1 << 28), "DeadNodeRemovalPass")
    assert LoadTimePasses.of(passes, "all") == basic
    assert LoadTimePasses.of(passes, "disable") == LoadTimePasses()
