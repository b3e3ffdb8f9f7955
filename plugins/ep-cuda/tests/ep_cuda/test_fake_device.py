"""Kernel numerics on the simulated device (same kernel code as the GPU, numpy arrays),
checked against ep-cpu. The generated CUDA sources themselves are compiled in test_nvrtc."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cuda_helpers import assert_close, model, placement, run_both
from onnx import TensorProto, helper

R = np.random.default_rng(1)


def f32(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def _check(nodes, feeds, outs, inits=None, opset=17, options=None, rtol=1e-4, atol=1e-5, all_cuda=True, level=None):  # type: ignore[no-untyped-def]
    m = model(nodes, feeds, outs, inits, opset)
    got, want, p, s = run_both(m, feeds, options, level=level)
    assert_close(got, want, rtol, atol)
    if all_cuda:
        off = {n: pr for n, pr in placement(s).items() if pr != "cuda"}
        assert not off, (
            f"not on cuda: {off}: {[d.declined for d in s.partition_report().nodes if d.provider != 'cuda']}"
        )
    return p


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Erf", "Floor", "Ceil", "Softplus", "Softsign", "Sin", "Cos",
         "HardSwish", "Sign", "Round"]


@pytest.mark.parametrize("op", UNARY)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_unary(op: str, dtype: str) -> None:
    x = (f32(3, 5) * 2).astype(dtype)
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == "float16" else {}
    _check([helper.make_node(op, ["x"], ["y"])], {"x": x}, ["y"], **tol)


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
                                      ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("Gelu", {}),
                                      ("Gelu", {"approximate": "tanh"})])
def test_unary_attrs(op: str, attrs: dict) -> None:
    _check([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": f32(4, 6)}, ["y"], opset=20)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu"])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((1,), (2, 3))])
def test_binary_broadcast(op: str, shapes: tuple) -> None:
    if op == "PRelu" and len(shapes[1]) > len(shapes[0]):
        pytest.skip("PRelu slope broadcasts to X only")
    a, b = np.abs(f32(*shapes[0])) + 0.5, f32(*shapes[1])
    _check([helper.make_node(op, ["a", "b"], ["y"])], {"a": a, "b": b}, ["y"])


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_compare_and_where(op: str) -> None:
    a, b = np.round(f32(3, 4)), np.round(f32(3, 4))
    nodes = [helper.make_node(op, ["a", "b"], ["c"]), helper.make_node("Not", ["c"], ["nc"]),
             helper.make_node("Where", ["nc", "a", "b"], ["y"])]
    _check(nodes, {"a": a, "b": b}, ["y", "c"])


def test_int64_arithmetic_on_device() -> None:
    a = R.integers(-20, 20, (3, 4)).astype(np.int64)
    b = R.integers(1, 5, (3, 4)).astype(np.int64) * np.where(R.random((3, 4)) < 0.5, -1, 1)
    nodes = [helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Mul", ["q", "b"], ["m"]),
             helper.make_node("Sub", ["a", "m"], ["y"]), helper.make_node("Cast", ["y"], ["yf"], to=TensorProto.FLOAT)]
    _check(nodes, {"a": a, "b": b}, ["y", "yf", "q"])


def test_variadic_and_clip() -> None:
    a, b, c = f32(2, 3), f32(2, 3), f32(3)
    nodes = [helper.make_node("Sum", ["a", "b", "c"], ["s"]), helper.make_node("Mean", ["a", "b", "c"], ["mn"]),
             helper.make_node("Max", ["a", "b", "c"], ["mx"]), helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    _check(nodes, {"a": a, "b": b, "c": c}, ["y", "mn", "mx"],
           {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)})


def test_cast_float16_roundtrip() -> None:
    x = f32(4, 4) * 100
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Relu", ["h"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)]
    _check(nodes, {"x": x}, ["y", "h"], rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize(
    "shapes", [((4, 8), (8, 5)), ((2, 3, 4, 8), (2, 3, 8, 5)), ((3, 4, 8), (8, 2)), ((8,), (8, 3))]
)
def test_matmul(shapes: tuple, dtype: str) -> None:
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == "float16" else {}
    _check(
        [helper.make_node("MatMul", ["a", "b"], ["y"])],
        {"a": f32(*shapes[0]).astype(dtype), "b": f32(*shapes[1]).astype(dtype)},
        ["y"],
        **tol,
    )


@pytest.mark.parametrize(
    "ta,tb,alpha,beta,cshape",
    [(0, 0, 1.0, 1.0, (5,)), (1, 0, 0.5, 2.0, (4, 5)), (0, 1, 1.0, 0.0, None), (1, 1, 2.0, 1.0, (1, 5))],
)
def test_gemm(ta: int, tb: int, alpha: float, beta: float, cshape: tuple | None) -> None:
    a = f32(3, 4) if ta else f32(4, 3)
    b = f32(5, 3) if tb else f32(3, 5)
    ins = ["a", "b"] + (["c"] if cshape else [])
    inits = {"c": f32(*cshape)} if cshape else {}
    _check(
        [helper.make_node("Gemm", ins, ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)],
        {"a": a, "b": b},
        ["y"],
        inits,
    )


CONVS = [
    dict(w=(6, 3, 3, 3), x=(2, 3, 9, 9), pads=[1, 1, 1, 1]),
    dict(w=(4, 3, 1, 1), x=(1, 3, 7, 7)),
    dict(w=(4, 3, 1, 1), x=(1, 3, 7, 7), strides=[2, 2]),
    dict(w=(8, 2, 3, 3), x=(1, 4, 8, 8), group=2, strides=[2, 1], pads=[0, 1, 2, 1]),
    dict(w=(4, 1, 3, 3), x=(2, 4, 6, 6), group=4, dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(w=(5, 3, 7, 7), x=(1, 3, 16, 16), strides=[2, 2], pads=[3, 3, 3, 3]),
    dict(w=(4, 3, 3, 3), x=(1, 3, 7, 8), auto_pad="SAME_UPPER", strides=[2, 2]),
]


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("bias", [False, True])
def test_conv(case: int, bias: bool) -> None:
    c = dict(CONVS[case])
    w, x = f32(*c.pop("w")), f32(*c.pop("x"))
    inits = {"w": w} | ({"b": f32(w.shape[0])} if bias else {})
    _check([helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], **c)], {"x": x}, ["y"], inits)


def test_conv_bn_relu_group_folds() -> None:
    x, w = f32(2, 3, 8, 8), f32(6, 3, 3, 3)
    inits = {"w": w, "b": f32(6), "s": np.abs(f32(6)) + 0.5, "bb": f32(6), "m": f32(6), "v": np.abs(f32(6)) + 0.1}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    p = _check(nodes, {"x": x}, ["y"], inits, level="disable")
    assert [(k, len(n)) for k, n in p.analysis.groups] == [("conv", 3)]
    _check(nodes, {"x": x}, ["y"], inits)  # whatever the core's passes make of it
    p2 = _check(nodes, {"x": x}, ["y"], inits, options={"fuse": False})
    assert p2.analysis.groups == []


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("MaxPool", dict(kernel_shape=[2, 2], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[5, 5], strides=[3, 3], ceil_mode=1)),
    ("GlobalAveragePool", {}), ("GlobalMaxPool", {}),
])
def test_pool(op: str, attrs: dict) -> None:
    _check([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": f32(2, 3, 10, 11)}, ["y"])


def test_batchnorm_lrn_softmax_layernorm() -> None:
    x = f32(2, 4, 5, 5)
    inits = {"s": f32(4), "b": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 0.2, "g": f32(5), "bt": f32(5)}
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("LRN", ["bn"], ["l"], size=3, alpha=1e-3, beta=0.75, bias=1.0),
             helper.make_node("Softmax", ["l"], ["sm"], axis=-1),
             helper.make_node("Softmax", ["l"], ["sm1"], axis=1),
             helper.make_node("LogSoftmax", ["l"], ["lsm"], axis=-1),
             helper.make_node("LayerNormalization", ["l", "g", "bt"], ["ln"], axis=-1, epsilon=1e-5),
             helper.make_node("LayerNormalization", ["l", "g"], ["ln2"], axis=-1)]
    _check(nodes, {"x": x}, ["sm", "sm1", "lsm", "ln", "ln2"], inits)


def test_softmax_opset9_coerces_to_2d() -> None:
    _check([helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": f32(2, 3, 4)}, ["y"], opset=9)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layernorm_float16(dtype: str) -> None:
    x = f32(3, 16).astype(dtype)
    _check([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"])], {"x": x}, ["y"],
           {"g": f32(16).astype(dtype), "b": f32(16).astype(dtype)}, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                                "ReduceL2", "ReduceL1", "ReduceLogSumExp"])
@pytest.mark.parametrize("keep", [0, 1])
def test_reductions(op: str, keep: int) -> None:
    x = f32(2, 3, 4)
    _check([helper.make_node(op, ["x", "axes"], ["y"], keepdims=keep)], {"x": x}, ["y"],
           {"axes": np.array([1, -1], np.int64)}, opset=18)


def test_reduce_legacy_attr_and_argmax() -> None:
    x = f32(3, 5)
    nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1]), helper.make_node("ArgMax", ["x"], ["a"], axis=1),
             helper.make_node("ArgMin", ["x"], ["b"], axis=0, keepdims=0)]
    _check(nodes, {"x": x}, ["y", "a", "b"], opset=13)


def test_shape_ops() -> None:
    x = f32(2, 3, 4)
    inits = {
        "starts": np.array([0, 1], np.int64),
        "ends": np.array([2, 10], np.int64),
        "axes": np.array([0, 2], np.int64),
        "steps": np.array([1, 2], np.int64),
        "idx": np.array([[2, 0], [1, -1]], np.int64),
        "shape": np.array([3, 1, 1, 4], np.int64),
        "split": np.array([1, 2], np.int64),
        "ax": np.array([0, 3], np.int64),
        "reps": np.array([1, 2, 1], np.int64),
        "pads": np.array([0, 1, 0, 0, 2, 1], np.int64),
        "cval": np.array(1.5, np.float32),
    }
    nodes = [
        helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Gather", ["x", "idx"], ["ga"], axis=1),
        helper.make_node("Transpose", ["x"], ["tr"], perm=[2, 0, 1]),
        helper.make_node("Concat", ["x", "x"], ["cc"], axis=-1),
        helper.make_node("Flatten", ["x"], ["fl"], axis=2),
        helper.make_node("Split", ["x", "split"], ["s1", "s2"], axis=1),
        helper.make_node("Unsqueeze", ["x", "ax"], ["un"]),
        helper.make_node("Squeeze", ["un", "ax"], ["sq"]),
        helper.make_node("Expand", ["e"], ["ex"], ),
        helper.make_node("Tile", ["x", "reps"], ["ti"]),
        helper.make_node("Pad", ["x", "pads", "cval"], ["pd"]),
        helper.make_node("Identity", ["x"], ["id"]),
    ]
    nodes[8] = helper.make_node("Expand", ["e", "shape"], ["ex"])
    feeds = {"x": x, "e": f32(3, 1, 4)}
    _check(nodes, feeds, ["sl", "ga", "tr", "cc", "fl", "s1", "s2", "sq", "ex", "ti", "pd", "id"], inits)


def test_constant_of_shape_range_and_dropout() -> None:
    x = f32(2, 3)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["z"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5])),
        helper.make_node("Add", ["x", "z"], ["xz"]),
        helper.make_node("Dropout", ["xz"], ["d"]),
        helper.make_node("Range", ["r0", "r1", "r2"], ["rg"]),
        helper.make_node("Cast", ["rg"], ["rgf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["d", "rgf"], ["y"]),
    ]
    inits = {"r0": np.array(0, np.int64), "r1": np.array(3, np.int64), "r2": np.array(1, np.int64)}
    _check(nodes, {"x": x}, ["y"], inits)


def _bench_models():  # type: ignore[no-untyped-def]
    root = Path(__file__).resolve().parents[4] / "bench"
    if not (root / "models.py").exists():
        pytest.skip("bench/models.py not in this checkout")
    sys.path.insert(0, str(root))
    import models  # type: ignore[import-not-found]

    return models


@pytest.mark.parametrize("options", [{}, {"fuse": False}, {"cuda_graph": True}])
def test_bert_encoder_small(options: dict) -> None:
    models = _bench_models()
    cfg = dict(hidden=64, heads=4, ffn=128, layers=2, seq=16, vocab=100, max_positions=32, batch=2)
    m = models.build_bert(cfg).SerializeToString()
    feeds = models.bert_feeds_factory(cfg)(np.random.default_rng(0))
    got, want, p, s = run_both(m, feeds, options)
    assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert set(placement(s).values()) == {"cuda"}
    assert p.backend.host_syncs == 0 and p.backend.implicit_uploads == 0
    if not options:
        kinds = [k for k, _ in p.analysis.groups]
        assert kinds.count("ew") >= 4  # attention scale+mask, bias+GELU per layer...


def test_light_squeezenet_all_on_device() -> None:
    models = _bench_models()
    found = [m for m in models.light_models() if m.name == "light_squeezenet"]
    if not found:
        pytest.skip("light models not shipped with this onnx")
    bm = found[0]
    feeds = bm.make_feeds(np.random.default_rng(0))
    # its constant weights drive the logits to ~7e9, where an ulp (~512) between two channels
    # turns the uniform softmax (0.001) into 0 / 0.002, and the fake device's products are
    # numpy's OpenBLAS, whose Haswell kernels (AVX2 CPUs) round one product's rows differently:
    # the logits (the Softmax's input, made an output) are compared, within float rounding
    proto = onnx.load(str(bm.path))
    (softmax,) = [n for n in proto.graph.node if n.op_type == "Softmax"]
    proto.graph.output.insert(0, onnx.ValueInfoProto(name=softmax.input[0]))
    got, want, p, s = run_both(proto.SerializeToString(), feeds)
    assert np.abs(want[0]).max() > 1e9
    assert_close(got[:1], want[:1], rtol=1e-5, atol=0)
    assert set(placement(s).values()) == {"cuda"}
    assert any(k == "conv" for k, _n in p.analysis.groups)
