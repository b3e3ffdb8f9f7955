"""com.microsoft::Tokenizer against onnxruntime on fixed inputs."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy

ort = pytest.importorskip("onnxruntime")


def _model(attrs: dict[str, Any]):  # type: ignore[no-untyped-def]
    node = helper.make_node("Tokenizer", ["X"], ["Y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.STRING, None)],
                              [helper.make_tensor_value_info("Y", TensorProto.STRING, None)])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    return model


def _both(attrs: dict[str, Any], x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    model = _model(attrs)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"X": x})[0]
    return got, want


def _check(attrs: dict[str, Any], x: np.ndarray) -> None:
    got, want = _both(attrs, x)
    assert got.shape == want.shape
    assert got.dtype == object
    assert got.tolist() == want.tolist()


TEXTS_1D = np.array(["Hello World", "a b  c", "I like dogs, cats", "", "one", "  lead and trail  "], dtype=object)
TEXTS_2D = np.array([["a b", "c"], ["", "d e f"], ["x.y", "Hello, World!"]], dtype=object)
UNICODE = np.array(["héllo wörld ñ", "日本語 テキスト", "ÀB àb Straße", "naïve café_1"], dtype=object)

SPLITS = [
    {"separators": [" "]},
    {"separators": [" ", ","]},
    {"separators": ["o", "l"]},
    {"separators": ["l", "lo"]},
    {"separators": ["lo", "l"]},
    {"separators": ["[ ,.!]+"]},
    {"separators": ["l+"]},
    {"separators": ["^H"]},
    {"separators": ["d$"]},
    {"separators": ["$"]},
    {"separators": [" ", "$"]},
    {"separators": ["a*"]},
    {"separators": ["x", "y*"]},
    {"separators": ["\\s"]},
    {"separators": ["\\W+"]},
    {"tokenexp": "[a-z]+"},
    {"tokenexp": "\\w+"},
    {"tokenexp": "[a-zA-Z0-9_]+"},
    {"tokenexp": "\\b\\w\\w+\\b"},
    {"tokenexp": "\\d*"},
    {"tokenexp": "(?i)àb"},
    {"tokenexp": "\\w$"},
    {"tokenexp": "[^\\s]+"},
    {"tokenexp": "zzz"},
    {"separators": [" "], "tokenexp": "a"},
]


@pytest.mark.parametrize("split", SPLITS, ids=lambda s: repr(s))
@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("mincharnum", [1, 2, 3])
@pytest.mark.parametrize("x", [TEXTS_1D, TEXTS_2D, UNICODE], ids=["1d", "2d", "unicode"])
def test_tokenizer_matches_onnxruntime(split: dict[str, Any], mark: int, mincharnum: int, x: np.ndarray) -> None:
    _check({"mark": mark, "pad_value": "#", "mincharnum": mincharnum, **split}, x)


@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("x", [TEXTS_1D, TEXTS_2D, UNICODE], ids=["1d", "2d", "unicode"])
def test_char_level_tokenization(mark: int, x: np.ndarray) -> None:
    _check({"mark": mark, "pad_value": "", "mincharnum": 1, "separators": [""]}, x)


@pytest.mark.parametrize("mark", [0, 1])
@pytest.mark.parametrize("x", [
    np.array(["", ""], dtype=object),
    np.array([["", ""], ["", ""]], dtype=object),
    np.array(["", "  "], dtype=object),
    np.array(["ab", "  "], dtype=object),
    np.array([[" a "]], dtype=object),
    np.zeros((0,), dtype=object),
    np.zeros((0, 3), dtype=object),
    np.zeros((2, 0), dtype=object),
], ids=["empty-1d", "empty-2d", "blank", "one-token", "1x1", "0", "0x3", "2x0"])
def test_empty_strings_and_empty_inputs(mark: int, x: np.ndarray) -> None:
    _check({"mark": mark, "pad_value": "#", "mincharnum": 1, "separators": [" "]}, x)
    _check({"mark": mark, "pad_value": "#", "mincharnum": 1, "tokenexp": "\\w+"}, x)


@pytest.mark.parametrize(("attrs", "why"), [
    ({"mark": 0, "pad_value": "#", "mincharnum": 1}, "separators or tokenexp"),
    ({"mark": 0, "pad_value": "#", "mincharnum": 1, "tokenexp": ""}, "non-empty tokenexp"),
    ({"mark": 0, "pad_value": "#", "mincharnum": 2, "separators": [""]}, "mincharnum is too big"),
], ids=["neither", "empty-tokenexp", "char-mincharnum"])
def test_invalid_attributes_are_rejected(attrs: dict[str, Any], why: str) -> None:
    model = _model(attrs)
    with pytest.raises(Exception, match=why.split()[-1]):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(epoxy.errors.EpoxyError, match=why), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"X": np.array(["a b"], dtype=object)})
