"""Map values (``map(K, V)``, ``seq(map(...))``): onnx_ir cannot hold their types, so the
loader carries them beside it (epoxy.load.map_types); value types, type strings, NodeArgs, feeds
and outputs see the real type. Test-only kernels stand in for the ai.onnx.ml ops
(plugins/ep-cpu/tests/ep_cpu/test_ml_maps.py checks the real ones against onnxruntime).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from fakes import Factory
from onnx import TensorProto, helper

from epoxy import InferenceSession, InvalidFeedError, SessionOptions
from epoxy.contract import ValueType
from epoxy.graph.graph_spec import CoreGraph
from epoxy.graph.type_strings import type_string
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.load.loader import as_model_proto, load_model
from epoxy.load.map_types import MAP_TYPE_KEY, has_map, value_type_from_proto
from epoxy.run.feeds import check_feeds
from epoxy.run.limits import value_nbytes
from epoxy.run.output_safety import detach_aliases, owners_of

ML = "ai.onnx.ml"
F, I64, S, D = TensorProto.FLOAT, TensorProto.INT64, TensorProto.STRING, TensorProto.DOUBLE

# -- test-only kernels for the ai.onnx.ml map ops -------------------------------------------------
MAP_KERNELS = KernelRegistry()


@MAP_KERNELS.register("ZipMap", 1, domain=ML)
def _zip_map(node):  # type: ignore[no-untyped-def]
    labels = [s.decode() if isinstance(s, bytes) else s for s in node.attr("classlabels_strings") or ()]
    labels = labels or [int(i) for i in node.attr("classlabels_int64s")]
    return lambda x: [dict(zip(labels, row)) for row in np.atleast_2d(x).tolist()]


@MAP_KERNELS.register("DictVectorizer", 1, domain=ML)
def _dict_vectorizer(node):  # type: ignore[no-untyped-def]
    vocabulary = [s.decode() if isinstance(s, bytes) else s for s in node.attr("string_vocabulary") or ()]
    vocabulary = vocabulary or list(node.attr("int64_vocabulary"))
    seen: list[Any] = []
    dtype = node.input_types[0].element.dtype

    def run(m):  # type: ignore[no-untyped-def]
        seen.append(m)
        return np.asarray([[m.get(k, 0) for k in vocabulary]], dtype=dtype)

    run.seen = seen  # type: ignore[attr-defined]
    return run


def _registry(make_registry):  # type: ignore[no-untyped-def]
    maps = Factory("maps", lambda d, o: KernelProvider("maps", d, MAP_KERNELS, o), priority=10)
    return make_registry(maps)


def _map_type(key: int, value: int) -> onnx.TypeProto:
    return helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))


def _seq_map(key: int, value: int) -> onnx.TypeProto:
    return helper.make_sequence_type_proto(_map_type(key, value))


def _model(nodes, inputs, outputs, value_info=()):  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, outputs, value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
    model.ir_version = 8
    return model


def zipmap_model(ints: bool = False) -> onnx.ModelProto:
    labels = {"classlabels_int64s": [3, 1, 2]} if ints else {"classlabels_strings": ["a", "b", "c"]}
    node = helper.make_node("ZipMap", ["X"], ["Z"], name="zip", domain=ML, **labels)
    return _model([node], [helper.make_tensor_value_info("X", F, ["N", 3])],
                  [helper.make_value_info("Z", _seq_map(I64 if ints else S, F))])


def vectorizer_model(key: int = S, value: int = I64) -> onnx.ModelProto:
    vocab = {"string_vocabulary": ["x", "y", "z"]} if key == S else {"int64_vocabulary": [4, 2, 7]}
    node = helper.make_node("DictVectorizer", ["M"], ["Y"], name="vec", domain=ML, **vocab)
    return _model([node], [helper.make_value_info("M", _map_type(key, value))],
                  [helper.make_tensor_value_info("Y", value, [1, 3])])


def _session(model, make_registry, **options):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a map model loads without complaints
        return InferenceSession(model, SessionOptions(**options), providers=["maps"],
                                registry=_registry(make_registry))


# -- loader: types carried beside onnx_ir ---------------------------------------------------------
def test_loader_carries_map_input_and_seq_map_output_types() -> None:
    loaded = load_model(vectorizer_model())
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    vt = graph.value_type("M")
    assert vt.kind == "map" and vt.key_dtype == np.dtype(object)
    assert vt.element is not None and vt.element.kind == "tensor" and vt.element.dtype == np.dtype(np.int64)
    assert graph.nodes[0].input_types[0] == vt
    assert loaded.warnings == []

    loaded = load_model(zipmap_model(ints=True))
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    out = graph.value_type("Z")
    assert out.kind == "sequence" and out.element is not None and out.element.kind == "map"
    assert out.element.key_dtype == np.dtype(np.int64) and out.element.element.dtype == np.dtype(np.float32)
    assert graph.nodes[0].output_types[0] == out


def test_inferred_map_types_are_carried_when_undeclared() -> None:
    """A ZipMap output with no declared type gets the one onnx's shape inference gives."""
    model = zipmap_model()
    model.graph.output[0].ClearField("type")
    loaded = load_model(model, check="off")
    graph = CoreGraph(loaded.model.graph, loaded.model.opset_imports)
    assert type_string(graph.value_type("Z")) == "seq(map(string,tensor(float)))"


def test_callers_proto_keeps_its_map_types() -> None:
    model = vectorizer_model()
    before = model.SerializeToString()
    load_model(model)
    assert model.SerializeToString() == before


def test_map_types_in_subgraphs_are_carried() -> None:
    branch_out = helper.make_value_info("Zb", _seq_map(S, F))

    def branch(name: str, scale: float) -> onnx.GraphProto:
        nodes = [helper.make_node("Constant", [], [f"k_{name}"], value=helper.make_tensor("k", F, [], [scale])),
                 helper.make_node("Mul", ["X", f"k_{name}"], [f"s_{name}"]),
                 helper.make_node("ZipMap", [f"s_{name}"], [f"Z_{name}"], domain=ML,
                                  classlabels_strings=["a", "b", "c"])]
        out = helper.make_value_info(f"Z_{name}", _seq_map(S, F))
        return helper.make_graph(nodes, name, [], [out])

    node = helper.make_node("If", ["C"], ["Z"], then_branch=branch("then", 1.0), else_branch=branch("else", 2.0))
    model = _model([node], [helper.make_tensor_value_info("C", TensorProto.BOOL, []),
                            helper.make_tensor_value_info("X", F, [1, 3])],
                   [helper.make_value_info("Z", branch_out.type)])
    loaded = load_model(model)
    if_node = next(iter(loaded.model.graph))
    then = if_node.attributes["then_branch"].value
    assert has_map(then.outputs[0].meta[MAP_TYPE_KEY])
    sub = CoreGraph(then, loaded.model.opset_imports)
    assert type_string(sub.value_type("Z_then")) == "seq(map(string,tensor(float)))"


def test_serialized_model_gets_its_map_types_back(tmp_path, make_registry) -> None:  # type: ignore[no-untyped-def]
    loaded = load_model(zipmap_model())
    proto = as_model_proto(loaded.model)
    assert type_string(value_type_from_proto(proto.graph.output[0].type)) == "seq(map(string,tensor(float)))"
    onnx.checker.check_model(proto, full_check=True)

    target = tmp_path / "optimized.onnx"
    model = vectorizer_model()
    _session(model, make_registry, optimized_model_filepath=str(target))
    saved = onnx.load(str(target))
    assert saved.graph.input[0].type == model.graph.input[0].type
    onnx.checker.check_model(saved, full_check=True)


def test_value_type_from_proto_reads_every_kind() -> None:
    vt = value_type_from_proto(helper.make_optional_type_proto(_seq_map(I64, D)))
    assert vt.kind == "optional" and vt.element.kind == "sequence"
    inner = vt.element.element
    assert inner.kind == "map" and inner.key_dtype == np.dtype(np.int64) and inner.element.dtype == np.dtype(np.float64)
    tensor = value_type_from_proto(helper.make_tensor_type_proto(F, ["N", 3, None]))
    assert tensor == ValueType("tensor", F, np.dtype(np.float32), ("N", 3, None))
    assert not has_map(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None)))


# -- type strings and NodeArgs ---------------------------------------------------------------------
@pytest.mark.parametrize(("type_proto", "text"), [
    (_map_type(S, I64), "map(string,tensor(int64))"),
    (_map_type(I64, F), "map(int64,tensor(float))"),
    (_map_type(I64, S), "map(int64,tensor(string))"),
    (_map_type(S, D), "map(string,tensor(double))"),
    (_seq_map(I64, F), "seq(map(int64,tensor(float)))"),
    (_seq_map(S, F), "seq(map(string,tensor(float)))"),
])
def test_type_strings_spell_maps_as_onnxruntime(type_proto, text) -> None:  # type: ignore[no-untyped-def]
    assert type_string(value_type_from_proto(type_proto)) == text


def test_node_args_of_map_inputs_and_outputs(make_registry) -> None:  # type: ignore[no-untyped-def]
    session = _session(vectorizer_model(), make_registry)
    [arg] = session.get_inputs()
    assert (arg.name, arg.type, arg.shape) == ("M", "map(string,tensor(int64))", [])
    session = _session(zipmap_model(ints=True), make_registry)
    [out] = session.get_outputs()
    assert (out.name, out.type, out.shape) == ("Z", "seq(map(int64,tensor(float)))", [])


# -- runs: dict feeds in, lists of dicts out -----------------------------------------------------------
@pytest.mark.parametrize("level", ["disable", "basic", "all"])
def test_dict_feed_reaches_the_kernel_normalized(make_registry, level) -> None:  # type: ignore[no-untyped-def]
    session = _session(vectorizer_model(), make_registry, graph_optimization_level=level)
    feed = {"x": 3, np.str_("z"): np.int64(5), b"y": True, "w": 9}
    [y] = session.run(None, {"M": feed})
    np.testing.assert_array_equal(y, [[3, 1, 5]])
    assert y.dtype == np.int64
    assert feed == {"x": 3, np.str_("z"): np.int64(5), b"y": True, "w": 9}  # the caller's dict is untouched


def test_float_map_values_are_rounded_to_float32(make_registry) -> None:  # type: ignore[no-untyped-def]
    session = _session(vectorizer_model(I64, F), make_registry)
    [y] = session.run(None, {"M": {2: 0.1, np.int32(4): 1, 99: 2.5}})
    np.testing.assert_array_equal(y, np.asarray([[1, 0.1, 0]], np.float32))


def test_seq_map_output_is_a_list_of_dicts(make_registry) -> None:  # type: ignore[no-untyped-def]
    session = _session(zipmap_model(), make_registry)
    x = np.asarray([[0.5, 0.25, 0.25], [0, 1, 0]], np.float32)
    [z] = session.run(None, {"X": x})
    assert z == [{"a": 0.5, "b": 0.25, "c": 0.25}, {"a": 0.0, "b": 1.0, "c": 0.0}]
    assert all(type(k) is str and type(v) is float for row in z for k, v in row.items())


def test_seq_map_input_passes_through_as_a_list_of_dicts(make_registry) -> None:  # type: ignore[no-untyped-def]
    t = _seq_map(I64, F)
    model = _model([], [helper.make_value_info("S", t)], [helper.make_value_info("S", t)])
    session = _session(model, make_registry)
    feed = [{1: 2, 0: 0.5}, {}]
    [out] = session.run(None, {"S": feed})
    assert out == [{1: 2.0, 0: 0.5}, {}]
    assert all(type(k) is int and type(v) is float for row in out for k, v in row.items())
    out[0][1] = 99.0
    assert feed[0][1] == 2


# -- feed validation ---------------------------------------------------------------------------------
def _declared(type_proto: onnx.TypeProto) -> dict[str, ValueType]:
    return {"M": value_type_from_proto(type_proto)}


@pytest.mark.parametrize(("type_proto", "feed", "message"), [
    (_map_type(S, I64), [{"x": 1}], "expected a dict (map(string,tensor(int64))), got list"),
    (_map_type(S, I64), {1: 2}, "map keys must be str (map(string,tensor(int64))), got key 1 of type int"),
    (_map_type(S, I64), {None: 2}, "got key None of type NoneType"),
    (_map_type(I64, F), {"1": 2.0}, "map keys must be ints (map(int64,tensor(float))), got key '1' of type str"),
    (_map_type(I64, F), {1.0: 2.0}, "map keys must be ints"),
    (_map_type(I64, F), {2**63: 1.0}, "does not fit the key type int64"),
    (_map_type(TensorProto.INT32, F), {2**31: 1.0}, "does not fit the key type int32"),
    (_map_type(S, I64), {"x": 1.5}, "int64 cannot represent exactly"),
    (_map_type(S, I64), {"x": 2**64}, "int64 cannot represent exactly"),
    (_map_type(S, F), {"x": "1"}, "map values must be numbers (map(string,tensor(float))), got '1' of type str"),
    (_map_type(S, F), {"x": None}, "map values must be numbers (map(string,tensor(float))), got None"),
    (_map_type(I64, S), {1: None}, "map values must be str"),
    (_map_type(S, F), {"x": np.ones(2)}, "map values must be numbers"),
    (_map_type(S, F), {"x": 1e300}, "float32 cannot represent exactly"),
    (_map_type(I64, S), {1: 2}, "map values must be str (map(int64,tensor(string))), got 2 of type int"),
    (_map_type(S, F), {b"\xff": 1.0}, "not UTF-8 text"),
    (_seq_map(S, F), {"x": 1.0}, "expected a list of dicts (seq(map(string,tensor(float)))), got dict"),
    (_seq_map(S, F), [{"x": 1.0}, {2: 1.0}], "input 'M[1]': map keys must be str"),
])
def test_wrong_map_feeds_name_the_input_and_the_type(type_proto, feed, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidFeedError, match="input 'M") as info:
        check_feeds({"M": feed}, _declared(type_proto), {"M"})
    assert message in str(info.value)


@pytest.mark.parametrize(("type_proto", "feed", "expected"), [
    (_map_type(S, F), {}, {}),
    (_map_type(S, S), {"a": b"x", b"b": "y"}, {"a": "x", "b": "y"}),
    (_map_type(I64, F), {np.uint8(3): np.float64(0.5), True: 1}, {3: 0.5, 1: 1.0}),
    (_map_type(S, D), {"a": 0.1}, {"a": 0.1}),
    (_map_type(S, TensorProto.BOOL), {"a": 1, "b": False}, {"a": True, "b": False}),
    (_seq_map(S, F), ({"a": 1},), [{"a": 1.0}]),
])
def test_map_feeds_become_plain_python_dicts(type_proto, feed, expected) -> None:  # type: ignore[no-untyped-def]
    got = check_feeds({"M": feed}, _declared(type_proto), {"M"})["M"]
    assert got == expected
    rows = got if isinstance(got, list) else [got]
    for row in rows:
        for key, value in row.items():
            assert type(key) in (str, int) and type(value) in (str, int, float, bool)


def test_missing_map_input_names_its_type() -> None:
    with pytest.raises(InvalidFeedError, match=r"missing input 'M' \(map\(string,tensor\(int64\)\)\)"):
        check_feeds({}, _declared(_map_type(S, I64)), {"M"})


# -- run-time helpers ----------------------------------------------------------------------------------
def test_maps_count_in_feed_sizes() -> None:
    assert value_nbytes({"a": 1.0, "b": 2.0}) > value_nbytes({"a": 1.0}) > 0


def test_constant_maps_are_never_handed_out_twice() -> None:
    shared = [{"a": 1.0}]
    constants = owners_of([shared])
    [first] = detach_aliases([shared], [], constants)
    assert first == shared and first is not shared and first[0] is not shared[0]
    fresh = [{"a": 1.0}]
    [same] = detach_aliases([fresh], [], constants)
    assert same[0] is fresh[0]  # computed per run: no copy
