"""Ops onnxruntime's CPU graph optimizer writes into a saved optimized model (ORT_ENABLE_EXTENDED):
com.microsoft FusedConv and FusedGemm, and its own ai.onnx LayerNormalization below opset 17.
Each against onnxruntime, plus whole models optimized and saved by onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _contrib_oracle import assert_same, check, epoxy_session, ort_run, run_both, single_node
from onnx import TensorProto, helper, numpy_helper

import epoxy

ort = pytest.importorskip("onnxruntime")


def _f(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


# ============================================================================ FusedConv
CONV_ACTS = [("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.2]), ("Clip", [-0.5, 1.0]),
             ("HardSigmoid", [0.3, 0.4]), ("", [])]


@pytest.mark.parametrize("activation,params", CONV_ACTS, ids=[a or "none" for a, _ in CONV_ACTS])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_z", [False, True])
def test_fused_conv(activation, params, with_bias, with_z):
    rng = np.random.default_rng(len(activation) + 2 * with_bias + 4 * with_z)
    attrs = {"pads": [1, 1, 1, 1]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    x, w = _f(rng, 2, 3, 6, 5), _f(rng, 4, 3, 3, 3)
    check("FusedConv", [x, w, _f(rng, 4) if with_bias else None, _f(rng, 2, 4, 6, 5) if with_z else None], attrs,
          consts=(1,))


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({"strides": [2, 2], "group": 2, "activation": "Relu"}, (1, 4, 7, 7), (6, 2, 3, 3)),
    ({"dilations": [2, 1], "pads": [2, 1, 2, 1], "activation": "Sigmoid"}, (1, 2, 9, 8), (3, 2, 3, 3)),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2], "activation": "Tanh"}, (1, 2, 9, 8), (3, 2, 3, 3)),
    ({"activation": "LeakyRelu", "activation_params": [0.01]}, (2, 3, 10), (5, 3, 3)),
    ({"activation": "Clip", "activation_params": [0.0, 6.0], "group": 3}, (1, 3, 6, 6), (3, 1, 3, 3)),
], ids=["strided-grouped", "dilated", "same-upper", "conv1d", "depthwise-relu6"])
def test_fused_conv_geometries(attrs, x_shape, w_shape):
    rng = np.random.default_rng(len(x_shape))
    check("FusedConv", [_f(rng, *x_shape), _f(rng, *w_shape), _f(rng, w_shape[0])], attrs, consts=(1, 2),
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attrs,why", [
    ({"activation": "Elu"}, r"activation='Elu'.*expected one of"),
    ({"activation": "Clip", "activation_params": [1.0]}, r"activation_params=\(1.0,\).*expected 2 value"),
    ({"activation": "LeakyRelu"}, r"activation_params=\(\).*expected 1 value"),
    ({"activation": "Clip", "activation_params": [2.0, 1.0]}, r"expected Clip min <= max"),
], ids=["unknown", "clip-params", "leaky-params", "clip-order"])
def test_fused_conv_bad_attributes(attrs, why):
    model = single_node("FusedConv", [np.ones((1, 1, 3, 3), np.float32), np.ones((1, 1, 1, 1), np.float32)], attrs)
    if "min <= max" not in why:  # onnxruntime refuses these too
        with pytest.raises(Exception, match="FusedConv"):
            ort_run(model, {"x0": np.ones((1, 1, 3, 3), np.float32), "x1": np.ones((1, 1, 1, 1), np.float32)})
    with pytest.raises(epoxy.errors.EpoxyError, match=r"the_FusedConv.*" + why):
        epoxy_session(model)


# ============================================================================ FusedGemm
GEMM_ACTS = [
    ("Relu", {}), ("Tanh", {}), ("Sigmoid", {}), ("LeakyRelu", {"activation_alpha": 0.3}),
    ("HardSigmoid", {"activation_alpha": 0.3, "activation_beta": 0.4}), ("Elu", {"activation_alpha": 0.7}),
    ("Selu", {"activation_alpha": 1.5, "activation_gamma": 1.1}), ("ThresholdedRelu", {"activation_alpha": 0.2}),
    ("Softplus", {}), ("Softsign", {}),
]


@pytest.mark.parametrize("activation,params", GEMM_ACTS, ids=[a for a, _ in GEMM_ACTS])
@pytest.mark.parametrize("trans_a,trans_b,c_shape", [(0, 0, (5,)), (1, 1, (3, 5)), (0, 1, None), (1, 0, (1, 1))],
                         ids=["row-bias", "full-bias", "no-bias", "scalar-bias"])
def test_fused_gemm(activation, params, trans_a, trans_b, c_shape):
    rng = np.random.default_rng(len(activation) + trans_a + 2 * trans_b)
    a = _f(rng, 4, 3) if trans_a else _f(rng, 3, 4)
    b = _f(rng, 5, 4) if trans_b else _f(rng, 4, 5)
    c = None if c_shape is None else _f(rng, *c_shape)
    attrs = dict(activation=activation, transA=trans_a, transB=trans_b, alpha=0.7, beta=1.3, **params)
    check("FusedGemm", [a, b, c], attrs)


@pytest.mark.parametrize("attrs,why", [
    ({}, r"activation=None.*expected one of"),
    ({"activation": "Gelu"}, r"activation='Gelu'.*expected one of"),
    ({"activation": "LeakyRelu"}, r"activation_alpha=None.*expected a float"),
    ({"activation": "Selu", "activation_alpha": 1.0}, r"activation_gamma=None.*expected a float"),
], ids=["missing", "unknown", "leaky-alpha", "selu-gamma"])
def test_fused_gemm_bad_attributes(attrs, why):
    a, b = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    model = single_node("FusedGemm", [a, b], attrs)
    with pytest.raises(Exception, match="FusedGemm"):
        ort_run(model, {"x0": a, "x1": b})
    with pytest.raises(epoxy.errors.EpoxyError, match=r"the_FusedGemm.*" + why):
        epoxy_session(model)


# ============================================================================ LayerNormalization < 17
@pytest.mark.parametrize("opset", [11, 13, 16])
@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("with_bias", [True, False])
def test_onnxruntime_layer_normalization_before_opset_17(opset, axis, with_bias):
    rng = np.random.default_rng(opset + axis)
    x = _f(rng, 2, 3, 4)
    g = _f(rng, *x.shape[axis:])
    b = _f(rng, *x.shape[axis:]) if with_bias else None
    check("LayerNormalization", [x, g, b], {"axis": axis, "epsilon": 1e-3}, domain="", opset=opset, n_out=3)


# ============================================================================ models onnxruntime optimized
def _save_optimized(model: onnx.ModelProto, path) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(path)
    so.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return onnx.load(path)


def _cnn() -> onnx.ModelProto:
    """Conv + each activation onnxruntime fuses into FusedConv, then Gemm + activations."""
    rng = np.random.default_rng(0)

    def init(name: str, a: np.ndarray) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = (
        [
            init("w1", rng.standard_normal((4, 3, 3, 3))),
            init("b1", rng.standard_normal(4)),
            init("w2", rng.standard_normal((4, 4, 3, 3))),
        ]
        + [init(f"w{i}", rng.standard_normal((4, 4, 1, 1))) for i in range(3, 7)]
        + [
            init("gw", rng.standard_normal((6, 4))),
            init("gb", rng.standard_normal(6)),
            init("gw2", rng.standard_normal((6, 6))),
            init("gw3", rng.standard_normal((6, 6))),
            init("mw", rng.standard_normal((6, 6))),
            init("mb", rng.standard_normal(6)),
            init("lo", 0.0),
            init("hi", 6.0),
        ]
    )
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4), helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4), helper.make_node("Add", ["c2", "r1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"]), helper.make_node("Sigmoid", ["c3"], ["r3"]),
        helper.make_node("Conv", ["r3", "w4"], ["c4"]), helper.make_node("Clip", ["c4", "lo", "hi"], ["r4"]),
        helper.make_node("Conv", ["r4", "w5"], ["c5"]), helper.make_node("LeakyRelu", ["c5"], ["r5"], alpha=0.2),
        helper.make_node("Conv", ["r5", "w6"], ["c6"]), helper.make_node("HardSigmoid", ["c6"], ["r6"]),
        helper.make_node("GlobalAveragePool", ["r6"], ["gp"]), helper.make_node("Flatten", ["gp"], ["fl"]),
        helper.make_node("Gemm", ["fl", "gw", "gb"], ["g1"], transB=1), helper.make_node("Relu", ["g1"], ["gr1"]),
        helper.make_node("Gemm", ["gr1", "gw2"], ["g2"], transB=1), helper.make_node("Tanh", ["g2"], ["gr2"]),
        helper.make_node("Gemm", ["gr2", "gw3"], ["g3"]), helper.make_node("LeakyRelu", ["g3"], ["gr3"], alpha=0.3),
        helper.make_node("MatMul", ["gr3", "mw"], ["mm"]), helper.make_node("Add", ["mm", "mb"], ["ma"]),
        helper.make_node("Softmax", ["ma"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _transformer_block() -> onnx.ModelProto:
    """Unfused LayerNorm, Gelu, QuickGelu, Transpose+MatMul and RMSNorm subgraphs at opset 13."""
    rng = np.random.default_rng(1)
    d = 8

    def init(name: str, a: np.ndarray | float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = [init("g", 1 + 0.1 * rng.standard_normal(d)), init("b", 0.1 * rng.standard_normal(d)), init("eps", 1e-5),
             init("two", 2.0), init("w", rng.standard_normal((d, d))), init("bias", rng.standard_normal(d)),
             init("half", 0.5), init("one", 1.0), init("sq2", 1.4142135), init("k", 1.702), init("sc", 0.5),
             init("w2", rng.standard_normal((d, d)))]
    n = helper.make_node
    nodes = [
        n("ReduceMean", ["x"], ["m"], axes=[-1]),
        n("Sub", ["x", "m"], ["d"]),
        n("Pow", ["d", "two"], ["p"]),
        n("ReduceMean", ["p"], ["v"], axes=[-1]),
        n("Add", ["v", "eps"], ["ve"]),
        n("Sqrt", ["ve"], ["s"]),
        n("Div", ["d", "s"], ["nn"]),
        n("Mul", ["nn", "g"], ["ng"]),
        n("Add", ["ng", "b"], ["ln"]),
        n("MatMul", ["ln", "w"], ["mm"]),
        n("Add", ["mm", "bias"], ["mb"]),
        n("Div", ["mb", "sq2"], ["e0"]),
        n("Erf", ["e0"], ["e1"]),
        n("Add", ["e1", "one"], ["e2"]),
        n("Mul", ["mb", "e2"], ["e3"]),
        n("Mul", ["e3", "half"], ["ge"]),
        n("Mul", ["ge", "k"], ["q0"]),
        n("Sigmoid", ["q0"], ["q1"]),
        n("Mul", ["ge", "q1"], ["qg"]),
        n("Transpose", ["w2"], ["w2t"], perm=[1, 0]),
        n("MatMul", ["qg", "w2t"], ["m2"]),
        n("Mul", ["m2", "sc"], ["m3"]),
        n("Add", ["m3", "x"], ["res"]),
        n("Pow", ["res", "two"], ["rp"]),
        n("ReduceMean", ["rp"], ["rv"], axes=[-1]),
        n("Add", ["rv", "eps"], ["rve"]),
        n("Sqrt", ["rve"], ["rs"]),
        n("Div", ["res", "rs"], ["rn"]),
        n("Mul", ["rn", "g"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", d])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", d])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("build,shape,expect", [
    (_cnn, (2, 3, 8, 8), {("com.microsoft", "FusedConv"), ("com.microsoft", "FusedGemm")}),
    (_transformer_block, (2, 3, 8), {("", "LayerNormalization"), ("", "SimplifiedLayerNormalization"),
                                     ("com.microsoft", "BiasGelu"), ("com.microsoft", "QuickGelu"),
                                     ("com.microsoft", "FusedMatMul")}),
], ids=["cnn", "transformer-block"])
def test_onnxruntime_extended_optimized_model(tmp_path, build, shape, expect):
    optimized = _save_optimized(build(), tmp_path / "opt.onnx")
    written = {(n.domain, n.op_type) for n in optimized.graph.node}
    assert expect <= written, written
    rng = np.random.default_rng(5)
    for batch in (shape[0], 1):
        feeds = {"x": _f(rng, batch, *shape[1:])}
        got, want = run_both(optimized, feeds)  # asserts every node ran on cpu
        assert_same(got, want, rtol=1e-4, atol=1e-5)
