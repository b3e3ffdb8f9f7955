"""QDQGlobalAveragePoolPass: ``DQ -> GlobalAveragePool -> Q`` with scalar constant parameters
becomes one ``com.epoxy.cpu::QuantizedGlobalAveragePool`` on the codes (values: ep-cpu's
``test_quantized_pool.py``); what it does not take is left alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.optimize.passes.qdq_pool import (
    DOMAIN,
    OP_TYPE,
    WINDOWED_OP_TYPE,
    QDQAveragePoolPass,
    QDQGlobalAveragePoolPass,
)

PARAMS = {"sx": np.float32(0.05), "zx": np.uint8(128), "sy": np.float32(0.02), "zy": np.int8(1),
          "sv": np.array([0.1, 0.2, 0.3, 0.4], np.float32)}


def _model(x_scale: str = "sx", extra_reader: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("DequantizeLinear", ["x", x_scale, "zx"], ["dx"], axis=1),
             helper.make_node("GlobalAveragePool", ["dx"], ["p"], name="gap"),
             helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 4, 1, 1])]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 4, 1, 1]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 5, 5])],
                              outputs, [numpy_helper.from_array(np.asarray(v), k) for k, v in PARAMS.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _apply(proto: onnx.ModelProto) -> tuple[ir.Model, int]:
    model = ir.serde.deserialize_model(proto)
    p = QDQGlobalAveragePoolPass()
    p(model)
    return model, p.count


def test_pool_becomes_one_op_on_codes():
    model, count = _apply(_model())
    assert count == 1
    (node,) = list(model.graph)
    assert (node.domain, node.op_type) == (DOMAIN, OP_TYPE) and model.opset_imports[DOMAIN] == 1
    assert [v.name for v in node.inputs] == ["x", "sx", "zx", "sy", "zy"] and node.outputs[0].name == "y"
    onnx.checker.check_model(ir.serde.serialize_model(model))


@pytest.mark.parametrize("variant", [{"x_scale": "sv"}, {"extra_reader": True}], ids=["per-channel", "read-elsewhere"])
def test_left_alone(variant):
    model, count = _apply(_model(**variant))
    assert count == 0
    assert "GlobalAveragePool" in [n.op_type for n in model.graph]


def _windowed(kernel_shape: list[int]) -> onnx.ModelProto:
    model = _model()
    pool = model.graph.node[1]
    pool.op_type = "AveragePool"
    pool.attribute.extend([helper.make_attribute("kernel_shape", kernel_shape),
                           helper.make_attribute("count_include_pad", 1)])
    return model


def test_windowed_pool_becomes_one_op_with_its_attributes():
    model = ir.serde.deserialize_model(_windowed([3, 3]))
    p = QDQAveragePoolPass()
    p(model)
    assert p.count == 1
    (node,) = list(model.graph)
    assert (node.domain, node.op_type) == (DOMAIN, WINDOWED_OP_TYPE)
    assert [v.name for v in node.inputs] == ["x", "sx", "zx", "sy", "zy"]
    assert list(node.attributes["kernel_shape"].value) == [3, 3] and node.attributes["count_include_pad"].value == 1
    onnx.checker.check_model(ir.serde.serialize_model(model))


def test_windowed_pools_other_than_2d_are_left_alone():
    model = ir.serde.deserialize_model(_windowed([3]))
    p = QDQAveragePoolPass()
    p(model)
    assert p.count == 0 and "AveragePool" in [n.op_type for n in model.graph]
