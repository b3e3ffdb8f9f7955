"""QDQAddPass: ``DQ(a) + DQ(b) [-> Relu] -> Q`` with scalar constant parameters becomes one
``com.epoxy.cpu::QuantizedAdd`` on the codes (its values are checked against the QDQ graph in
ep-cpu's tests); what it does not take is left alone."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.optimize.passes.qdq_add import DOMAIN, FUSED_OPS, QDQAddPass

U8 = TensorProto.UINT8
SHAPE = [1, 4, 5, 5]
PARAMS = {"sa": np.float32(0.05), "za": np.uint8(128), "sb": np.float32(0.02), "zb": np.int8(-3),
          "sy": np.float32(0.07), "zy": np.uint8(100), "sv": np.array([0.1, 0.2, 0.3, 0.4], np.float32)}


def _model(add_op: str = "Add", relu: bool = False, b_scale: str = "sb", extra_reader: bool = False,
           q_scale: str = "sy") -> onnx.ModelProto:
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", b_scale, "zb"], ["db"], axis=1),
             helper.make_node(add_op, ["da", "db"], ["s"], name="residual")]
    last = "s"
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, q_scale, "zy"], ["y"]))
    outputs = [helper.make_tensor_value_info("y", U8, SHAPE)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["s"], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, SHAPE))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", U8, SHAPE),
                                           helper.make_tensor_value_info("b", TensorProto.INT8, SHAPE)], outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in PARAMS.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


def _apply(proto: onnx.ModelProto) -> tuple[ir.Model, int]:
    model = ir.serde.deserialize_model(proto)
    p = QDQAddPass()
    p(model)
    return model, p.count


@pytest.mark.parametrize("add_op", ["Add", "Sum", "Mul"])
@pytest.mark.parametrize("relu", [False, True], ids=["plain", "relu"])
def test_residual_add_becomes_one_op_on_codes(add_op, relu):
    model, count = _apply(_model(add_op, relu))
    assert count == 1
    (node,) = list(model.graph)
    assert (node.domain, node.op_type) == (DOMAIN, FUSED_OPS[add_op])
    assert FUSED_OPS[add_op] == ("QuantizedMul" if add_op == "Mul" else "QuantizedAdd")
    assert [v.name for v in node.inputs] == ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"]
    assert node.attributes["relu"].value == int(relu)
    assert node.outputs[0].name == "y" and node.outputs[0].dtype == ir.DataType.UINT8
    assert model.opset_imports[DOMAIN] == 1
    onnx.checker.check_model(ir.serde.serialize_model(model))


@pytest.mark.parametrize("variant", [{"b_scale": "sv"}, {"extra_reader": True}, {"q_scale": "sv"}],
                         ids=["per-channel-dq", "sum-read-elsewhere", "per-channel-q"])
def test_left_alone(variant):
    model, count = _apply(_model(**variant))
    assert count == 0
    assert "Add" in [n.op_type for n in model.graph]


def test_an_add_of_constant_codes_is_left_to_folding():
    """Both inputs DQ of constants (a QDQLookupPass table chain): no fused op, which plan-time
    folding (standard ops only) would leave to run on every call."""
    proto = _model()
    a_info, b_info = proto.graph.input
    rng = np.random.default_rng(0)
    proto.graph.initializer.extend([
        numpy_helper.from_array(rng.integers(0, 256, [d.dim_value for d in a_info.type.tensor_type.shape.dim])
                                .astype(np.uint8), "a"),
        numpy_helper.from_array(rng.integers(-128, 128, [d.dim_value for d in b_info.type.tensor_type.shape.dim])
                                .astype(np.int8), "b")])
    del proto.graph.input[:]
    model, count = _apply(proto)
    assert count == 0 and "Add" in [n.op_type for n in model.graph]
