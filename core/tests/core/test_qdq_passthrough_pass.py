"""``QDQPassThroughPass`` (optimize/passes/qdq_passthrough.py): ``DQ -> op -> Q`` with one scale and
zero point runs the op on the codes; the outputs equal the QDQ graph's exactly (onnx.reference;
the cpu provider's run: plugins/ep-cpu/tests/ep_cpu/test_qdq_codes_on_cpu.py), and mismatched
parameters and old opsets keep the graph as written."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _pass_run import rewrite
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy.optimize.passes.qdq_passthrough import QDQPassThroughPass

SHAPE = [1, 4, 9, 9]


def _wrapped(op: str, attrs: dict, extra_inputs: dict | None = None, *, second: bool = False, out_scale: float = 0.05,
             out_zp: int = 128, dtype=np.uint8, opset: int = 19, out_shape=None) -> onnx.ModelProto:
    """x -> Q -> DQ -> op (-> Q -> DQ) -> y with scale 0.05 and zero point 128 (10 for int8) on the
    input side; the output Q's parameters as given."""
    zp_in = 128 if dtype == np.uint8 else 10
    out_zp = out_zp if dtype == np.uint8 else (10 if out_zp == 128 else out_zp)
    inits = {"s": np.array(0.05, np.float32), "z": np.array(zp_in, dtype), "so": np.array(out_scale, np.float32),
             "zo": np.array(out_zp, dtype), **(extra_inputs or {})}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    op_inputs = ["xd"] + (["xd2"] if second else []) + list(extra_inputs or {})
    if second:
        nodes += [helper.make_node("QuantizeLinear", ["x2", "s", "z"], ["xq2"]),
                  helper.make_node("DequantizeLinear", ["xq2", "s", "z"], ["xd2"])]
    nodes += [helper.make_node(op, op_inputs, ["o"], **attrs),
              helper.make_node("QuantizeLinear", ["o", "so", "zo"], ["oq"]),
              helper.make_node("DequantizeLinear", ["oq", "so", "zo"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)]
    if second:
        inputs.append(helper.make_tensor_value_info("x2", TensorProto.FLOAT, SHAPE))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
    initializers = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "qdq_move", inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


CASES = {
    "maxpool": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, None, False),
    "reshape": ("Reshape", {}, {"shape": np.array([1, -1], np.int64)}, False),
    "flatten": ("Flatten", {"axis": 1}, None, False),
    "transpose": ("Transpose", {"perm": [0, 2, 3, 1]}, None, False),
    "unsqueeze": ("Unsqueeze", {}, {"axes": np.array([0], np.int64)}, False),
    "concat": ("Concat", {"axis": 1}, None, True),
    "relu": ("Relu", {}, None, False),
}


def _feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {i.name: (rng.standard_normal(SHAPE) * 3).astype(np.float32) for i in model.graph.input}


@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_moves_run_on_codes_exactly(case, dtype):
    op, attrs, extra, second = CASES[case]
    model = _wrapped(op, attrs, extra, second=second, dtype=dtype)
    out, count = rewrite(QDQPassThroughPass(), model)
    assert count == 1
    ops = [n.op_type for n in out.graph.node]
    assert ops.count("QuantizeLinear") == (2 if second else 1) and ops.count("DequantizeLinear") == 1  # the output's DQ
    assert ("Max" if op == "Relu" else op) in ops and "Relu" not in ops
    feeds = _feeds(model)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(out).run(None, feeds)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("why", ["scale", "zero point", "opset"])
def test_other_parameters_or_old_opsets_stay(why):
    op, attrs, extra, second = CASES["maxpool"]
    kwargs = {"scale": {"out_scale": 0.07}, "zero point": {"out_zp": 120}, "opset": {"opset": 11}}[why]
    model = _wrapped(op, attrs, extra, second=second, **kwargs)
    _, count = rewrite(QDQPassThroughPass(), model)
    assert count == 0


def test_a_concat_with_one_input_of_other_parameters_stays():
    model = _wrapped("Concat", {"axis": 1}, None, second=True)
    for init in model.graph.initializer:
        if init.name == "s":  # the second input gets its own scale
            model.graph.initializer.append(numpy_helper.from_array(np.array(0.06, np.float32), "s2"))
            break
    for node in model.graph.node:
        if node.output[0] in ("xq2", "xd2"):
            node.input[1] = "s2"
    _, count = rewrite(QDQPassThroughPass(), model)
    assert count == 0
