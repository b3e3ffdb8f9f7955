"""Models onnx.checker complains about: loaded with a warning naming the complaint when they
are safe to run (as onnxruntime loads them), refused with the reason when they are unsafe
or ambiguous; ``check="strict"`` keeps refusing every complaint, ``"off"`` runs no checker.

tests/integration/test_models_ort_loads.py compares the outputs with onnxruntime's.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from epoxy import InferenceSession, InvalidArgumentError, ModelLoadError, SessionOptions
from epoxy.errors import InvalidGraphError
from epoxy.load.loader import load_model

F = TensorProto.FLOAT
X = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
C = np.full((2, 3), 3, np.float32)
LEVELS = ("disable", "basic", "extended", "all")


def _vi(name: str, shape=(2, 3), elem=F):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes, inputs=None, outputs=None, inits=(), opset=17, ir_version=8, value_info=()):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs if inputs is not None else [_vi("x")],
                              outputs if outputs is not None else [_vi("y")], list(inits),
                              value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _add_relu(**kw):  # type: ignore[no-untyped-def]
    """y = Relu(x + c)."""
    nodes = [
        helper.make_node("Add", ["x", "c"], ["t"], name="add"),
        helper.make_node("Relu", ["t"], ["y"], name="relu"),
    ]
    return _model(nodes, inits=[numpy_helper.from_array(C, "c")], **kw)


EXPECTED = np.maximum(X + C, 0)


def _session(model, make_registry, level="all", check="warn"):  # type: ignore[no-untyped-def]
    options = SessionOptions(graph_optimization_level=level, check_model=check)
    return InferenceSession(model, providers=["cpu"], sess_options=options, registry=make_registry())


def _run(model, make_registry, **kw):  # type: ignore[no-untyped-def]
    return _session(model, make_registry, **kw).run(None, {"x": X})[0]


# -- the modes --------------------------------------------------------------------------------
def _unsorted():  # type: ignore[no-untyped-def]
    model = _add_relu()
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend(reversed(nodes))
    return model


def test_warn_is_the_default_and_names_the_checker_message():
    loaded = load_model(_unsorted())
    assert any("onnx.checker: Nodes in a graph must be topologically sorted" in w for w in loaded.warnings)
    assert any("not in topological order" in w and "'relu' (Relu) reads 't'" in w for w in loaded.warnings)


def test_session_shows_the_checker_message_as_a_runtime_warning(make_registry):
    with pytest.warns(RuntimeWarning, match="onnx.checker: Nodes in a graph must be topologically sorted"):
        session = _session(_unsorted(), make_registry)
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)


@pytest.mark.parametrize("check", ["strict", True])
def test_strict_refuses_any_checker_complaint(check):
    with pytest.raises(ModelLoadError, match="not valid ONNX: Nodes in a graph must be topologically sorted"):
        load_model(_unsorted(), check=check)


@pytest.mark.parametrize("check", ["off", False])
def test_off_runs_no_checker_but_still_repairs(check):
    loaded = load_model(_unsorted(), check=check)
    assert not any("onnx.checker" in w for w in loaded.warnings)
    assert any("not in topological order" in w for w in loaded.warnings)


def test_an_unknown_mode_is_an_argument_error():
    with pytest.raises(InvalidArgumentError, match="warn"):
        load_model(_add_relu(), check="lenient")


def test_a_valid_model_loads_without_warnings():
    assert load_model(_add_relu()).warnings == []


def test_the_callers_proto_is_not_changed():
    model = _unsorted()
    before = model.SerializeToString()
    load_model(model)
    assert model.SerializeToString() == before


# -- safe to run: loaded, repaired where later stages need it ----------------------------------------
@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("opset", [8, 9])
def test_ir3_initializers_that_are_not_graph_inputs(make_registry, level, opset):
    nodes = [helper.make_node("Add", ["x", "c"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    model = _model(nodes, inits=[numpy_helper.from_array(C, "c")], opset=opset, ir_version=3)
    with pytest.warns(RuntimeWarning, match="c in initializer but not in graph input"):
        session = _session(model, make_registry, level)
    assert [i.name for i in session.get_inputs()] == ["x"]
    assert session.get_overridable_initializers() == []  # IR < 4: initializers are constants
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)


def test_ir3_with_some_initializers_listed_makes_all_constants():
    nodes = [helper.make_node("Add", ["x", "c"], ["t"]), helper.make_node("Mul", ["t", "d"], ["y"])]
    inits = [numpy_helper.from_array(C, "c"), numpy_helper.from_array(C, "d")]
    model = _model(nodes, inputs=[_vi("x"), _vi("d")], inits=inits, opset=9, ir_version=3)
    loaded = load_model(model)
    assert [v.name for v in loaded.model.graph.inputs] == ["x"]
    assert loaded.model.ir_version == 4


@pytest.mark.parametrize("level", LEVELS)
def test_unsorted_nodes_run_sorted(make_registry, level):
    with pytest.warns(RuntimeWarning):
        np.testing.assert_array_equal(_run(_unsorted(), make_registry, level=level), EXPECTED)


def test_unsorted_nodes_inside_a_subgraph_run_sorted(make_registry):
    body = helper.make_graph([helper.make_node("Relu", ["t"], ["b"], name="inner_relu"),
                              helper.make_node("Neg", ["x"], ["t"], name="inner_neg")],
                             "then", [], [_vi("b")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e")])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other)]
    model = _model(nodes, inputs=[_vi("x"), _vi("cond", [], TensorProto.BOOL)])
    with pytest.warns(RuntimeWarning, match="subgraph 'then_branch'"):
        session = _session(model, make_registry)
    y = session.run(None, {"x": X, "cond": np.array(True)})[0]
    np.testing.assert_array_equal(y, np.maximum(-X, 0))


def _calls_function(body_nodes):  # type: ignore[no-untyped-def]
    """y = local::Twice(x), a model-local function over ``a`` -> ``b``."""
    function = helper.make_function("local", "Twice", ["a"], ["b"], body_nodes, [helper.make_opsetid("", 17)])
    model = _model([helper.make_node("Twice", ["x"], ["y"], domain="local", name="call")])
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(function)
    return model


def test_unsorted_function_body_runs_sorted(make_registry):
    model = _calls_function([helper.make_node("Relu", ["t"], ["b"]), helper.make_node("Neg", ["a"], ["t"])])
    with pytest.warns(RuntimeWarning, match="function local::Twice: nodes are not in topological order"):
        np.testing.assert_array_equal(_run(model, make_registry), np.maximum(-X, 0))


def test_missing_opset_import_reads_the_newest_version(make_registry):
    model = _add_relu()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.warns(RuntimeWarning, match=rf"read as version {onnx.defs.onnx_opset_version()}, the newest"):
        session = _session(model, make_registry)
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)


def test_empty_and_repeated_node_names(make_registry):
    model = _model(
        [
            helper.make_node("Neg", ["x"], ["a"], name="n"),
            helper.make_node("Relu", ["a"], ["b"], name="n"),
            helper.make_node("Neg", ["b"], ["c"], name=""),
            helper.make_node("Identity", ["c"], ["y"], name="n"),
        ]
    )
    with pytest.warns(RuntimeWarning, match="'n' -> 'n_2', 'n' -> 'n_3'"):
        session = _session(model, make_registry, level="disable")
    assert [n.name for n in session._graph.nodes] == ["n", "n_2", "Neg_2", "n_3"]
    assert len(session.partition_report().nodes) == 4
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], -np.maximum(-X, 0))


def test_repeated_initializer_with_the_same_value_is_kept_once(make_registry):
    model = _add_relu()
    model.graph.initializer.append(numpy_helper.from_array(C, "c"))
    with pytest.warns(RuntimeWarning, match="'c' are defined more than once with the same value"):
        np.testing.assert_array_equal(_run(model, make_registry), EXPECTED)


def test_unused_initializer_loads_silently(make_registry):
    model = _add_relu()
    model.graph.initializer.append(numpy_helper.from_array(np.ones(4, np.float32), "unused"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(_run(model, make_registry), EXPECTED)


def test_value_info_that_disagrees_is_ignored(make_registry):
    for wrong in (_vi("t", (2, 3), TensorProto.INT64), _vi("t", (5, 7))):
        model = _add_relu(value_info=[wrong])
        with pytest.warns(RuntimeWarning, match="value_info of 't' declares .* but its node produces float"):
            session = _session(model, make_registry)
        assert session._graph.value_type("t").dtype == np.float32
        np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)


def test_output_shape_that_disagrees_takes_the_produced_shape(make_registry):
    model = _add_relu()
    model.graph.output[0].CopyFrom(_vi("y", (9, 9)))
    with pytest.warns(RuntimeWarning, match=r"graph output 'y' is declared float \[9, 9\] but its node produces"):
        session = _session(model, make_registry)
    assert session.get_outputs()[0].shape == [2, 3]
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)


def test_output_type_that_disagrees_takes_the_produced_type(make_registry):
    model = _add_relu()
    model.graph.output[0].CopyFrom(_vi("y", ("N", 3), TensorProto.INT32))
    with pytest.warns(RuntimeWarning, match=r"graph output 'y' is declared int32 \['N', 3\] but its node produces "
                                            r"float \[2, 3\]; a run returns what the node produces"):
        session = _session(model, make_registry)
    assert (session.get_outputs()[0].type, session.get_outputs()[0].shape) == ("tensor(float)", [2, 3])
    assert session._graph.nodes[-1].output_types[0].dtype == np.float32  # what kernels see
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], EXPECTED)


def test_deprecated_op_loads_with_the_checker_message():
    scale = numpy_helper.from_array(np.ones(2, np.float32), "s")
    bias = numpy_helper.from_array(np.zeros(2, np.float32), "b")
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)
    loaded = load_model(_model([node], [_vi("x", (1, 2, 3))], [_vi("y", (1, 2, 3))], [scale, bias], opset=18))
    assert len(loaded.warnings) == 1
    assert "GroupNormalization is deprecated in domain_version of 18" in loaded.warnings[0]


def test_a_newer_ir_version_is_refused_unless_checking_is_off():
    model = _add_relu(ir_version=onnx.IR_VERSION + 1)
    for check in ("warn", "strict"):
        with pytest.raises(ModelLoadError, match=rf"IR version {onnx.IR_VERSION + 1} is newer"):
            load_model(model, check=check)
    load_model(model, check="off")


# -- unsafe or ambiguous: refused, naming the value and why -------------------------------------------
def _two_writers():  # type: ignore[no-untyped-def]
    return _model(
        [
            helper.make_node("Neg", ["x"], ["t"], name="first"),
            helper.make_node("Relu", ["x"], ["t"], name="second"),
            helper.make_node("Identity", ["t"], ["y"]),
        ]
    )


def _cycle():  # type: ignore[no-untyped-def]
    return _model(
        [
            helper.make_node("Add", ["x", "b"], ["a"], name="p"),
            helper.make_node("Relu", ["a"], ["b"], name="q"),
            helper.make_node("Identity", ["b"], ["y"]),
        ]
    )


def _undefined():  # type: ignore[no-untyped-def]
    return _model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")])


def _undefined_in_subgraph():  # type: ignore[no-untyped-def]
    body = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["b"])], "then", [], [_vi("b")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e")])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other)]
    return _model(nodes, inputs=[_vi("x"), _vi("cond", [], TensorProto.BOOL)])


def _undefined_in_function():  # type: ignore[no-untyped-def]
    return _calls_function([helper.make_node("Add", ["a", "nowhere"], ["b"], name="inner")])


def _empty_input_in_function():  # type: ignore[no-untyped-def]
    return _calls_function([helper.make_node("Add", ["a", ""], ["b"], name="inner")])


def _output_not_written():  # type: ignore[no-untyped-def]
    return _model([helper.make_node("Relu", ["x"], ["r"])])


def _input_twice():  # type: ignore[no-untyped-def]
    return _model([helper.make_node("Relu", ["x"], ["y"])], inputs=[_vi("x"), _vi("x")])


def _writes_an_input():  # type: ignore[no-untyped-def]
    return _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["x"], name="back")])


def _initializer_twice():  # type: ignore[no-untyped-def]
    model = _add_relu()
    model.graph.initializer.append(numpy_helper.from_array(C * 2, "c"))
    return model


def _declared_unlike_initializer():  # type: ignore[no-untyped-def]
    model = _add_relu()
    model.graph.input.append(_vi("c", (7, 7)))
    return model


def _unknown_attribute():  # type: ignore[no-untyped-def]
    model = _add_relu()
    model.graph.node[1].attribute.append(helper.make_attribute("alpha", 0.5))
    return model


def _too_many_inputs():  # type: ignore[no-untyped-def]
    model = _add_relu()
    model.graph.node[1].input.append("x")
    return model


def _no_opset():  # type: ignore[no-untyped-def]
    model = _add_relu()
    del model.opset_import[:]
    return model


UNSAFE = {
    "two_writers": (
        _two_writers,
        InvalidGraphError,
        r"value 't' is written by two nodes, 'first' \(Neg\) and 'second'",
    ),
    "cycle": (_cycle, InvalidGraphError, r"form a cycle through values 'a', 'b'"),
    "undefined": (_undefined, InvalidGraphError, r"'add' \(Add\) reads 'nowhere', which no graph input"),
    "undefined_in_subgraph": (_undefined_in_subgraph, InvalidGraphError, r"subgraph 'then_branch'.*reads 'nowhere'"),
    "undefined_in_function": (
        _undefined_in_function,
        InvalidGraphError,
        r"function local::Twice: node 'inner' \(Add\) reads 'nowhere'",
    ),
    "empty_input_in_function": (
        _empty_input_in_function,
        InvalidGraphError,
        "function local::Twice does not match its schema.*input 1 is marked single",
    ),
    "output_not_written": (_output_not_written, InvalidGraphError, "graph output 'y' is not written by any node"),
    "input_twice": (_input_twice, InvalidGraphError, "graph input 'x' is declared twice"),
    "writes_an_input": (_writes_an_input, InvalidGraphError, r"'back' \(Neg\) writes 'x', which is also a graph input"),
    "initializer_twice": (
        _initializer_twice,
        InvalidGraphError,
        "initializer 'c' is defined twice with different values",
    ),
    "declared_unlike_initializer": (
        _declared_unlike_initializer,
        InvalidGraphError,
        r"graph input 'c' is declared float \[7, 7\] but its initializer holds float \[2, 3\]",
    ),
    "unknown_attribute": (_unknown_attribute, InvalidGraphError, "Unrecognized attribute: alpha for operator Relu"),
    "too_many_inputs": (
        _too_many_inputs,
        InvalidGraphError,
        "'relu' \\(Relu\\) does not match its schema.*input size 2",
    ),
    "no_opset": (_no_opset, ModelLoadError, "imports no opset"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_models_are_refused_with_the_reason(make_registry, case):
    build, error, message = UNSAFE[case]
    with pytest.raises(error, match=message):
        _session(build(), make_registry)


#: refused with checking off too: they are about running the graph, not about the checker
STRUCTURAL = ["two_writers", "cycle", "undefined", "undefined_in_subgraph", "undefined_in_function",
              "output_not_written", "input_twice",
              "writes_an_input", "initializer_twice", "declared_unlike_initializer"]


@pytest.mark.parametrize("case", STRUCTURAL)
def test_structural_refusals_hold_with_checking_off(case):
    build, error, message = UNSAFE[case]
    with pytest.raises(error, match=message):
        load_model(build(), check="off")


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_strict_refuses_them_too(case):
    build, error, _ = UNSAFE[case]
    with pytest.raises(ModelLoadError):
        load_model(build(), check="strict")


@pytest.mark.parametrize("size", [3, 128])  # checked up front / when the data is read
def test_initializer_data_that_does_not_fit_its_dims_is_refused(make_registry, size):
    nodes = [helper.make_node("Add", ["x", "c"], ["y"])]
    bad = numpy_helper.from_array(np.ones((size, size), np.float32), "c")
    bad.raw_data = bad.raw_data[:-4]
    model = _model(nodes, [_vi("x", (size, size))], [_vi("y", (size, size))], [bad])
    with pytest.raises(ModelLoadError, match="initializer 'c' has .*does not fit its dims"):
        _session(model, make_registry)


def test_callers_model_proto_is_never_edited(make_registry):
    """Sparse initializers are densified and inferred types adopted on a copy."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from epoxy import InferenceSession

    big = np.ones((128, 256), np.float32)  # large enough for the checker skeleton path
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([2.0], np.float32), "s"),
                                       numpy_helper.from_array(np.array([1], np.int64), "s_i"), [3])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"]),
         helper.make_node("Add", ["s", "s"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(big, "w")], sparse_initializer=[sparse])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    session = InferenceSession(model, providers=["cpu"], registry=make_registry())
    assert model.SerializeToString() == before
    y, z = session.run(None, {"x": np.ones((2, 128), np.float32)})
    np.testing.assert_array_equal(z, [0.0, 4.0, 0.0])
