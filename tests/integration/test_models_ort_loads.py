"""Models onnx.checker complains about, against onnxruntime: what onnxruntime loads epoxy
loads too (with a RuntimeWarning naming the checker's complaint) and gives the same
outputs; what is unsafe or ambiguous to run both refuse, epoxy naming the value and why.

Where epoxy departs from onnxruntime it is on purpose and tested here: it also runs models
whose only fault is harmless (repeated node names, a wrong element type declared for a
value_info or a graph output, unsorted nodes inside a subgraph or a function body:
onnxruntime refuses them; epoxy returns what the nodes compute and says so), and it refuses one onnxruntime
runs (an initializer defined twice with different values: onnxruntime takes the last).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
LEVELS = ("disable", "basic", "extended", "all")
RNG = np.random.default_rng(3)
W = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)
X = RNG.standard_normal((2, 3)).astype(np.float32)


def _vi(name: str, shape=(2, 4), elem=F):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes, inputs=None, outputs=None, inits=None, opset=17, ir_version=8, value_info=()):  # type: ignore[no-untyped-def]
    inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")] if inits is None else inits
    graph = helper.make_graph(nodes, "g", inputs if inputs is not None else [_vi("x", (2, 3))],
                              outputs if outputs is not None else [_vi("y")], inits, value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _dense(**kw):  # type: ignore[no-untyped-def]
    """y = Relu(x @ W + B)."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["t"], name="mm"),
        helper.make_node("Add", ["t", "B"], ["u"], name="add"),
        helper.make_node("Relu", ["u"], ["y"], name="relu"),
    ]
    return _model(nodes, **kw)


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _epoxy(model: onnx.ModelProto, level: str = "all") -> epoxy.InferenceSession:
    return epoxy.InferenceSession(model, providers=["cpu"],
                                  sess_options=epoxy.SessionOptions(graph_optimization_level=level))


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _checker_message(model: onnx.ModelProto) -> str:
    with pytest.raises(onnx.checker.ValidationError) as info:
        onnx.checker.check_model(model)
    return str(info.value).splitlines()[0]


# ---------------------------------------------------------------------- onnxruntime loads them
def _ir3(opset: int) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:  # the initializers are not graph inputs, as IR 3 requires
        return _dense(opset=opset, ir_version=3)
    return build


def _unsorted() -> onnx.ModelProto:
    model = _dense()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([nodes[2], nodes[0], nodes[1]])
    return model


def _in_subgraph(sort: bool) -> onnx.ModelProto:
    body = [helper.make_node("Relu", ["t"], ["a"]), helper.make_node("MatMul", ["x", "W"], ["t"])]
    then = helper.make_graph(body[::-1] if sort else body, "then", [], [_vi("a")])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["e"])], "else", [], [_vi("e")])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    return _model(nodes, inputs=[_vi("x", (2, 3)), _vi("cond", [], TensorProto.BOOL)])


def _missing_default_opset() -> onnx.ModelProto:
    model = _dense()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    return model


def _missing_ml_opset() -> onnx.ModelProto:
    nodes = [helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.25)]
    return _model(nodes, outputs=[_vi("y", (2, 3))], inits=[])


def _deprecated_op() -> onnx.ModelProto:
    scale = numpy_helper.from_array(np.array([1.5, 0.5], np.float32), "s")
    bias = numpy_helper.from_array(np.array([0.1, -0.2], np.float32), "b")
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2, epsilon=1e-5)
    return _model([node], [_vi("x", (2, 4, 3))], [_vi("y", (2, 4, 3))], [scale, bias], opset=18)


def _same_initializer_twice() -> onnx.ModelProto:
    model = _dense()
    model.graph.initializer.append(numpy_helper.from_array(W, "W"))
    return model


#: name -> (model, feeds, whether onnx.checker complains)
LOADS: dict[str, tuple[Callable[[], onnx.ModelProto], str, bool]] = {
    "ir3_opset8": (_ir3(8), "x", True),
    "ir3_opset9": (_ir3(9), "x", True),
    "unsorted": (_unsorted, "x", True),
    "missing_default_opset": (_missing_default_opset, "x", True),
    "missing_ml_opset": (_missing_ml_opset, "x", True),
    "deprecated_op": (_deprecated_op, "x3", True),
    "same_initializer_twice": (_same_initializer_twice, "x", True),
    "empty_node_names": (lambda: _strip_names(_dense()), "x", False),
    "unused_initializer": (lambda: _with_unused(_dense()), "x", False),
    "value_info_shape_disagrees": (lambda: _dense(value_info=[_vi("t", (5, 7))]), "x", False),
    "output_shape_disagrees": (lambda: _dense(outputs=[_vi("y", (9, 9))]), "x", False),
}

FEEDS = {
    "x": {"x": X},
    "x3": {"x": RNG.standard_normal((2, 4, 3)).astype(np.float32)},
}


def _strip_names(model: onnx.ModelProto) -> onnx.ModelProto:
    for node in model.graph.node:
        node.name = ""
    return model


def _with_unused(model: onnx.ModelProto) -> onnx.ModelProto:
    model.graph.initializer.append(numpy_helper.from_array(np.ones((5, 5), np.float32), "unused"))
    return model


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", sorted(LOADS))
def test_loads_like_onnxruntime(case: str, level: str) -> None:
    build, feeds_name, complains = LOADS[case]
    model, feeds = build(), FEEDS[feeds_name]
    want = _ort(model, feeds)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = _epoxy(model, level)
    shown = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if complains:
        first_line = _checker_message(model)
        assert any(f"onnx.checker: {first_line}" in s for s in shown), shown
    _same(session.run(None, feeds), want)


def test_reported_output_shapes_are_onnxruntimes() -> None:
    model = _dense(outputs=[_vi("y", (9, 9))])
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.warns(RuntimeWarning, match="graph output 'y' is declared float"):
        session = _epoxy(model)
    assert [o.shape for o in session.get_outputs()] == [o.shape for o in ref.get_outputs()] == [[2, 4]]


@pytest.mark.parametrize("level", LEVELS)
def test_ir3_initializers_cannot_be_fed_as_in_onnxruntime(level: str) -> None:
    model = _dense(opset=9, ir_version=3)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.warns(RuntimeWarning):
        session = _epoxy(model, level)
    assert [i.name for i in session.get_inputs()] == [i.name for i in ref.get_inputs()] == ["x"]
    with pytest.raises(Exception, match="Invalid input name: W"):
        ref.run(None, {"x": X, "W": W})
    with pytest.raises(epoxy.InvalidFeedError, match="unknown input 'W'"):
        session.run(None, {"x": X, "W": W})


def test_strict_still_refuses_what_the_checker_complains_about() -> None:
    with pytest.raises(epoxy.ModelLoadError, match="not valid ONNX"):
        epoxy.InferenceSession(_unsorted(), providers=["cpu"], sess_options=epoxy.SessionOptions(check_model="strict"))


# ---------------------------------------------------------------------- epoxy runs, onnxruntime refuses
def test_unsorted_nodes_in_a_subgraph_run_sorted() -> None:
    feeds = {"x": X, "cond": np.array(True)}
    with pytest.raises(Exception, match="must be topologically sorted"):  # onnxruntime sorts the main graph only
        _ort(_in_subgraph(sort=False), feeds)
    with pytest.warns(RuntimeWarning, match="subgraph 'then_branch'.*not in topological order"):
        got = _epoxy(_in_subgraph(sort=False)).run(None, feeds)
    _same(got, _ort(_in_subgraph(sort=True), feeds))


def _calls_function(sort: bool) -> onnx.ModelProto:
    body = [helper.make_node("Relu", ["t"], ["b"]), helper.make_node("MatMul", ["a", "w"], ["t"])]
    function = helper.make_function("local", "Dense", ["a", "w"], ["b"], body[::-1] if sort else body,
                                    [helper.make_opsetid("", 17)])
    model = _model([helper.make_node("Dense", ["x", "W"], ["y"], domain="local")])
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(function)
    return model


def test_unsorted_function_body_runs_sorted() -> None:
    with pytest.raises(Exception, match="op_type:Relu"):  # onnxruntime does not sort function bodies
        _ort(_calls_function(sort=False), {"x": X})
    with pytest.warns(RuntimeWarning, match="function local::Dense: nodes are not in topological order"):
        got = _epoxy(_calls_function(sort=False)).run(None, {"x": X})
    _same(got, _ort(_calls_function(sort=True), {"x": X}))


def test_output_with_a_wrong_type_returns_what_its_node_produces() -> None:
    model = _dense(outputs=[_vi("y", (2, 4), TensorProto.INT32)])
    with pytest.raises(Exception, match="Type Error"):
        _ort(model, {"x": X})
    with pytest.warns(RuntimeWarning, match="graph output 'y' is declared int32"):
        session = _epoxy(model)
    assert session.get_outputs()[0].type == "tensor(float)"
    _same(session.run(None, {"x": X}), _ort(_dense(), {"x": X}))


def test_repeated_node_names_run_renamed() -> None:
    model = _dense()
    for node in model.graph.node:
        node.name = "n"
    with pytest.raises(Exception, match="two nodes with same node name"):
        _ort(model, {"x": X})
    with pytest.warns(RuntimeWarning, match="'n' -> 'n_2', 'n' -> 'n_3'"):
        got = _epoxy(model).run(None, {"x": X})
    _same(got, _ort(_dense(), {"x": X}))


def test_value_info_with_a_wrong_type_is_ignored() -> None:
    model = _dense(value_info=[_vi("t", (2, 4), TensorProto.INT64)])
    with pytest.raises(Exception, match="Type Error"):
        _ort(model, {"x": X})
    with pytest.warns(RuntimeWarning, match="value_info of 't' declares int64"):
        got = _epoxy(model).run(None, {"x": X})
    _same(got, _ort(_dense(), {"x": X}))  # what the nodes compute


# ---------------------------------------------------------------------- both refuse
def _two_writers() -> onnx.ModelProto:
    return _model([helper.make_node("MatMul", ["x", "W"], ["t"]), helper.make_node("Relu", ["x"], ["t"], name="dup"),
                   helper.make_node("Add", ["t", "B"], ["y"])])


def _cycle() -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                   helper.make_node("Identity", ["b"], ["y"])], outputs=[_vi("y", (2, 3))])


def _undefined_input() -> onnx.ModelProto:
    return _model([helper.make_node("Add", ["x", "nowhere"], ["y"])], outputs=[_vi("y", (2, 3))])


def _output_not_written() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["r"])], outputs=[_vi("y", (2, 3))])


def _input_twice() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])], inputs=[_vi("x", (2, 3)), _vi("x", (2, 3))],
                  outputs=[_vi("y", (2, 3))])


def _writes_an_initializer() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["B"]), helper.make_node("Identity", ["B"], ["y"])],
                  outputs=[_vi("y", (2, 3))])


def _initializer_declared_otherwise(shape=(7, 7), elem=F):  # type: ignore[no-untyped-def]
    model = _dense()
    model.graph.input.append(_vi("W", shape, elem))
    return model


def _unknown_attribute() -> onnx.ModelProto:
    model = _dense()
    model.graph.node[2].attribute.append(helper.make_attribute("alpha", 0.5))
    return model


def _reduce_sum_axes_attribute() -> onnx.ModelProto:
    # ReduceSum-13 takes axes as an input: running it would silently reduce every axis
    node = helper.make_node("ReduceSum", ["x"], ["y"], axes=[1])
    return _model([node], outputs=[_vi("y", (2, 1))], inits=[], opset=13)


def _too_many_inputs() -> onnx.ModelProto:
    model = _dense()
    model.graph.node[2].input.append("x")
    return model


def _no_opset() -> onnx.ModelProto:
    model = _dense()
    del model.opset_import[:]
    return model


def _newer_ir() -> onnx.ModelProto:
    return _dense(ir_version=onnx.IR_VERSION + 1)


#: name -> (model, epoxy's error class, what epoxy's message says)
REFUSED: dict[str, tuple[Callable[[], onnx.ModelProto], type, str]] = {
    "two_writers": (_two_writers, epoxy.InvalidGraphError, "value 't' is written by two nodes"),
    "cycle": (_cycle, epoxy.InvalidGraphError, "form a cycle through values 'a', 'b'"),
    "undefined_input": (_undefined_input, epoxy.InvalidGraphError, "reads 'nowhere', which no graph input"),
    "output_not_written": (_output_not_written, epoxy.InvalidGraphError, "graph output 'y' is not written"),
    "input_twice": (_input_twice, epoxy.InvalidGraphError, "graph input 'x' is declared twice"),
    "writes_an_initializer": (
        _writes_an_initializer,
        epoxy.InvalidGraphError,
        "writes 'B', which is also an initializer",
    ),
    "initializer_declared_with_another_shape": (
        _initializer_declared_otherwise,
        epoxy.InvalidGraphError,
        r"graph input 'W' is declared float \[7, 7\]",
    ),
    "initializer_declared_with_another_type": (
        lambda: _initializer_declared_otherwise((3, 4), TensorProto.INT64),
        epoxy.InvalidGraphError,
        r"graph input 'W' is declared int64 \[3, 4\]",
    ),
    "unknown_attribute": (
        _unknown_attribute,
        epoxy.InvalidGraphError,
        "Unrecognized attribute: alpha for operator Relu",
    ),
    "reduce_sum_axes_attribute": (
        _reduce_sum_axes_attribute,
        epoxy.InvalidGraphError,
        "Unrecognized attribute: axes for operator ReduceSum",
    ),
    "too_many_inputs": (_too_many_inputs, epoxy.InvalidGraphError, "input size 2 not in range"),
    "no_opset": (_no_opset, epoxy.ModelLoadError, "imports no opset"),
    "newer_ir": (_newer_ir, epoxy.ModelLoadError, "is newer than this onnx"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_like_onnxruntime(case: str) -> None:
    build, error, message = REFUSED[case]
    model = build()
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's classes vary by case
        _ort(model, {"x": X})
    with pytest.raises(error, match=message):
        _epoxy(model)


def test_initializer_defined_twice_with_different_values_is_refused() -> None:
    model = _dense()
    model.graph.initializer.append(numpy_helper.from_array(W * 2, "W"))
    _ort(model, {"x": X})  # onnxruntime runs it with one of the two (the last)
    with pytest.raises(epoxy.InvalidGraphError, match="initializer 'W' is defined twice with different values"):
        _epoxy(model)
