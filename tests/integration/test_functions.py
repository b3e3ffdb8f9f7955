"""ONNX functions: model-local functions are inlined; ops nobody runs are expanded into
their schema function bodies (recursively, also inside control-flow subgraphs)."""

from __future__ import annotations

import numpy as np
import onnx
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
LOCAL = "local.fn"


def vi(name, elem=F, shape=()):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, list(shape))


# -- a provider built on the cpu kernels that refuses some ops, to force expansions -----------
#: ops the "nofn" provider refuses unless told otherwise (ONNX defines them as functions)
REFUSED = ("Celu", "Range", "LayerNormalization", "HardSwish")


class _Refusing(KernelProvider):
    def claims(self, node):  # type: ignore[no-untyped-def]
        if node.op_type in self.options.get("refuse", REFUSED):
            return f"{node.op_type} refused for this test"
        return super().claims(node)


class _Factory:
    name, vendor, version, sdk_api, priority = "nofn", "tests", "0", "1.0", 5

    def devices(self):  # type: ignore[no-untyped-def]
        return [Device("nofn", "cpu", 0)]

    def create(self, device, options):  # type: ignore[no-untyped-def]
        from epoxy_ep_cpu.registry import load_kernels

        return _Refusing("nofn", device, load_kernels(), options)


@pytest.fixture(scope="module")
def registry() -> ProviderRegistry:
    return registry_with(_Factory(), installed=True, plugin_name="nofn-tests")


def nofn_session(model, registry, refuse=REFUSED):  # type: ignore[no-untyped-def]
    options = epoxy.SessionOptions(disable_fallback=True)
    return epoxy.InferenceSession(model, providers=[("nofn", {"refuse": refuse})], sess_options=options,
                                  registry=registry)


def assert_matches_reference(sess, model, feeds, rtol=1e-5, atol=1e-6):  # type: ignore[no-untyped-def]
    got = sess.run(None, feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


# -- model-local functions ----------------------------------------------------------------------
def _local_model():  # type: ignore[no-untyped-def]
    # scale_add(x, b) = x * alpha + b  (alpha: attribute with a default of 2.0)
    const = helper.make_node("Constant", [], ["a"], name="const")
    const.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    const.attribute[0].ref_attr_name = "alpha"
    scale_add = helper.make_function(
        LOCAL, "ScaleAdd", ["x", "b"], ["y"],
        [const, helper.make_node("Mul", ["x", "a"], ["xa"]), helper.make_node("Add", ["xa", "b"], ["y"])],
        [helper.make_opsetid("", 17)], attributes=[],
    )
    default = helper.make_attribute("alpha", 2.0)
    scale_add.attribute_proto.append(default)
    # twice(x, b) = ScaleAdd(ScaleAdd(x, b), b) with alpha=3 on the inner call: nested local call
    twice = helper.make_function(
        LOCAL, "Twice", ["x", "b"], ["y"],
        [helper.make_node("ScaleAdd", ["x", "b"], ["t"], domain=LOCAL, alpha=3.0),
         helper.make_node("ScaleAdd", ["t", "b"], ["y"], domain=LOCAL)],
        [helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)],
    )
    nodes = [
        helper.make_node("ScaleAdd", ["X", "B"], ["y1"], domain=LOCAL, name="first"),
        helper.make_node("ScaleAdd", ["y1", "B"], ["y2"], domain=LOCAL, name="second", alpha=0.5),
        helper.make_node("Twice", ["y2", "B"], ["out"], domain=LOCAL, name="third"),
    ]
    graph = helper.make_graph(
        nodes, "g", [vi("X", F, [2, 3]), vi("B", F, [3])], [vi("y1", F, [2, 3]), vi("out", F, [2, 3])]
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(LOCAL, 1)],
                             functions=[scale_add, twice])


def test_local_functions_inlined() -> None:
    model = _local_model()
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1, -1, 0.5], np.float32)
    y1, out = sess.run(None, {"X": x, "B": b})  # (onnx.reference cannot run attribute refs here)
    assert y1.dtype == out.dtype == np.float32
    np.testing.assert_allclose(y1, x * 2 + b)
    y2 = y1 * 0.5 + b
    np.testing.assert_allclose(out, (y2 * 3 + b) * 2 + b)
    names = [d.node for d in sess.partition_report().nodes]
    assert len(names) == len(set(names))
    assert all(n.split("/")[0] in ("first", "second", "third") for n in names), names
    assert all(d.provider == "cpu" and d.op_type in ("Constant", "Mul", "Add") for d in sess.partition_report().nodes)
    assert [o.name for o in sess.get_outputs()] == ["y1", "out"]


# -- schema functions -----------------------------------------------------------------------
def test_celu_expanded_when_no_provider_runs_it(registry: ProviderRegistry) -> None:
    node = helper.make_node("Celu", ["x"], ["y"], alpha=0.7, name="my_celu")
    model = helper.make_model(helper.make_graph([node], "g", [vi("x", F, [5])], [vi("y", F, [5])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = nofn_session(model, registry)
    x = np.array([-3, -0.5, 0, 0.5, 3], np.float32)
    assert_matches_reference(sess, model, {"x": x})
    decisions = sess.partition_report().nodes
    assert len(decisions) > 1
    assert all(d.node.startswith("my_celu/") and d.provider == "nofn" for d in decisions)
    assert "Celu" not in {d.op_type for d in decisions}


def test_default_attribute_and_context_dependent_body(registry: ProviderRegistry) -> None:
    # LayerNormalization's body is context dependent (built for the input types); the
    # defaults (axis=-1, epsilon) come from the schema; two outputs, one is optional
    scale = numpy_helper.from_array(np.array([1.0, 2.0, 0.5, -1.0], np.float32), "scale")
    node = helper.make_node("LayerNormalization", ["x", "scale"], ["y", "mean"], name="ln")
    graph = helper.make_graph([node], "g", [vi("x", F, [2, 3, 4])], [vi("y", F, [2, 3, 4]), vi("mean", F, [2, 3, 1])],
                              initializer=[scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = nofn_session(model, registry)
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    assert_matches_reference(sess, model, {"x": x}, rtol=1e-4, atol=1e-5)
    assert all(d.node.startswith("ln/") for d in sess.partition_report().nodes)


def test_range_body_with_loop_and_outer_references(registry: ProviderRegistry) -> None:
    # Range expands to a body holding a Loop whose subgraph reads the function's input
    # `delta`: the reference must be renamed to the caller's value; the Loop then runs on core
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="rng"),
             helper.make_node("Range", ["limit", "start", "neg"], ["r2"], name="rng2")]
    graph = helper.make_graph(nodes, "g", [vi("start", F), vi("limit", F), vi("delta", F), vi("neg", F)],
                              [vi("r", F, ["n"]), vi("r2", F, ["m"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = nofn_session(model, registry)
    feeds = {"start": np.array(1.0, np.float32), "limit": np.array(4.0, np.float32),
             "delta": np.array(0.75, np.float32), "neg": np.array(-1.0, np.float32)}
    r, r2 = sess.run(None, feeds)
    np.testing.assert_allclose(r, np.arange(1.0, 4.0, 0.75, dtype=np.float32))
    np.testing.assert_allclose(r2, np.arange(4.0, 1.0, -1.0, dtype=np.float32))
    feeds["delta"] = np.array(-1.0, np.float32)  # zero iterations: empty, float32
    r, _ = sess.run(None, feeds)
    assert r.shape == (0,) and r.dtype == np.float32
    loops = [d for d in sess.partition_report().nodes if d.op_type == "Loop"]
    assert [d.provider for d in loops] == ["core", "core"]
    assert {d.node.split("/")[0] for d in loops} == {"rng", "rng2"}


def test_function_body_for_older_model_opset(registry: ProviderRegistry) -> None:
    # Relu-14's body is written for opset 18 (CastLike...): its nodes keep that opset
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    model = helper.make_model(helper.make_graph([node], "g", [vi("x", F, [4])], [vi("y", F, [4])]),
                              opset_imports=[helper.make_opsetid("", 14)])
    sess = nofn_session(model, registry, refuse=("Relu",))
    x = np.array([-1, 0, 2, -3], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_expansion_inside_a_loop_body(registry: ProviderRegistry) -> None:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("HardSwish", ["v_in"], ["hs"], name="hs_in_body"),
         helper.make_node("Add", ["hs", "bias"], ["v_out"])],
        "body", [vi("i", I64), vi("c_in", B), vi("v_in", F, [3])], [vi("c_out", B), vi("v_out", F, [3])],
    )
    loop = helper.make_node("Loop", ["M", "", "v0"], ["v"], body=body, name="loop")
    graph = helper.make_graph([loop], "g", [vi("M", I64), vi("v0", F, [3]), vi("bias", F, [3])], [vi("v", F, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = nofn_session(model, registry)
    v = np.array([-4, 0.5, 4], np.float32)
    bias = np.array([0.1, 0.2, 0.3], np.float32)
    got = sess.run(None, {"M": np.array(3, np.int64), "v0": v, "bias": bias})[0]
    for _ in range(3):
        v = v * np.clip(v / 6 + 0.5, 0, 1) + bias
    np.testing.assert_allclose(got, v, rtol=1e-6)
    assert any(n.startswith("loop.body:") for n in sess.partition_report().notes)


def test_unexpandable_node_still_reports_why(registry: ProviderRegistry) -> None:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="custom.none", name="mystery")
    graph = helper.make_graph([node], "g", [vi("x", F, [1])], [vi("y", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.none", 1)])
    with pytest.raises(UnsupportedOpError, match="mystery"):
        epoxy.InferenceSession(model, providers=["cpu"], sess_options=epoxy.SessionOptions(check_model=False))


def test_provider_that_runs_the_op_gets_it_unexpanded() -> None:
    node = helper.make_node("Celu", ["x"], ["y"], name="c")
    model = helper.make_model(helper.make_graph([node], "g", [vi("x", F, [2])], [vi("y", F, [2])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = epoxy.InferenceSession(model, providers=["cpu"])
    assert [(d.node, d.op_type) for d in sess.partition_report().nodes] == [("c", "Celu")]
