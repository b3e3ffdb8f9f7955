"""Fused elementwise groups on cpu (the jit tier): every op of the kit's table through the
numba emitter against the kit's numpy reference, whole groups against the per-node numpy
path (jit off) and onnx.reference, the size limit that falls back to the per-node kernels,
the switches, and the on-disk source cache."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from _jit_cases import close
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy
import epoxy_ep_cpu.jit as jit_pkg
from epoxy.kit.elementwise import OPS, evaluate_numpy, single_op_program
from epoxy_ep_cpu import fused_groups
from epoxy_ep_cpu.fused_groups import LIMITS, FusedElementwise, limit_of
from epoxy_ep_cpu.jit import probe
from epoxy_ep_cpu.jit.probe import Availability

numba = pytest.importorskip("numba")
from epoxy_ep_cpu.jit import kernels_elementwise as emit  # noqa: E402 - needs numba

R = np.random.default_rng(7)
ATTRS = {"alpha": 0.25, "beta": 0.375, "gamma": 1.25, "min": -0.5, "max": 0.75, "approximate": "none"}
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])


@pytest.fixture(autouse=True)
def _fusion_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups are opt-in (``EPOXY_CPU_FUSE_ELEMENTWISE=1``); these tests are about them."""
    monkeypatch.setenv("EPOXY_CPU_FUSE_ELEMENTWISE", "1")  # the option fuse_elementwise, through its variable


def _values(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values with NaN, +-Inf and signed zeros sprinkled in."""
    x = R.uniform(-3, 3, shape).astype(dtype)
    flat = x.reshape(-1)
    flat[R.choice(flat.size, size=min(flat.size, 5), replace=False)] = SPECIAL[: min(flat.size, 5)]
    return x


def _never(*args: Any) -> Any:
    raise AssertionError("the per-node fallback ran")


# -- the emitter: every op, both float dtypes, every broadcasting class --------------------------
SHAPES = {  # operand shapes per arity: every class (c, s, b) appears; each set is one variant
    1: [[(2, 3, 4)], [(1, 1)]],
    2: [[(2, 3, 4), (4,)], [(1, 1), (2, 3, 1)]],
    3: [[(1, 3, 1), (), (2, 1, 4)]],
}
#: float64 differs from float32 only by the dtype the source binds to ``T``: checked on the ops
#: whose spelling has literals, NaN rules or libm calls (each variant costs ~0.5 s to compile)
FLOAT64_OPS = {"Div", "Max", "Min", "Clip", "Exp", "Erf", "Tanh", "Sigmoid", "Gelu", "Pow", "Where", "Round",
               "Selu", "HardSwish", "Relu", "Softplus"}
CASES = [(op, "float32") for op in sorted(OPS)] + [(op, "float64") for op in sorted(FLOAT64_OPS)]


@pytest.mark.parametrize(("op", "dtype"), CASES)
def test_every_op_of_the_kit_compiles_and_matches_its_numpy_reference(op: str, dtype: str) -> None:
    arity = OPS[op].arity
    program = single_op_program(op, arity, {k: ATTRS[k] for k in OPS[op].attrs})
    run = FusedElementwise(program, range(arity), dtype, [dtype] * arity, _never, 1)
    run.limit = None  # small shapes anyway; the emitter itself is under test
    for shapes in SHAPES[arity][: 1 if dtype == "float64" else None]:
        xs = [_values(s, dtype) for s in shapes]
        got = run(*xs)[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want = evaluate_numpy(program, xs, [dtype], compute=dtype)[0]
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        # libm's scalar exp/tanh/erf against numpy's SIMD ones: a few ulp
        tol = (4e-6 if OPS[op].transcendental else 1e-7) if dtype == "float32" else 1e-13
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True, err_msg=f"{op} {shapes}")


def test_bool_condition_loads_as_truth_and_non_contiguous_inputs_are_read_right() -> None:
    program = single_op_program("Where", 3)
    run = FusedElementwise(program, range(3), "float32", ["bool", "float32", "float32"], _never, 1)
    cond = R.standard_normal((4, 5)) > 0
    a = R.standard_normal((5, 4)).astype(np.float32).T  # a transposed view
    b = R.standard_normal((1, 5)).astype(np.float32)
    np.testing.assert_array_equal(run(cond, a, b)[0], np.where(cond, a, b))


def test_broadcast_patterns_of_every_dimension_and_two_outputs() -> None:
    """b-class inputs full or broadcast per collapsed dimension, in every combination."""
    from epoxy.kit.elementwise import ProgramBuilder

    b = ProgramBuilder(3)
    s = b.add("Add", [("in", 0), ("in", 1)])
    program = b.build([b.add("Mul", [s, ("in", 2)]), s])
    run = FusedElementwise(program, range(3), "float64", ["float64"] * 3, _never, 1)
    out = (3, 4, 5)
    for mask in range(1, 7):  # 0 is one element (class s), 7 the output shape (class c)
        shape = tuple(d if mask >> k & 1 else 1 for k, d in enumerate(out))
        for x0, x1 in (((3, 4, 5), shape), (shape, (4, 1))):
            xs = [_values(x0, "float64"), _values(x1, "float64"), _values(shape, "float64")]
            want = evaluate_numpy(program, xs, ["float64", "float64"], compute="float64")
            for g, w in zip(run(*xs), want):
                np.testing.assert_array_equal(g, w)


def test_an_input_that_is_not_an_array_runs_the_per_node_path() -> None:
    calls: list[int] = []
    run = FusedElementwise(single_op_program("Add", 2), (0, 1), "float32", ["float32"] * 2,
                           lambda *a: (calls.append(1), (np.add(*a),))[1], 1)
    assert run(np.ones(3, np.float32), np.float32(2))[0].tolist() == [3, 3, 3] and calls == [1]


def test_empty_outputs_run_nothing_and_keep_the_shape() -> None:
    run = FusedElementwise(single_op_program("Add", 2), (0, 1), "float32", ["float32"] * 2, _never, 1)
    out = run(np.zeros((0, 3), np.float32), np.zeros(3, np.float32))[0]
    assert out.shape == (0, 3) and out.dtype == np.float32


# -- whole groups in sessions ---------------------------------------------------------------------
def _model(nodes: list[onnx.NodeProto], inputs: dict[str, np.ndarray], outputs: list[str],
           inits: dict[str, np.ndarray] | None = None, opset: int = 17,
           dims: dict[str, list[Any]] | None = None) -> bytes:
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), (dims or {}).get(n, v.shape))
             for n, v in inputs.items()]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs]
    init = [onnx.numpy_helper.from_array(v, n) for n, v in (inits or {}).items()]
    g = helper.make_graph(nodes, "g", infos, outs, initializer=init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _session(model: bytes, **opts: Any) -> epoxy.InferenceSession:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=[("cpu", opts)])


def _run(sess: epoxy.InferenceSession, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return [np.asarray(v) for v in sess.run(None, feeds)]


def _fused_groups(sess: epoxy.InferenceSession) -> dict[str, list[str]]:
    report = sess.partition_report()
    owner = {d.node: d.provider for d in report.nodes}
    groups = {k: v for k, v in report.groups.items() if k.startswith("cpu_ew_")}
    assert all(owner[n] == "cpu" for members in groups.values() for n in members)
    return groups


def _three_ways(model: bytes, feeds: dict[str, np.ndarray], rtol: float, atol: float) -> dict[str, list[str]]:
    """jit on (fused) vs jit off (per-node numpy) vs onnx.reference; the fused groups."""
    fused = _session(model, jit=True)
    got = _run(fused, feeds)
    close(got, _run(_session(model, jit=False), feeds), rtol, atol)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = [np.asarray(v) for v in ReferenceEvaluator(onnx.load_from_string(model)).run(None, feeds)]
    close(got, reference, rtol, atol)
    return _fused_groups(fused)


def test_silu_with_bias_and_residual_is_one_group_and_matches() -> None:
    x = _values((2, 8, 5), "float32")
    feeds = {"x": x, "r": _values((2, 8, 5), "float32")}
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["a"]), helper.make_node("Add", ["a", "r"], ["y"])]
    model = _model(nodes, feeds, ["y"], {"bias": R.standard_normal((8, 1)).astype(np.float32)})
    groups = _three_ways(model, feeds, 1e-6, 1e-6)
    assert list(groups.values()) == [["Sigmoid_0", "Mul_1", "Add_2", "Add_3"]]


def test_attention_mask_add_with_where_on_a_bool_condition() -> None:
    scores = _values((1, 2, 4, 4), "float32")
    keep = R.standard_normal((1, 1, 1, 4)) > 0
    feeds = {"scores": scores, "keep": keep}
    nodes = [helper.make_node("Mul", ["scores", "scale"], ["sc"]),
             helper.make_node("Where", ["keep", "sc", "neg"], ["w"]),
             helper.make_node("Add", ["w", "bias"], ["y"])]
    inits = {"scale": np.array(0.125, np.float32), "neg": np.array(-1e9, np.float32),
             "bias": R.standard_normal((4, 4)).astype(np.float32)}
    groups = _three_ways(_model(nodes, feeds, ["y"], inits), feeds, 1e-6, 1e-6)
    assert len(groups) == 1 and len(next(iter(groups.values()))) == 3


def test_float64_chain_with_clip_bounds_variadic_ops_and_scalars() -> None:
    feeds = {"x": _values((3, 4), "float64"), "y": _values((4,), "float64"), "z": np.array(0.5)}
    nodes = [helper.make_node("Sum", ["x", "y", "z"], ["s"]),
             helper.make_node("Mean", ["s", "x"], ["m"]),
             helper.make_node("Clip", ["m", "lo", "hi"], ["c"]),
             helper.make_node("Max", ["c", "y"], ["out"])]
    inits = {"lo": np.array(-1.5), "hi": np.array(2.0)}
    groups = _three_ways(_model(nodes, feeds, ["out"], inits), feeds, 1e-13, 1e-13)
    assert len(groups) == 1 and len(next(iter(groups.values()))) == 4


def test_erf_gelu_left_unfused_by_the_optimizer_matches() -> None:
    """x * 0.5 * (1 + erf(x / sqrt 2)) written out as nodes (an exporter's GELU)."""
    feeds = {"x": _values((2, 16), "float32")}
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"]), helper.make_node("Neg", ["y"], ["out"])]
    inits = {"sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
             "half": np.array(0.5, np.float32)}
    model = _model(nodes, feeds, ["out"], inits)
    fused = _session(model, jit=True)
    close(_run(fused, feeds), _run(_session(model, jit=False), feeds), 2e-6, 2e-6)
    assert sum(len(v) for v in _fused_groups(fused).values()) >= 2


def _silu_model(shape: tuple[int, ...], op: str = "Sigmoid", dynamic: bool = True
                ) -> tuple[bytes, dict[str, np.ndarray]]:
    feeds = {"x": _values(shape, "float32")}
    nodes = [helper.make_node(op, ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    dims = {"x": [f"d{k}" for k in range(len(shape))]} if dynamic else None
    return _model(nodes, feeds, ["y"], dims=dims), feeds


def _count_variants(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    seen: list[tuple[Any, ...]] = []
    real = emit.kernel

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(emit, "kernel", spy)
    return seen


def test_transcendental_groups_past_the_limit_run_the_per_node_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _count_variants(monkeypatch)
    big = (2, LIMITS["Sigmoid"] or 0)
    model, feeds = _silu_model(big, dynamic=False)
    assert not _fused_groups(_session(model, jit=True))  # static and past the limit: not claimed
    model, feeds = _silu_model(big)
    fused = _session(model, jit=True)
    assert _fused_groups(fused)  # symbolic dims: claimed, and the size decides at run time
    # the per-node kernels: Sigmoid's float32 loop (kernels_special, on fast_math's exp) is
    # within an ulp of numpy's, the Mul the same
    close(_run(fused, feeds), _run(_session(model, jit=False), feeds), 3e-7, 0)
    assert not seen
    model, feeds = _silu_model((2, 8))
    _run(_session(model, jit=True), feeds)
    assert len(seen) == 1
    model, feeds = _silu_model(big, op="Relu")  # no transcendental: fused at any size
    close(_run(_session(model, jit=True), feeds), _run(_session(model, jit=False), feeds), 0, 0)
    assert len(seen) == 2


def test_limits_follow_the_slowest_transcendental_op() -> None:
    from epoxy.kit.elementwise import ProgramBuilder

    b = ProgramBuilder(1)
    erf = b.add("Erf", [("in", 0)])
    assert limit_of(b.build([erf])) is None  # ep-cpu's numpy erf is slower than libm's
    sig = b.add("Sigmoid", [erf])
    assert limit_of(b.build([sig])) == LIMITS["Sigmoid"]
    tanh_gelu = b.add("Gelu", [sig], {"approximate": "tanh"})
    assert limit_of(b.build([tanh_gelu])) == LIMITS["Tanh"]
    assert limit_of(single_op_program("Add", 2)) is None
    assert limit_of(single_op_program("Cos", 1)) == fused_groups.DEFAULT_LIMIT


def test_one_plan_per_input_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _count_variants(monkeypatch)
    x = np.zeros((3, 4), np.float32)
    sess = _session(_model([helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                           {"x": x}, ["y"], dims={"x": ["n", 4]}), jit=True)
    for _ in range(3):
        _run(sess, {"x": x})
    assert len(seen) == 1
    _run(sess, {"x": np.ones((5, 4), np.float32)})
    assert len(seen) == 2


# -- switches ---------------------------------------------------------------------------------------
def _two_relus() -> bytes:
    x = np.zeros((2, 3), np.float32)
    return _model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])], {"x": x}, ["y"])


def test_no_groups_with_jit_off_fusion_off_or_numba_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _two_relus()
    assert _fused_groups(_session(model, jit=True))
    assert not _fused_groups(_session(model, jit=False))
    monkeypatch.setenv("EPOXY_CPU_FUSE_ELEMENTWISE", "off")
    assert not _fused_groups(_session(model, jit=True))
    monkeypatch.delenv("EPOXY_CPU_FUSE_ELEMENTWISE")
    assert not _fused_groups(_session(model, jit=True))  # off by default
    monkeypatch.setenv("EPOXY_CPU_FUSE_ELEMENTWISE", "1")  # the option fuse_elementwise, through its variable
    assert _fused_groups(_session(model, jit=True))
    missing = Availability(False, reason="numba cannot be imported: ModuleNotFoundError")
    monkeypatch.setattr(jit_pkg, "availability", lambda: missing)
    monkeypatch.setattr(probe, "availability", lambda: missing)
    assert not _fused_groups(_session(model, jit=True))


def test_integer_and_mixed_dtype_nodes_are_not_taken() -> None:
    feeds = {"i": np.arange(6, dtype=np.int64).reshape(2, 3), "x": np.zeros((2, 3), np.float32)}
    nodes = [helper.make_node("Add", ["i", "i"], ["a"]), helper.make_node("Mul", ["a", "i"], ["b"]),
             helper.make_node("Cast", ["b"], ["c"], to=TensorProto.FLOAT), helper.make_node("Add", ["c", "x"], ["y"]),
             helper.make_node("Less", ["y", "x"], ["lt"])]
    sess = _session(_model(nodes, feeds, ["y", "lt"]), jit=True)
    assert not _fused_groups(sess)
    assert fused_groups.FLOATS == {"float32", "float64"}


# -- the source cache -----------------------------------------------------------------------------
def test_generated_source_is_written_once_under_the_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setattr(emit, "_directory", lambda: tmp_path / "epoxy_elementwise")
    monkeypatch.setattr(emit, "_compiled", {})
    program = single_op_program("Mul", 2)
    fn = emit.kernel(program, "float32", "ff", "cc", 1, False)
    files = list((tmp_path / "epoxy_elementwise").glob("ew_*.py"))
    assert len(files) == 1 and "def kernel(" in files[0].read_text()
    assert emit.kernel(program, "float32", "ff", "cc", 1, False) is fn
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(fn(a, a, (4,), np.zeros(1, np.int64)), a * a)


def test_an_unwritable_cache_dir_still_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setattr(emit, "_directory", lambda: blocker / "epoxy_elementwise")
    monkeypatch.setattr(emit, "_compiled", {})
    fn = emit.kernel(single_op_program("Sub", 2), "float64", "ff", "cs", 1, False)
    a = np.arange(3.0)
    np.testing.assert_array_equal(fn(a, np.array([1.0]), (3,), np.zeros(1, np.int64)), a - 1)


def test_an_initializer_a_feed_may_replace_is_never_baked_into_a_program() -> None:
    """onnxruntime's overridable initializers: the fed value must reach the fused loop."""
    from onnx import TensorProto, helper, numpy_helper

    scale = numpy_helper.from_array(np.array([2.0], np.float32), "scale")
    nodes = [helper.make_node("Mul", ["x", "scale"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                     helper.make_tensor_value_info("scale", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], initializer=[scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = epoxy.InferenceSession(model.SerializeToString(),
                                  providers=[("cpu", {"jit": True, "fuse_elementwise": True})])
    assert any(label.startswith("cpu_ew") for label in sess.partition_report().groups)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [2.0, 0.0, 6.0])
    fed = sess.run(None, {"x": x, "scale": np.array([-1.0], np.float32)})[0]
    np.testing.assert_array_equal(fed, [0.0, 2.0, 0.0])
