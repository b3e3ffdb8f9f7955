"""StaticShapePass (static dimensions read through Shape become constants) and
FlattenedGemmPass (a linear layer's flatten -> Gemm -> reshape back becomes MatMul [+ Add]):
the forms both torch.onnx exporters write for GPT-2's Conv1D layers, the near misses that must
stay, and the values against onnx.reference (a whole cpu session on such a layer:
tests/integration/test_optimizer.py)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_optimizer_passes import apply, check_same, init, ops, rand, vi

import epoxy
from epoxy.optimize.passes import ConstantFoldingPass, FlattenedGemmPass, StaticShapePass

F = TensorProto.FLOAT
BIG = 9223372036854775807


def _model(nodes, inputs, outputs, inits=(), opset=17):  # type: ignore[no-untyped-def]
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                          opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m, data_prop=True)  # symbolic dims through Shape, as sessions see them


# -- StaticShapePass -------------------------------------------------------------------------
def test_static_dimensions_read_through_shape_become_constants():  # type: ignore[no-untyped-def]
    """Slice(Shape(x), -1) and Gather(Shape(x), 2) of x [b, s, 32]: 32; Shape(x, start=2): [32];
    a symbolic dimension stays a computation; the values are the reference's."""
    n = helper.make_node
    inits = [init("m1", np.array([-1], np.int64)), init("big", np.array([BIG], np.int64)),
             init("two", np.array(2, np.int64)), init("zero", np.array(0, np.int64))]
    nodes = [n("Shape", ["x"], ["s"]), n("Slice", ["s", "m1", "big"], ["last"]),
             n("Gather", ["s", "two"], ["k"]), n("Gather", ["s", "zero"], ["b"]),
             n("Shape", ["x"], ["tail"], start=2), n("Shape", ["x"], ["all"])]
    m = _model(nodes, [vi("x", ["b", "s", 32])],
               [vi("last", [1], TensorProto.INT64), vi("kk", [], TensorProto.INT64),
                vi("b", [], TensorProto.INT64), vi("tail2", [1], TensorProto.INT64)], inits, opset=15)
    m.graph.node.extend([n("Identity", ["k"], ["kk"]), n("Identity", ["tail"], ["tail2"])])
    after, im, counts = apply(m, StaticShapePass())
    assert counts == [2]  # Gather(.., 2) and Shape(start=2); Slice's output is a graph output
    kinds = ops(im)
    assert kinds.count("Gather") == 1 and kinds.count("Slice") == 1  # the symbolic one and the output
    check_same(m, after, {"x": rand(3, 5, 32)})


def test_a_flatten_target_computed_from_shape_folds_to_a_constant():  # type: ignore[no-untyped-def]
    """TorchScript's ``x.view(-1, x.size(-1))``: Concat([-1], Unsqueeze(Squeeze(Slice(Shape(x),
    -1)))) -> the constant [-1, 32] once StaticShapePass and the constant folding have run."""
    n = helper.make_node
    inits = [init("m1", np.array([-1], np.int64)), init("big", np.array([BIG], np.int64)),
             init("ax0", np.array([0], np.int64))]
    nodes = [n("Shape", ["x"], ["s"]), n("Slice", ["s", "m1", "big"], ["last"]), n("Squeeze", ["last", "ax0"], ["k"]),
             n("Unsqueeze", ["k", "ax0"], ["k1"]), n("Concat", ["m1", "k1"], ["target"], axis=0),
             n("Reshape", ["x", "target"], ["y"])]
    m = _model(nodes, [vi("x", ["b", "s", 32])], [vi("y", ["n", 32])], inits)
    after, im, counts = apply(m, StaticShapePass(), ConstantFoldingPass())
    assert ops(im) == ["Shape", "Reshape"]  # the Shape is dead now (the dead-node pass removes it)
    target = [v for v in im.graph.initializers.values() if v.name == "target"][0]
    assert target.const_value.numpy().tolist() == [-1, 32]
    check_same(m, after, {"x": rand(2, 3, 32)})


def test_a_static_dimension_holds_for_every_run_because_feeds_are_checked(make_registry):  # type: ignore[no-untyped-def]
    """The constant [32] stands for x's last dimension: a feed of another width is refused
    before any node runs, as without the pass (the test registry's mini cpu runs the Neg)."""
    n = helper.make_node
    inits = [init("m1", np.array([-1], np.int64)), init("big", np.array([BIG], np.int64))]
    nodes = [n("Shape", ["x"], ["s"]), n("Slice", ["s", "m1", "big"], ["last"]), n("Neg", ["last"], ["y"])]
    m = _model(nodes, [vi("x", ["b", 32])], [vi("y", [1], TensorProto.INT64)], inits)
    session = epoxy.InferenceSession(m.SerializeToString(), providers=["cpu"], registry=make_registry())
    assert session.run(None, {"x": rand(2, 32)})[0].tolist() == [-32]
    with pytest.raises(epoxy.errors.InvalidArgument, match="x"):
        session.run(None, {"x": rand(2, 31)})


# -- FlattenedGemmPass -----------------------------------------------------------------------
def gpt2_linear(form: str = "constant", trans_b: int = 0, bias: str = "row", heads: bool = False,
                alpha: float = 1.0, back: str = "same", act: bool = True) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    """x [b, s, 16] (or merged heads [b, s, 2, 8]) -> Reshape(x, [-1, 16]) -> Gemm(W [16, 24]
    or its transpose, C) -> Reshape(Concat(Shape(x)[:2], [24])) [-> Gelu]; ``form``: the flatten
    target constant, or computed from Shape(x) (TorchScript); ``bias``: ``row`` [24], ``none``,
    ``per-row`` [b*s, 24] as a feed; ``back``: ``same`` leading dims, or ``swapped`` (s, b)."""
    n = helper.make_node
    rng = np.random.default_rng(4)
    w = (rng.standard_normal((16, 24)) * 0.3).astype(np.float32)
    inits = [init("w", w.T.copy() if trans_b else w), init("c", rng.standard_normal(24).astype(np.float32)),
             init("m1", np.array([-1], np.int64)), init("big", np.array([BIG], np.int64)),
             init("k16", np.array([-1, 16], np.int64)), init("n24", np.array([24], np.int64)),
             init("zero", np.array([0], np.int64)), init("two", np.array([2], np.int64)),
             init("idx", np.array([1, 0] if back == "swapped" else [0, 1], np.int64))]
    nodes = []
    src = "x"
    if form == "constant":
        target = "k16"
    else:
        nodes += [n("Shape", [src], ["xs"]), n("Slice", ["xs", "m1", "big"], ["xk"]),
                  n("Concat", ["m1", "xk"], ["flat_target"], axis=0)]
        target = "flat_target"
    c = {"row": ["c"], "none": [], "per-row": ["cr"]}[bias]
    nodes += [n("Reshape", [src, target], ["rows"]),
              n("Gemm", ["rows", "w", *c], ["g"], transB=trans_b, alpha=alpha),
              n("Shape", ["x"], ["xs2"]), n("Gather", ["xs2", "idx"], ["lead"]),
              n("Concat", ["lead", "n24"], ["back_target"], axis=0), n("Reshape", ["g", "back_target"], ["y0"])]
    out = "y0"
    if act:
        nodes.append(n("Relu", ["y0"], ["y"]))
        out = "y"
    shape = ["b", "s", 2, 8] if heads else ["b", "s", 16]
    inputs = [vi("x", shape)] + ([vi("cr", ["bs", 24])] if bias == "per-row" else [])
    return _model(nodes, inputs, [vi(out, ["s", "b", 24] if back == "swapped" else ["b", "s", 24])], inits)


def _feeds(model: onnx.ModelProto, b: int = 2, s: int = 3) -> dict[str, np.ndarray]:
    heads = len(model.graph.input[0].type.tensor_type.shape.dim) == 4
    feeds = {"x": rand(b, s, 2, 8) if heads else rand(b, s, 16)}
    if len(model.graph.input) > 1:
        feeds["cr"] = rand(b * s, 24)
    return feeds


@pytest.mark.parametrize("form", ["constant", "shape"])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("bias", ["row", "none"])
def test_flatten_gemm_reshape_becomes_matmul(form, trans_b, bias):  # type: ignore[no-untyped-def]
    m = gpt2_linear(form, trans_b, bias)
    passes = [StaticShapePass(), ConstantFoldingPass()] if form == "shape" else []
    after, im, counts = apply(m, *passes, FlattenedGemmPass())
    assert counts[-1] == 1 and "Gemm" not in ops(im)
    assert ops(im).count("MatMul") == 1 and ops(im).count("Add") == (1 if bias == "row" else 0)
    for feeds in (_feeds(m), _feeds(m, b=1, s=7)):
        check_same(m, after, feeds)


def test_merged_heads_are_read_through_one_reshape():  # type: ignore[no-untyped-def]
    """x [b, s, 2, 8] (attention's merged heads) flattened to 16 columns: Reshape(x, [0, 0, 16])."""
    m = gpt2_linear(heads=True)
    after, im, counts = apply(m, FlattenedGemmPass())
    assert counts == [1]
    rows = [node for node in im.graph if node.op_type == "Reshape"]  # the flatten and the reshape back went
    assert len(rows) == 1 and rows[0].inputs[0].name == "x"
    assert rows[0].inputs[1].const_value.numpy().tolist() == [0, 0, 16]
    check_same(m, after, _feeds(m))


@pytest.mark.parametrize("kwargs", [
    {"alpha": 0.5},            # scaled product
    {"bias": "per-row"},       # C adds a different row to each row
    {"back": "swapped"},       # the reshape back does not restore x's leading dims
])
def test_near_misses_stay(kwargs):  # type: ignore[no-untyped-def]
    m = gpt2_linear(**kwargs)
    after, im, counts = apply(m, FlattenedGemmPass())
    assert counts == [0] and "Gemm" in ops(im)
