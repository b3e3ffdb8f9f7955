"""ai.onnx.ml kernels: LabelEncoder, TreeEnsemble, ArrayFeatureExtractor, Binarizer."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy

ML = "ai.onnx.ml"


def _model(op, feeds, out_elem, out_rank, attrs, ml_opset, consts=None):  # type: ignore[no-untyped-def]
    consts = consts or {}
    inputs = []
    for k, v in feeds.items():
        elem = TensorProto.STRING if v.dtype == object else helper.np_dtype_to_tensor_dtype(v.dtype)
        inputs.append(helper.make_tensor_value_info(k, elem, list(v.shape)))
    node = helper.make_node(op, list(feeds) + list(consts), ["Y"], domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        inputs,
        [helper.make_tensor_value_info("Y", out_elem, [None] * out_rank)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid(ML, ml_opset)]
    )
    model.ir_version = 9
    return model


def _run(model, feeds):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)[0]


def _ref(model, feeds):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, feeds)[0]


# ----------------------------------------------------------------------------- Binarizer / AFE


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_binarizer(dtype) -> None:  # type: ignore[no-untyped-def]
    x = np.array([[-2, 0, 1], [3, 5, 1]], dtype=dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    got = _run(_model("Binarizer", {"X": x}, elem, 2, {"threshold": 1.0}, 1), {"X": x})
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, [[0, 0, 0], [1, 1, 0]])


def test_array_feature_extractor() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    idx = np.array([3, 0, -1], np.int64)
    got = _run(_model("ArrayFeatureExtractor", {"X": x, "I": idx}, TensorProto.FLOAT, 3, {}, 1), {"X": x, "I": idx})
    np.testing.assert_array_equal(got, x[..., [3, 0, -1]])
    s = np.array(["a", "b", "c"], dtype=object)
    i1 = np.array([[2, 2]], np.int64)
    got = _run(_model("ArrayFeatureExtractor", {"X": s, "I": i1}, TensorProto.STRING, 2, {}, 1), {"X": s, "I": i1})
    assert got.shape == (1, 2) and got.tolist() == [["c", "c"]]


# ----------------------------------------------------------------------------- LabelEncoder


def test_label_encoder_v1_both_directions() -> None:
    s = np.array(["b", "zz", "a"], dtype=object)
    attrs = {"classes_strings": ["a", "b", "c"], "default_int64": 42}
    got = _run(_model("LabelEncoder", {"X": s}, TensorProto.INT64, 1, attrs, 1), {"X": s})
    np.testing.assert_array_equal(got, [1, 42, 0])
    i = np.array([[2, 7], [-1, 0]], np.int64)
    attrs = {"classes_strings": ["a", "b", "c"], "default_string": "?"}
    got = _run(_model("LabelEncoder", {"X": i}, TensorProto.STRING, 2, attrs, 1), {"X": i})
    assert got.tolist() == [["c", "?"], ["?", "a"]]


def test_label_encoder_v2_float_to_string_and_defaults() -> None:
    x = np.array([1.5, 2.0, -0.0, 9.0], np.float32)
    attrs = {"keys_floats": [1.5, 2.0, 0.0], "values_strings": ["x", "y", "zero"]}
    got = _run(_model("LabelEncoder", {"X": x}, TensorProto.STRING, 1, attrs, 2), {"X": x})
    assert got.tolist() == ["x", "y", "zero", "_Unused"]
    s = np.array(["a", "q"], dtype=object)
    attrs = {"keys_strings": ["a"], "values_floats": [0.25]}
    got = _run(_model("LabelEncoder", {"X": s}, TensorProto.FLOAT, 1, attrs, 2), {"X": s})
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [0.25, -0.0])


def test_label_encoder_v4_tensors_nan_and_last_duplicate_wins() -> None:
    x = np.array([[np.nan, 1.0], [2.0, 3.0]], np.float64)
    attrs = {
        "keys_tensor": numpy_helper.from_array(np.array([1.0, np.nan, 2.0, 1.0], np.float64), "k"),
        "values_tensor": numpy_helper.from_array(np.array([10, 20, 30, 40], np.int16), "v"),
        "default_tensor": numpy_helper.from_array(np.array([-5], np.int16), "d"),
    }
    got = _run(_model("LabelEncoder", {"X": x}, TensorProto.INT16, 2, attrs, 4), {"X": x})
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, [[20, 40], [30, -5]])


def test_label_encoder_v4_string_int_matches_reference() -> None:
    x = np.array(["Amy", "Sally", "Dori", "Amy"], dtype=object)
    attrs = {"keys_strings": ["Amy", "Sally"], "values_int64s": [5, 6], "default_int64": -1}
    model = _model("LabelEncoder", {"X": x}, TensorProto.INT64, 1, attrs, 4)
    np.testing.assert_array_equal(_run(model, {"X": x}), _ref(model, {"X": x}))


# ----------------------------------------------------------------------------- TreeEnsemble


def _ensemble_attrs(aggregate: int, post: int = 0) -> dict:
    # tree 0: node0 x0 <= 0.5 ? node1 : leaf2 ; node1 x1 in {1, 3} ? leaf0 : leaf1
    # tree 1: node2 x2 > 1 (missing -> true) ? leaf3 : node3 ; node3 x0 == 2 ? leaf4 : leaf5
    return {
        "n_targets": 2,
        "aggregate_function": aggregate,
        "post_transform": post,
        "tree_roots": [0, 2],
        "nodes_featureids": [0, 1, 2, 0],
        "nodes_modes": numpy_helper.from_array(np.array([0, 6, 3, 4], np.uint8), "m"),
        "nodes_splits": numpy_helper.from_array(np.array([0.5, 0.0, 1.0, 2.0], np.float32), "s"),
        "nodes_truenodeids": [1, 0, 3, 4],
        "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 3, 5],
        "nodes_falseleafs": [1, 1, 0, 1],
        "nodes_missing_value_tracks_true": [0, 0, 1, 0],
        "membership_values": numpy_helper.from_array(np.array([1.0, 3.0, np.nan], np.float32), "mv"),
        "leaf_targetids": [0, 1, 0, 1, 0, 1],
        "leaf_weights": numpy_helper.from_array(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], np.float32), "w"),
    }


_TREE_X = np.array(
    [[0.0, 1.0, 2.0], [0.0, 2.0, 0.0], [1.0, 3.0, np.nan], [2.0, 0.0, 0.5], [np.nan, 3.0, 1.0]], np.float32
)


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
def test_tree_ensemble_matches_reference(aggregate: int) -> None:
    model = _model("TreeEnsemble", {"X": _TREE_X}, TensorProto.FLOAT, 2, _ensemble_attrs(aggregate), 5)
    got = _run(model, {"X": _TREE_X})
    assert got.dtype == np.float32 and got.shape == (5, 2)
    expected = _ref(model, {"X": _TREE_X})
    if aggregate in (2, 3):  # the reference leaves untouched targets at +-float max; we give 0
        expected = np.where(np.abs(expected) > 1e30, 0, expected)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_tree_ensemble_logistic_post_transform_and_double() -> None:
    x = _TREE_X.astype(np.float64)
    model = _model("TreeEnsemble", {"X": x}, TensorProto.DOUBLE, 2, _ensemble_attrs(1, post=2), 5)
    raw_model = _model("TreeEnsemble", {"X": x}, TensorProto.DOUBLE, 2, _ensemble_attrs(1), 5)
    got = _run(model, {"X": x})
    raw = _run(raw_model, {"X": x})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-raw)))
