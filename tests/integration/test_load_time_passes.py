"""The optimizer's first passes done on the protobuf while loading (ConstantOfShape fills,
before the checks, an IR < 4 model's initializer inputs, Constant nodes) give the optimized
graph the passes give, the checks say the same of the model, and the session reports the
passes as applied (sessions on ep-cpu; the loader's own rules are tested in
core/tests/core/test_load_folds_fills.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import epoxy
import epoxy.session as session_module

ROOT = Path(__file__).resolve().parents[2]
LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def _core_test_module(name: str):  # type: ignore[no-untyped-def]
    # by path: other test directories have modules of their own on sys.path
    path = ROOT / "core" / "tests" / "core" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"epoxy_core_tests_{name}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


fills_model = _core_test_module("load_time_models").fills_model
reshaped_fills_model = _core_test_module("load_time_models").reshaped_fills_model
constants_model = _core_test_module("test_load_lifts_constants")._model


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


@pytest.mark.parametrize("model", ["fills", "fills_ir3", "fills_ir3_partial", "reshaped_11", "reshaped_17",
                                   "constants", "constants_ir3",
                                   "shufflenet", "squeezenet", "inception_v1", "inception_v2", "densenet121"])
def test_the_optimized_graph_is_the_passes_graph(model, tmp_path, monkeypatch):
    if model.startswith("constants"):  # Constant nodes in the main graph and in an If branch
        proto = constants_model()
        proto.ir_version = 3 if model == "constants_ir3" else proto.ir_version  # lifted after the checks
        source: Path | bytes = proto.SerializeToString()
    elif model.startswith("fills"):
        proto = fills_model(ir_version=8 if model == "fills" else 3)
        # IR 3: every initializer is a graph input too; "partial": some are not (the graph
        # checks repair that and say so, the same either way)
        declared = [t for t in proto.graph.initializer if t.name != "override_shape"]
        if model == "fills_ir3_partial":
            declared = declared[::2]
        if model.startswith("fills_ir3"):
            proto.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                                     for t in declared)
        source = proto.SerializeToString()
    elif model.startswith("reshaped"):  # Unsqueeze & co. of fills: axes attributes at 11, inputs at 17
        source = reshaped_fills_model(int(model.split("_")[1])).SerializeToString()
    else:
        source = LIGHT / f"light_{model}.onnx"
    early, early_passes, early_warnings = _optimized(source, tmp_path, "early", monkeypatch, on_protobuf=True)
    late, late_passes, late_warnings = _optimized(source, tmp_path, "late", monkeypatch, on_protobuf=False)
    assert _canonical(early) == _canonical(late)
    assert early_passes == late_passes
    assert early_warnings == late_warnings  # the checks say the same of the model
    folds = {"ConstantFoldingPass", "DeadNodeRemovalPass"}
    assert ({"LiftConstantsPass"} if model.startswith("constants") else folds) <= set(early_passes)


@pytest.mark.parametrize("model", ["fills", "reshaped_11", "reshaped_17"])
def test_a_folded_fill_runs_as_the_pass_would(model):
    """The session's outputs with the load-time folds equal onnxruntime's on the fills models."""
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(0)
    if model == "fills":
        proto = fills_model()
        feeds = {"x": rng.standard_normal((1, 3, 8, 8), np.float32),
                 "feed": np.ones((2, 3), np.float32), "override_shape": np.array([4], np.int64)}
    else:
        opset = int(model.split("_")[1])
        proto = reshaped_fills_model(opset, bad_axes=False)  # which onnxruntime refuses to load
        feeds = {"x": rng.standard_normal((1, 4, 2, 2), np.float32), "feed": rng.standard_normal((3, 2), np.float32)}
        if opset >= 13:
            feeds["axes_feed"] = np.array([1], np.int64)  # overrides the initializer
    ours = epoxy.InferenceSession(proto.SerializeToString(), providers=["cpu"]).run(None, feeds)
    theirs = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
