"""Rotary position embedding in the rotate-half form -> com.epoxy.cpu::FusedRotary: the pass
fires on both torch.onnx exporters' forms (constant slice bounds as the dynamo exporter
writes them; ``x.shape[-1] // 2`` computed from Shape at run time as the TorchScript
exporter writes it), leaves near misses alone, gives the op-by-op graph's values bit for
bit and onnxruntime's, and keeps the shape arithmetic after it cacheable."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.run.shape_cache import ShapeCachingExecutor

RNG = np.random.default_rng(23)
BIG = 9223372036854775807


def _i64(name: str, *values: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


def rotary_model(d: int = 8, form: str = "constant", dtype: int = TensorProto.FLOAT, swap: bool = False,
                 axis: int = -1, leak: str | None = None, reshape_after: bool = False,
                 negate_first: bool = False) -> onnx.ModelProto:
    """``y = x * cos + Concat(-x[..., h:], x[..., :h]) * sin`` on x [b, heads, s, d] (cos and sin
    [1, 1, s, d] feeds); ``form``: ``constant`` slice bounds, or ``shape`` (h from
    Shape/Gather/Div/Cast/Unsqueeze of x; the core folds the Gather of a static last
    dimension), or ``shape-symbolic`` (the same with d symbolic: the Gather stays); ``swap``:
    the commutative operands the other way round; ``axis``: the slices' and the Concat's
    axis; ``negate_first``: ``Concat(-x1, x2)`` (not rotate-half); ``leak``: an intermediate
    also returned (the pattern must then stay); ``reshape_after``: y reshaped by a target
    computed from Shape(y) (shape arithmetic)."""
    n = helper.make_node
    h = d // 2
    inits = [_i64("axes", axis), _i64("steps", 1), _i64("zero", 0), _i64("end", BIG), _i64("lo", h),
             _i64("keep2", 2)]
    nodes = []
    if form == "constant":
        low_end, high_start = "lo", "lo"
    else:
        inits += [numpy_helper.from_array(np.array(3, np.int64), "i3"),
                  numpy_helper.from_array(np.array(2, np.int64), "two"), _i64("ax0", 0)]
        nodes += [n("Shape", ["x"], ["xs"]), n("Gather", ["xs", "i3"], ["dim"], axis=0),
                  n("Div", ["dim", "two"], ["half"]), n("Cast", ["half"], ["half64"], to=TensorProto.INT64),
                  n("Unsqueeze", ["half64", "ax0"], ["h_a"]), n("Unsqueeze", ["half64", "ax0"], ["h_b"])]
        low_end, high_start = "h_a", "h_b"
    nodes += [
        n("Slice", ["x", "zero", low_end, "axes", "steps"], ["x1"]),
        n("Slice", ["x", high_start, "end", "axes", "steps"], ["x2"]),
        n("Neg", ["x1" if negate_first else "x2"], ["nx2"]),
        n("Concat", ["nx2", "x2" if negate_first else "x1"], ["rot"], axis=axis),
        n("Mul", ["sin", "rot"] if swap else ["rot", "sin"], ["b"]),
        n("Mul", ["cos", "x"] if swap else ["x", "cos"], ["a"]),
        n("Add", ["b", "a"] if swap else ["a", "b"], ["y"]),
    ]
    out = "y"
    if reshape_after:
        inits.append(_i64("flat_tail", -1))
        nodes += [n("Shape", ["y"], ["ys"]), n("Slice", ["ys", "zero", "keep2"], ["ylead"]),
                  n("Concat", ["ylead", "flat_tail"], ["target"], axis=0), n("Reshape", ["y", "target"], ["yr"])]
        out = "yr"
    last = "d" if form == "shape-symbolic" else d  # symbolic: Gather(Shape(x)) stays a node
    inputs = [helper.make_tensor_value_info("x", dtype, ["b", 4, "s", last]),
              helper.make_tensor_value_info("cos", dtype, [1, 1, "s", last]),
              helper.make_tensor_value_info("sin", dtype, [1, 1, "s", last])]
    outputs = [helper.make_tensor_value_info(out, dtype, ["b", 4, "r"] if reshape_after else ["b", 4, "s", last])]
    if leak:
        outputs.append(helper.make_tensor_value_info(leak, dtype, ["b", 4, "s", last]))
    graph = helper.make_graph(nodes, "rotary", inputs, outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(model: onnx.ModelProto, b: int = 2, s: int = 5, np_dtype=np.float32, d: int = 0):  # type: ignore[no-untyped-def]
    """Feeds for ``model``; ``d``: the last dimension when the model's is symbolic."""
    d = model.graph.input[0].type.tensor_type.shape.dim[3].dim_value or d or 8
    angles = RNG.standard_normal((1, 1, s, d))
    return {"x": RNG.standard_normal((b, 4, s, d)).astype(np_dtype),
            "cos": np.cos(angles).astype(np_dtype), "sin": np.sin(angles).astype(np_dtype)}


def fused_count(session: epoxy.InferenceSession) -> int:
    return [node.op_type for node in session._graph.nodes].count("FusedRotary")


def run_all(model: onnx.ModelProto, feeds: dict[str, np.ndarray], jit: str = "on") -> epoxy.InferenceSession:
    """The fused session against the op-by-op one (bit for bit) and onnxruntime."""
    plain = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"],
                                   sess_options=epoxy.SessionOptions(graph_optimization_level="disable"))
    fused = epoxy.InferenceSession(model.SerializeToString(), providers=[("cpu", {"jit": jit})])
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want, ref = plain.run(None, feeds), oracle.run(None, feeds)
    for _ in range(3):  # the third run takes the shape-cached plan
        for got, a, r in zip(fused.run(None, feeds), want, ref):
            assert got.dtype == a.dtype and got.shape == a.shape
            np.testing.assert_array_equal(got, a)
            np.testing.assert_allclose(got, r, rtol=1e-6, atol=1e-6)
    return fused


@pytest.mark.parametrize("form", ["constant", "shape", "shape-symbolic"])
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("jit", ["on", "off"])
def test_exporter_forms_are_fused_and_match(form, swap, jit) -> None:  # type: ignore[no-untyped-def]
    model = rotary_model(form=form, swap=swap)
    fused = run_all(model, feeds_for(model), jit=jit)
    assert fused_count(fused) == 1
    ops = [node.op_type for node in fused._graph.nodes]
    assert "Neg" not in ops and "Concat" not in ops


def test_half_of_an_odd_last_dimension_and_float64() -> None:
    """h = 7 // 2 = 3: the halves are 4 and 3 long, as the op-by-op graph makes them."""
    model = rotary_model(d=7, form="shape")
    assert fused_count(run_all(model, feeds_for(model))) == 1
    model = rotary_model(form="shape-symbolic")  # h from the run's own last dimension: 7, then 8
    assert fused_count(run_all(model, feeds_for(model, d=7))) == 1
    assert fused_count(run_all(model, feeds_for(model, d=8))) == 1
    model = rotary_model(dtype=TensorProto.DOUBLE)
    assert fused_count(run_all(model, feeds_for(model, np_dtype=np.float64))) == 1


@pytest.mark.parametrize("kwargs", [
    {"leak": "rot"},                 # an intermediate the caller fetches
    {"leak": "a"},
    {"axis": 2},                     # not the last axis
    {"negate_first": True},          # Concat(-x1, x2): not rotate-half
    {"dtype": TensorProto.FLOAT16},  # float16 keeps its ops (each widens on its own)
])
def test_near_misses_are_left_alone(kwargs) -> None:  # type: ignore[no-untyped-def]
    model = rotary_model(**kwargs)
    np_dtype = np.float16 if kwargs.get("dtype") == TensorProto.FLOAT16 else np.float32
    feeds = feeds_for(model, np_dtype=np_dtype)
    fused = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert fused_count(fused) == 0
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for got, r in zip(fused.run(None, feeds), want):
        tol = 2e-3 if np_dtype == np.float16 else 1e-6  # float16: one rounding of a product apart
        np.testing.assert_allclose(got, r, rtol=tol, atol=tol)


def test_shape_arithmetic_after_it_stays_cached() -> None:
    """Shape(FusedRotary(..)) is fixed by the input shapes: the shape-caching executor skips
    the Shape -> Slice -> Concat chain on a repeated shape (FusedRotary is in the shape rules)."""
    model = rotary_model(reshape_after=True)
    fused = run_all(model, feeds_for(model))
    executor = fused._executor
    assert isinstance(executor, ShapeCachingExecutor)
    kept = [step.op_type for step in executor.reduced_plan.steps]
    assert "FusedRotary" in kept and "Shape" not in kept and "Concat" not in kept


def test_kernel_rejects_a_scalar() -> None:
    from epoxy.contract import NodeSpec
    from epoxy_ep_cpu.ops.rotary import fused_rotary

    spec = NodeSpec(index=0, name="r", op_type="FusedRotary", domain="com.epoxy.cpu", opset=1,
                    inputs=("x", "c", "s"), outputs=("y",), attributes={"split": 1}, input_types=(),
                    output_types=())
    run = fused_rotary(spec)
    with pytest.raises(ValueError, match="no last axis"):
        run(np.float32(1.0), np.float32(1.0), np.float32(1.0))
