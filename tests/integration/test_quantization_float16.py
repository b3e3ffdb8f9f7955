"""epoxy.quantization.float16 on ep-cpu and onnxruntime: converted models load and run on both,
within float16 / bfloat16 tolerance of the float32 model and of each other.

onnxruntime 1.32's CPU provider has almost no bfloat16 kernels: it refuses the bfloat16 models
here at session creation (NOT_IMPLEMENTED: no Relu, Mul, BatchNormalization in bfloat16);
``test_bfloat16_on_onnxruntime`` records that, and passes if a later version runs them.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.errors import InvalidGraphError
from epoxy.quantization.float16 import (
    DEFAULT_OP_BLOCK_LIST,
    FloatConversionWarning,
    _check,
    convert_float,
    convert_float_report,
)

ort = pytest.importorskip("onnxruntime")

F, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
RNG = np.random.default_rng(0)


def init(name: str, *shape: int, scale: float = 0.5) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    out = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    out.ir_version = 8
    onnx.checker.check_model(out, full_check=True)
    return out


def mlp() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="add1"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["z"], name="mm2"),
        helper.make_node("Add", ["z", "b2"], ["zb"], name="add2"),
        helper.make_node("Softmax", ["zb"], ["y"], name="softmax", axis=-1),
    ]
    m = model(nodes, [helper.make_tensor_value_info("x", F, [4, 8])], [helper.make_tensor_value_info("y", F, [4, 5])],
              [init("w1", 8, 16), init("b1", 16), init("w2", 16, 5), init("b2", 5)])
    return m, {"x": RNG.standard_normal((4, 8)).astype(np.float32)}


def cnn() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "mean", "var"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], name="gemm", transB=1),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax"),
    ]
    var = numpy_helper.from_array(RNG.uniform(0.5, 1.5, 4).astype(np.float32), "var")
    m = model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 8, 8])],
              [helper.make_tensor_value_info("y", F, [2, 10])],
              [init("cw", 4, 3, 3, 3), init("cb", 4), init("s", 4), init("bb", 4), init("mean", 4), var,
               init("gw", 10, 64, scale=0.2), init("gb", 10)])
    return m, {"x": RNG.standard_normal((2, 3, 8, 8)).astype(np.float32)}


def with_if() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """y = if cond: tanh(x * k) else x + k, reading x and k from the outer scope."""
    then = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["m"], name="then_mul"),
                              helper.make_node("Tanh", ["m"], ["t"], name="then_tanh")], "then", [],
                             [helper.make_tensor_value_info("t", F, [3, 4])])
    other = helper.make_graph([helper.make_node("Add", ["x", "k"], ["e"], name="else_add")], "else", [],
                              [helper.make_tensor_value_info("e", F, [3, 4])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other)]
    m = model(nodes, [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                      helper.make_tensor_value_info("x", F, [3, 4])],
              [helper.make_tensor_value_info("y", F, [3, 4])], [init("k", 3, 4)])
    return m, {"cond": np.array(True), "x": RNG.standard_normal((3, 4)).astype(np.float32)}


def with_loop() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """v = x; repeat 3 times: v = v * 0.5 + c; a Loop carrying a float value."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["v_in", "half"], ["vh"], name="body_mul"),
         helper.make_node("Add", ["vh", "c"], ["v_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, [2, 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", F, [2, 3])])
    nodes = [helper.make_node("Constant", [], ["half"], name="half", value_float=0.5),
             helper.make_node("Loop", ["trips", "", "x"], ["y"], name="loop", body=body)]
    m = model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 3])],
              [numpy_helper.from_array(np.array(3, np.int64), "trips"), init("c", 2, 3)])
    return m, {"x": RNG.standard_normal((2, 3)).astype(np.float32)}


MODELS = {"mlp": mlp, "cnn": cnn, "if": with_if, "loop": with_loop}


def run_ort(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def run_epoxy(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return epoxy.InferenceSession(m.SerializeToString(), providers=["cpu"]).run(None, feeds)


def io_feeds(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` in the converted model's input types (float16 inputs when keep_io_types=False)."""
    kinds = {i.name: i.type.tensor_type.elem_type for i in m.graph.input}
    return {k: v.astype(np.float16) if kinds[k] == F16 else v for k, v in feeds.items()}


def value_types(m: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(m)
    types = {i.name: i.data_type for i in inferred.graph.initializer}
    for info in (*inferred.graph.input, *inferred.graph.output, *inferred.graph.value_info):
        types[info.name] = info.type.tensor_type.elem_type
    return types


def node(m: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in m.graph.node if n.name == name)


def assert_no_back_to_back_casts(m: onnx.ModelProto) -> None:
    cast_outputs = {n.output[0] for n in m.graph.node if n.op_type == "Cast"}
    assert not [n.name for n in m.graph.node if n.op_type == "Cast" and n.input[0] in cast_outputs]


@pytest.mark.parametrize("keep_io_types", [True, False])
@pytest.mark.parametrize("which", sorted(MODELS))
def test_float16_runs_on_epoxy_and_onnxruntime(which: str, keep_io_types: bool) -> None:
    m, feeds = MODELS[which]()
    want = run_ort(m, feeds)
    half = convert_float(m, keep_io_types=keep_io_types)
    io = F if keep_io_types else F16
    assert [i.type.tensor_type.elem_type for i in half.graph.input if i.name != "cond"] == [io]
    assert [o.type.tensor_type.elem_type for o in half.graph.output] == [io]
    assert all(i.data_type != F for i in half.graph.initializer)  # every weight converted
    assert_no_back_to_back_casts(half)
    fed = io_feeds(half, feeds)
    got_epoxy, got_ort = run_epoxy(half, fed), run_ort(half, fed)
    for w, e, o in zip(want, got_epoxy, got_ort):
        assert e.dtype == o.dtype == (np.float32 if keep_io_types else np.float16)
        np.testing.assert_allclose(e.astype(np.float32), w, rtol=1e-2, atol=2e-3)
        np.testing.assert_allclose(o.astype(np.float32), w, rtol=1e-2, atol=2e-3)
        np.testing.assert_allclose(e.astype(np.float32), o.astype(np.float32), rtol=5e-3, atol=1e-3)


def test_if_branches_and_loop_body_are_converted() -> None:
    half = convert_float(with_if()[0])
    branches = [a.g for a in node(half, "if").attribute]
    assert all(out.type.tensor_type.elem_type == F16 for g in branches for out in g.output)
    loop = convert_float(with_loop()[0])
    body = node(loop, "loop").attribute[0].g
    assert body.input[2].type.tensor_type.elem_type == F16
    assert node(loop, "half").attribute[0].t.data_type == F16  # value_float became a float16 tensor


@pytest.mark.parametrize("blocks", [{"op_block_list": ["Relu"]}, {"node_block_list": ["relu"]}])
def test_block_lists_keep_the_node_in_float32(blocks: dict[str, list[str]]) -> None:
    m, feeds = cnn()
    half, report = convert_float_report(m, **blocks)  # type: ignore[arg-type]
    types = value_types(half)
    relu, pool = node(half, "relu"), node(half, "pool")
    assert types[relu.input[0]] == F and types[relu.output[0]] == F
    assert types[pool.input[0]] == F16  # a cast back to float16 after the blocked node
    assert types[node(half, "bn").output[0]] == F16
    assert ("relu", "op_block_list" if "op_block_list" in blocks else "node_block_list") in report.kept_float32
    assert_no_back_to_back_casts(half)
    np.testing.assert_allclose(run_epoxy(half, feeds)[0], run_ort(m, feeds)[0], rtol=1e-2, atol=2e-3)


def test_default_block_list_keeps_overflowing_reductions_in_float32() -> None:
    nodes = [helper.make_node("Mul", ["x", "k"], ["m"], name="mul"),
             helper.make_node("ReduceSumSquare", ["m"], ["y"], name="sumsq", keepdims=0)]
    m = model(nodes, [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [])],
              [numpy_helper.from_array(np.full(4, 2.0, np.float32), "k")])
    feeds = {"x": np.full(4, 150.0, np.float32)}  # 300**2 * 4 = 360000 > 65504
    half = convert_float(m)
    assert "ReduceSumSquare" in DEFAULT_OP_BLOCK_LIST
    assert value_types(half)[node(half, "sumsq").input[0]] == F
    for run in (run_epoxy, run_ort):
        np.testing.assert_allclose(run(half, feeds)[0], 360000.0, rtol=1e-3)
    # without the block list the float16 sum overflows on epoxy; onnxruntime has no float16
    # ReduceSumSquare kernel on CPU, so it upcasts the node to float32 itself and gets it right
    unsafe = convert_float(m, op_block_list=())
    assert value_types(unsafe)[node(unsafe, "sumsq").input[0]] == F16
    assert np.isinf(run_epoxy(unsafe, feeds)[0])


def test_values_past_float16_range_are_clipped_with_a_warning() -> None:
    big = np.array([1.0, 1e5, -7e4, 3e-9], np.float32)
    m = model([helper.make_node("Add", ["x", "big"], ["y"], name="add")],
              [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [4])],
              [numpy_helper.from_array(big, "big")])
    with pytest.warns(FloatConversionWarning, match=r"clipped in 'big' \(2\)"), \
            pytest.warns(FloatConversionWarning, match=r"set to 0 in 'big' \(1\)"):
        half = convert_float(m)
    values = numpy_helper.to_array(half.graph.initializer[0])
    np.testing.assert_array_equal(values, np.array([1.0, 65504, -65504, 0], np.float16))
    _, report = convert_float_report(m, min_positive=1e-4)
    assert report.clipped == {"big": 2} and report.flushed == {"big": 1}
    got = run_epoxy(half, {"x": np.zeros(4, np.float32)})[0]
    assert np.isfinite(got).all()


@pytest.mark.parametrize("which", ["mlp", "cnn", "loop"])
def test_bfloat16_runs_on_epoxy(which: str) -> None:
    m, feeds = MODELS[which]()
    want = run_ort(m, feeds)
    low, report = convert_float_report(m, dtype="bfloat16")
    assert any(i.data_type == BF16 for i in low.graph.initializer)
    if which == "cnn":  # Conv and MaxPool have no bfloat16 schema at opset 17: kept automatically
        kept = dict(report.kept_float32)
        assert kept["conv"].startswith("no bfloat16 schema") and kept["pool"].startswith("no bfloat16 schema")
        assert value_types(low)[node(low, "conv").input[1]] == F
    assert_no_back_to_back_casts(low)
    np.testing.assert_allclose(run_epoxy(low, feeds)[0], want[0], rtol=4e-2, atol=2e-2)


def test_bfloat16_on_onnxruntime() -> None:
    m, feeds = mlp()
    low = convert_float(m, dtype="bfloat16")
    try:
        got = run_ort(low, feeds)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented as exc:  # 1.32: no bfloat16 Relu on CPU
        assert "Could not find an implementation" in str(exc)
        return
    np.testing.assert_allclose(got[0], run_ort(m, feeds)[0], rtol=4e-2, atol=2e-2)


def test_a_cast_feeding_a_blocked_node_is_not_cast_twice() -> None:
    """Cast(int64 -> float) converted to float16, read by a float32 Relu: the Relu gets
    Cast(int64 -> float32) of the original input, not float16 then float32."""
    nodes = [helper.make_node("Cast", ["a"], ["f"], name="cast", to=F),
             helper.make_node("Relu", ["f"], ["r"], name="relu"),
             helper.make_node("Add", ["f", "r"], ["y"], name="add")]
    m = model(nodes, [helper.make_tensor_value_info("a", TensorProto.INT64, [3])],
              [helper.make_tensor_value_info("y", F, [3])])
    half = convert_float(m, op_block_list=["Relu"])
    assert node(half, "cast").attribute[0].i == F16
    assert_no_back_to_back_casts(half)
    assert value_types(half)[node(half, "relu").input[0]] == F
    got = run_epoxy(half, {"a": np.array([-2, 0, 70000], np.int64)})[0]
    np.testing.assert_array_equal(got, [-2, 0, np.inf])  # 70000 is past float16 already at the Cast


@pytest.mark.parametrize("keep_io_types", [True, False])
def test_an_output_of_a_blocked_node_read_by_others_keeps_its_name(keep_io_types: bool) -> None:
    """y comes from a float32 Softmax and is also read by a float16 Neg: y keeps its name and
    type, and one cast serves both the output and Neg."""
    m, feeds = mlp()
    m.graph.node.append(helper.make_node("Neg", ["y"], ["y2"], name="neg"))
    m.graph.output.append(helper.make_tensor_value_info("y2", F, [4, 5]))
    half = convert_float(m, keep_io_types=keep_io_types, op_block_list=["Softmax"])
    assert [o.name for o in half.graph.output] == ["y", "y2"]
    softmax_out = node(half, "softmax").output[0]
    assert len([n for n in half.graph.node if n.op_type == "Cast" and n.input[0] == softmax_out]) == 1
    fed = io_feeds(half, feeds)
    want = run_ort(m, feeds)
    for run in (run_epoxy, run_ort):
        for got, w in zip(run(half, fed), want):
            np.testing.assert_allclose(got.astype(np.float32), w, rtol=1e-2, atol=2e-3)


def test_a_model_without_float_is_returned_unchanged() -> None:
    m = model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
              [helper.make_tensor_value_info("a", TensorProto.INT64, [3])],
              [helper.make_tensor_value_info("y", TensorProto.INT64, [3])],
              [numpy_helper.from_array(np.arange(3, dtype=np.int64), "b")])
    with pytest.warns(FloatConversionWarning, match="no float32 tensors"):
        out = convert_float(m)
    assert out.SerializeToString() == m.SerializeToString()


def test_an_invalid_result_names_the_node() -> None:
    m, _ = mlp()
    m.graph.initializer[1].CopyFrom(numpy_helper.from_array(np.zeros(16, np.float16), "b1"))
    with pytest.raises(InvalidGraphError) as info:
        _check(m, "float16")
    assert info.value.node == "add1" and "add1" in str(info.value)


def test_bad_dtype_is_refused() -> None:
    with pytest.raises(epoxy.errors.InvalidArgumentError, match="float8"):
        convert_float(mlp()[0], dtype="float8")
