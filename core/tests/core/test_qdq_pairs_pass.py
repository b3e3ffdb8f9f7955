"""QuantizeDequantizePairPass: an activation QuantizeLinear -> DequantizeLinear(s) pair with
constant, equal parameters becomes one ``com.epoxy.cpu::QuantizeDequantizeLinear`` node; pairs
whose codes are read elsewhere, whose parameters differ or are not constant, and forms the fused
op does not take are left alone; the builtin registration fuses only when cpu picks first; a
session's outputs equal the unoptimized run's bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy.optimize.builtin import BuiltinPasses
from epoxy.optimize.passes.qdq_pairs import DOMAIN, OP_TYPE, QuantizeDequantizePairPass
from epoxy.optimize.pipeline import PassRegistration, optimize

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)
_vi = helper.make_tensor_value_info
SHAPE = [1, 4, 6, 6]
PARAMS = {"s": np.float32(0.05), "z": np.uint8(128), "s2": np.float32(0.07), "z2": np.uint8(120),
          "sc": np.array([0.05, 0.1, 0.2, 0.4], np.float32), "zc": np.array([1, 2, 3, 4], np.int8),
          "sc2": np.array([0.05, 0.1, 0.2, 0.5], np.float32)}


def _model(nodes: list[onnx.NodeProto], outputs: list[str], inits: dict[str, np.ndarray] | None = None,
           inputs: list[onnx.ValueInfoProto] | None = None, opset: int = 19) -> onnx.ModelProto:
    inits = PARAMS if inits is None else inits
    outs = [_vi(o, TensorProto.UINT8 if o == "q" else F, SHAPE) for o in outputs]
    graph = helper.make_graph(nodes, "g", inputs or [_vi("x", F, SHAPE)], outs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _q(x: str, out: str, s: str = "s", z: str | None = "z", **attrs: int) -> onnx.NodeProto:
    return helper.make_node("QuantizeLinear", [x, s, *([z] if z else [])], [out], name=f"Q_{out}", **attrs)


def _dq(x: str, out: str, s: str = "s", z: str | None = "z", **attrs: int) -> onnx.NodeProto:
    return helper.make_node("DequantizeLinear", [x, s, *([z] if z else [])], [out], name=f"DQ_{out}", **attrs)


def _relu(x: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Relu", [x], [out])


def _apply(proto: onnx.ModelProto) -> tuple[ir.Model, int]:
    m = ir.serde.deserialize_model(proto)
    p = QuantizeDequantizePairPass()
    p(m)
    return m, p.count


def _ops(m: ir.Model) -> list[str]:
    return [n.op_type for n in m.graph]


def test_folds_a_per_tensor_pair():
    m, count = _apply(_model([_q("x", "q"), _dq("q", "d"), _relu("d", "y")], ["y"]))
    assert count == 1 and _ops(m) == [OP_TYPE, "Relu"]
    fused = next(iter(m.graph))
    assert fused.domain == DOMAIN and m.opset_imports[DOMAIN] == 1
    assert [v.name for v in fused.inputs] == ["x", "s", "z"]
    assert fused.outputs[0].name == "d"  # the value keeps the DQ output's name
    assert fused.outputs[0].dtype == ir.DataType.FLOAT and fused.outputs[0].shape == ir.Shape(SHAPE)
    onnx.checker.check_model(ir.serde.serialize_model(m))


def test_folds_a_per_axis_pair_with_its_axis():
    nodes = [_q("x", "q", "sc", "zc", axis=-3), _dq("q", "d", "sc", "zc", axis=1), _relu("d", "y")]
    m, count = _apply(_model(nodes, ["y"]))
    assert count == 1
    assert next(iter(m.graph)).attributes["axis"].value == 1


def test_one_q_feeding_several_dqs_becomes_one_node():
    nodes = [_q("x", "q"), _dq("q", "d1"), _dq("q", "d2"), _relu("d1", "y1"), _relu("d2", "y2")]
    m, count = _apply(_model(nodes, ["y1", "y2"]))
    assert count == 1 and _ops(m) == [OP_TYPE, "Relu", "Relu"]
    fused = next(iter(m.graph))
    assert {use.node.op_type for use in fused.outputs[0].uses()} == {"Relu"}
    assert len(list(fused.outputs[0].uses())) == 2


def test_missing_zero_points_become_a_uint8_zero():
    m, count = _apply(_model([_q("x", "q", z=None), _dq("q", "d", z=None), _relu("d", "y")], ["y"]))
    assert count == 1
    zp = next(iter(m.graph)).inputs[2]
    assert zp is not None and zp.const_value is not None
    np.testing.assert_array_equal(zp.const_value.numpy(), np.zeros((), np.uint8))
    assert zp.const_value.numpy().dtype == np.uint8


def test_dq_output_that_is_a_graph_output_keeps_its_name():
    m, count = _apply(_model([_q("x", "q"), _dq("q", "y")], ["y"]))
    assert count == 1 and m.graph.outputs[0].name == "y" and m.graph.outputs[0].producer().op_type == OP_TYPE


KEPT = {
    "q-output-is-graph-output": ([_q("x", "q"), _dq("q", "d"), _relu("d", "y")], ["y", "q"]),
    "q-read-by-a-non-dq": ([_q("x", "q"), _dq("q", "d"), helper.make_node("Cast", ["q"], ["c"], to=F),
                            helper.make_node("Add", ["d", "c"], ["y"])], ["y"]),
    "different-scale": ([_q("x", "q"), _dq("q", "d", "s2"), _relu("d", "y")], ["y"]),
    "different-zero-point": ([_q("x", "q"), _dq("q", "d", "s", "z2"), _relu("d", "y")], ["y"]),
    "dq-without-the-zero-point": ([_q("x", "q"), _dq("q", "d", "s", None), _relu("d", "y")], ["y"]),
    "one-dq-differs": ([_q("x", "q"), _dq("q", "d1"), _dq("q", "d2", "s2"),
                        helper.make_node("Add", ["d1", "d2"], ["y"])], ["y"]),
    "different-per-axis-scale": ([_q("x", "q", "sc", "zc"), _dq("q", "d", "sc2", "zc"), _relu("d", "y")], ["y"]),
    "different-axis": ([_q("x", "q", "sc", "zc", axis=1), _dq("q", "d", "sc", "zc", axis=2), _relu("d", "y")], ["y"]),
    "two-dq-graph-outputs": ([_q("x", "q"), _dq("q", "y1"), _dq("q", "y2")], ["y1", "y2"]),
}


@pytest.mark.parametrize("case", sorted(KEPT))
def test_ineligible_pairs_are_kept(case):
    nodes, outputs = KEPT[case]
    m, count = _apply(_model(nodes, outputs))
    assert count == 0 and "QuantizeLinear" in _ops(m) and OP_TYPE not in _ops(m)


def test_non_constant_scale_is_kept():
    inits = {k: v for k, v in PARAMS.items() if k != "s"}
    m, count = _apply(_model([_q("x", "q"), _dq("q", "d"), _relu("d", "y")], ["y"], inits,
                             [_vi("x", F, SHAPE), _vi("s", F, [])]))
    assert count == 0


def test_constant_input_is_left_to_constant_folding():
    inits = {**PARAMS, "w": RNG.standard_normal(SHAPE).astype(np.float32)}
    m, count = _apply(_model([_q("w", "q"), _dq("q", "d"), helper.make_node("Add", ["x", "d"], ["y"])], ["y"], inits))
    assert count == 0


@pytest.mark.parametrize(("zp", "zp_type"), [(np.int32(0), TensorProto.INT32), (None, TensorProto.FLOAT8E4M3FN)])
def test_codes_the_fused_op_does_not_take_are_kept(zp, zp_type):
    inits = dict(PARAMS)
    if zp is not None:
        inits["zw"] = zp
        nodes = [_q("x", "q", "s", "zw"), _dq("q", "d", "s", "zw"), _relu("d", "y")]
    else:
        nodes = [_q("x", "q", z=None, output_dtype=zp_type), _dq("q", "d", z=None), _relu("d", "y")]
    m, count = _apply(_model(nodes, ["y"], inits, opset=21))
    assert count == 0


def test_blocked_quantization_is_kept():
    inits = {**PARAMS, "sb": np.full((1, 2, 6, 6), 0.1, np.float32), "zb": np.zeros((1, 2, 6, 6), np.uint8)}
    nodes = [_q("x", "q", "sb", "zb", axis=1, block_size=2), _dq("q", "d", "sb", "zb", axis=1, block_size=2),
             _relu("d", "y")]
    m, count = _apply(_model(nodes, ["y"], inits, opset=21))
    assert count == 0


def _builtin_registrations() -> list[PassRegistration]:
    entries: list[PassRegistration] = []
    BuiltinPasses().epoxy_register_passes(lambda p, **kw: entries.append(PassRegistration(p, **kw)))
    return entries


@pytest.mark.parametrize(("providers", "fused"), [(["cpu"], True), (["openvino", "cpu"], False)])
def test_builtin_registration_fuses_only_when_cpu_picks_first(providers, fused):
    """OpenVINO runs the pair in int8: it must still see it."""
    m = ir.serde.deserialize_model(_model([_q("x", "q"), _dq("q", "d"), _relu("d", "y")], ["y"]))
    assert "QuantizeDequantizePairPass" not in optimize(m, _builtin_registrations(), "basic", providers)
    m = ir.serde.deserialize_model(_model([_q("x", "q"), _dq("q", "d"), _relu("d", "y")], ["y"]))
    changed = optimize(m, _builtin_registrations(), "extended", providers)
    assert ("QuantizeDequantizePairPass" in changed) is fused
    assert (OP_TYPE in _ops(m)) is fused

