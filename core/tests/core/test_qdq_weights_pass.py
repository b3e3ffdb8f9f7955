"""DequantizeWeightsPass: a DequantizeLinear of constant integer weights read by MatMul/Gemm/Conv
becomes a float32 initializer, equal to what DequantizeLinear computes (onnx.reference as the
oracle); activation Q->DQ pairs, non-constant inputs and other readers are left alone; the
builtin registration folds only when the cpu provider has first pick."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy.optimize.builtin import BuiltinPasses
from epoxy.optimize.passes import DequantizeWeightsPass
from epoxy.optimize.pipeline import PassRegistration, optimize

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)
_vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits, opset=19):  # the reference has DequantizeLinear from 19
    graph = helper.make_graph(nodes, "g", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10 if opset >= 21 else 8)


def _apply(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    m = ir.serde.deserialize_model(proto)
    p = DequantizeWeightsPass()
    p(m)
    return ir.serde.serialize_model(m), p.count


def _ops(proto: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in proto.graph.node]


def _dq_value(proto: onnx.ModelProto, dq_output: str) -> np.ndarray:
    """What the original model's DequantizeLinear computes (the reference evaluator)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(proto)
    exposed.graph.output.append(_vi(dq_output, F, None))
    (value,) = ReferenceEvaluator(exposed).run([dq_output], _feeds(proto))
    return np.asarray(value)


def _feeds(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    shapes = {"x": (2, 3, 8, 8), "xm": (4, 32)}
    return {i.name: RNG.standard_normal(shapes[str(i.name)]).astype(np.float32) for i in proto.graph.input}


def _check_folded(proto: onnx.ModelProto, dq_outputs: list[str], expect_left: int = 0) -> onnx.ModelProto:
    after, count = _apply(proto)
    onnx.checker.check_model(after)
    assert count == len(dq_outputs)
    inits = {i.name: numpy_helper.to_array(i) for i in after.graph.initializer}
    for name in dq_outputs:  # the weight is now a float32 initializer holding exactly the DQ's value
        assert inits[name].dtype == np.float32
        np.testing.assert_array_equal(inits[name], _dq_value(proto, name))
    assert _ops(after).count("DequantizeLinear") == expect_left
    feeds = _feeds(proto)
    for a, b in zip(ReferenceEvaluator(proto).run(None, feeds), ReferenceEvaluator(after).run(None, feeds)):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)
    return after


def _act_qdq(x: str, out: str) -> list[onnx.NodeProto]:
    """An activation Q->DQ pair (uint8, per-tensor): must survive the pass."""
    return [helper.make_node("QuantizeLinear", [x, "s_act", "z_act"], [f"{out}_q"]),
            helper.make_node("DequantizeLinear", [f"{out}_q", "s_act", "z_act"], [out])]


ACT = {"s_act": np.float32(0.05), "z_act": np.uint8(128)}


def test_per_tensor_matmul_weight_folds_and_the_activation_pair_stays() -> None:
    w = RNG.integers(-128, 128, (32, 16)).astype(np.int8)
    nodes = [*_act_qdq("xm", "xd"), helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"]),
             helper.make_node("MatMul", ["xd", "w"], ["y"])]
    proto = _model(nodes, [_vi("xm", F, [4, 32])], [_vi("y", F, [4, 16])],
                   {**ACT, "w_q": w, "w_s": np.float32(0.02), "w_z": np.int8(-3)})
    after = _check_folded(proto, ["w"], expect_left=1)
    assert _ops(after) == ["QuantizeLinear", "DequantizeLinear", "MatMul"]


def test_per_channel_conv_weight_and_int32_bias_fold() -> None:
    w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    b = RNG.integers(-2000, 2000, (4,)).astype(np.int32)
    scales = RNG.uniform(0.001, 0.1, 4).astype(np.float32)
    nodes = [*_act_qdq("x", "xd"),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["b_q", "b_s"], ["b"], axis=0),
             helper.make_node("Conv", ["xd", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    proto = _model(nodes, [_vi("x", F, [2, 3, 8, 8])], [_vi("y", F, [2, 4, 8, 8])],
                   {**ACT, "w_q": w, "w_s": scales, "w_z": np.zeros(4, np.int8), "b_q": b, "b_s": scales * 0.05})
    _check_folded(proto, ["w", "b"], expect_left=1)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, ml_dtypes.int4])
def test_blocked_weight_folds(dtype):
    lo, hi = (-8, 8) if dtype is ml_dtypes.int4 else (np.iinfo(dtype).min, np.iinfo(dtype).max + 1)
    w = RNG.integers(lo, hi, (32, 16)).astype(dtype)
    scales = RNG.uniform(0.01, 0.1, (3, 16)).astype(np.float32)  # blocks of 12 along K = 32: ragged last block
    zps = RNG.integers(lo, hi, (3, 16)).astype(dtype)
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], axis=0, block_size=12),
             helper.make_node("MatMul", ["xm", "w"], ["y"])]
    proto = _model(nodes, [_vi("xm", F, [4, 32])], [_vi("y", F, [4, 16])],
                   {"w_q": w, "w_s": scales, "w_z": zps}, opset=21)
    _check_folded(proto, ["w"])


def test_weight_through_transpose_into_gemm_folds() -> None:
    w = RNG.integers(0, 256, (16, 32)).astype(np.uint8)
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"]),
             helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Gemm", ["xm", "wt"], ["y"])]
    proto = _model(nodes, [_vi("xm", F, [4, 32])], [_vi("y", F, [4, 16])],
                   {"w_q": w, "w_s": np.float32(0.01), "w_z": np.uint8(131)})
    after = _check_folded(proto, ["w"])
    assert _ops(after) == ["Transpose", "Gemm"]  # the constant-folding pass takes the Transpose next


def _not_folded(proto: onnx.ModelProto) -> None:
    after, count = _apply(proto)
    assert count == 0
    assert _ops(after) == _ops(proto)


def test_dq_of_a_graph_input_is_not_folded() -> None:
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
             helper.make_node("MatMul", ["xm", "w"], ["y"])]
    inputs = [_vi("xm", F, [4, 32]), _vi("w_q", TensorProto.INT8, [32, 16])]
    _not_folded(_model(nodes, inputs, [_vi("y", F, [4, 16])], {"w_s": np.float32(0.1)}))


def test_dq_of_an_overridable_initializer_is_not_folded() -> None:
    """An initializer that is also a graph input may be fed at run time: not a constant."""
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
             helper.make_node("MatMul", ["xm", "w"], ["y"])]
    inputs = [_vi("xm", F, [4, 32]), _vi("w_q", TensorProto.INT8, [32, 16])]
    w = RNG.integers(-128, 128, (32, 16)).astype(np.int8)
    _not_folded(_model(nodes, inputs, [_vi("y", F, [4, 16])], {"w_q": w, "w_s": np.float32(0.1)}))


def test_dq_read_by_a_non_weight_op_is_not_folded() -> None:
    """A quantized embedding table read by Gather stays int8 (folding would only cost memory)."""
    table = RNG.integers(-128, 128, (50, 8)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["t_q", "t_s"], ["t"]),
             helper.make_node("Gather", ["t", "ids"], ["y"])]
    inputs = [_vi("ids", TensorProto.INT64, [3])]
    _not_folded(_model(nodes, inputs, [_vi("y", F, [3, 8])], {"t_q": table, "t_s": np.float32(0.1)}))


def test_float16_scale_is_left_to_the_plan_builder() -> None:
    w = RNG.integers(-128, 128, (32, 16)).astype(np.int8)
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
             helper.make_node("MatMul", ["xm", "w"], ["y"])]
    proto = _model(nodes, [_vi("xm", TensorProto.FLOAT16, [4, 32])],
                   [_vi("y", TensorProto.FLOAT16, [4, 16])], {"w_q": w, "w_s": np.float16(0.1)})
    _not_folded(proto)


def _builtin_registrations() -> list[PassRegistration]:
    entries: list[PassRegistration] = []
    BuiltinPasses().epoxy_register_passes(lambda p, **kw: entries.append(PassRegistration(p, **kw)))
    return entries


@pytest.mark.parametrize("providers,folded", [(["cpu"], True), (["openvino", "cpu"], False), (["cuda", "cpu"], False)])
def test_builtin_registration_folds_only_when_cpu_picks_first(providers, folded):
    """A provider with first pick may run the QDQ pattern in int8 (OpenVINO does): it needs the DQ."""
    w = RNG.integers(-128, 128, (32, 16)).astype(np.int8)
    nodes = [*_act_qdq("xm", "xd"), helper.make_node("DequantizeLinear", ["w_q", "w_s"], ["w"]),
             helper.make_node("MatMul", ["xd", "w"], ["y"])]
    proto = _model(nodes, [_vi("xm", F, [4, 32])], [_vi("y", F, [4, 16])],
                   {**ACT, "w_q": w, "w_s": np.float32(0.02)})
    m = ir.serde.deserialize_model(proto)
    changed = optimize(m, _builtin_registrations(), "basic", providers)
    assert ("DequantizeWeightsPass" in changed) is folded
    left = [n.op_type for n in m.graph].count("DequantizeLinear")
    assert left == (1 if folded else 2)  # the activation pair's DQ always stays
