"""Control flow run by the core: If, Loop, Scan (8 and 9+), SequenceMap, nested subgraphs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy
from epoxy.contract import Device
from epoxy.errors import UnsupportedOpError
from epoxy.kit import KernelProvider
from epoxy.plugins import ProviderRegistry
from epoxy.testing import registry_with

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem=F, shape=()):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


def mk(nodes, inputs, outputs, inits=(), opset=17):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "main", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_both(model, feeds, providers=("cpu",), **kw):  # type: ignore[no-untyped-def]
    sess = epoxy.InferenceSession(model, providers=list(providers), **kw)
    got = sess.run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for a, b in zip(g, w):
                np.testing.assert_allclose(a, b, rtol=1e-6)
            continue
        w = np.asarray(w)
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-6)
    return sess, got


# -- a second provider, to check subgraph nodes are partitioned over the session's providers
class _OnlyAdd(KernelProvider):
    def claims(self, node):  # type: ignore[no-untyped-def]
        if node.op_type != "Add":
            return "lite runs Add only"
        return super().claims(node)


class _LiteFactory:
    name, vendor, version, sdk_api, priority = "lite", "tests", "0", "1.0", 5

    def devices(self):  # type: ignore[no-untyped-def]
        return [Device("lite", "cpu", 0)]

    def create(self, device, options):  # type: ignore[no-untyped-def]
        from epoxy_ep_cpu.registry import load_kernels

        return _OnlyAdd("lite", device, load_kernels(), options)


@pytest.fixture(scope="module")
def lite_registry() -> ProviderRegistry:
    return registry_with(_LiteFactory(), installed=True, plugin_name="lite-tests")


# -- If -------------------------------------------------------------------------------------
def _if_model(opset: int = 17):  # type: ignore[no-untyped-def]
    # then: x + w (w: outer initializer), else: x * y (x, y: outer graph inputs)
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [vi("t", F, [3])])
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "y"], ["e"])], "else", [], [vi("e", F, [3])])
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g, name="the_if")
    w = numpy_helper.from_array(np.array([10, 20, 30], np.float32), "w")
    return mk([node], [vi("c", B, []), vi("x", F, [3]), vi("y", F, [3])], [vi("out", F, [3])], [w], opset)


@pytest.mark.parametrize("cond", [True, False])
def test_if_reads_outer_scope(cond: bool) -> None:
    x, y = np.array([1, 2, 3], np.float32), np.array([2, 2, 2], np.float32)
    sess, _ = run_both(_if_model(), {"c": np.array(cond), "x": x, "y": y})
    report = sess.partition_report()
    (decision,) = report.nodes
    assert decision.node == "the_if" and decision.provider == "core" and decision.declined == []
    assert any(n.startswith("the_if.then_branch") for n in report.notes)


def test_if_branch_nodes_partitioned_over_session_providers(lite_registry: ProviderRegistry) -> None:
    sess = epoxy.InferenceSession(_if_model(), providers=["lite", "cpu"], registry=lite_registry)
    notes = " | ".join(sess.partition_report().notes)
    assert "the_if.then_branch: 1 on lite" in notes
    assert "the_if.else_branch: 1 on cpu" in notes
    x, y = np.array([1, 2, 3], np.float32), np.array([2, 2, 2], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"c": np.array(True), "x": x, "y": y})[0], x + [10, 20, 30])


def test_if_branch_with_unsupported_node_names_it() -> None:
    then_g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["t"], domain="custom.x", name="inner")],
                               "then", [], [vi("t", F, [1])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [vi("e", F, [1])])
    node = helper.make_node("If", ["c"], ["out"], then_branch=then_g, else_branch=else_g)
    graph = helper.make_graph([node], "main", [vi("c", B, []), vi("x", F, [1])], [vi("out", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.x", 1)])
    with pytest.raises(UnsupportedOpError, match="then_branch.*inner"):
        epoxy.InferenceSession(model, providers=["cpu"], sess_options=epoxy.SessionOptions(check_model=False))


# -- Loop -----------------------------------------------------------------------------------
def _loop_model(with_m: bool = True, with_cond: bool = True, opset: int = 17):  # type: ignore[no-untyped-def]
    # carried: acc (float [2]); scan output: acc * i ; stops when sum(acc) > limit (outer value)
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),  # step: outer-scope input
            helper.make_node("Mul", ["acc_out", "i_f"], ["scan"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"]),  # limit: outer initializer
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [2])],
        [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("scan", F, [2])],
    )
    node = helper.make_node("Loop", ["M" if with_m else "", "cond" if with_cond else "", "acc0"], ["acc", "scans"],
                            body=body, name="loop")
    inputs = [vi("acc0", F, [2]), vi("step", F, [2])]
    if with_m:
        inputs.append(vi("M", I64, []))
    if with_cond:
        inputs.append(vi("cond", B, []))
    limit = numpy_helper.from_array(np.array(20.0, np.float32), "limit")
    return mk([node], inputs, [vi("acc", F, [2]), vi("scans", F, ["n", 2])], [limit], opset)


def _loop_expected(acc0, step, m, cond, use_cond):  # type: ignore[no-untyped-def]
    acc, scans, i = acc0.copy(), [], 0
    going = True if cond is None else cond
    while going and (m is None or i < m):
        acc = acc + step
        scans.append(acc * np.float32(i))
        if use_cond:
            going = bool(acc.sum() < 20.0)
        i += 1
    return acc, (np.stack(scans) if scans else np.zeros((0, 2), np.float32))


@pytest.mark.parametrize("with_m,with_cond,m,cond", [
    (True, True, 3, True),     # trip count ends it
    (True, True, 100, True),   # cond ends it
    (True, False, 8, None),    # for loop: body cond ignored (runs past the limit)
    (False, True, None, True), # while loop
    (True, True, 0, True),     # zero iterations: empty scan output with the right dtype
    (True, True, 5, False),    # cond false up front: zero iterations
])
def test_loop(with_m: bool, with_cond: bool, m, cond) -> None:  # type: ignore[no-untyped-def]
    model = _loop_model(with_m, with_cond)
    feeds = {"acc0": np.array([0.5, 1.0], np.float32), "step": np.array([1.0, 2.0], np.float32)}
    if with_m:
        feeds["M"] = np.array(m, np.int64)
    if with_cond:
        feeds["cond"] = np.array(cond)
    acc, scans = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    want_acc, want_scans = _loop_expected(feeds["acc0"], feeds["step"], m, cond, with_cond)
    assert acc.dtype == np.float32 and scans.dtype == np.float32
    assert scans.shape == want_scans.shape
    np.testing.assert_allclose(acc, want_acc)
    np.testing.assert_allclose(scans, want_scans)
    if with_cond and m not in (0, None) and cond is not False:
        run_both(model, feeds)  # the onnx reference agrees where it can run


def test_loop_sequence_carried_and_nested_if() -> None:
    # carried sequence; an If inside the body reads the loop's iteration number and an
    # outer-outer value ("base"), appending a tensor on even iterations only
    then_g = helper.make_graph(
        [
            helper.make_node("Add", ["base", "i_f"], ["v"]),
            helper.make_node("SequenceInsert", ["seq_in", "v"], ["seq_t"]),
        ],
        "then",
        [],
        [helper.make_tensor_sequence_value_info("seq_t", F, None)],
    )
    else_g = helper.make_graph([helper.make_node("Identity", ["seq_in"], ["seq_e"])], "else", [],
                               [helper.make_tensor_sequence_value_info("seq_e", F, None)])
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Mod", ["i", "two"], ["r"]),
            helper.make_node("Equal", ["r", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["seq_out"], then_branch=then_g, else_branch=else_g, name="inner_if"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [vi("cond_out", B, []), helper.make_tensor_sequence_value_info("seq_out", F, None)],
    )
    nodes = [
        helper.make_node("SequenceEmpty", [], ["seq0"], dtype=F),
        helper.make_node("Loop", ["M", "", "seq0"], ["seq"], body=body),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
    ]
    inits = [
        numpy_helper.from_array(np.array(2, np.int64), "two"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
    ]
    model = mk(nodes, [vi("M", I64, []), vi("base", F, [2])], [vi("cat", F, ["n"])], inits)
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    (cat,) = sess.run(None, {"M": np.array(5, np.int64), "base": np.array([100, 200], np.float32)})
    assert any("inner_if" in n for n in sess.partition_report().notes)
    np.testing.assert_array_equal(cat, [100, 200, 102, 202, 104, 204])


def test_loop_body_partitioned_over_providers(lite_registry: ProviderRegistry) -> None:
    sess = epoxy.InferenceSession(_loop_model(), providers=["lite", "cpu"], registry=lite_registry)
    (decision,) = sess.partition_report().nodes
    assert decision.provider == "core"
    notes = " | ".join(sess.partition_report().notes)
    assert "loop.body: " in notes and "1 on lite" in notes and "4 on cpu" in notes
    feeds = {"acc0": np.zeros(2, np.float32), "step": np.ones(2, np.float32), "M": np.array(3, np.int64),
             "cond": np.array(True)}
    acc, scans = sess.run(None, feeds)
    np.testing.assert_array_equal(acc, [3, 3])
    np.testing.assert_array_equal(scans, [[0, 0], [2, 2], [6, 6]])


def test_loop_opset11_scalar_scan() -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["a_in", "i"], ["a_out"]),
         helper.make_node("Identity", ["a_out"], ["s"])],
        "body", [vi("i", I64, []), vi("cond_in", B, []), vi("a_in", I64, [])],
        [vi("cond_out", B, []), vi("a_out", I64, []), vi("s", I64, [])],
    )
    node = helper.make_node("Loop", ["M", "c", "a0"], ["a", "s_all"], body=body)
    model = mk(
        [node],
        [vi("M", I64, []), vi("c", B, []), vi("a0", I64, [])],
        [vi("a", I64, []), vi("s_all", I64, ["n"])],
        opset=11,
    )
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    for m in (0, 1, 6):
        a, s_all = sess.run(None, {"M": np.array(m, np.int64), "c": np.array(True), "a0": np.array(3, np.int64)})
        want = 3 + np.cumsum(np.arange(m, dtype=np.int64))
        assert a.dtype == np.int64 and a.shape == () and int(a) == (want[-1] if m else 3)
        assert s_all.dtype == np.int64 and s_all.shape == (m,)
        np.testing.assert_array_equal(s_all, want)


# -- Scan -----------------------------------------------------------------------------------
def _scan9_model(attrs, x_shape, opset=17):  # type: ignore[no-untyped-def]
    # state: running sum s (shape [2]); scan inputs x (rows) and y; outputs s*k (k outer) and x - y
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "k"], ["o1"]),
            helper.make_node("Sub", ["x_t", "y_t"], ["o2"]),
        ],
        "body", [vi("s_in", F, [2]), vi("x_t", F, [2]), vi("y_t", F, [2])],
        [vi("s_out", F, [2]), vi("o1", F, [2]), vi("o2", F, [2])],
    )
    node = helper.make_node("Scan", ["s0", "x", "y"], ["s", "out1", "out2"], body=body, num_scan_inputs=2, **attrs)
    k = numpy_helper.from_array(np.array(2.0, np.float32), "k")
    return mk([node], [vi("s0", F, [2]), vi("x", F, x_shape), vi("y", F, x_shape)],
              [vi("s", F, [2]), vi("out1", F, ["a", "b"]), vi("out2", F, ["c", "d"])], [k], opset)


@pytest.mark.parametrize("attrs,x_shape", [
    ({}, [4, 2]),
    ({"scan_input_directions": [1, 0]}, [4, 2]),
    ({"scan_input_axes": [1, -1]}, [2, 3]),
    ({"scan_output_axes": [1, -2], "scan_output_directions": [1, 0]}, [3, 2]),
    ({}, [0, 2]),  # empty scan
])
def test_scan9(attrs, x_shape) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    model = _scan9_model(attrs, x_shape)
    feeds = {"s0": np.array([1, -1], np.float32), "x": rng.standard_normal(x_shape).astype(np.float32),
             "y": rng.standard_normal(x_shape).astype(np.float32)}
    got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)
    in_axes = attrs.get("scan_input_axes", [0, 0])
    in_dirs = attrs.get("scan_input_directions", [0, 0])
    out_axes = attrs.get("scan_output_axes", [0, 0])
    out_dirs = attrs.get("scan_output_directions", [0, 0])
    xs = []
    for name, axis, direction in zip("xy", in_axes, in_dirs):
        seq = np.moveaxis(feeds[name], axis, 0)
        xs.append(seq[::-1] if direction else seq)
    state, o1, o2 = feeds["s0"], [], []
    for x_t, y_t in zip(*xs):
        state = state + x_t
        o1.append(state * np.float32(2))
        o2.append(x_t - y_t)
    np.testing.assert_allclose(got[0], state, rtol=1e-6)
    for out, values, axis, direction in zip(got[1:], (o1, o2), out_axes, out_dirs):
        if not values:
            assert out.shape == (0, 2) and out.dtype == np.float32
            continue
        want = np.stack(values[::-1] if direction else values, axis=axis)
        assert out.dtype == np.float32 and out.shape == want.shape
        np.testing.assert_allclose(out, want, rtol=1e-6)
    if not any(attrs.values()) and x_shape[0]:
        run_both(model, feeds)


def test_scan8_batched_with_sequence_lens_and_reverse() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["o"])],
        "body", [vi("s_in", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("o", F, [2])],
    )
    node = helper.make_node("Scan", ["lens", "s0", "x"], ["s", "o_all"], body=body, num_scan_inputs=1, directions=[1])
    model = mk([node], [vi("lens", TensorProto.INT32, [2]), vi("s0", F, [2, 2]), vi("x", F, [2, 3, 2])],
               [vi("s", F, [2, 2]), vi("o_all", F, [2, 3, 2])], opset=8)
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    s, o = epoxy.InferenceSession(model, providers=["cpu"]).run(
        None, {"lens": np.array([3, 2], np.int32), "s0": np.zeros((2, 2), np.float32), "x": x})
    np.testing.assert_array_equal(s, [x[0].sum(0), x[1, :2].sum(0)])
    np.testing.assert_array_equal(o[0], np.cumsum(x[0, ::-1], axis=0))
    np.testing.assert_array_equal(o[1, :2], np.cumsum(x[1, 1::-1], axis=0))
    np.testing.assert_array_equal(o[1, 2], [0, 0])  # padded past the sequence length


def test_scan8_without_sequence_lens_matches_reference() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Mul", ["s_out", "x_t"], ["o"])],
        "body", [vi("s_in", F, [2]), vi("x_t", F, [2])], [vi("s_out", F, [2]), vi("o", F, [2])],
    )
    node = helper.make_node("Scan", ["", "s0", "x"], ["s", "o_all"], body=body, num_scan_inputs=1)
    model = mk([node], [vi("s0", F, [3, 2]), vi("x", F, [3, 4, 2])], [vi("s", F, [3, 2]), vi("o_all", F, [3, 4, 2])],
               opset=8)
    rng = np.random.default_rng(1)
    s0 = rng.standard_normal((3, 2)).astype(np.float32)
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    s, o = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"s0": s0, "x": x})
    running = s0[:, None, :] + np.cumsum(x, axis=1)
    np.testing.assert_allclose(s, running[:, -1], rtol=1e-5)
    np.testing.assert_allclose(o, running * x, rtol=1e-5)
    assert o.shape == (3, 4, 2) and o.dtype == np.float32


# -- SequenceMap ----------------------------------------------------------------------------
def test_sequence_map_with_tensor_input_and_outer_value() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Mul", ["ab", "scale"], ["out"]),
         helper.make_node("Shape", ["a"], ["shp"])],
        "body", [vi("a", F, ["n"]), vi("b", F, [1])], [vi("out", F, ["n"]), vi("shp", I64, [1])],
    )
    node = helper.make_node("SequenceMap", ["seq", "t"], ["mapped", "shapes"], body=body)
    scale = numpy_helper.from_array(np.array(3.0, np.float32), "scale")
    model = mk([node], [helper.make_tensor_sequence_value_info("seq", F, ["n"]), vi("t", F, [1])],
               [helper.make_tensor_sequence_value_info("mapped", F, ["n"]),
                helper.make_tensor_sequence_value_info("shapes", I64, [1])], [scale])
    seq = [np.arange(k, dtype=np.float32) for k in (1, 3, 2)]
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    mapped, shapes = sess.run(None, {"seq": seq, "t": np.array([1], np.float32)})
    assert [m.tolist() for m in mapped] == [[3.0], [3.0, 6.0, 9.0], [3.0, 6.0]]
    assert [s.tolist() for s in shapes] == [[1], [3], [2]] and shapes[0].dtype == np.int64
    empty, empty_shapes = sess.run(None, {"seq": [], "t": np.array([1], np.float32)})
    assert empty == [] and empty_shapes == []
