"""cpu-only fusions (com.epoxy.cpu::FusedConv / FusedMatMul / FusedGemm): the passes fire on
their patterns at level ``extended`` and the fused kernels give the unfused results."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_ep_cpu.ops.fused import DOMAIN

F = TensorProto.FLOAT
RNG = np.random.default_rng(1)


def rand(*shape, dtype=np.float32):  # type: ignore[no-untyped-def]
    return RNG.standard_normal(shape).astype(dtype)


def init(name, array):  # type: ignore[no-untyped-def]
    return numpy_helper.from_array(np.asarray(array), name)


def build(nodes, inputs, outputs, inits=(), opset=17):  # type: ignore[no-untyped-def]
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


def sessions(model):  # type: ignore[no-untyped-def]
    plain = epoxy.InferenceSession(model, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(model, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="extended"))
    return plain, fused


def fused_ops(session) -> list[str]:  # type: ignore[no-untyped-def]
    return [n.op_type for n in session._graph.nodes]


def compare(model, feeds, rtol=1e-5, atol=1e-5):  # type: ignore[no-untyped-def]
    plain, fused = sessions(model)
    for a, b in zip(plain.run(None, feeds), fused.run(None, feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    return fused


ACTIVATIONS = [
    ("Relu", {}, []),
    ("LeakyRelu", {"alpha": 0.1}, []),
    ("LeakyRelu", {"alpha": 1.5}, []),  # outside [0, 1]: the kernel's slow path
    ("Clip", {}, [("lo", -0.5), ("hi", 0.7)]),
    ("Clip", {}, [("lo", 0.0)]),
    ("Sigmoid", {}, []),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, []),
    ("HardSwish", {}, []),
    ("Tanh", {}, []),
]


def _act_node(op, attrs, consts, x, y):  # type: ignore[no-untyped-def]
    names = [x] + [n for n, _ in consts]
    return helper.make_node(op, names, [y], **attrs), [init(n, np.array(v, np.float32)) for n, v in consts]


@pytest.mark.parametrize("op,attrs,consts", ACTIVATIONS)
def test_conv_activation(op, attrs, consts):  # type: ignore[no-untyped-def]
    act, extra = _act_node(op, attrs, consts, "c", "y")
    inits = [init("w", rand(6, 3, 3, 3)), init("b", rand(6)), *extra]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), act]
    m = build(
        nodes,
        [helper.make_tensor_value_info("x", F, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    fused = compare(m, {"x": rand(2, 3, 8, 8)})
    assert fused_ops(fused) == ["FusedConv"]
    assert fused._model.opset_imports[DOMAIN] == 1


@pytest.mark.parametrize("residual_op", ["Add", "Sum"])
@pytest.mark.parametrize("with_relu", [True, False])
def test_conv_residual(residual_op, with_relu):  # type: ignore[no-untyped-def]
    # resnet: Conv (BN folded) + shortcut, then Relu; grouped conv without bias
    inits = [init("w", rand(4, 2, 3, 3)), init("w2", rand(4, 4, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w2"], ["short"]),
             helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=2),
             helper.make_node(residual_op, ["short", "c"], ["s" if with_relu else "y"])]
    if with_relu:
        nodes.append(helper.make_node("Relu", ["s"], ["y"]))
    m = build(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    fused = compare(m, {"x": rand(1, 4, 6, 6)})
    assert fused_ops(fused) == ["Conv", "FusedConv"]


def test_conv_bn_relu_becomes_one_fused_conv():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(5, 3, 3, 3)), init("s", rand(5) + 2), init("bb", rand(5)), init("mu", rand(5)),
             init("var", np.abs(rand(5)) + 0.5)]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mu", "var"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["y"])]
    m = build(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, 3, 7, 7])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    fused = compare(m, {"x": rand(1, 3, 7, 7)}, rtol=1e-4, atol=1e-4)
    assert fused_ops(fused) == ["FusedConv"]


def test_conv_output_read_twice_is_not_fused():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(4, 3, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["c", "r"], ["y"])]
    m = build(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    fused = compare(m, {"x": rand(1, 3, 4, 4)})
    assert "FusedConv" not in fused_ops(fused)


def test_conv_float16():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(4, 3, 3, 3, dtype=np.float16)), init("b", rand(4, dtype=np.float16))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    m = build(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 5, 5])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], inits)
    fused = compare(m, {"x": rand(1, 3, 5, 5, dtype=np.float16)}, rtol=1e-3, atol=1e-3)
    assert fused_ops(fused) == ["FusedConv"]


def _gelu_nodes(x: str, y: str) -> tuple[list, list]:  # type: ignore[type-arg]
    inits = [init("sqrt2", np.array(math.sqrt(2), np.float32)), init("one", np.array(1, np.float32)),
             init("half", np.array(0.5, np.float32))]
    nodes = [helper.make_node("Div", [x, "sqrt2"], ["g_d"]), helper.make_node("Erf", ["g_d"], ["g_e"]),
             helper.make_node("Add", ["g_e", "one"], ["g_a"]), helper.make_node("Mul", [x, "g_a"], ["g_m"]),
             helper.make_node("Mul", ["g_m", "half"], [y])]
    return nodes, inits


@pytest.mark.parametrize("rank", [2, 3])
def test_matmul_bias_gelu(rank):  # type: ignore[no-untyped-def]
    gelu, ginits = _gelu_nodes("h", "y")
    inits = [init("w", rand(8, 16)), init("b", rand(16)), *ginits]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["h"]), *gelu]
    shape = [5, 8] if rank == 2 else [2, 5, 8]
    m = build(
        nodes, [helper.make_tensor_value_info("x", F, shape)], [helper.make_tensor_value_info("y", F, None)], inits
    )
    fused = compare(m, {"x": rand(*shape)})
    # 2-D: the core's MatMul+Add -> Gemm may have run first (then it is a FusedGemm)
    assert fused_ops(fused) == ["FusedMatMul"] if rank == 3 else fused_ops(fused) in (["FusedMatMul"], ["FusedGemm"])
    node = fused._graph.nodes[0]
    assert node.attributes["activation"] == "Gelu" and node.inputs[2] == "b"


def test_matmul_bias_with_broadcasting_addend():  # type: ignore[no-untyped-def]
    # the addend grows the result: the kernel must not write it into the product
    inits = [init("w", rand(8, 4))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "z"], ["y"])]
    m = build(nodes, [helper.make_tensor_value_info("x", F, [5, 8]), helper.make_tensor_value_info("z", F, [3, 5, 4])],
              [helper.make_tensor_value_info("y", F, None)], inits)
    fused = compare(m, {"x": rand(5, 8), "z": rand(3, 5, 4)})
    assert fused_ops(fused) == ["FusedMatMul"]


def test_matmul_plus_an_addend_computed_after_it():  # type: ignore[no-untyped-def]
    """The addend is made by a node placed after the MatMul: the fused node goes after both
    (the MatMul turned into it in place would read the addend before it is computed); a
    constant bias and a graph input make the MatMul itself the fused node."""
    inits = [init("w", rand(8, 4)), init("b", rand(4))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Neg", ["z"], ["nz"]),
             helper.make_node("Add", ["mm", "nz"], ["s"]), helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("MatMul", ["x", "w"], ["mm2"], name="second"),
             helper.make_node("Add", ["mm2", "b"], ["y2"]),
             helper.make_node("MatMul", ["x", "w"], ["mm3"], name="third"),
             helper.make_node("Add", ["z", "mm3"], ["y3"])]
    # rank 3: a 2-D MatMul + Add would become a Gemm first
    m = build(nodes, [helper.make_tensor_value_info("x", F, [2, 5, 8]), helper.make_tensor_value_info("z", F, [5, 4])],
              [helper.make_tensor_value_info(n, F, None) for n in ("y", "y2", "y3")], inits, opset=13)
    fused = compare(m, {"x": rand(2, 5, 8), "z": rand(5, 4)})
    specs = fused._graph.nodes
    assert [n.op_type for n in specs].count("FusedMatMul") == 3
    order = [n.op_type if n.op_type != "FusedMatMul" else n.inputs[2] for n in specs]
    assert order.index("Neg") < order.index("nz")  # the fused node reading Neg's output comes after it
    assert {n.name for n in specs if n.op_type == "FusedMatMul" and n.inputs[2] in ("b", "z")} == {"second", "third"}


def test_gemm_relu():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(6, 8)), init("b", rand(6))]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1, alpha=0.5),
             helper.make_node("Relu", ["g"], ["y"])]
    m = build(
        nodes, [helper.make_tensor_value_info("x", F, [3, 8])], [helper.make_tensor_value_info("y", F, None)], inits
    )
    fused = compare(m, {"x": rand(3, 8)})
    assert fused_ops(fused) == ["FusedGemm"]


@pytest.mark.parametrize("op", ["HardSwish", "HardSigmoid"])
def test_gemm_hard_activation(op):  # type: ignore[no-untyped-def]
    """MobileNetV3's classifier: Linear + Hardswish becomes one FusedGemm."""
    inits = [init("w", rand(6, 8)), init("b", rand(6))]
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1), helper.make_node(op, ["g"], ["y"])]
    m = build(
        nodes, [helper.make_tensor_value_info("x", F, [3, 8])], [helper.make_tensor_value_info("y", F, None)], inits
    )
    fused = compare(m, {"x": rand(3, 8) * 4}, rtol=0, atol=0)
    assert fused_ops(fused) == ["FusedGemm"]


def _silu_model(head: str, *, order: str = "xs", extra_reader: str = "", residual: bool = False):  # type: ignore[no-untyped-def]
    """``head`` (Conv 3->6 or MatMul 8->6), [+ residual Add,] then SiLU as exporters write it:
    ``Mul(h, Sigmoid(h))`` (``order`` "sx": the Mul's operands swapped); ``extra_reader``: a
    third reader of h ("h") or of the sigmoid ("s"), which keeps the nodes apart."""
    if head == "Conv":
        inits = [init("w", rand(6, 3, 3, 3)), init("b", rand(6))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
        x_info, shape = helper.make_tensor_value_info("x", F, [2, 3, 8, 8]), (2, 3, 8, 8)
    else:
        inits = [init("w", rand(8, 6))]
        nodes = [helper.make_node("MatMul", ["x", "w"], ["c"])]
        x_info, shape = helper.make_tensor_value_info("x", F, [4, 8]), (4, 8)
    h = "c"
    if residual:
        inits.append(init("r", rand(6, 1, 1) if head == "Conv" else rand(6)))
        nodes.append(helper.make_node("Add", ["c", "r"], ["h"]))
        h = "h"
    nodes.append(helper.make_node("Sigmoid", [h], ["s"]))
    nodes.append(helper.make_node("Mul", [h, "s"] if order == "xs" else ["s", h], ["y"]))
    outputs = [helper.make_tensor_value_info("y", F, None)]
    if extra_reader:
        nodes.append(helper.make_node("Neg", [h if extra_reader == "h" else "s"], ["other"]))
        outputs.append(helper.make_tensor_value_info("other", F, None))
    return build(nodes, [x_info], outputs, inits), {"x": rand(*shape) * 4}


@pytest.mark.parametrize("head", ["Conv", "MatMul"])
@pytest.mark.parametrize("order", ["xs", "sx"])
@pytest.mark.parametrize("residual", [False, True])
def test_silu_becomes_the_fused_activation(head, order, residual):  # type: ignore[no-untyped-def]
    model, feeds = _silu_model(head, order=order, residual=residual)
    fused = compare(model, feeds)
    # 2-D MatMul + Add: the core's Gemm rewrite may run first (then a FusedGemm)
    assert fused_ops(fused) in ([["FusedConv"]] if head == "Conv" else [["FusedMatMul"], ["FusedGemm"]])
    assert fused._graph.nodes[0].attributes["activation"] in ("SiLU", b"SiLU")


@pytest.mark.parametrize("extra_reader", ["h", "s"])
def test_silu_with_another_reader_is_not_fused(extra_reader):  # type: ignore[no-untyped-def]
    model, feeds = _silu_model("Conv", extra_reader=extra_reader)
    fused = compare(model, feeds)
    assert "Sigmoid" in fused_ops(fused) and "Mul" in fused_ops(fused)


def test_fusions_do_not_run_at_basic():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(4, 3, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    m = build(
        nodes,
        [helper.make_tensor_value_info("x", F, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", F, None)],
        inits,
    )
    basic = epoxy.InferenceSession(m, providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="basic"))
    assert fused_ops(basic) == ["Conv", "Relu"]


# -- BatchNormalization + activation (densenet's pre-activation blocks) -------------------------
def _bn_model(act: str, act_attrs: dict, extra: list, opset: int = 17, training: bool = False):  # type: ignore[no-untyped-def]
    inits = [init("s", rand(6) + 2), init("bb", rand(6)), init("mu", rand(6)), init("var", np.abs(rand(6)) + 0.5)]
    inits += [init(name, np.array(v, np.float32)) for name, v in extra]
    bn_attrs = {"training_mode": 1} if training else {}
    nodes = [helper.make_node("Concat", ["x", "x2"], ["cat"], axis=1),  # nothing to fold the BatchNorm into
             helper.make_node("BatchNormalization", ["cat", "s", "bb", "mu", "var"], ["bn"], epsilon=1e-3,
                              **bn_attrs),
             helper.make_node(act, ["bn", *[name for name, _ in extra]], ["y"], **act_attrs)]
    return build(nodes, [helper.make_tensor_value_info("x", F, ["n", 4, 5, 5]),
                         helper.make_tensor_value_info("x2", F, ["n", 2, 5, 5])],
                 [helper.make_tensor_value_info("y", F, None)], inits, opset)


@pytest.mark.parametrize("jit", [True, False])
@pytest.mark.parametrize(("act", "attrs", "extra"), [a for a in ACTIVATIONS if a[0] in ("Relu", "LeakyRelu", "Clip")],
                         ids=lambda v: str(v))
def test_batch_norm_activation_becomes_one_node_with_the_unfused_values(act, attrs, extra, jit, monkeypatch):  # type: ignore[no-untyped-def]
    """Bit for bit the unfused nodes' values; with jit on, in the compiled pass (counted)."""
    calls: list[int] = []
    if jit:
        from epoxy_ep_cpu.jit import kernels_normalization

        real = kernels_normalization.BatchNormKernel.__call__
        monkeypatch.setattr(kernels_normalization.BatchNormKernel, "__call__",
                            lambda self, x, out=None: calls.append(self._act[0]) or real(self, x, out))
    model = _bn_model(act, attrs, extra)
    feeds = {"x": rand(2, 4, 5, 5), "x2": rand(2, 2, 5, 5)}
    feeds["x"][0, 0, 0, :3] = [np.nan, np.inf, -np.inf]
    plain = epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(model, providers=[("cpu", {"jit": jit})])
    assert fused_ops(fused) == ["Concat", "FusedBatchNormalization"]
    for _ in range(2):
        np.testing.assert_array_equal(fused.run(None, feeds)[0], plain.run(None, feeds)[0])
    # the fused pass (activation code > 0) ran twice; the plain session's BatchNorm ran bare (code 0)
    assert sorted(calls) == ([0, 0] + [{"Relu": 1, "LeakyRelu": 2, "Clip": 3}[act]] * 2 if jit else [])


def test_batch_norm_in_training_mode_or_followed_by_sigmoid_is_not_fused():  # type: ignore[no-untyped-def]
    sigmoid = _bn_model("Sigmoid", {}, [])
    assert "FusedBatchNormalization" not in fused_ops(sessions(sigmoid)[1])
    training = _bn_model("Relu", {}, [], opset=15, training=True)
    assert "FusedBatchNormalization" not in fused_ops(
        epoxy.InferenceSession(training, providers=["cpu"],
                               sess_options=epoxy.SessionOptions(graph_optimization_level="extended")))
