"""StringConcat, StringNormalizer, StringSplit, RegexFullMatch, TfIdfVectorizer kernels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _model(op, feeds, outs, attrs, opset):  # type: ignore[no-untyped-def]
    """outs: list of (elem_type, rank)."""
    inputs = []
    for k, v in feeds.items():
        elem = TensorProto.STRING if v.dtype == object else helper.np_dtype_to_tensor_dtype(v.dtype)
        inputs.append(helper.make_tensor_value_info(k, elem, list(v.shape)))
    outputs = [helper.make_tensor_value_info(f"Y{i}", e, [None] * r) for i, (e, r) in enumerate(outs)]
    node = helper.make_node(op, list(feeds), [o.name for o in outputs], **attrs)
    graph = helper.make_graph([node], "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


def _run(model, feeds):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)


def _s(*items) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.array(items, dtype=object)


S = TensorProto.STRING


def test_string_concat_broadcasting_and_utf8() -> None:
    x = _s("a", "é", "")
    y = np.array(["-z"], dtype=object)
    got = _run(_model("StringConcat", {"X": x, "Z": y}, [(S, 1)], {}, 20), {"X": x, "Z": y})[0]
    assert got.dtype == object
    assert got.tolist() == ["a-z", "é-z", "-z"]


def test_string_concat_zero_dim_and_empty() -> None:
    x = np.array("ab", dtype=object)
    y = np.array("cd", dtype=object)
    got = _run(_model("StringConcat", {"X": x, "Z": y}, [(S, 0)], {}, 20), {"X": x, "Z": y})[0]
    assert got.shape == () and got.item() == "abcd"
    e = np.zeros((0, 2), dtype=object)
    got = _run(_model("StringConcat", {"X": e, "Z": e}, [(S, 2)], {}, 20), {"X": e, "Z": e})[0]
    assert got.shape == (0, 2)


@pytest.mark.parametrize(
    "attrs,x,expected",
    [
        ({"case_change_action": "LOWER"}, _s("MonDay", "ÄBC"), ["monday", "äbc"]),
        (
            {"case_change_action": "UPPER", "stopwords": ["monday"], "is_case_sensitive": 1},
            _s("monday", "MONDAY", "tuesday"),
            ["MONDAY", "TUESDAY"],
        ),
        (
            {"case_change_action": "UPPER", "stopwords": ["monday"], "is_case_sensitive": 0},
            _s("monday", "MONDAY", "tuesday"),
            ["TUESDAY"],
        ),
        ({"stopwords": ["a", "b"], "is_case_sensitive": 1}, _s("a", "b"), [""]),
        ({"locale": "xx_NOT_A_LOCALE", "case_change_action": "LOWER"}, _s("ABC"), ["abc"]),
    ],
)
def test_string_normalizer(attrs, x, expected) -> None:  # type: ignore[no-untyped-def]
    got = _run(_model("StringNormalizer", {"X": x}, [(S, 1)], attrs, 10), {"X": x})[0]
    assert got.tolist() == expected


def test_string_normalizer_two_dim_empty_output() -> None:
    x = np.array([["monday", "Monday"]], dtype=object)
    attrs = {"stopwords": ["monday"], "is_case_sensitive": 0}
    got = _run(_model("StringNormalizer", {"X": x}, [(S, 2)], attrs, 10), {"X": x})[0]
    assert got.shape == (1, 1) and got[0, 0] == ""


def test_string_split_delimiter_and_maxsplit() -> None:
    x = np.array([["a,b,,c", "x"], ["", "1,2"]], dtype=object)
    model = _model("StringSplit", {"X": x}, [(S, 3), (TensorProto.INT64, 2)], {"delimiter": ",", "maxsplit": 2}, 20)
    parts, counts = _run(model, {"X": x})
    assert parts.shape == (2, 2, 3)
    assert parts[0, 0].tolist() == ["a", "b", ",c"]
    assert parts[0, 1].tolist() == ["x", "", ""]
    assert parts[1, 0].tolist() == ["", "", ""]
    np.testing.assert_array_equal(counts, [[3, 1], [1, 2]])


def test_string_split_whitespace_and_empty_tensor() -> None:
    x = _s("  hello   world ", "", "one")
    parts, counts = _run(_model("StringSplit", {"X": x}, [(S, 2), (TensorProto.INT64, 1)], {}, 20), {"X": x})
    assert parts.tolist() == [["hello", "world"], ["", ""], ["one", ""]]
    np.testing.assert_array_equal(counts, [2, 0, 1])
    e = np.zeros((0,), dtype=object)
    parts, counts = _run(_model("StringSplit", {"X": e}, [(S, 2), (TensorProto.INT64, 1)], {}, 20), {"X": e})
    assert parts.shape == (0, 0) and counts.shape == (0,) and counts.dtype == np.int64


def test_regex_full_match() -> None:
    x = np.array([["www.google.com", "www.facebook.com"], ["www.bbc.co.uk", ""]], dtype=object)
    model = _model("RegexFullMatch", {"X": x}, [(TensorProto.BOOL, 2)], {"pattern": r"www\.[\w.-]+\.\bcom\b"}, 20)
    got = _run(model, {"X": x})[0]
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, [[True, True], [False, False]])


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("max_skip", [0, 2])
def test_tfidf_matches_reference_ints(mode: str, max_skip: int) -> None:
    x = np.array([[1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8], [8, 8, 7, 7, 6, 6, 5, 5, 3, 3, 1, 1]], np.int32)
    attrs = {
        "mode": mode,
        "min_gram_length": 1,
        "max_gram_length": 2,
        "max_skip_count": max_skip,
        "ngram_counts": [0, 4],
        "ngram_indexes": [0, 1, 2, 3, 4, 5, 6],
        "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        "weights": [0.5, 1, 2, 1, 3, 1, 0.25],
    }
    model = _model("TfIdfVectorizer", {"X": x}, [(TensorProto.FLOAT, 2)], attrs, 9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = ReferenceEvaluator(model).run(None, {"X": x})[0]
    got = _run(model, {"X": x})[0]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected)


def test_tfidf_strings_1d_only_bigrams() -> None:
    x = _s("a", "b", "a", "b", "c", "a")
    attrs = {
        "mode": "TF",
        "min_gram_length": 2,
        "max_gram_length": 2,
        "max_skip_count": 0,
        "ngram_counts": [0, 0],
        "ngram_indexes": [1, 0],
        "pool_strings": ["a", "b", "b", "c"],
    }
    got = _run(_model("TfIdfVectorizer", {"X": x}, [(TensorProto.FLOAT, 1)], attrs, 9), {"X": x})[0]
    np.testing.assert_array_equal(got, np.array([1.0, 2.0], np.float32))
