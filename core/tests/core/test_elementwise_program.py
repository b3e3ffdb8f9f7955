"""epoxy.kit.elementwise: the op table against onnx.reference, programs, lowering, groups."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from epoxy.graph.graph_spec import CoreGraph
from epoxy.kit import boundary
from epoxy.kit.elementwise import (
    OPS,
    ProgramBuilder,
    classify,
    elementwise_groups,
    evaluate_numpy,
    lower_group,
    single_op_program,
)
from epoxy.load.loader import load_model

R = np.random.default_rng(0)
# float32-exact values: ONNX stores float attributes as float32
ATTRS = {"alpha": 0.25, "beta": 0.375, "gamma": 1.25, "min": -0.5, "max": 0.75, "approximate": "tanh"}
#: ops whose ONNX node reads Clip-like bounds as inputs, or that are not ONNX ops
NOT_ONNX = {"MulAdd"}
#: onnx.reference computes these with float32 constants (or in float32) for float64 inputs
REFERENCE_IN_FLOAT32 = {"Erf", "Gelu", "HardSwish"}


def _operands(op: str, dtype: str) -> list[np.ndarray]:
    xs = [R.uniform(-2, 2, (3, 4)).astype(dtype) for _ in range(OPS[op].arity)]
    if op in ("Log", "Sqrt", "Pow"):
        xs[0] = np.abs(xs[0]) + np.asarray(0.1, dtype)
    if op == "Where":
        xs[0] = (xs[0] > 0).astype(dtype)
    return xs


def _onnx_node_attrs(op: str) -> dict[str, object]:
    spec = OPS[op]
    return {k: ATTRS[k] for k in spec.attrs if op != "Clip"}


def _reference(op: str, xs: list[np.ndarray]) -> np.ndarray:
    """The op as one ONNX node, run by onnx.reference (bool where ONNX wants bool)."""
    dtype = TensorProto.FLOAT if xs[0].dtype == np.float32 else TensorProto.DOUBLE
    logic = op in ("And", "Or", "Xor", "Not")
    feeds = {f"x{k}": (x != 0) if logic or (op == "Where" and k == 0) else x for k, x in enumerate(xs)}
    names = list(feeds)
    inits = []
    if op == "Clip":
        inits = [helper.make_tensor(n, dtype, [], [ATTRS[k]]) for n, k in (("lo", "min"), ("hi", "max"))]
        names += ["lo", "hi"]
    node = helper.make_node(op, names, ["y"], **_onnx_node_attrs(op))
    inputs = [helper.make_tensor_value_info(n, TensorProto.BOOL if v.dtype == bool else dtype, v.shape)
              for n, v in feeds.items()]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", sorted(set(OPS) - NOT_ONNX))
def test_every_op_matches_onnx_reference_and_keeps_the_dtype(op: str, dtype: str) -> None:
    xs = _operands(op, dtype)
    attrs = {k: ATTRS[k] for k in OPS[op].attrs}
    got = evaluate_numpy(single_op_program(op, len(xs), attrs), xs, [dtype], compute=dtype)[0]
    assert got.dtype == np.dtype(dtype)
    want = _reference(op, xs)
    rtol = 2e-6 if dtype == "float32" else 1e-7 if op in REFERENCE_IN_FLOAT32 else 1e-12
    np.testing.assert_allclose(got, want.astype(dtype), rtol=rtol, atol=rtol, err_msg=op)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_numpy_references_keep_float32_float32_and_float64_float64() -> None:
    for op, spec in OPS.items():
        for dtype in (np.float32, np.float64):
            xs = [np.linspace(-1, 1, 5).astype(dtype)] * spec.arity
            out = spec.numpy(*xs, {k: ATTRS[k] for k in spec.attrs})
            assert np.asarray(out).dtype == dtype, (op, dtype)


def test_builder_folds_variadic_ops_and_checks_arity() -> None:
    b = ProgramBuilder(3)
    mean = b.add("Mean", [("in", 0), ("in", 1), ("in", 2)])
    one = b.add("Max", [("in", 0)])
    prog = b.build([mean, one])
    assert [i.op for i in prog.instrs] == ["Add", "Add", "Div", "Identity"]
    xs = [R.standard_normal(4).astype(np.float32) for _ in range(3)]
    got_mean, got_one = evaluate_numpy(prog, xs, ["float32", "float32"])
    np.testing.assert_allclose(got_mean, (xs[0] + xs[1] + xs[2]) / 3, rtol=1e-6)
    np.testing.assert_array_equal(got_one, xs[0])
    with pytest.raises(ValueError, match="takes 2 inputs"):
        ProgramBuilder(1).add("Add", [("in", 0)])


def test_program_key_is_stable_and_distinguishes_attributes() -> None:
    a = single_op_program("LeakyRelu", 1, {"alpha": 0.1})
    assert a.key == single_op_program("LeakyRelu", 1, {"alpha": 0.1}).key
    assert a.key != single_op_program("LeakyRelu", 1, {"alpha": 0.2}).key
    assert single_op_program("Sigmoid", 1).transcendentals == 1 and a.transcendentals == 0


def test_float32_compute_rounds_where_float64_compute_does_not() -> None:
    x = np.array([1e-8], np.float64)
    prog = single_op_program("Add", 2)
    one = np.ones(1)
    assert evaluate_numpy(prog, [one, x], ["float64"], compute="float32")[0][0] == 1.0
    assert evaluate_numpy(prog, [one, x], ["float64"], compute="float64")[0][0] == 1.0 + 1e-8


def test_classify_contiguous_scalar_and_broadcast() -> None:
    shape = (2, 3)
    t = np.zeros(shape).T.copy().T  # same shape, not C-contiguous
    arrays = [np.zeros(shape), np.zeros(()), np.zeros((1, 1)), np.zeros(3), t]
    assert classify(shape, [(a.shape, a.strides, a.flags.c_contiguous) for a in arrays]) == "cssbb"


# -- lowering and groups on a real GraphSpec ------------------------------------------------------
def _graph(nodes, inputs, outputs, inits=()):  # type: ignore[no-untyped-def]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
                          initializer=list(inits))
    loaded = load_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    return CoreGraph(loaded.model.graph, loaded.model.opset_imports)


def _silu_bias_graph():  # type: ignore[no-untyped-def]
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["m"]),
        helper.make_node("Add", ["m", "bias"], ["a"]),
        helper.make_node("Mul", ["a", "half"], ["h"]),
        helper.make_node("Clip", ["h", "lo", "hi"], ["y"]),
        helper.make_node("Exp", ["y"], ["e"]),  # y is a graph output: e cannot take it inside
    ]
    inits = [helper.make_tensor("half", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("lo", TensorProto.FLOAT, [], [-1.0]),
             helper.make_tensor("hi", TensorProto.FLOAT, [], [2.0])]
    return _graph(nodes, [("x", [2, 3]), ("bias", [3])], ["y", "e"], inits)


def test_groups_have_one_output_and_never_swallow_a_graph_output() -> None:
    g = _silu_bias_graph()
    groups = elementwise_groups(g, lambda n: True)
    assert groups == [(0, 1, 2, 3, 4)]
    assert elementwise_groups(g, lambda n: n.op_type != "Add") == [(3, 4), (0, 1)]
    assert elementwise_groups(g, lambda n: True, taken={4}) == [(0, 1, 2, 3)]
    assert elementwise_groups(g, lambda n: True, min_size=6) == []


def test_same_shape_keeps_nodes_on_broadcast_operands_out() -> None:
    """RMSNorm's tail: 1/sqrt(var + eps) on one value per row stays out of the x * r group."""
    nodes = [helper.make_node("Add", ["var", "eps"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"]),
             helper.make_node("Reciprocal", ["s"], ["r"]), helper.make_node("Mul", ["x", "r"], ["m"]),
             helper.make_node("Mul", ["m", "w"], ["y"])]
    g = _graph(nodes, [("var", [4, 1]), ("x", [4, 8]), ("w", [8])], ["y"],
               [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-6])])
    assert elementwise_groups(g, lambda n: True) == [(0, 1, 2, 3, 4)]
    assert elementwise_groups(g, lambda n: True, same_shape=True) == [(3, 4), (0, 1, 2)]


def test_lowered_group_bakes_scalar_constants_and_computes_the_chain() -> None:
    g = _silu_bias_graph()
    members = (0, 1, 2, 3, 4)
    inputs, outputs = boundary(g, members)
    program, used = lower_group(g, members, inputs, outputs)
    assert [inputs[k] for k in used] == ["x", "bias"]  # half, lo, hi baked in as literals
    assert [i.op for i in program.instrs] == ["Sigmoid", "Mul", "Add", "Mul", "Clip"]
    assert dict(program.instrs[-1].attrs) == {"min": -1.0, "max": 2.0}
    x, bias = R.standard_normal((2, 3)).astype(np.float32), R.standard_normal(3).astype(np.float32)
    got = evaluate_numpy(program, [x, bias], ["float32"])[0]
    want = np.clip((x / (1 + np.exp(-x)) + bias) * 0.5, -1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
