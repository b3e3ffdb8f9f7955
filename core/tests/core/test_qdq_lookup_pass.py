"""QDQLookupPass and QDQConcatRequantizePass: ``DQ -> f -> Q`` for an elementwise ``f`` of one
tensor becomes ``com.epoxy.cpu::QuantizedLookup(codes, table)`` with the table a constant copy
of the pattern over all 256 codes (folded later by the provider's kernels), and a Concat of
inputs with different parameters joins codes; what they do not take is left alone (values:
ep-cpu's ``test_quantized_lookup.py``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.optimize.passes.qdq_lookup import DOMAIN, OP_TYPE, QDQConcatRequantizePass, QDQLookupPass

U8, S8 = TensorProto.UINT8, TensorProto.INT8
SHAPE = [1, 4, 5, 5]
PARAMS = {"sx": np.float32(0.05), "zx": np.int8(-3), "sy": np.float32(0.02), "zy": np.uint8(128),
          "sv": np.array([0.1, 0.2, 0.3, 0.4], np.float32), "k": np.float32(3.0),
          "kv": np.array([1.0, 2.0, 3.0, 4.0], np.float32).reshape(1, 4, 1, 1),
          "k5": np.ones((1, 1, 1, 1, 1), np.float32), "kw": np.arange(5, dtype=np.float32).reshape(1, 1, 1, 5),
          "g": np.full(4, 1.5, np.float32), "b": np.zeros(4, np.float32), "m": np.zeros(4, np.float32),
          "v": np.ones(4, np.float32),
          "lo": np.float32(0.0), "hi": np.float32(6.0), "cx": np.zeros(SHAPE, np.int8)}


def _model(op: str, inputs: list[str], x_scale: str = "sx", extra_reader: bool = False, codes: str = "x",
           **attrs) -> onnx.ModelProto:
    nodes = [helper.make_node("DequantizeLinear", [codes, x_scale, "zx"], ["dx"], axis=1),
             helper.make_node(op, inputs, ["f"], name="act", **attrs),
             helper.make_node("QuantizeLinear", ["f", "sy", "zy"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", U8, SHAPE)]
    if extra_reader:
        outputs.append(helper.make_tensor_value_info("f", TensorProto.FLOAT, SHAPE))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", S8, SHAPE)], outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in PARAMS.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _apply(proto: onnx.ModelProto, cls=QDQLookupPass) -> tuple[ir.Model, int]:
    model = ir.serde.deserialize_model(proto)
    p = cls()
    p(model)
    return model, p.count


@pytest.mark.parametrize(("op", "inputs", "attrs"), [
    ("Sigmoid", ["dx"], {}), ("LeakyRelu", ["dx"], {"alpha": 0.25}), ("Clip", ["dx", "lo", "hi"], {}),
    ("HardSwish", ["dx"], {}), ("Mul", ["dx", "k"], {}), ("Sub", ["k", "dx"], {}),
], ids=["sigmoid", "leaky-relu", "clip", "hard-swish", "mul-scalar", "scalar-sub"])
def test_elementwise_op_becomes_a_table_lookup(op, inputs, attrs):
    model, count = _apply(_model(op, inputs, **attrs))
    assert count == 1
    lookup = model.graph.outputs[0].producer()
    assert (lookup.domain, lookup.op_type) == (DOMAIN, OP_TYPE) and model.opset_imports[DOMAIN] == 1
    assert lookup.inputs[0].name == "x" and lookup.outputs[0].name == "y"
    # the table: Q(op(DQ(all codes))), the pattern's own op, attributes and parameters
    q = lookup.inputs[1].producer()
    f = q.inputs[0].producer()
    dq = f.inputs[inputs.index("dx")].producer()
    assert (dq.op_type, f.op_type, q.op_type) == ("DequantizeLinear", op, "QuantizeLinear")
    assert [v.name for v in q.inputs[1:]] == ["sy", "zy"] and [v.name for v in dq.inputs[1:]] == ["sx", "zx"]
    assert {k: a.value for k, a in f.attributes.items()} == attrs
    codes = dq.inputs[0].const_value.numpy()
    assert codes.dtype == np.int8 and codes.view(np.uint8).tolist() == list(range(256))
    assert "act" not in [n.name for n in model.graph]
    onnx.checker.check_model(ir.serde.serialize_model(model))


@pytest.mark.parametrize(("op", "inputs", "variant"), [
    ("Sigmoid", ["dx"], {"x_scale": "sv"}),  # per-channel DQ
    ("Sigmoid", ["dx"], {"extra_reader": True}),  # the float value is read elsewhere
    ("Sigmoid", ["dx"], {"codes": "cx"}),  # constant codes: left to constant folding
    ("Mul", ["dx", "kv"], {}),  # a per-channel operand, but the data's channels unknown (no shapes)
    ("Mul", ["dx", "k5"], {}),  # a one-element operand of higher rank would grow the shape
    ("Mul", ["dx", "dx"], {}),  # two tensors
    ("Softmax", ["dx"], {}),  # not elementwise
], ids=["per-channel", "read-elsewhere", "constant-codes", "vector-operand", "rank-growth", "square", "softmax"])
def test_left_alone(op, inputs, variant):
    model, count = _apply(_model(op, inputs, **variant))
    assert count == 0
    assert op in [n.op_type for n in model.graph]


def _concat(scales: list[str], zps: list[str], q_zp: str = "zy") -> onnx.ModelProto:
    nodes, inputs = [], []
    for i, (s, z) in enumerate(zip(scales, zps)):
        dtype = U8 if z in ("zy",) else S8
        nodes.append(helper.make_node("DequantizeLinear", [f"x{i}", s, z], [f"d{i}"]))
        inputs.append(helper.make_tensor_value_info(f"x{i}", dtype, SHAPE))
    nodes += [helper.make_node("Concat", [f"d{i}" for i in range(len(scales))], ["c"], axis=1, name="join"),
              helper.make_node("QuantizeLinear", ["c", "sy", q_zp], ["y"])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", U8, [1, 4 * len(scales), 5, 5])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in PARAMS.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_concat_requantizes_the_inputs_of_other_parameters():
    model, count = _apply(_concat(["sx", "sy"], ["zx", "zy"]), QDQConcatRequantizePass)
    assert count == 1
    join = model.graph.outputs[0].producer()
    assert join.op_type == "Concat" and join.attributes["axis"].value == 1
    first, second = join.inputs
    assert first.producer().op_type == OP_TYPE and first.producer().inputs[0].name == "x0"
    assert second.name == "x1"  # already in the output's parameters
    onnx.checker.check_model(ir.serde.serialize_model(model))


@pytest.mark.parametrize(("scales", "zps"), [(["sy", "sy"], ["zy", "zy"]), (["sv", "sy"], ["zx", "zy"])],
                         ids=["same-params", "per-channel-input"])
def test_concat_left_alone(scales, zps):
    model, count = _apply(_concat(scales, zps), QDQConcatRequantizePass)
    assert count == 0


def _inferred(proto: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(proto)


@pytest.mark.parametrize(("op", "inputs"), [("Mul", ["dx", "kv"]), ("Add", ["kv", "dx"]),
                                            ("BatchNormalization", ["dx", "g", "b", "m", "v"])],
                         ids=["mul", "add", "batchnorm"])
def test_per_channel_constants_take_a_table_per_channel(op, inputs):
    """One value per channel (axis 1, the channel count known from the shapes): the table chain
    runs on every code of every channel, laid out (1, C, 1, 256)."""
    model, count = _apply(_inferred(_model(op, inputs)))
    assert count == 1
    lookup = model.graph.outputs[0].producer()
    assert (lookup.domain, lookup.op_type) == (DOMAIN, OP_TYPE)
    f = lookup.inputs[1].producer().inputs[0].producer()
    assert f.op_type == op
    grid = f.inputs[inputs.index("dx")].producer().inputs[0].const_value.numpy()
    assert grid.shape == (1, 4, 1, 256) and grid.dtype == np.int8
    assert all(row.view(np.uint8).tolist() == list(range(256)) for row in grid.reshape(4, 256))


@pytest.mark.parametrize(("op", "inputs", "attrs"), [
    ("Mul", ["dx", "kw"], {}),  # one value per column, not per channel
    ("BatchNormalization", ["dx", "g", "b", "m", "v"], {"training_mode": 1}),
], ids=["along-width", "training-mode"])
def test_other_constants_stay(op, inputs, attrs):
    proto = _model(op, inputs, **attrs)
    if attrs:  # training mode has three outputs' worth of semantics: keep the model valid as written
        proto.opset_import[0].version = 15
    model, count = _apply(_inferred(proto))
    assert count == 0
    assert op in [n.op_type for n in model.graph]
