"""Every translated op: convert, reload the saved package as MIL, interpret, compare with ep-cpu."""

from __future__ import annotations

import numpy as np
import pytest
from coreml_harness import check, model, rand
from onnx import helper

N = helper.make_node
I64 = np.int64


def _case(id_, nodes, feeds, consts=None, opset=17, rtol=1e-4, atol=1e-5, outputs=None):
    return pytest.param(nodes, feeds, consts or {}, opset, rtol, atol, outputs, id=id_)


def _unary(op, low=-1.0, high=1.0, opset=17, **attrs):
    return _case(op + ("" if not attrs else "-" + "-".join(f"{k}{v}" for k, v in attrs.items())),
                 N(op, ["x"], ["y"], **attrs), {"x": rand(2, 3, 4, low=low, high=high)}, opset=opset)


def _binary(op, shape_b=(3, 4), opset=17, dtype=np.float32, positive=False):
    lo = 0.5 if positive else -1.0
    a = rand(2, 3, 4, low=lo, high=2.0)
    b = rand(*shape_b, low=lo, high=2.0)
    if dtype != np.float32:
        a, b = (a * 10).astype(dtype), (b * 10).astype(dtype)
    return _case(f"{op}-{np.dtype(dtype).name}-{'x'.join(map(str, shape_b))}", N(op, ["a", "b"], ["y"]),
                 {"a": a, "b": b}, opset=opset)


CASES = [
    # elementwise
    _binary("Add"),
    _binary("Sub", (1, 4)),
    _binary("Mul", (2, 3, 4)),
    _binary("Div", (4,), positive=True),
    _binary("Pow", (3, 4), positive=True),
    _binary("Add", (3, 4), dtype=np.int64),
    _binary("Mul", (4,), dtype=np.int32),
    _binary("Equal", (3, 4), dtype=np.int64),
    _binary("Greater"),
    _binary("Less", (4,)),
    _binary("GreaterOrEqual"),
    _binary("LessOrEqual"),
    _case("Max-3", N("Max", ["a", "b", "c"], ["y"]), {"a": rand(3, 4), "b": rand(3, 4), "c": rand(4)}),
    _case("Min-2", N("Min", ["a", "b"], ["y"]), {"a": rand(3, 4), "b": rand(1, 4)}),
    _case("Sum-3", N("Sum", ["a", "b", "c"], ["y"]), {"a": rand(3, 4), "b": rand(3, 4), "c": rand(3, 4)}),
    _case("Mean-2", N("Mean", ["a", "b"], ["y"]), {"a": rand(3, 4), "b": rand(3, 4)}),
    _case(
        "Where-And-Not",
        [
            N("Greater", ["a", "b"], ["g"]),
            N("Less", ["a", "c"], ["l"]),
            N("And", ["g", "l"], ["m"]),
            N("Not", ["m"], ["n"]),
            N("Or", ["n", "g"], ["o"]),
            N("Xor", ["o", "l"], ["p"]),
            N("Where", ["p", "a", "b"], ["y"]),
        ],
        {"a": rand(3, 4), "b": rand(3, 4), "c": rand(3, 4)},
    ),
    _case("bool-output", N("Greater", ["a", "b"], ["y"]), {"a": rand(3, 4), "b": rand(3, 4)}),
    _case("Pow-const-int-exponent", N("Pow", ["x", "e"], ["y"]), {"x": rand(3, 4, low=0.1)}, {"e": np.array(3, I64)}),
    # unary
    *[
        _unary(op)
        for op in (
            "Abs",
            "Neg",
            "Ceil",
            "Floor",
            "Exp",
            "Sin",
            "Cos",
            "Tan",
            "Atan",
            "Sinh",
            "Cosh",
            "Tanh",
            "Erf",
            "Sign",
            "Relu",
            "Sigmoid",
            "Softsign",
            "Softplus",
            "Identity",
        )
    ],
    _unary("Asin", -0.9, 0.9),
    _unary("Acos", -0.9, 0.9),
    _unary("Log", 0.1, 3.0),
    _unary("Sqrt", 0.1, 3.0),
    _unary("Reciprocal", 0.2, 3.0),
    _case("Neg-int", N("Neg", ["x"], ["y"]), {"x": np.arange(-6, 6, dtype=I64).reshape(3, 4)}),
    _case("Dropout", N("Dropout", ["x"], ["y"]), {"x": rand(2, 5)}, opset=13),
    _case("Cast-f2i", N("Cast", ["x"], ["y"], to=7), {"x": rand(3, 4, low=-5, high=5)}),
    _case("Cast-i2f", N("Cast", ["x"], ["y"], to=1), {"x": np.arange(12, dtype=I64).reshape(3, 4)}),
    _case("Cast-f2b", N("Cast", ["x"], ["y"], to=9), {"x": np.array([[0.0, 1.5, -2.0, 0.0]], np.float32)}),
    # activations
    _unary("LeakyRelu", alpha=0.2),
    _unary("Elu", alpha=0.7),
    _unary("Selu"),
    _unary("HardSigmoid", alpha=0.3, beta=0.4),
    _unary("HardSwish", -4, 4),
    _unary("ThresholdedRelu", alpha=0.3),
    _unary("Mish", opset=18),
    _unary("Gelu", opset=20),
    _case("Gelu-tanh", N("Gelu", ["x"], ["y"], approximate="tanh"), {"x": rand(2, 8)}, opset=20),
    _case("PRelu-channel", N("PRelu", ["x", "s"], ["y"]), {"x": rand(1, 3, 4, 4)}, {"s": rand(3, 1, 1)}),
    _case("PRelu-scalar", N("PRelu", ["x", "s"], ["y"]), {"x": rand(2, 5)}, {"s": np.array([0.25], np.float32)}),
    _case(
        "Clip-11",
        N("Clip", ["x", "lo", "hi"], ["y"]),
        {"x": rand(3, 4)},
        {"lo": np.array(-0.5, np.float32), "hi": np.array(0.4, np.float32)},
    ),
    _case("Clip-min-only", N("Clip", ["x", "lo"], ["y"]), {"x": rand(3, 4)}, {"lo": np.array(0.1, np.float32)}),
    _case("Clip-6", N("Clip", ["x"], ["y"], min=-0.2, max=0.3), {"x": rand(3, 4)}, opset=6),
    _case("Softmax-13", N("Softmax", ["x"], ["y"], axis=1), {"x": rand(2, 3, 4)}),
    _case("Softmax-11-coerced", N("Softmax", ["x"], ["y"], axis=1), {"x": rand(2, 3, 4)}, opset=11),
    _case("LogSoftmax", N("LogSoftmax", ["x"], ["y"]), {"x": rand(2, 3, 4)}),
    # convolution
    _case(
        "Conv2d-pads-stride",
        N("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 2, 1], strides=[2, 1]),
        {"x": rand(1, 3, 9, 8)},
        {"w": rand(4, 3, 3, 3), "b": rand(4)},
    ),
    _case(
        "Conv2d-group-dilation",
        N("Conv", ["x", "w"], ["y"], group=2, dilations=[2, 1], pads=[2, 1, 2, 1]),
        {"x": rand(2, 4, 7, 7)},
        {"w": rand(6, 2, 3, 3)},
    ),
    _case(
        "Conv2d-same-upper",
        N("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2]),
        {"x": rand(1, 2, 7, 6)},
        {"w": rand(3, 2, 4, 3)},
    ),
    _case(
        "Conv2d-same-lower",
        N("Conv", ["x", "w"], ["y"], auto_pad="SAME_LOWER"),
        {"x": rand(1, 2, 5, 5)},
        {"w": rand(3, 2, 2, 2)},
    ),
    _case(
        "Conv2d-depthwise",
        N("Conv", ["x", "w", "b"], ["y"], group=4, pads=[1, 1, 1, 1]),
        {"x": rand(1, 4, 6, 6)},
        {"w": rand(4, 1, 3, 3), "b": rand(4)},
    ),
    _case(
        "Conv1d",
        N("Conv", ["x", "w", "b"], ["y"], pads=[1, 1], strides=[2]),
        {"x": rand(2, 3, 11)},
        {"w": rand(5, 3, 3), "b": rand(5)},
    ),
    _case(
        "Conv3d",
        N("Conv", ["x", "w"], ["y"], pads=[1, 0, 1, 1, 0, 1]),
        {"x": rand(1, 2, 4, 5, 5)},
        {"w": rand(3, 2, 3, 2, 3)},
    ),
    _case(
        "ConvTranspose2d",
        N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 2]),
        {"x": rand(1, 3, 4, 5)},
        {"w": rand(3, 2, 3, 3), "b": rand(2)},
    ),
    _case(
        "ConvTranspose2d-pads-outpad",
        N("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
        {"x": rand(1, 2, 4, 4)},
        {"w": rand(2, 3, 3, 3)},
    ),
    _case(
        "ConvTranspose2d-group-dilation",
        N("ConvTranspose", ["x", "w"], ["y"], group=2, dilations=[2, 2], pads=[1, 0, 0, 1]),
        {"x": rand(1, 4, 3, 3)},
        {"w": rand(4, 1, 2, 2)},
    ),
    _case(
        "ConvTranspose1d",
        N("ConvTranspose", ["x", "w", "b"], ["y"], strides=[3]),
        {"x": rand(2, 2, 5)},
        {"w": rand(2, 3, 4), "b": rand(3)},
    ),
    # linear algebra
    _case(
        "Gemm-const-B-bias",
        N("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=0.5, beta=2.0),
        {"a": rand(3, 5)},
        {"w": rand(4, 5), "c": rand(4)},
    ),
    _case(
        "Gemm-transA",
        N("Gemm", ["a", "w", "c"], ["y"], transA=1),
        {"a": rand(5, 3)},
        {"w": rand(5, 4), "c": rand(3, 4)},
    ),
    _case(
        "Gemm-runtime-B",
        N("Gemm", ["a", "b", "c"], ["y"], transB=1, beta=0.5),
        {"a": rand(3, 5), "b": rand(4, 5)},
        {"c": rand(1, 4)},
    ),
    _case("MatMul-batched", N("MatMul", ["a", "b"], ["y"]), {"a": rand(2, 3, 4, 5), "b": rand(3, 5, 6)}),
    _case("MatMul-const", N("MatMul", ["a", "w"], ["y"]), {"a": rand(2, 3, 5)}, {"w": rand(5, 4)}),
    _case("MatMul-vector", N("MatMul", ["a", "b"], ["y"]), {"a": rand(5), "b": rand(2, 5, 3)}),
    # normalization
    _case(
        "BatchNormalization-4d",
        N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3),
        {"x": rand(2, 3, 4, 5)},
        {"s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, low=0.5, high=2)},
        opset=15,
    ),
    _case(
        "BatchNormalization-2d",
        N("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]),
        {"x": rand(4, 3)},
        {"s": rand(3), "b": rand(3), "m": rand(3), "v": rand(3, low=0.5, high=2)},
        opset=9,
    ),
    _case(
        "InstanceNormalization",
        N("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-4),
        {"x": rand(2, 3, 4, 5)},
        {"s": rand(3), "b": rand(3)},
        rtol=1e-3,
        atol=1e-4,
    ),
    _case(
        "LayerNormalization",
        N("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1),
        {"x": rand(2, 3, 8)},
        {"s": rand(8), "b": rand(8)},
        rtol=1e-3,
        atol=1e-4,
    ),
    _case(
        "LayerNormalization-axis1",
        N("LayerNormalization", ["x", "s"], ["y"], axis=1),
        {"x": rand(2, 3, 4)},
        {"s": rand(3, 4)},
        rtol=1e-3,
        atol=1e-4,
    ),
    _case("LRN", N("LRN", ["x"], ["y"], size=3, alpha=0.1, beta=0.6, bias=1.5), {"x": rand(1, 5, 3, 3)}),
    # pooling
    _case(
        "MaxPool-pads",
        N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        {"x": rand(1, 2, 7, 8)},
    ),
    _case(
        "MaxPool-ceil",
        N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        {"x": rand(1, 2, 8, 8)},
    ),
    _case(
        "MaxPool-same", N("MaxPool", ["x"], ["y"], kernel_shape=[2, 3], auto_pad="SAME_UPPER"), {"x": rand(1, 2, 5, 5)}
    ),
    _case("MaxPool-1d", N("MaxPool", ["x"], ["y"], kernel_shape=[3], strides=[2]), {"x": rand(2, 3, 9)}),
    _case(
        "AveragePool-include-pad",
        N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
        {"x": rand(1, 2, 6, 6)},
    ),
    _case(
        "AveragePool-exclude-pad-ceil",
        N("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        {"x": rand(1, 2, 6, 6)},
    ),
    _case("LpPool", N("LpPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2]), {"x": rand(1, 2, 6, 6)}, opset=18),
    _case("GlobalAveragePool", N("GlobalAveragePool", ["x"], ["y"]), {"x": rand(2, 3, 5, 4)}),
    _case("GlobalMaxPool", N("GlobalMaxPool", ["x"], ["y"]), {"x": rand(2, 3, 5, 4)}),
    # shape ops
    _case("Reshape", N("Reshape", ["x", "s"], ["y"]), {"x": rand(2, 3, 4)}, {"s": np.array([0, -1], I64)}),
    _case("Flatten", N("Flatten", ["x"], ["y"], axis=2), {"x": rand(2, 3, 4, 5)}),
    _case(
        "Squeeze-Unsqueeze",
        [N("Squeeze", ["x", "a"], ["s"]), N("Unsqueeze", ["s", "b"], ["y"])],
        {"x": rand(2, 1, 4)},
        {"a": np.array([1], I64), "b": np.array([0, 3], I64)},
    ),
    _case("Squeeze-11", N("Squeeze", ["x"], ["y"], axes=[1]), {"x": rand(2, 1, 4)}, opset=11),
    _case("Expand", N("Expand", ["x", "s"], ["y"]), {"x": rand(3, 1)}, {"s": np.array([2, 3, 4], I64)}),
    _case("Transpose", N("Transpose", ["x"], ["y"], perm=[2, 0, 1]), {"x": rand(2, 3, 4)}),
    _case("Transpose-default", N("Transpose", ["x"], ["y"]), {"x": rand(2, 3, 4)}),
    _case(
        "Concat-const",
        N("Concat", ["a", "b", "c"], ["y"], axis=-1),
        {"a": rand(2, 3), "b": rand(2, 2)},
        {"c": rand(2, 1)},
    ),
    _case(
        "Split-sizes",
        N("Split", ["x", "s"], ["y0", "y1", "y2"], axis=1),
        {"x": rand(2, 6)},
        {"s": np.array([1, 2, 3], I64)},
        outputs=["y0", "y1", "y2"],
    ),
    _case("Split-equal", N("Split", ["x"], ["y0", "y1"], axis=0), {"x": rand(4, 3)}, outputs=["y0", "y1"]),
    _case(
        "Slice",
        N("Slice", ["x", "st", "en", "ax", "sp"], ["y"]),
        {"x": rand(5, 6, 7)},
        {
            "st": np.array([1, -5], I64),
            "en": np.array([100, -1], I64),
            "ax": np.array([0, 2], I64),
            "sp": np.array([2, 1], I64),
        },
    ),
    _case(
        "Slice-negative-step",
        N("Slice", ["x", "st", "en", "ax", "sp"], ["y"]),
        {"x": rand(5, 6)},
        {
            "st": np.array([-1, 4], I64),
            "en": np.array([-100, 0], I64),
            "ax": np.array([0, 1], I64),
            "sp": np.array([-2, -1], I64),
        },
    ),
    _case("Slice-1", N("Slice", ["x"], ["y"], starts=[1], ends=[3], axes=[1]), {"x": rand(3, 5)}, opset=9),
    _case(
        "Gather-axis1",
        N("Gather", ["x", "i"], ["y"], axis=1),
        {"x": rand(3, 5, 2)},
        {"i": np.array([[4, 0], [-1, 2]], I64)},
    ),
    _case("Gather-scalar", N("Gather", ["x", "i"], ["y"], axis=0), {"x": rand(3, 5)}, {"i": np.array(2, I64)}),
    _case("Tile", N("Tile", ["x", "r"], ["y"]), {"x": rand(2, 3)}, {"r": np.array([2, 3], I64)}),
    _case(
        "Pad-constant",
        N("Pad", ["x", "p", "v"], ["y"]),
        {"x": rand(1, 2, 3, 3)},
        {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], I64), "v": np.array(0.5, np.float32)},
    ),
    _case(
        "Pad-reflect",
        N("Pad", ["x", "p"], ["y"], mode="reflect"),
        {"x": rand(1, 2, 4, 4)},
        {"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], I64)},
    ),
    _case(
        "Pad-edge",
        N("Pad", ["x", "p"], ["y"], mode="edge"),
        {"x": rand(1, 2, 4, 4)},
        {"p": np.array([0, 0, 1, 0, 0, 0, 0, 3], I64)},
    ),
    _case("DepthToSpace-DCR", N("DepthToSpace", ["x"], ["y"], blocksize=2), {"x": rand(1, 8, 2, 3)}),
    _case("DepthToSpace-CRD", N("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"), {"x": rand(1, 8, 2, 3)}),
    _case("SpaceToDepth", N("SpaceToDepth", ["x"], ["y"], blocksize=2), {"x": rand(1, 2, 4, 6)}),
    _case("CumSum", N("CumSum", ["x", "a"], ["y"], exclusive=1, reverse=1), {"x": rand(3, 4)}, {"a": np.array(1, I64)}),
    # reductions
    *[
        _case(f"{op}-axes", N(op, ["x"], ["y"], axes=[1, -1], keepdims=k), {"x": rand(2, 3, 4, low=0.1)}, opset=17)
        for op, k in (
            ("ReduceMean", 1),
            ("ReduceMax", 0),
            ("ReduceMin", 1),
            ("ReduceProd", 0),
            ("ReduceL1", 1),
            ("ReduceL2", 0),
            ("ReduceLogSumExp", 1),
            ("ReduceSumSquare", 0),
            ("ReduceLogSum", 1),
        )
    ],
    _case(
        "ReduceSum-13-input-axes",
        N("ReduceSum", ["x", "a"], ["y"], keepdims=0),
        {"x": rand(2, 3, 4)},
        {"a": np.array([0, 2], I64)},
    ),
    _case("ReduceMean-all", N("ReduceMean", ["x"], ["y"]), {"x": rand(2, 3, 4)}),
    _case(
        "ReduceMean-18-input-axes",
        N("ReduceMean", ["x", "a"], ["y"]),
        {"x": rand(2, 3, 4)},
        {"a": np.array([1], I64)},
        opset=18,
    ),
    _case("ArgMax", N("ArgMax", ["x"], ["y"], axis=1, keepdims=1), {"x": rand(3, 5, 2)}),
    _case("ArgMin", N("ArgMin", ["x"], ["y"], axis=-1, keepdims=0), {"x": rand(3, 5)}),
    # resize
    _case(
        "Resize-nearest-half-pixel",
        N("Resize", ["x", "", "s"], ["y"], mode="nearest"),
        {"x": rand(1, 2, 3, 4)},
        {"s": np.array([1, 1, 2, 3], np.float32)},
        opset=13,
    ),
    _case(
        "Resize-nearest-asymmetric-floor",
        N(
            "Resize",
            ["x", "", "", "z"],
            ["y"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        {"x": rand(1, 2, 3, 4)},
        {"z": np.array([1, 2, 6, 8], I64)},
        opset=13,
    ),
    _case(
        "Resize-linear-half-pixel",
        N("Resize", ["x", "", "s"], ["y"], mode="linear"),
        {"x": rand(1, 2, 3, 4)},
        {"s": np.array([1, 1, 2, 2], np.float32)},
        opset=13,
    ),
    _case(
        "Resize-linear-sizes-down",
        N("Resize", ["x", "", "", "z"], ["y"], mode="linear"),
        {"x": rand(1, 2, 6, 8)},
        {"z": np.array([1, 2, 4, 5], I64)},
        opset=13,
    ),
    _case(
        "Resize-linear-align-corners",
        N("Resize", ["x", "", "", "z"], ["y"], mode="linear", coordinate_transformation_mode="align_corners"),
        {"x": rand(1, 2, 3, 4)},
        {"z": np.array([1, 2, 7, 5], I64)},
        opset=13,
    ),
    _case(
        "Upsample-9",
        N("Upsample", ["x", "s"], ["y"], mode="nearest"),
        {"x": rand(1, 2, 3, 4)},
        {"s": np.array([1, 1, 2, 2], np.float32)},
        opset=9,
    ),
    # folded constants
    _case(
        "ConstantOfShape-Shape-folded",
        [
            N("Shape", ["x"], ["sh"]),
            N("ConstantOfShape", ["sh"], ["c"], value=helper.make_tensor("v", 1, [1], [0.5])),
            N("Add", ["x", "c"], ["y"]),
        ],
        {"x": rand(2, 3)},
    ),
    _case(
        "Constant-folded",
        [N("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0]), N("Mul", ["x", "c"], ["y"])],
        {"x": rand(2, 3)},
    ),
    _case(
        "Reshape-shape-chain",
        [
            N("Shape", ["x"], ["s"]),
            N("Gather", ["s", "zero"], ["n"], axis=0),
            N("Unsqueeze", ["n", "ax"], ["n1"]),
            N("Concat", ["n1", "m1"], ["shape"], axis=0),
            N("Reshape", ["x", "shape"], ["y"]),
        ],
        {"x": rand(2, 3, 4)},
        {"zero": np.array(0, I64), "ax": np.array([0], I64), "m1": np.array([-1], I64)},
    ),
]


@pytest.mark.parametrize("nodes,feeds,consts,opset,rtol,atol,outputs", CASES)
def test_op_matches_cpu(nodes, feeds, consts, opset, rtol, atol, outputs, tmp_path):
    m = model(nodes, feeds, outputs=outputs, consts=consts, opset=opset)
    check(m, feeds, tmp_path, rtol=rtol, atol=atol)


def test_every_translated_op_has_a_numerical_case():
    from epoxy_ep_coreml.ops import OPS

    covered = set()
    for case in CASES:
        nodes = case.values[0]
        for node in nodes if isinstance(nodes, list) else [nodes]:
            covered.add(node.op_type)
    folded_only = {"Size", "Range"}  # folded by numpy, never emitted as MIL
    assert set(OPS) - covered - folded_only == set()


def test_gemm_becomes_linear(tmp_path):
    m = model(N("Gemm", ["a", "w", "c"], ["y"], transB=1), {"a": rand(3, 5)}, consts={"w": rand(4, 5), "c": rand(4)})
    ops = check(m, {"a": rand(3, 5)}, tmp_path)
    assert "linear" in ops


def test_fp16_precision_inserts_casts_and_stays_close(tmp_path):
    feeds = {"x": rand(1, 3, 8, 8)}
    m = model([N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"])], feeds,
              consts={"w": rand(4, 3, 3, 3), "b": rand(4)})
    ops = check(m, feeds, tmp_path, options={"compute_precision": "fp16"}, rtol=2e-2, atol=2e-2)
    assert "cast" in ops


@pytest.mark.parametrize("target", ["iOS16", "iOS17", "macOS15"])
def test_newer_deployment_targets_convert(target, tmp_path):
    feeds = {"x": rand(2, 3, 6, 6)}
    m = model([N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), N("Sigmoid", ["c"], ["s"]),
               N("GlobalAveragePool", ["s"], ["g"]), N("Flatten", ["g"], ["f"]), N("Softmax", ["f"], ["y"])], feeds,
              consts={"w": rand(4, 3, 3, 3)})
    check(m, feeds, tmp_path, options={"minimum_deployment_target": target})
