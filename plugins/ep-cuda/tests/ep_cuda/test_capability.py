"""Capability, partitioning, host values, fusion and copies against a simulated device."""

from __future__ import annotations

import numpy as np
from cuda_helpers import assert_close, model, placement, run_both
from onnx import TensorProto, helper

from epoxy_ep_cuda.capability import find_regions
from epoxy_ep_cuda.ops_table import decline_reason, load

R = np.random.default_rng(0)


def test_unsupported_op_and_dtype_stay_on_cpu_with_copies() -> None:
    x = R.standard_normal((2, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Cast", ["a"], ["d"], to=TensorProto.DOUBLE, name="to_double"),
        helper.make_node("Exp", ["d"], ["e"], name="exp_double"),  # float64: declined
        helper.make_node("Cast", ["e"], ["f"], to=TensorProto.FLOAT, name="to_float"),
        helper.make_node("Det", ["sq"], ["det"], name="det"),  # no kernel
        helper.make_node("Mul", ["f", "f"], ["y"], name="mul"),
    ]
    m = model(nodes, {"x": x, "sq": R.standard_normal((3, 3)).astype(np.float32)}, ["y", "det"])
    got, want, provider, s = run_both(m, {"x": x, "sq": np.eye(3, dtype=np.float32)})
    assert_close(got, want)
    where = placement(s)
    assert where["relu"] == "cuda" and where["mul"] == "cuda"
    assert where["exp_double"] == "cpu" and where["det"] == "cpu" and where["to_double"] == "cpu"
    reasons = {d.node: dict(d.declined).get("cuda") for d in s.partition_report().nodes}
    assert "does not support float64" in reasons["exp_double"]
    assert "no kernel for Det" in reasons["det"]
    assert "Cast to float64" in reasons["to_double"]
    copies = [st.label for st in s._plan.steps if st.op_type == "MemcpyDevice"]
    assert any("cuda:gpu:0->host" in c for c in copies) and any("host->cuda:gpu:0" in c for c in copies)


def test_shape_chain_runs_on_host_without_syncs() -> None:
    x = R.standard_normal((2, 3, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Shape", ["r"], ["shp"], name="shape"),
        helper.make_node("Gather", ["shp", "i0"], ["d0"], axis=0, name="gather"),
        helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"], name="unsq"),
        helper.make_node("Concat", ["d0u", "minus1"], ["newshape"], axis=0, name="concat"),
        helper.make_node("Reshape", ["r", "newshape"], ["y"], name="reshape"),
    ]
    inits = {"i0": np.array(0, np.int64), "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    m = model(nodes, {"x": x}, ["y"], inits, dims={"x": ["n", 3, 4]})  # a static batch would fold the chain
    got, want, p, s = run_both(m, {"x": x})
    assert_close(got, want)
    assert set(placement(s).values()) == {"cuda"}
    host = {p.analysis.claimed[i].node.name for i, plan in p.analysis.claimed.items() if plan.host_mode}
    assert host == {"shape", "gather", "unsq", "concat"}
    assert p.backend.host_syncs == 0 and p.backend.implicit_uploads == 0
    assert p.backend.copies_out == 1  # only the graph output comes back


def test_shape_value_read_on_cpu_passes_through() -> None:
    x = R.standard_normal((2, 5)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Det", ["m"], ["dt"])]
    m = model(
        nodes + [helper.make_node("Cast", ["s"], ["y"], to=TensorProto.INT64)],
        {"x": x, "m": np.eye(2, dtype=np.float32)},
        ["y", "dt"],
    )
    got, want, _p, _s = run_both(m, {"x": x, "m": np.eye(2, dtype=np.float32)})
    assert_close(got, want)


def test_elementwise_chains_fuse_into_one_group() -> None:
    x = R.standard_normal((4, 8)).astype(np.float32)
    inits = {
        "w": R.standard_normal((8, 8)).astype(np.float32),
        "b": R.standard_normal(8).astype(np.float32),
        "sqrt2": np.array(np.sqrt(2), np.float32),
        "one": np.array(1, np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"]),
        helper.make_node("Add", ["mm", "b"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["g1"]),
        helper.make_node("Erf", ["g1"], ["g2"]),
        helper.make_node("Add", ["g2", "one"], ["g3"]),
        helper.make_node("Mul", ["h", "g3"], ["g4"]),
        helper.make_node("Mul", ["g4", "half"], ["y"]),
    ]
    m = model(nodes, {"x": x}, ["y"], inits)
    got, want, p, s = run_both(m, {"x": x}, level="disable")
    assert_close(got, want)
    assert [k for k, n in p.analysis.groups] == ["ew"] and len(p.analysis.groups[0][1]) == 6
    groups = s.partition_report().groups
    assert len(groups) == 1
    # scalar constants are baked into the kernel as literals: one kernel, two real inputs
    assert len(p.backend.ew_variants) == 1
    (variant,) = p.backend.ew_variants
    assert len(variant[1]) == 2
    got2, want2, p2, _ = run_both(m, {"x": x}, {"fuse": False}, level="disable")
    assert_close(got2, want2)
    assert p2.analysis.groups == []


def test_group_not_fused_when_intermediate_escapes() -> None:
    x = R.standard_normal((3, 3)).astype(np.float32)
    nodes = [helper.make_node("Exp", ["x"], ["e"]), helper.make_node("Neg", ["e"], ["n"]),
             helper.make_node("Add", ["n", "e"], ["y"])]
    m = model(nodes, {"x": x}, ["y", "e"])  # e is a graph output: not absorbed
    got, want, p, _ = run_both(m, {"x": x})
    assert_close(got, want)
    for _kind, nodes_ in p.analysis.groups:
        assert 0 not in nodes_


def test_cuda_graph_regions_are_convex() -> None:
    x = R.standard_normal((2, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Det", ["sq"], ["d"], name="cpu_det"),
        helper.make_node("Mul", ["a", "d"], ["b"], name="b"),
        helper.make_node("Exp", ["a"], ["c"], name="c"),
        helper.make_node("Add", ["b", "c"], ["y"], name="y"),
    ]
    sq = np.eye(2, dtype=np.float32) * 2
    m = model(nodes, {"x": x, "sq": sq}, ["y"])
    got, want, p, s = run_both(m, {"x": x, "sq": sq}, {"cuda_graph": True})
    assert_close(got, want)
    kinds = [k for k, _ in p.analysis.groups]
    assert kinds and set(kinds) == {"region"}
    for _ in range(3):
        assert_close(s.run(None, {"x": x, "sq": sq}), want)


def test_find_regions_levels() -> None:
    class G:
        def __init__(self, edges: dict[int, list[int]], n: int) -> None:
            from types import SimpleNamespace

            self.nodes = [SimpleNamespace(index=i, inputs=tuple(f"v{p}" for p in edges.get(i, []))) for i in range(n)]

        def producer(self, name: str) -> int:
            return int(name[1:])

    # 0 -> 1(cpu) -> 2 ; 0 -> 2 ; 2 -> 3
    regions = find_regions(G({1: [0], 2: [0, 1], 3: [2]}, 4), [0, 2, 3])  # type: ignore[arg-type]
    assert regions == [(0,), (2, 3)]


def test_decline_reasons_from_table() -> None:
    load()
    from epoxy.contract import NodeSpec, ValueType

    def spec(op: str, dtype: str | None) -> NodeSpec:
        vt = ValueType("tensor", 0, None if dtype is None else np.dtype(dtype), (2,))
        return NodeSpec(0, "n", op, "", 17, ("x",), ("y",), {}, (vt,), (vt,))

    assert decline_reason(spec("Relu", "float32")) is None
    assert decline_reason(spec("Relu", "float16")) is None
    assert "does not support int8" in decline_reason(spec("Relu", "int8"))
    assert "dtype unknown" in decline_reason(spec("Relu", None))
    assert "no kernel for NonMaxSuppression" in decline_reason(spec("NonMaxSuppression", "float32"))
