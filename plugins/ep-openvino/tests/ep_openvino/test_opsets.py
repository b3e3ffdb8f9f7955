"""Groups holding nodes the optimizer fused at a newer opset than the model's (Gelu is opset
20) reach OpenVINO as valid ONNX models, and older nodes whose schema changed since
(ReduceMean-13's ``axes`` attribute) are rewritten, not misread."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper
from ov_test_models import make_model

import epoxy
from epoxy.graph.graph_spec import CoreGraph

F = TensorProto.FLOAT


def _gelu_block(rng, opset=13):
    """MatMul -> GELU written out with Erf -> ReduceMean over the last axis (attribute)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["g"], name="gelu"),
        helper.make_node("ReduceMean", ["g"], ["y"], axes=[-1], keepdims=1, name="pool"),
    ]
    inits = {"w": rng.standard_normal((16, 32)).astype(np.float32), "sqrt2": np.float32(math.sqrt(2.0)),
             "one": np.float32(1.0), "half": np.float32(0.5)}
    return make_model(nodes, [("x", F, [4, 16])], [("y", F, [4, 1])], inits, opset=opset)


def test_extended_level_gelu_compiles_on_openvino_from_a_valid_model(rng, ov_all, monkeypatch):
    exported: list[onnx.ModelProto] = []
    to_model = CoreGraph.to_model

    def recording(self, nodes):  # type: ignore[no-untyped-def]
        exported.append(to_model(self, nodes))
        return exported[-1]

    monkeypatch.setattr(CoreGraph, "to_model", recording)
    model = _gelu_block(rng)
    options = epoxy.SessionOptions(graph_optimization_level="extended")
    sess = epoxy.InferenceSession(model, providers=ov_all, sess_options=options)
    report = sess.partition_report()
    assert {d.op_type: d.provider for d in report.nodes} == {"MatMul": "openvino", "Gelu": "openvino",
                                                              "ReduceMean": "openvino"}
    assert len(report.groups) == 1
    assert exported
    for proto in exported:
        onnx.checker.check_model(proto, full_check=True)
        assert {o.domain: o.version for o in proto.opset_import}[""] == 20
    x = rng.standard_normal((4, 16)).astype(np.float32)
    want = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"x": x})[0]
    got = sess.run(None, {"x": x})[0]
    assert got.shape == want.shape == (4, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
