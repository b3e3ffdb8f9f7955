"""Loading skips the data-propagating shape inference when propagation has no source in the
model (epoxy.load.propagation_sources): the predicate on crafted models, and the loader runs
onnx's inference once for such a model, twice otherwise, with the same types either way.
tests/integration/test_propagation_sources_suite.py holds the predicate to onnx's own
inference on the backend suite's models."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper, shape_inference

from epoxy.load.loader import load_model
from epoxy.load.propagation_sources import propagation_has_no_source

F = TensorProto.FLOAT


def _model(nodes, inputs, inits=(), outputs=("y",)):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _x(shape=(1, 4, 6, 6), name="x", elem=F):  # type: ignore[no-untyped-def]
    return helper.make_tensor_value_info(name, elem, list(shape) if shape is not None else None)


I64 = TensorProto.INT64
CASES = {
    # feature maps only: nothing for propagation to start from
    "cnn": (True, _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["x", "r"], ["c"], axis=1),
                          helper.make_node("Add", ["c", "c"], ["y"])], [_x()])),
    "shape_to_reshape": (False, _model([helper.make_node("Shape", ["x"], ["s"]),
                                        helper.make_node("Reshape", ["x", "s"], ["y"])], [_x()])),
    "vector_to_reshape": (False, _model([helper.make_node("Concat", ["v", "v"], ["s"], axis=0),
                                         helper.make_node("Reshape", ["x", "s"], ["y"])],
                                        [_x(), _x((2,), "v", I64)])),
    # a 1-D bias is data to propagation, but only Relu (which reads no values) reads what it makes
    "bias_then_relu": (True, _model(
        [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
        [_x((2, 3))], [numpy_helper.from_array(np.ones(3, np.float32), "b")])),
    "unknown_rank_to_expand": (False, _model(
        [helper.make_node("Mul", ["s", "s"], ["m"]), helper.make_node("Expand", ["x", "m"], ["y"])],
        [_x(), _x(None, "s", I64)])),
    # Slice's inference reads its starts: data reaching them may change its output's shape
    "vector_to_slice_starts": (False, _model(
        [helper.make_node("Add", ["v", "v"], ["starts"]), helper.make_node("Slice", ["x", "starts", "ends"], ["y"])],
        [_x(), _x((1,), "v", I64)], [numpy_helper.from_array(np.array([3], np.int64), "ends")])),
    # but a vector Unsqueeze reshapes (its input 0) is only passed along: densenet121's scales
    "vector_through_unsqueeze": (True, _model(
        [helper.make_node("Unsqueeze", ["b", "axes"], ["u"]), helper.make_node("Mul", ["x", "u"], ["m"]),
         helper.make_node("Relu", ["m"], ["y"])],
        [_x()], [numpy_helper.from_array(np.ones(4, np.float32), "b"),
                 numpy_helper.from_array(np.array([1, 2], np.int64), "axes")])),
    "no_propagating_op": (True, _model([helper.make_node("Reshape", ["x", "s"], ["y"])], [_x()],
                                       [numpy_helper.from_array(np.array([4, 36], np.int64), "s")])),
    "other_domain_reads_it": (False, _model(
        [helper.make_node("Unsqueeze", ["v", "axes"], ["u"]),
         helper.make_node("Custom", ["u"], ["y"], domain="com.example")],
        [_x((3,), "v")], [numpy_helper.from_array(np.array([0], np.int64), "axes")])),
    "subgraph": (False, _model([helper.make_node("If", ["c"], ["y"], then_branch=helper.make_graph(
        [helper.make_node("Relu", ["x"], ["t"])], "t", [], [helper.make_tensor_value_info("t", F, None)]),
        else_branch=helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "e", [],
                                      [helper.make_tensor_value_info("e", F, None)]))],
        [_x(), helper.make_tensor_value_info("c", TensorProto.BOOL, [])])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_predicate_on_crafted_models(name):
    expected, model = CASES[name]
    if name == "other_domain_reads_it":
        model.opset_import.append(helper.make_opsetid("com.example", 1))
    inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=False)
    assert propagation_has_no_source(inferred) is expected
    if expected:  # and it is right: propagation infers exactly the same
        full = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
        assert full.SerializeToString() == inferred.SerializeToString()


@pytest.mark.parametrize("name", ["cnn", "shape_to_reshape"])
def test_the_loader_infers_once_when_nothing_can_propagate(name, monkeypatch):
    expected, model = CASES[name]
    real = shape_inference.infer_shapes
    calls: list[bool] = []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs.get("data_prop", False))
        return real(*args, **kwargs)

    types_before = {}
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted)
    loaded = load_model(model.SerializeToString())
    assert calls == ([False] if expected else [False, True])
    graph = loaded.model.graph
    for node in graph:
        for value in node.outputs:
            types_before[value.name] = (value.type, value.shape)
    monkeypatch.setattr("epoxy.load.loader.propagation_has_no_source", lambda inferred: False)
    both = load_model(model.SerializeToString()).model.graph
    assert {v.name: (v.type, v.shape) for n in both for v in n.outputs} == types_before


def test_a_long_vector_propagation_would_crawl_is_kept_from_it():
    """A 1-D value longer than DATA_PROP_MAX_1D that propagation could start from: the second
    run is left out (noted), as propagation would build one dim per element; a long vector
    propagation cannot start from needs no note (one run, nothing to crawl)."""
    from epoxy.load.loader import DATA_PROP_MAX_1D

    n = DATA_PROP_MAX_1D + 1
    crawled = _model([helper.make_node("Add", ["v", "v"], ["s"]), helper.make_node("Expand", ["x", "s"], ["y"])],
                     [_x((1,), "x"), _x((n,), "v", I64)])
    loaded = load_model(crawled.SerializeToString())
    assert any(f"'v' is longer than {DATA_PROP_MAX_1D}" in note for note in loaded.warnings)
    inert = _model([helper.make_node("Relu", ["v"], ["y"])], [_x((n,), "v")])
    assert not any("longer than" in note for note in load_model(inert.SerializeToString()).warnings)
