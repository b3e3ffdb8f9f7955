"""The core's rewrite passes: each fires on its pattern, leaves look-alikes alone, and the
outputs before and after agree (onnx.reference as the oracle, random weights)."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from epoxy import InferenceSession, SessionOptions
from epoxy.optimize.passes import (
    BatchNormAffineFoldPass,
    CastEliminationPass,
    ConstantFoldingPass,
    ConvAffineFoldPass,
    ConvBatchNormFoldPass,
    DropoutEliminationPass,
    GeluFusionPass,
    IdentityEliminationPass,
    LayerNormFusionPass,
    LegacyInitializerInputsPass,
    MatMulAddToGemmPass,
    MatMulAffineFoldPass,
    ReshapeTransposeSimplifyPass,
    RMSNormFusionPass,
)

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def vi(name, shape, elem=F):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, shape)


def init(name, array):  # type: ignore[no-untyped-def]
    return numpy_helper.from_array(np.asarray(array), name)


def rand(*shape, scale=1.0, dtype=np.float32):  # type: ignore[no-untyped-def]
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def model(nodes, inputs, outputs, inits=(), opset=17, ir_version=8):  # type: ignore[no-untyped-def]
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return onnx.shape_inference.infer_shapes(m)


def run_ref(proto, feeds):  # type: ignore[no-untyped-def]
    return ReferenceEvaluator(proto).run(None, feeds)


def apply(proto, *passes, bump_opset=None):  # type: ignore[no-untyped-def]
    """Run the passes on a copy of ``proto``; return (optimized proto, ir model, counts)."""
    m = ir.serde.deserialize_model(proto)
    counts = []
    for p in passes:
        p(m)
        counts.append(getattr(p, "count", None))
    if bump_opset:
        m.opset_imports[""] = max(m.opset_imports.get("", 1), bump_opset)
    return ir.serde.serialize_model(m), m, counts


def ops(m: ir.Model) -> list[str]:
    return [n.op_type for n in m.graph]


def check_same(before, after, feeds, rtol=1e-5, atol=1e-5):  # type: ignore[no-untyped-def]
    onnx.checker.check_model(after)
    for a, b in zip(run_ref(before, feeds), run_ref(after, feeds)):
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)


# -- Dropout -----------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [9, 12, 17])
def test_dropout_eliminated(opset):  # type: ignore[no-untyped-def]
    extra = {"ratio": 0.3} if opset < 12 else {}
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Dropout", ["r"], ["d"], **extra),
             helper.make_node("Neg", ["d"], ["y"])]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], opset=opset)
    after, im, counts = apply(m, DropoutEliminationPass())
    assert counts == [1] and ops(im) == ["Relu", "Neg"]
    check_same(m, after, {"x": rand(2, 3)})


def test_dropout_as_graph_output_keeps_the_name():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Dropout", ["r"], ["y"])]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])
    after, im, _ = apply(m, DropoutEliminationPass())
    assert ops(im) == ["Relu"] and [o.name for o in im.graph.outputs] == ["y"]
    check_same(m, after, {"x": rand(2, 3)})


def test_dropout_kept_when_training_or_mask_used():  # type: ignore[no-untyped-def]
    t = init("t", np.array(True))
    nodes = [helper.make_node("Dropout", ["x", "", "t"], ["y"])]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])], [t])
    assert apply(m, DropoutEliminationPass())[2] == [0]
    nodes = [helper.make_node("Dropout", ["x"], ["y", "mask"])]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3]), vi("mask", [2, 3], TensorProto.BOOL)])
    assert apply(m, DropoutEliminationPass())[2] == [0]


# -- Identity ------------------------------------------------------------------------------
def test_identity_eliminated_and_a_graph_output_keeps_its_name():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
             helper.make_node("Neg", ["i"], ["n"]), helper.make_node("Identity", ["n"], ["y"])]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])])
    after, im, counts = apply(m, IdentityEliminationPass())
    assert counts == [2] and ops(im) == ["Relu", "Neg"] and [o.name for o in im.graph.outputs] == ["y"]
    check_same(m, after, {"x": rand(2, 3)})


@pytest.mark.parametrize("outputs", [["a", "b"], ["b", "a"]])
def test_identity_between_two_graph_outputs_is_kept(outputs, make_registry):  # type: ignore[no-untyped-def]
    """onnx_ir's pass renamed ``a`` to ``b`` here: the model lost its output ``a``."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Identity", ["a"], ["b"])]
    m = model(nodes, [vi("x", [2, 3])], [vi(n, [2, 3]) for n in outputs])
    after, im, counts = apply(m, IdentityEliminationPass())
    assert counts == [0] and [o.name for o in im.graph.outputs] == outputs
    check_same(m, after, {"x": rand(2, 3)})
    sess = InferenceSession(m, providers=["cpu"], registry=make_registry())  # the basic level's passes
    assert [o.name for o in sess.get_outputs()] == outputs
    x = rand(2, 3)
    got = sess.run(None, {"x": x})
    for value in got:
        np.testing.assert_array_equal(value, np.maximum(x, 0))


def test_identity_of_a_graph_input_to_a_graph_output_is_kept():  # type: ignore[no-untyped-def]
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    assert apply(m, IdentityEliminationPass())[2] == [0]


# -- Cast to its own type ------------------------------------------------------------------
def test_cast_to_the_type_it_reads_is_eliminated():  # type: ignore[no-untyped-def]
    """Same-type Cast and CastLike go (a graph output keeps its name); real conversions stay."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=F),
             helper.make_node("CastLike", ["c", "x"], ["l"]),
             helper.make_node("Cast", ["l"], ["d"], to=TensorProto.DOUBLE),
             helper.make_node("Cast", ["d"], ["y"], to=F), helper.make_node("Neg", ["y"], ["n"]),
             helper.make_node("Cast", ["n"], ["z"], to=F)]
    m = model(nodes, [vi("x", [2, 3])], [vi("y", [2, 3]), vi("z", [2, 3])])
    after, im, counts = apply(m, CastEliminationPass())
    assert counts == [3] and ops(im) == ["Relu", "Cast", "Cast", "Neg"]
    assert [o.name for o in im.graph.outputs] == ["y", "z"]
    check_same(m, after, {"x": rand(2, 3)})


def test_cast_of_a_graph_input_to_a_graph_output_or_of_an_unknown_type_is_kept():  # type: ignore[no-untyped-def]
    m = model([helper.make_node("Cast", ["x"], ["y"], to=F)], [vi("x", [2])], [vi("y", [2])])
    assert apply(m, CastEliminationPass())[2] == [0]
    untyped = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Cast", ["r"], ["c"], to=F),
         helper.make_node("Neg", ["c"], ["y"])], "g", [vi("x", [2])], [vi("y", [2])]),
        opset_imports=[helper.make_opsetid("", 17)])  # not shape-inferred: r's type is unknown
    assert apply(untyped, CastEliminationPass())[2] == [0]


def test_an_rms_norm_between_float_round_trips_takes_its_weight():  # type: ignore[no-untyped-def]
    """TorchScript's Llama: Cast(x, float) -> RMSNorm -> Cast(float) -> Mul(weight), all float32:
    with the Casts gone the weight is the norm's scale (one node, the same values)."""
    base = _rms_model(opset=18, gamma="first")
    nodes = [helper.make_node("Cast", ["x_in"], ["x"], to=F)] + list(base.graph.node)
    last = nodes[-1]  # Mul(gamma, n)
    nodes[-1:] = [helper.make_node("Cast", ["n"], ["n_back"], to=F),
                  helper.make_node("Mul", [last.input[0], "n_back"], ["y"])]
    m = model(nodes, [vi("x_in", [2, 5, 16])], [vi("y", [2, 5, 16])], list(base.graph.initializer), opset=18)
    after, im, counts = apply(m, CastEliminationPass(), RMSNormFusionPass(), bump_opset=23)
    assert counts == [2, 1] and ops(im) == ["RMSNormalization"]
    check_same(m, after, {"x_in": rand(2, 5, 16)})


# -- legacy initializers + constant folding -------------------------------------------------
def test_legacy_initializer_inputs_and_constant_of_shape_folding():  # type: ignore[no-untyped-def]
    shape = init("w_shape", np.array([4, 3, 1, 1], np.int64))
    cos = helper.make_node("ConstantOfShape", ["w_shape"], ["w"], value=helper.make_tensor("v", F, [1], [0.5]))
    conv = helper.make_node("Conv", ["x", "w"], ["y"])
    m = model([cos, conv], [vi("x", [1, 3, 5, 5]), vi("w_shape", [4], TensorProto.INT64)], [vi("y", None)],
              [shape], opset=9, ir_version=3)
    # IR 3: w_shape is an input too, so nothing is constant until the legacy pass runs
    assert apply(m, ConstantFoldingPass())[2] == [0]
    after, im, counts = apply(m, LegacyInitializerInputsPass(), ConstantFoldingPass())
    assert counts[1] == 1 and ops(im) == ["Conv"] and [v.name for v in im.graph.inputs] == ["x"]
    np.testing.assert_array_equal(
        im.graph.initializers["w"].const_value.numpy(), np.full((4, 3, 1, 1), 0.5, np.float32)
    )
    check_same(m, after, {"x": rand(1, 3, 5, 5)})


def test_legacy_pass_leaves_modern_models_alone():  # type: ignore[no-untyped-def]
    m = model([helper.make_node("Add", ["x", "c"], ["y"])], [vi("x", [2]), vi("c", [2])], [vi("y", [2])],
              [init("c", np.ones(2, np.float32))])
    _, im, _ = apply(m, LegacyInitializerInputsPass(), ConstantFoldingPass())
    assert [v.name for v in im.graph.inputs] == ["x", "c"] and ops(im) == ["Add"]


def test_constant_folding_chain():  # type: ignore[no-untyped-def]
    nodes = [
        helper.make_node("Unsqueeze", ["v", "axes"], ["u"]),
        helper.make_node("Transpose", ["u"], ["ut"], perm=[1, 0]),
        helper.make_node("Reshape", ["ut", "shape"], ["ur"]),
        helper.make_node("Add", ["x", "ur"], ["y"]),
    ]
    inits = [init("v", rand(3)), init("axes", np.array([1], np.int64)), init("shape", np.array([0, -1], np.int64))]
    m = model(nodes, [vi("x", [1, 3])], [vi("y", [1, 3])], inits, opset=13)
    after, im, counts = apply(m, ConstantFoldingPass())
    assert counts == [3] and ops(im) == ["Add"]
    check_same(m, after, {"x": rand(1, 3)})


def test_constant_folding_keeps_a_scalar_a_scalar():  # type: ignore[no-untyped-def]
    """Squeeze([0], axes=[0]) folds to a 0-d initializer (it became [0] once, found by output
    checks on the ONNX Attention function: Gather then returned rank 1 for a scalar)."""
    nodes = [helper.make_node("Squeeze", ["zero", "zero"], ["scalar"]), helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "scalar"], ["y"])]
    m = model(nodes, [vi("x", [2, 3])], [helper.make_tensor_value_info("y", TensorProto.INT64, [])],
              [init("zero", np.array([0], np.int64))], opset=13)
    after, im, counts = apply(m, ConstantFoldingPass())
    assert counts == [1] and ops(im) == ["Shape", "Gather"]
    (folded,) = [v for v in im.graph.initializers.values() if v.name == "scalar"]
    assert folded.const_value.numpy().shape == ()


# -- Conv + BatchNormalization / affine folding ------------------------------------------
def _conv_bn_model(op="Conv", group=1, with_bias=True, extra=()):  # type: ignore[no-untyped-def]
    c, m_ = 4, 6
    if op == "Conv":
        w = rand(m_, c // group, 3, 3)
    else:
        w = rand(c, m_ // group, 3, 3)
    inits = [init("w", w), init("scale", rand(m_) + 1.5), init("bias", rand(m_)), init("mean", rand(m_)),
             init("var", np.abs(rand(m_)) + 0.1)]
    conv_in = ["x", "w"]
    if with_bias:
        inits.append(init("b", rand(m_)))
        conv_in.append("b")
    nodes = [helper.make_node(op, conv_in, ["c"], pads=[1, 1, 1, 1], group=group),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], epsilon=1e-3)]
    last = "bn"
    for i, (kind, shape) in enumerate(extra):
        inits.append(init(f"k{i}", rand(*shape) + (2.0 if kind in ("Mul", "Div") else 0.0)))
        nodes.append(helper.make_node(kind, [last, f"k{i}"], [f"e{i}"]))
        last = f"e{i}"
    nodes.append(helper.make_node("Relu", [last], ["y"]))
    return model(nodes, [vi("x", [2, c, 7, 7])], [vi("y", None)], inits)


@pytest.mark.parametrize("op,group,bias", [("Conv", 1, True), ("Conv", 2, False), ("ConvTranspose", 1, True)])
def test_conv_bn_folded(op, group, bias):  # type: ignore[no-untyped-def]
    m = _conv_bn_model(op, group, bias)
    after, im, counts = apply(m, ConvBatchNormFoldPass())
    assert counts == [1] and ops(im) == [op, "Relu"]
    check_same(m, after, {"x": rand(2, 4, 7, 7)}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,axis,dtype", [((300, 64, 3, 3), 0, np.float32), ((64, 300, 3, 3), 1, np.float32),
                                               ((2000, 3000, 1, 1), 0, np.float32), ((7, 5), 0, np.float16),
                                               ((0, 3), 1, np.float32)])
def test_scaled_per_channel_rounds_each_product_once(shape, axis, dtype):  # type: ignore[no-untyped-def]
    # the folded weight is the float64 product rounded once (the whole float64 array as the oracle)
    from epoxy.kit import passes as kit_passes

    w = RNG.standard_normal(shape).astype(dtype)
    scale = RNG.standard_normal(shape[axis])
    expected = (w.astype(np.float64) * kit_passes.per_channel(scale, w.ndim, axis)).astype(dtype)
    got = kit_passes.scaled_per_channel(w, scale, axis)
    assert got.dtype == dtype and got.shape == w.shape
    assert np.array_equal(got.view(np.uint8), expected.view(np.uint8))


def test_conv_bn_not_folded_when_conv_output_is_shared():  # type: ignore[no-untyped-def]
    m = _conv_bn_model()
    g = m.graph
    g.output.append(vi("c", None))
    assert apply(m, ConvBatchNormFoldPass())[2] == [0]


def test_bn_then_per_channel_mul_add_fold_into_conv():  # type: ignore[no-untyped-def]
    # densenet / inception_v2 style: BN followed by an unsqueezed per-channel scale and shift
    # (the Conv+BN fold takes the chain too: one scaling of W, one new conv)
    m = _conv_bn_model(extra=[("Mul", (6, 1, 1)), ("Add", (1, 6, 1, 1)), ("Sub", (6, 1, 1)), ("Div", (1,))])
    after, im, counts = apply(m, ConvBatchNormFoldPass(), ConvAffineFoldPass())
    assert counts == [1, 0] and ops(im) == ["Conv", "Relu"]
    check_same(m, after, {"x": rand(2, 4, 7, 7)}, rtol=1e-4, atol=1e-4)


def test_a_conv_bn_fold_takes_the_chain_after_the_bn_with_factors_composed_in_float64():  # type: ignore[no-untyped-def]
    """The folded weight is W * (bn_scale * chain_scale), each element rounded once."""
    m = _conv_bn_model(extra=[("Mul", (6, 1, 1)), ("Add", (1, 6, 1, 1))])
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    _, im, counts = apply(m, ConvBatchNormFoldPass())
    assert counts == [1]
    conv = next(n for n in im.graph if n.op_type == "Conv")
    w, scale, var, k0 = (inits[n].astype(np.float64) for n in ("w", "scale", "var", "k0"))
    factors = (scale / np.sqrt(var + 1e-3)) * k0.reshape(-1)
    expected = (w * factors.reshape(-1, 1, 1, 1)).astype(np.float32)
    assert np.array_equal(conv.inputs[1].const_value.numpy(), expected)


def test_a_refold_rewrites_its_own_weights_in_place_and_never_the_users():  # type: ignore[no-untyped-def]
    """The Mul/Add fold makes the folded weight; the Conv+BN fold after it scales that array in place
    (the one it made, read by one node), not a copy. The user's weights (an in-memory model's
    arrays) come out of both folds untouched."""
    proto = _conv_bn_model()
    # a per-channel Mul between the conv and the BN: the Mul/Add fold goes first, then Conv+BN
    conv, bn = proto.graph.node[0], proto.graph.node[1]
    conv.output[0] = "c0"
    proto.graph.node.insert(1, helper.make_node("Mul", ["c0", "k"], ["c"]))
    proto.graph.initializer.append(init("k", rand(6, 1, 1) + 2.0))
    assert bn.input[0] == "c"
    user_w = numpy_helper.to_array(next(i for i in proto.graph.initializer if i.name == "w")).copy()
    m = ir.serde.deserialize_model(proto)
    held = m.graph.initializers["w"]
    held.const_value = ir.Tensor(user_w)  # the user's own array, as an in-memory model holds it
    before = user_w.copy()
    ConvAffineFoldPass()(m)
    first = next(n for n in m.graph if n.op_type == "Conv").inputs[1].const_value.numpy()
    ConvBatchNormFoldPass()(m)
    second = next(n for n in m.graph if n.op_type == "Conv").inputs[1].const_value.numpy()
    assert second is first and np.shares_memory(second, first)  # scaled in place
    assert np.array_equal(user_w.view(np.uint32), before.view(np.uint32))  # the user's array as it was
    check_same(proto, ir.serde.serialize_model(m), {"x": rand(2, 4, 7, 7)}, rtol=1e-4, atol=1e-4)


def _held_as(proto, own):  # type: ignore[no-untyped-def]
    """``proto`` as an onnx_ir model whose initializers hold arrays of ours, marked as a pass's
    own (``own``: as folded fills are) or not (a model's own data); the arrays and copies."""
    from epoxy.kit.passes import PASS_MADE

    m = ir.serde.deserialize_model(proto)
    arrays = {}
    for name, value in m.graph.initializers.items():
        arrays[name] = value.const_value.numpy().copy()
        value.const_value = ir.Tensor(arrays[name])
        value.const_value.meta[PASS_MADE] = own
    return m, arrays, {name: array.copy() for name, array in arrays.items()}


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_conv_bn_fold_of_a_passs_own_arrays_writes_into_them(with_bias):  # type: ignore[no-untyped-def]
    """Weights and BN parameters a pass made (folded fills): the weight is scaled in its own
    initializer and the bias written into the conv's bias or, without one, into the BN's
    shift: no initializer added. The model's own arrays get new ones and stay as they were."""
    proto = _conv_bn_model(with_bias=with_bias)
    for own in (True, False):
        m, arrays, before = _held_as(proto, own)
        names = set(m.graph.initializers)
        ConvBatchNormFoldPass()(m)
        conv = next(n for n in m.graph if n.op_type == "Conv")
        w, b = conv.inputs[1], conv.inputs[2]
        if own:
            assert set(m.graph.initializers) <= names  # nothing added
            assert w.name == "w" and w.const_value.numpy() is arrays["w"]
            assert b.name == ("b" if with_bias else "bias") and b.const_value.numpy() is arrays[b.name]
        else:
            assert w.name not in names and b.name not in names  # new initializers
            assert all(np.array_equal(arrays[n], before[n]) for n in arrays)
        check_same(proto, ir.serde.serialize_model(m), {"x": rand(2, 4, 7, 7)}, rtol=1e-4, atol=1e-4)


def test_a_bn_affine_fold_of_a_passs_own_parameters_writes_into_them():  # type: ignore[no-untyped-def]
    """BN -> Mul -> Add folded into the BN: its parameters, when a pass's own, are rewritten
    where they are; the model's own get new initializers and stay as they were."""
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "b", "mu", "v"], ["bn"], epsilon=1e-3),
             helper.make_node("Mul", ["bn", "k"], ["scaled"]), helper.make_node("Add", ["scaled", "t"], ["y"])]
    inits = [init("g", rand(6) + 1.5), init("b", rand(6)), init("mu", rand(6)), init("v", np.abs(rand(6)) + 0.1),
             init("k", rand(6, 1, 1) + 2.0), init("t", rand(1, 6, 1, 1))]
    proto = model(nodes, [vi("x", [2, 6, 5, 5])], [vi("y", [2, 6, 5, 5])], inits)
    for own in (True, False):
        m, arrays, before = _held_as(proto, own)
        names = set(m.graph.initializers)
        assert BatchNormAffineFoldPass()(m).modified and ops(m) == ["BatchNormalization"]
        params = next(iter(m.graph)).inputs[1:]
        if own:
            assert [p.name for p in params] == ["g", "b", "mu", "v"]
            assert all(p.const_value.numpy() is arrays[p.name] for p in params)
        else:
            assert not {p.name for p in params} & names  # new initializers
            assert all(np.array_equal(arrays[n], before[n]) for n in arrays)
        check_same(proto, ir.serde.serialize_model(m), {"x": rand(2, 6, 5, 5)}, rtol=1e-4, atol=1e-4)


def test_rewritable_only_for_a_passs_own_single_use_arrays():  # type: ignore[no-untyped-def]
    from epoxy.kit import passes as kit_passes

    graph = ir.Graph([], [], nodes=[])
    made = kit_passes.add_initializer(graph, None, "made", np.ones((4, 3), np.float32), fresh=True)
    view = kit_passes.add_initializer(graph, None, "view", made.const_value.numpy()[1:], fresh=True)
    kept = kit_passes.add_initializer(graph, None, "kept", np.ones(3, np.float32))  # not claimed fresh
    users = ir.Value(name="users", const_value=ir.Tensor(np.ones(3, np.float32)))
    graph.register_initializer(users)
    x = ir.Value(name="x")
    for k, value in enumerate((made, view, kept, users)):
        graph.append(ir.Node("", "Add", [x, value], outputs=[ir.Value(name=f"a{k}")]))
    assert kit_passes.rewritable(made, made.const_value.numpy())
    assert not kit_passes.rewritable(users, users.const_value.numpy())  # the model's own
    assert not kit_passes.rewritable(kept, kept.const_value.numpy())  # a pass's, not claimed fresh
    assert not kit_passes.rewritable(view, view.const_value.numpy())  # a view: its memory is shared
    graph.append(ir.Node("", "Mul", [x, made], outputs=[ir.Value(name="b")]))
    assert not kit_passes.rewritable(made, made.const_value.numpy())  # two readers


def test_bn_affine_fold_without_conv():  # type: ignore[no-untyped-def]
    inits = [init("scale", rand(5) + 1.5), init("bias", rand(5)), init("mean", rand(5)),
             init("var", np.abs(rand(5)) + 0.1), init("s", rand(5, 1, 1)), init("t", rand(5, 1, 1))]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["bn"]),
             helper.make_node("Mul", ["bn", "s"], ["m"]), helper.make_node("Add", ["t", "m"], ["y"])]
    # (opset 15: onnx.reference's BatchNormalization-9 does not compute inference mode)
    m = model(nodes, [vi("x", [1, 5, 4, 4])], [vi("y", [1, 5, 4, 4])], inits, opset=15)
    after, im, counts = apply(m, BatchNormAffineFoldPass())
    assert counts == [1] and ops(im) == ["BatchNormalization"]
    check_same(m, after, {"x": rand(1, 5, 4, 4)}, rtol=1e-4, atol=1e-4)


def test_conv_add_bias_folding_and_non_channel_constants_left_alone():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(3, 2, 1, 1)), init("b", rand(1, 3, 1, 1)), init("full", rand(1, 3, 4, 4))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "b"], ["a"]),
             helper.make_node("Add", ["a", "full"], ["y"])]
    m = model(nodes, [vi("x", [1, 2, 4, 4])], [vi("y", [1, 3, 4, 4])], inits)
    after, im, counts = apply(m, ConvAffineFoldPass())
    assert counts == [1] and ops(im) == ["Conv", "Add"]
    check_same(m, after, {"x": rand(1, 2, 4, 4)})


def test_conv_with_dynamic_weights_is_not_folded():  # type: ignore[no-untyped-def]
    inits = [init("b", rand(3, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "b"], ["y"])]
    m = model(nodes, [vi("x", [1, 2, 4, 4]), vi("w", [3, 2, 1, 1])], [vi("y", None)], inits)
    assert apply(m, ConvAffineFoldPass())[2] == [0]


# -- MatMul + Add -> Gemm --------------------------------------------------------------------
@pytest.mark.parametrize("bias_shape,fires", [((5,), True), ((1, 5), True), ((3, 5), True), ((2, 3, 5), False)])
def test_matmul_add_to_gemm(bias_shape, fires):  # type: ignore[no-untyped-def]
    inits = [init("w", rand(4, 5)), init("b", rand(*bias_shape))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["b", "mm"], ["y"])]
    m = model(nodes, [vi("x", [3, 4])], [vi("y", None)], inits)
    after, im, counts = apply(m, MatMulAddToGemmPass())
    assert counts == [int(fires)]
    assert ops(im) == (["Gemm"] if fires else ["MatMul", "Add"])
    check_same(m, after, {"x": rand(3, 4)})


def test_matmul_add_3d_is_not_gemm():  # type: ignore[no-untyped-def]
    inits = [init("w", rand(4, 5)), init("b", rand(5))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"])]
    m = model(nodes, [vi("x", [2, 3, 4])], [vi("y", None)], inits)
    assert apply(m, MatMulAddToGemmPass())[2] == [0]


# -- Reshape / Transpose ---------------------------------------------------------------------
def test_transpose_chains():  # type: ignore[no-untyped-def]
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 3, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 3, 1, 2]),  # inverse: gone
             helper.make_node("Transpose", ["t2"], ["t3"], perm=[1, 0, 2, 3]),
             helper.make_node("Transpose", ["t3"], ["y"], perm=[0, 1, 3, 2])]
    m = model(nodes, [vi("x", [2, 3, 4, 5])], [vi("y", None)])
    after, im, counts = apply(m, ReshapeTransposeSimplifyPass())
    assert ops(im) == ["Transpose"]
    check_same(m, after, {"x": rand(2, 3, 4, 5)})


def test_reshape_chains():  # type: ignore[no-untyped-def]
    inits = [init("s1", np.array([6, 20], np.int64)), init("s2", np.array([-1, 4, 5], np.int64)),
             init("s3", np.array([0, 4, 5], np.int64))]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]), helper.make_node("Reshape", ["r1", "s2"], ["r2"]),
             helper.make_node("Reshape", ["r2", "s3"], ["y"])]  # r2 -> same shape: removed
    m = model(nodes, [vi("x", [2, 3, 4, 5])], [vi("y", None)], inits)
    after, im, _ = apply(m, ReshapeTransposeSimplifyPass())
    assert ops(im) == ["Reshape"]
    check_same(m, after, {"x": rand(2, 3, 4, 5)})


def test_reshape_with_zero_after_reshape_kept():  # type: ignore[no-untyped-def]
    inits = [init("s1", np.array([6, 20], np.int64)), init("s2", np.array([0, 4, 5], np.int64))]
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]), helper.make_node("Reshape", ["r1", "s2"], ["y"])]
    m = model(nodes, [vi("x", [2, 3, 4, 5])], [vi("y", None)], inits)
    _, im, _ = apply(m, ReshapeTransposeSimplifyPass())
    assert ops(im) == ["Reshape", "Reshape"]


def test_a_shared_inner_transpose_stays_and_the_outer_reads_its_input():  # type: ignore[no-untyped-def]
    """t1 is also returned: it stays, and the Transpose after it reads x with the composed perm."""
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["t1"], ["y"], perm=[0, 1, 3, 2])]
    m = model(nodes, [vi("x", [2, 3, 4, 5])], [vi("y", None), vi("t1", None)])
    after, im, _ = apply(m, ReshapeTransposeSimplifyPass())
    outer = [n for n in im.graph if n.outputs[0].name == "y"][0]
    assert outer.inputs[0].name == "x" and list(outer.attributes["perm"].value) == [0, 2, 3, 1]
    check_same(m, after, {"x": rand(2, 3, 4, 5)})


def _batched_transpose_model(split_dims=("b", 3, 5, 4), merge_tail=(4, 5)):  # type: ignore[no-untyped-def]
    """The dynamo exporter's transposed key: y [b, 3, 4, 5] -> Reshape [b*3, 4, 5] (target from
    Shape) -> Transpose (0, 2, 1) -> Reshape [b, 3, 5, 4] (target from Shape): shapes
    inferred with data propagation, as a session sees them."""
    n = helper.make_node
    inits = [init("i0", np.array([0], np.int64)), init("i1", np.array([1], np.int64)),
             init("m1", np.array([-1], np.int64)), init("tail", np.array(list(merge_tail), np.int64)),
             init("heads", np.array([3], np.int64)), init("split_tail", np.array([5, 4], np.int64))]
    nodes = [n("Relu", ["x"], ["y"]), n("Shape", ["y"], ["ys"]), n("Slice", ["ys", "i0", "i1"], ["b"]),
             n("Concat", ["m1", "tail"], ["merge_target"], axis=0), n("Reshape", ["y", "merge_target"], ["merged"]),
             n("Transpose", ["merged"], ["mt"], perm=[0, 2, 1]),
             n("Concat", ["b", "heads", "split_tail"], ["split_target"], axis=0),
             n("Reshape", ["mt", "split_target"], ["z"])]
    g = helper.make_graph(nodes, "g", [vi("x", ["b", 3, 4, 5])], [vi("z", list(split_dims))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(m, data_prop=True)


def test_a_batched_transpose_detour_is_one_transpose():  # type: ignore[no-untyped-def]
    m = _batched_transpose_model()
    after, im, _ = apply(m, ReshapeTransposeSimplifyPass())
    transposes = [n for n in im.graph if n.op_type == "Transpose"]
    assert len(transposes) == 1 and list(transposes[0].attributes["perm"].value) == [0, 1, 3, 2]
    assert transposes[0].inputs[0].name == "y" and "Reshape" not in ops(im)
    for b in (1, 2):
        check_same(m, after, {"x": rand(b, 3, 4, 5)})


def test_a_detour_that_regroups_the_matrices_stays():  # type: ignore[no-untyped-def]
    """Merged to [-1, 5, 4] (not y's trailing [4, 5]): a reinterpretation, not a transpose."""
    m = _batched_transpose_model(merge_tail=(5, 4))
    _, im, _ = apply(m, ReshapeTransposeSimplifyPass())
    assert ops(im).count("Reshape") == 2


# -- GELU ------------------------------------------------------------------------------------
def _c(name, v):  # type: ignore[no-untyped-def]
    return init(name, np.array(v, np.float32))


def _erf_gelu(grouping: str, use_mul: bool = False):  # type: ignore[no-untyped-def]
    inits = [_c("sqrt2", math.sqrt(2)), _c("inv_sqrt2", 1 / math.sqrt(2)), _c("one", 1.0), _c("half", 0.5)]
    first = (
        helper.make_node("Mul", ["x", "inv_sqrt2"], ["d"])
        if use_mul
        else helper.make_node("Div", ["x", "sqrt2"], ["d"])
    )
    nodes = [helper.make_node("Relu", ["in"], ["x"]), first, helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["one", "e"], ["a"])]
    if grouping == "x*a*0.5":
        nodes += [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["g"])]
    elif grouping == "(x*0.5)*a":
        nodes += [helper.make_node("Mul", ["half", "x"], ["h"]), helper.make_node("Mul", ["h", "a"], ["g"])]
    else:
        nodes += [helper.make_node("Mul", ["a", "half"], ["h"]), helper.make_node("Mul", ["x", "h"], ["g"])]
    nodes.append(helper.make_node("Neg", ["g"], ["y"]))
    return model(nodes, [vi("in", [3, 8])], [vi("y", [3, 8])], inits, opset=17)


@pytest.mark.parametrize("grouping", ["x*a*0.5", "(x*0.5)*a", "x*(a*0.5)"])
@pytest.mark.parametrize("use_mul", [False, True])
def test_erf_gelu_fused(grouping, use_mul):  # type: ignore[no-untyped-def]
    m = _erf_gelu(grouping, use_mul)
    after, im, counts = apply(m, GeluFusionPass(), bump_opset=20)
    assert counts == [1] and ops(im) == ["Relu", "Gelu", "Neg"]
    gelu = [n for n in im.graph if n.op_type == "Gelu"][0]
    assert gelu.version == 20  # the model is opset 17: the node carries its own version
    check_same(m, after, {"in": rand(3, 8)})


def test_tanh_gelu_fused():  # type: ignore[no-untyped-def]
    inits = [_c("three", 3.0), _c("k", 0.044715), _c("c", math.sqrt(2 / math.pi)), _c("one", 1.0), _c("half", 0.5)]
    for cube in ("pow", "mul"):
        nodes = [helper.make_node("Pow", ["x", "three"], ["p"])] if cube == "pow" else [
            helper.make_node("Mul", ["x", "x"], ["sq"]), helper.make_node("Mul", ["sq", "x"], ["p"])]
        nodes += [helper.make_node("Mul", ["k", "p"], ["q"]), helper.make_node("Add", ["x", "q"], ["r"]),
                  helper.make_node("Mul", ["r", "c"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
                  helper.make_node("Add", ["t", "one"], ["a"]), helper.make_node("Mul", ["x", "half"], ["h"]),
                  helper.make_node("Mul", ["h", "a"], ["y"])]
        m = model(nodes, [vi("x", [4, 6])], [vi("y", [4, 6])], inits, opset=20)
        after, im, counts = apply(m, GeluFusionPass())
        assert counts == [1] and ops(im) == ["Gelu"]
        assert im.graph.node(0).attributes["approximate"].value == "tanh"
        assert im.graph.node(0).version is None  # opset 20 model: no override needed
        check_same(m, after, {"x": rand(4, 6)})


def test_gelu_with_wrong_constant_or_shared_intermediate_not_fused():  # type: ignore[no-untyped-def]
    m = _erf_gelu("x*a*0.5")
    m.graph.initializer[0].CopyFrom(_c("sqrt2", 1.5))
    assert apply(m, GeluFusionPass())[2] == [0]
    m = _erf_gelu("x*a*0.5")
    m.graph.output.append(vi("e", [3, 8]))
    assert apply(m, GeluFusionPass())[2] == [0]


# -- LayerNorm -------------------------------------------------------------------------------
def _ln_model(opset=17, square="pow", recip=False, affine=True, gamma_shape=(16,)):  # type: ignore[no-untyped-def]
    inits = [_c("two", 2.0), _c("eps", 1e-5), init("gamma", rand(*gamma_shape)), init("beta", rand(16))]
    def mean(i, o):  # type: ignore[no-untyped-def]
        if opset >= 18:
            return helper.make_node("ReduceMean", [i, "axes"], [o])
        return helper.make_node("ReduceMean", [i], [o], axes=[-1])
    if opset >= 18:
        inits.append(init("axes", np.array([-1], np.int64)))
    nodes = [mean("x", "mu"), helper.make_node("Sub", ["x", "mu"], ["d"])]
    nodes.append(
        helper.make_node("Pow", ["d", "two"], ["sq"])
        if square == "pow"
        else helper.make_node("Mul", ["d", "d"], ["sq"])
    )
    nodes += [
        mean("sq", "var"),
        helper.make_node("Add", ["var", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["sd"]),
    ]
    if recip:
        nodes += [helper.make_node("Reciprocal", ["sd"], ["inv"]), helper.make_node("Mul", ["d", "inv"], ["n"])]
    else:
        nodes.append(helper.make_node("Div", ["d", "sd"], ["n"]))
    if affine:
        nodes += [helper.make_node("Mul", ["gamma", "n"], ["g"]), helper.make_node("Add", ["g", "beta"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["n"], ["y"]))
    return model(nodes, [vi("x", [2, 5, 16])], [vi("y", [2, 5, 16])], inits, opset=opset)


@pytest.mark.parametrize("opset,square,recip,affine", [(13, "pow", False, True), (18, "mul", True, True),
                                                        (17, "pow", False, False)])
def test_layer_norm_fused(opset, square, recip, affine):  # type: ignore[no-untyped-def]
    m = _ln_model(opset, square, recip, affine)
    after, im, counts = apply(m, LayerNormFusionPass(), bump_opset=17)
    assert counts == [1] and "LayerNormalization" in ops(im) and "ReduceMean" not in ops(im)
    ln = [n for n in im.graph if n.op_type == "LayerNormalization"][0]
    assert ln.version == (17 if opset < 17 else None)
    check_same(m, after, {"x": rand(2, 5, 16)}, rtol=1e-4, atol=1e-4)


def test_layer_norm_with_non_vector_gamma_not_fused():  # type: ignore[no-untyped-def]
    m = _ln_model(gamma_shape=(5, 16))
    assert apply(m, LayerNormFusionPass())[2] == [0]


# -- RMSNorm ---------------------------------------------------------------------------------
def _rms_model(opset=17, square="pow", recip="reciprocal", gamma="first", dtype=np.float32,  # type: ignore[no-untyped-def]
               gamma_shape=(16,), eps=1e-6, axis=-1):
    elem = TensorProto.DOUBLE if dtype == np.float64 else F
    inits = [init("two", np.array(2.0, dtype)), init("eps", np.array(eps, dtype)), init("one", np.array(1.0, dtype)),
             init("gamma", rand(*gamma_shape, dtype=dtype))]
    if opset >= 18:
        inits.append(init("axes", np.array([axis], np.int64)))
        mean = helper.make_node("ReduceMean", ["sq", "axes"], ["ms"])
    else:
        mean = helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[axis])
    squared = (helper.make_node("Pow", ["x", "two"], ["sq"]) if square == "pow"
               else helper.make_node("Mul", ["x", "x"], ["sq"]))
    nodes = [squared, mean, helper.make_node("Add", ["ms", "eps"], ["me"]), helper.make_node("Sqrt", ["me"], ["sd"])]
    if recip == "div":
        nodes.append(helper.make_node("Div", ["x", "sd"], ["n"]))
    else:
        nodes.append(helper.make_node("Reciprocal", ["sd"], ["inv"]) if recip == "reciprocal"
                     else helper.make_node("Div", ["one", "sd"], ["inv"]))
        nodes.append(helper.make_node("Mul", ["inv", "x"], ["n"]))
    if gamma == "first":
        nodes.append(helper.make_node("Mul", ["gamma", "n"], ["y"]))
    elif gamma == "second":
        nodes.append(helper.make_node("Mul", ["n", "gamma"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["n"], ["y"]))
    return model(nodes, [vi("x", [2, 5, 16], elem)], [vi("y", [2, 5, 16], elem)], inits, opset=opset)


@pytest.mark.parametrize("opset,square,recip,gamma,dtype", [
    (13, "pow", "reciprocal", "first", np.float32), (18, "mul", "div", "second", np.float32),
    (17, "pow", "div-one", "none", np.float32), (18, "pow", "reciprocal", "first", np.float64)])
def test_rms_norm_fused(opset, square, recip, gamma, dtype):  # type: ignore[no-untyped-def]
    m = _rms_model(opset, square, recip, gamma, dtype)
    after, im, counts = apply(m, RMSNormFusionPass(), bump_opset=23)
    assert counts == [1] and ops(im).count("RMSNormalization") == 1 and "ReduceMean" not in ops(im)
    rms = [n for n in im.graph if n.op_type == "RMSNormalization"][0]
    assert rms.version == 23 and rms.attributes["stash_type"].value == (11 if dtype == np.float64 else 1)
    feeds = {"x": rand(2, 5, 16, dtype=dtype)}
    if dtype == np.float32:
        check_same(m, after, feeds, rtol=1e-5, atol=1e-5)
    else:  # onnx.reference has no stash_type 11: the node's definition in float64, from its own inputs
        onnx.checker.check_model(after)
        x = feeds["x"]
        eps = rms.attributes["epsilon"].value
        scale = rms.inputs[1].const_value.numpy()
        want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale
        np.testing.assert_allclose(want, run_ref(m, feeds)[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("change", ["gamma_matrix", "eps_too_large", "other_axis", "sqrt_read_twice"])
def test_rms_norm_look_alikes_are_not_fused(change):  # type: ignore[no-untyped-def]
    if change == "gamma_matrix":
        m = _rms_model(gamma_shape=(5, 16))
    elif change == "eps_too_large":
        m = _rms_model(eps=2.0)
    elif change == "other_axis":
        m = _rms_model(axis=1)
    else:
        m = _rms_model()
        m.graph.output.append(vi("sd", [2, 5, 1]))
    assert apply(m, RMSNormFusionPass())[2] == [0]


def test_rms_norm_fusion_runs_where_cpu_runs_first():  # type: ignore[no-untyped-def]
    """Registered for sessions whose first provider is cpu: the fused node is an opset-23 op
    other providers may not claim."""
    from epoxy.optimize.builtin import BuiltinPasses

    seen: list[tuple[str, dict]] = []
    BuiltinPasses().epoxy_register_passes(register=lambda p, **kw: seen.append((type(p).__name__, kw)))
    assert [kw for name, kw in seen if name == "RMSNormFusionPass"] == [{"level": "extended", "providers": ("cpu",)}]


# -- through a session (mini provider): levels ---------------------------------------------
def test_levels_through_a_session(make_registry):  # type: ignore[no-untyped-def]
    inits = [init("w", rand(4, 5)), init("b", rand(5))]
    nodes = [helper.make_node("Identity", ["x"], ["xi"]), helper.make_node("MatMul", ["xi", "w"], ["mm"]),
             helper.make_node("Add", ["mm", "b"], ["y"])]
    m = model(nodes, [vi("x", [3, 4])], [vi("y", [3, 5])], inits)
    disabled = InferenceSession(m, providers=["cpu"], registry=make_registry(),
                                sess_options=SessionOptions(graph_optimization_level="disable"))
    assert disabled.applied_passes == []
    # the mini provider has no Gemm kernel: the fused node would be unrunnable, so check IR only
    _, im, _ = apply(m, MatMulAddToGemmPass())
    assert ops(im) == ["Identity", "Gemm"]
    x = rand(3, 4)
    np.testing.assert_allclose(disabled.run(None, {"x": x})[0], run_ref(m, {"x": x})[0], rtol=1e-5)


def test_the_core_passes_and_helpers_come_from_the_public_kit_module():  # type: ignore[no-untyped-def]
    """Providers compose the core's passes and write their own with epoxy.kit.passes alone."""
    import epoxy.kit.passes as kit_passes
    import epoxy.optimize.passes as core_passes

    for name in kit_passes.CORE_PASSES:
        assert getattr(kit_passes, name) is getattr(core_passes, name)
    assert set(kit_passes.CORE_PASSES) == set(core_passes.__all__)
    assert callable(kit_passes.RewritePass) and callable(kit_passes.make_node)
    with pytest.raises(AttributeError, match="no attribute 'NoSuchPass'"):
        kit_passes.NoSuchPass  # noqa: B018


# -- MatMul + per-channel scale/shift (convnext's layer scale) ---------------------------
def _layer_scale_model(scale_shape=(32, 1, 1), bias=True, perm=(0, 3, 1, 2), tail="Mul", shared=False):  # type: ignore[no-untyped-def]
    """x (2, 5, 5, 8) @ W (8, 32) [+ b] -> Transpose(perm) -> ``tail`` by a constant -> + residual."""
    out_shape = [(2, 5, 5, 32)[i] for i in perm] if perm else [2, 5, 5, 32]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"])]
    cur = "m"
    if bias:
        nodes.append(helper.make_node("Add", [cur, "b"], ["mb"]))
        cur = "mb"
    if perm:
        nodes.append(helper.make_node("Transpose", [cur], ["t"], perm=list(perm)))
        cur = "t"
    nodes += [helper.make_node(tail, [cur, "g"], ["s"]), helper.make_node("Add", ["s", "r"], ["y"])]
    outputs = [vi("y", out_shape)]
    if shared:  # a second MatMul reads the same weights
        nodes.append(helper.make_node("MatMul", ["x", "w"], ["y2"]))
        outputs.append(vi("y2", [2, 5, 5, 32]))
    inits = [init("w", rand(8, 32)), init("g", rand(*scale_shape) + 2.0)] + ([init("b", rand(32))] if bias else [])
    return model(nodes, [vi("x", [2, 5, 5, 8]), vi("r", out_shape)], outputs, inits)


def _layer_scale_feeds(proto):  # type: ignore[no-untyped-def]
    shape = [d.dim_value for d in proto.graph.input[1].type.tensor_type.shape.dim]
    return {"x": rand(2, 5, 5, 8), "r": rand(*shape)}


@pytest.mark.parametrize(("kwargs", "remaining"), [
    ({}, ["MatMul", "Add", "Transpose", "Add"]),  # convnext: the Mul after the Transpose goes
    ({"tail": "Div"}, ["MatMul", "Add", "Transpose", "Add"]),
    ({"scale_shape": (1, 32, 1, 1), "tail": "Sub"}, ["MatMul", "Add", "Transpose", "Add"]),  # a shift: into b
    ({"bias": False, "perm": None, "scale_shape": (32,)}, ["MatMul", "Add"]),  # the scale right after the product
    ({"shared": True}, ["MatMul", "Add", "Transpose", "Add", "MatMul"]),  # the other product keeps the weights
])
def test_matmul_affine_fold_takes_the_scale_into_the_weights(kwargs, remaining):  # type: ignore[no-untyped-def]
    m = _layer_scale_model(**kwargs)
    after, im, counts = apply(m, MatMulAffineFoldPass())
    assert counts == [1] and ops(im) == remaining
    check_same(m, after, _layer_scale_feeds(m), rtol=1e-5, atol=1e-4)


def test_matmul_affine_fold_rounds_each_weight_once_from_float64():  # type: ignore[no-untyped-def]
    m = _layer_scale_model()
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    _, im, _ = apply(m, MatMulAffineFoldPass())
    mm = next(n for n in im.graph if n.op_type == "MatMul")
    g = inits["g"].reshape(-1)
    assert np.array_equal(mm.inputs[1].const_value.numpy(), (inits["w"] * g).astype(np.float32))
    add = next(n for n in im.graph if n.op_type == "Add")
    assert np.array_equal(add.inputs[1].const_value.numpy(), (inits["b"] * g).astype(np.float32))


@pytest.mark.parametrize("kwargs", [
    {"scale_shape": (1, 1, 5, 1)},  # varies along a spatial axis, not the weights' columns
    {"scale_shape": (1, 32, 1, 1), "tail": "Add", "bias": False},  # a shift with no bias to carry it
    {"perm": (0, 1, 3, 2), "scale_shape": (32, 1, 1)},  # the Transpose keeps the columns last: (32, 1, 1) is not them
])
def test_matmul_affine_fold_leaves_look_alikes(kwargs):  # type: ignore[no-untyped-def]
    m = _layer_scale_model(**kwargs)
    before = [n.op_type for n in m.graph.node]
    _, im, counts = apply(m, MatMulAffineFoldPass())
    assert counts == [0] and ops(im) == before
