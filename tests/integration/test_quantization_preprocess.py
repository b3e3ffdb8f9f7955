"""Quantization always starts from the model simplified exactly (issue #19): BatchNormalization
folded into the Conv before it, Dropout/Identity removed, weight plumbing folded, so the QDQ
model has no float op between two quantized layers. onnxruntime is the oracle that nothing
changed in what the model computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from epoxy.quantization import quantize_model
from epoxy.quantization.preprocess import preprocess


def _conv_bn_model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b"),
        numpy_helper.from_array((rng.random(8) + 0.5).astype(np.float32), "gamma"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "beta"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "mean"),
        numpy_helper.from_array((rng.random(8) + 0.5).astype(np.float32), "var"),
        numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("Dropout", ["r"], ["d"]),
        helper.make_node("GlobalAveragePool", ["d"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Identity", ["f"], ["i"]),
        helper.make_node("MatMul", ["i", "fc"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_preprocess_folds_batch_norm_and_drops_plumbing_exactly() -> None:
    model = _conv_bn_model()
    simplified, changed = preprocess(model)
    ops = [n.op_type for n in simplified.graph.node]
    assert "BatchNormalization" not in ops and "Dropout" not in ops and "Identity" not in ops, ops
    assert [o.name for o in simplified.graph.output] == ["y"] and [i.name for i in simplified.graph.input] == ["x"]
    assert changed, "the passes say they changed the model"
    assert [n.op_type for n in model.graph.node][1] == "BatchNormalization", "the caller's model is not changed"
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_run(simplified, x), _run(model, x), rtol=1e-5, atol=1e-5)


def test_the_tool_quantizes_the_simplified_model() -> None:
    model = _conv_bn_model()
    rng = np.random.default_rng(1)
    batches = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)} for _ in range(5)]
    quantized, report = quantize_model(model, mode="static", calibration=batches, latency_runs=1)
    ops = [n.op_type for n in quantized.graph.node]
    assert "BatchNormalization" not in ops, ops
    assert any(note.startswith("pre-processed") for note in report.notes), report.notes
    # the Conv reads a DequantizeLinear directly: one QDQ group a runtime fuses into an int8 conv
    producer = {o: n.op_type for n in quantized.graph.node for o in n.output}
    conv = next(n for n in quantized.graph.node if n.op_type == "Conv")
    assert producer.get(conv.input[0]) == "DequantizeLinear" and producer.get(conv.input[1]) == "DequantizeLinear"
