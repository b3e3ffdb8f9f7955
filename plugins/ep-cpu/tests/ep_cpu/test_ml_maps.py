"""ai.onnx.ml map ops (ZipMap, CastMap, DictVectorizer) against onnxruntime: feeds as dicts,
ZipMap's outputs as lists of dicts equal to onnxruntime's (keys, key order, Python types).

onnxruntime's Python API only feeds maps with float values (map(string|int64, float)); the
other map types the ops take are checked against the spec's meaning.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import epoxy
from epoxy.errors import EpoxyError

ort = pytest.importorskip("onnxruntime")

ORT_ERRORS = (ort.capi.onnxruntime_pybind11_state.Fail, ort.capi.onnxruntime_pybind11_state.InvalidArgument)
ML = "ai.onnx.ml"
F, D, I64, S = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING


def _map(key: int, value: int) -> onnx.TypeProto:
    return helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))


def _model(node: onnx.NodeProto, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           extra: tuple[onnx.NodeProto, ...] = ()) -> onnx.ModelProto:
    graph = helper.make_graph([node, *extra], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
    model.ir_version = 8
    return model


def _untyped(name: str) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, onnx.TypeProto())


def _epoxy(model: onnx.ModelProto) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"])


def _ort(model: onnx.ModelProto) -> Any:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def assert_same(got: Any, want: Any, rtol: float = 0.0) -> None:
    """Equal as onnxruntime returns it: arrays by dtype, shape and value (NaN equal to NaN),
    dicts by keys in order, key and value types, values (exactly unless ``rtol``)."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape, (got, want)
        if want.dtype == object:
            assert got.tolist() == want.tolist()
        else:
            np.testing.assert_array_equal(got, want)
        return
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol)
        return
    assert isinstance(want, dict) and isinstance(got, dict), (got, want)
    assert list(got) == list(want)
    for (gk, gv), (wk, wv) in zip(got.items(), want.items()):
        assert type(gk) is type(wk) and type(gv) is type(wv), (got, want)
        same = gv == wv or (math.isnan(gv) and math.isnan(wv)) or math.isclose(gv, wv, rel_tol=rtol, abs_tol=0)
        assert same, (got, want)


def _compare(model: onnx.ModelProto, feeds: dict[str, Any], rtol: float = 0.0) -> list[Any]:
    want = _ort(model).run(None, feeds)
    got = _epoxy(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w, rtol)
    return got


# ------------------------------------------------------------------------------------------- ZipMap
def zipmap(labels: dict[str, Any], rank: int | None = 2, name: str = "zip") -> onnx.ModelProto:
    node = helper.make_node("ZipMap", ["X"], ["Z"], name=name, domain=ML, **labels)
    shape = None if rank is None else [None] * rank
    return _model(node, [helper.make_tensor_value_info("X", F, shape)], [_untyped("Z")])


LABELS = [
    {"classlabels_strings": ["setosa", "versicolor", "virginica"]},
    {"classlabels_strings": ["b", "a", "c"]},  # returned in key order, as onnxruntime's ordered maps
    {"classlabels_strings": ["x", "y", "x"]},  # a repeated label keeps its last column
    {"classlabels_strings": ["é", "z", "ä"]},
    {"classlabels_int64s": [0, 1, 2]},
    {"classlabels_int64s": [7, -3, 2]},
    {"classlabels_int64s": [5, 5, 1]},
]


@pytest.mark.parametrize("labels", LABELS)
@pytest.mark.parametrize("x", [
    np.asarray([[0.1, 0.2, 0.7], [1, 2, 3], [-0.0, 1e-30, 3.4e38]], np.float32),
    np.asarray([[np.nan, np.inf, -np.inf]], np.float32),
    np.asarray([0.25, 0.5, 0.25], np.float32),
    np.zeros((0, 3), np.float32),
], ids=["2d", "nonfinite", "1d", "empty"])
def test_zipmap_matches_onnxruntime(labels: dict[str, Any], x: np.ndarray) -> None:
    [z] = _compare(zipmap(labels, rank=None), {"X": x})
    assert isinstance(z, list)


@pytest.mark.parametrize("x", [np.ones((2, 4), np.float32), np.ones((1, 1, 3), np.float32)], ids=["columns", "3d"])
def test_zipmap_refuses_wrong_input_shapes_naming_the_node(x: np.ndarray) -> None:
    model = zipmap(LABELS[0], rank=None)
    with pytest.raises(ORT_ERRORS):
        _ort(model).run(None, {"X": x})
    with pytest.raises(EpoxyError, match="ZipMap node 'zip'"):
        _epoxy(model).run(None, {"X": x})


@pytest.mark.parametrize("labels", [{}, {"classlabels_strings": ["a"], "classlabels_int64s": [1]}],
                         ids=["neither", "both"])
def test_zipmap_needs_exactly_one_label_list(labels: dict[str, Any]) -> None:
    with pytest.raises(EpoxyError, match="ZipMap node 'zip'.*classlabels"):
        _epoxy(zipmap(labels))


def test_zipmap_unknown_attribute_is_refused_naming_the_node() -> None:
    with pytest.raises(EpoxyError, match="'zip'.*(?i:unrecognized attribute)"):
        _epoxy(zipmap({"classlabels_int64s": [1, 2], "classlabels": [1, 2]}))


def test_zipmap_runs_on_scores_computed_in_the_graph() -> None:
    """Softmax -> ZipMap, as classifiers exported by skl2onnx end."""
    node = helper.make_node("Softmax", ["L"], ["P"], axis=1)
    zip_node = helper.make_node("ZipMap", ["P"], ["Z"], domain=ML, classlabels_int64s=[10, 20, 30, 40])
    model = _model(node, [helper.make_tensor_value_info("L", F, ["N", 4])],
                   [helper.make_value_info("Z", helper.make_sequence_type_proto(_map(I64, F)))], (zip_node,))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    _compare(model, {"L": x}, rtol=1e-6)  # Softmax may differ in the last bit
    args = _epoxy(model).get_outputs()
    assert [(a.name, a.type, a.shape) for a in args] == [(a.name, a.type, a.shape) for a in _ort(model).get_outputs()]


# ------------------------------------------------------------------------------------------ CastMap
def castmap(value: int = F, name: str = "cast", **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node("CastMap", ["M"], ["Y"], name=name, domain=ML, **attrs)
    return _model(node, [helper.make_value_info("M", _map(I64, value))], [_untyped("Y")])


CAST_ATTRS = [{}, {"cast_to": "TO_STRING"}, {"cast_to": "TO_INT64"}, {"cast_to": "TO_FLOAT"},
              {"map_form": "SPARSE", "max_map": 6}, {"map_form": "SPARSE", "max_map": 6, "cast_to": "TO_STRING"},
              {"map_form": "SPARSE", "max_map": 6, "cast_to": "TO_INT64"}, {"map_form": "SPARSE"},
              {"map_form": "DENSE", "max_map": 2}]
FLOAT_MAPS = [
    {3: 1.5, 1: -2.25, 0: 7.0, 9: 1.0},
    {0: 1e10, 1: float("nan"), 2: -0.0, 3: 1e-7, 4: 2.5, 5: -2.5},
    {0: 123456789.0, 1: 0.1, 2: 1e20, 4: -1e20, 5: float("inf")},
    {2: np.float32(3.75), np.int64(0): 1},
]


@pytest.mark.parametrize("attrs", CAST_ATTRS)
@pytest.mark.parametrize("feed", FLOAT_MAPS)
def test_castmap_of_float_maps_matches_onnxruntime(attrs: dict[str, Any], feed: dict[Any, Any]) -> None:
    _compare(castmap(**attrs), {"M": feed})


@pytest.mark.parametrize("attrs", CAST_ATTRS[:4])
def test_castmap_dense_takes_negative_keys(attrs: dict[str, Any]) -> None:
    _compare(castmap(**attrs), {"M": {-1: 3.0, 2: 1.0, -5: 0.5}})


def test_castmap_sparse_refuses_negative_keys() -> None:
    model = castmap(map_form="SPARSE", max_map=3)
    with pytest.raises(ORT_ERRORS, match="Negative index"):
        _ort(model).run(None, {"M": {-1: 3.0, 2: 1.0}})
    with pytest.raises(EpoxyError, match="CastMap node 'cast'.*negative keys"):
        _epoxy(model).run(None, {"M": {-1: 3.0, 2: 1.0}})


@pytest.mark.parametrize(("attrs", "message"), [
    ({"cast_to": "TO_DOUBLE"}, "cast_to 'TO_DOUBLE' is not one of"),
    ({"map_form": "PACKED"}, "map_form 'PACKED' is not one of"),
    ({"map_form": "SPARSE", "max_map": 0}, "max_map must be > 0"),
])
def test_castmap_invalid_attributes_name_the_node(attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(ORT_ERRORS):
        _ort(castmap(**attrs))
    with pytest.raises(EpoxyError, match=f"CastMap node 'cast'.*{message}"):
        _epoxy(castmap(**attrs))


@pytest.mark.parametrize(("attrs", "expected"), [
    ({}, np.asarray([[1.5, 2000.0, -7.0, 12.0]], np.float32)),
    ({"cast_to": "TO_INT64"}, np.asarray([[1, 2, -7, 12]], np.int64)),
    ({"cast_to": "TO_STRING"}, np.asarray([["1.5", " 2e3x", "-7", "12abc"]], object)),
    ({"map_form": "SPARSE", "max_map": 5, "cast_to": "TO_INT64"}, np.asarray([[1, 0, 2, -7, 0]], np.int64)),
])
def test_castmap_of_string_maps_reads_numbers_like_c(attrs: dict[str, Any], expected: np.ndarray) -> None:
    """map(int64, string) (which onnxruntime's Python API cannot feed): strings are read as C's
    strtof / strtoll read them (onnxruntime's std::stof / std::stoll): the longest numeric prefix."""
    feed = {0: "1.5", 2: " 2e3x", 3: "-7", 7: "12abc"}
    if attrs.get("map_form") == "SPARSE":
        feed = {0: "1.5", 2: " 2e3x", 3: "-7"}
    [y] = _epoxy(castmap(S, **attrs)).run(None, {"M": feed})
    assert_same(y, expected)


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_INT64"])
def test_castmap_text_that_is_no_number_names_the_node(cast_to: str) -> None:
    with pytest.raises(EpoxyError, match="CastMap node 'cast'.*'abc' of key 4 is not"):
        _epoxy(castmap(S, cast_to=cast_to)).run(None, {"M": {1: "2", 4: "abc"}})


# ----------------------------------------------------------------------------------- DictVectorizer
def vectorizer(key: int, value: int, name: str = "vec", **vocabulary: Any) -> onnx.ModelProto:
    node = helper.make_node("DictVectorizer", ["M"], ["Y"], name=name, domain=ML, **vocabulary)
    return _model(node, [helper.make_value_info("M", _map(key, value))], [_untyped("Y")])


@pytest.mark.parametrize(("key", "vocabulary", "feeds"), [
    (S, {"string_vocabulary": ["x", "y", "z"]},
     [{"x": 3, "z": 5.5, "w": 9}, {"y": np.float32(1.5)}, {np.str_("x"): True, "z": np.float64(2)}]),
    (S, {"string_vocabulary": ["x", "y", "x"]}, [{"x": 3.0, "y": 2.0}]),
    (I64, {"int64_vocabulary": [4, 2, 7]}, [{2: 1.0, 7: 3, 99: 1}, {np.int64(2): 1.0}, {-4: 1.0, 4: -0.5}]),
    (I64, {"int64_vocabulary": [1, 2, 1]}, [{1: 3.0, 2: 2.0}]),
    (S, {"string_vocabulary": ["x"], "int64_vocabulary": [1, 2]}, [{"x": 3.0}]),  # the key type's vocabulary
])
def test_dictvectorizer_matches_onnxruntime(key: int, vocabulary: dict[str, Any], feeds: list[dict[Any, Any]]) -> None:
    model = vectorizer(key, F, **vocabulary)
    for feed in feeds:
        _compare(model, {"M": feed})


@pytest.mark.parametrize(("key", "value", "vocabulary", "feed", "expected"), [
    (S, I64, {"string_vocabulary": ["a", "b", "c"]}, {"c": 4, "a": -2}, np.asarray([[-2, 0, 4]], np.int64)),
    (S, D, {"string_vocabulary": ["a", "b"]}, {"b": 0.1}, np.asarray([[0, 0.1]], np.float64)),
    (I64, D, {"int64_vocabulary": [3, 1]}, {1: 0.1, 5: 1.0}, np.asarray([[0, 0.1]], np.float64)),
    (I64, S, {"int64_vocabulary": [3, 1, 2]}, {1: "one", 3: "three"}, np.asarray([["three", "one", ""]], object)),
    (S, F, {"string_vocabulary": ["a", "b"]}, {}, np.asarray([[0, 0]], np.float32)),
])
def test_dictvectorizer_other_map_types(key: int, value: int, vocabulary: dict[str, Any], feed: dict[Any, Any],
                                        expected: np.ndarray) -> None:
    """Map types onnxruntime's Python API cannot feed (and the empty map it refuses)."""
    [y] = _epoxy(vectorizer(key, value, **vocabulary)).run(None, {"M": feed})
    assert_same(y, expected)


@pytest.mark.parametrize(
    ("key", "vocabulary"), [(S, {"int64_vocabulary": [1, 2]}), (S, {}), (I64, {"string_vocabulary": ["a"]})]
)
def test_dictvectorizer_needs_the_vocabulary_of_its_key_type(key: int, vocabulary: dict[str, Any]) -> None:
    with pytest.raises(EpoxyError, match="DictVectorizer node 'vec'.*vocabulary is missing or empty"):
        _epoxy(vectorizer(key, F, **vocabulary))


def test_dictvectorizer_feeds_are_checked_against_the_map_type() -> None:
    session = _epoxy(vectorizer(S, F, string_vocabulary=["x"]))
    assert [(a.name, a.type, a.shape) for a in session.get_inputs()] == [("M", "map(string,tensor(float))", [])]
    with pytest.raises(epoxy.InvalidFeedError, match="input 'M': map keys must be str"):
        session.run(None, {"M": {1: 2.0}})
    with pytest.raises(epoxy.InvalidFeedError, match="input 'M': map values must be numbers"):
        session.run(None, {"M": {"x": "1"}})
    with pytest.raises(epoxy.InvalidFeedError, match=r"input 'M': expected a dict \(map\(string,tensor\(float\)\)\)"):
        session.run(None, {"M": [{"x": 1.0}]})


def test_dict_in_list_of_dicts_out() -> None:
    """DictVectorizer -> ZipMap: a dict fed, a list of dicts returned, both as onnxruntime."""
    vec = helper.make_node("DictVectorizer", ["M"], ["V"], domain=ML, string_vocabulary=["b", "a", "c"])
    zip_node = helper.make_node("ZipMap", ["V"], ["Z"], domain=ML, classlabels_strings=["B", "A", "C"])
    model = _model(vec, [helper.make_value_info("M", _map(S, F))], [_untyped("Z")], (zip_node,))
    for feed in ({"a": 1.0, "c": 0.5}, {"q": 3.0}, {"b": -1, "a": 2, "c": 3}):
        [z] = _compare(model, {"M": feed})
        assert isinstance(z, list) and len(z) == 1 and isinstance(z[0], dict)
