"""Normalizer, Scaler, Imputer, OneHotEncoder, CategoryMapper, FeatureVectorizer
(ai.onnx.ml 1) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from _ml_oracle import I64, F, S, check, elem_type, ml_model, run_epoxy, run_ort
from onnx import helper

from epoxy.errors import EpoxyError

pytest.importorskip("onnxruntime")

_X = np.array([[1.0, -2.0, 3.0], [0.0, 0.0, 0.0], [-1.0, -4.0, 2.0], [np.nan, 1.0, 0.5], [2.0, np.nan, -1.0]],
              np.float32)
_INPUTS = {
    "float32": _X,
    "float64": _X.astype(np.float64),
    "int64": np.nan_to_num(_X * 3).astype(np.int64),
    "int32": np.nan_to_num(_X * 3).astype(np.int32),
    "1d": _X[0],
    "negative": -np.abs(np.nan_to_num(_X)),
}


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("name", sorted(_INPUTS))
def test_normalizer(norm: str, name: str) -> None:
    x = _INPUTS[name]
    got = check("Normalizer", {"X": x}, [("Y", F)], {"norm": norm})
    assert got[0].shape == x.shape


def test_normalizer_rank_3_is_an_error() -> None:
    x = _X.reshape(1, 5, 3)
    with pytest.raises(EpoxyError, match="rank"):
        run_epoxy(ml_model("Normalizer", {"X": x}, [("Y", F)], {"norm": "L2"}), {"X": x})


@pytest.mark.parametrize(
    "attrs",
    [{"offset": [1.0], "scale": [2.0]}, {"offset": [1.0, 2.0, -3.0], "scale": [2.0, 0.5, 4.0]}],
    ids=["scalar", "per_feature"],
)
@pytest.mark.parametrize("name", sorted(_INPUTS))
def test_scaler(attrs: dict, name: str) -> None:
    check("Scaler", {"X": _INPUTS[name]}, [("Y", F)], attrs)


def test_scaler_rank_3_cycles_over_axis_1() -> None:
    # onnxruntime reads per-feature values along axis 1, cycling over the flattened tensor
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    check("Scaler", {"X": x}, [("Y", F)], {"offset": [1.0, 2.0], "scale": [1.0, -2.0]})


@pytest.mark.parametrize("attrs", [
    {"imputed_value_floats": [9.0], "replaced_value_float": float("nan")},
    {"imputed_value_floats": [7.0, 8.0, 9.0], "replaced_value_float": float("nan")},
    {"imputed_value_floats": [7.0, 8.0, 9.0], "replaced_value_float": 0.0},
    {"imputed_value_floats": [7.0, 8.0]},  # neither 1 nor 3 values: the first one everywhere
], ids=["nan_one", "nan_per_feature", "zero_per_feature", "mismatch"])
@pytest.mark.parametrize("x", [_X, _X[3], _X[:4].reshape(2, 2, 3)], ids=["2d", "1d", "3d"])
def test_imputer_floats(attrs: dict, x: np.ndarray) -> None:
    check("Imputer", {"X": x}, [("Y", F)], attrs)


@pytest.mark.parametrize("attrs", [
    {"imputed_value_int64s": [7, 8, 9], "replaced_value_int64": 0},
    {"imputed_value_int64s": [-5], "replaced_value_int64": 3},
    {"imputed_value_int64s": [7, 8], "replaced_value_int64": 0},
], ids=["per_feature", "one", "mismatch"])
def test_imputer_int64(attrs: dict) -> None:
    got = check("Imputer", {"X": _INPUTS["int64"]}, [("Y", I64)], attrs)
    assert got[0].dtype == np.int64


def test_imputer_keeps_float64_and_int32() -> None:
    # onnxruntime has float32 and int64 kernels only; the type is kept here
    x = _INPUTS["float64"]
    got = run_epoxy(
        ml_model(
            "Imputer",
            {"X": x},
            [("Y", helper.np_dtype_to_tensor_dtype(x.dtype))],
            {"imputed_value_floats": [1.5, 2.5, 3.5], "replaced_value_float": float("nan")},
        ),
        {"X": x},
    )[0]
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got[3:, :], [[1.5, 1.0, 0.5], [2.0, 2.5, -1.0]])
    xi = _INPUTS["int32"]
    got = run_epoxy(ml_model("Imputer", {"X": xi}, [("Y", elem_type(xi))],
                             {"imputed_value_int64s": [4], "replaced_value_int64": 0}), {"X": xi})[0]
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.where(xi == 0, 4, xi))


_STR = np.array([["a", "b", "zz"], ["c", "a", "b"]], dtype=object)
_INT = np.array([[1, 5, 7], [3, -2, 1]], np.int64)


@pytest.mark.parametrize("attrs", [{"cats_strings": ["a", "b", "c"]}, {"cats_strings": ["a", "b", "a"], "zeros": 1}],
                         ids=["plain", "duplicate"])
@pytest.mark.parametrize("x", [_STR, _STR[1]], ids=["2d", "1d"])
def test_one_hot_encoder_strings(attrs: dict, x: np.ndarray) -> None:
    got = check("OneHotEncoder", {"X": x}, [("Y", F)], attrs)
    assert got[0].shape == x.shape + (3,)


@pytest.mark.parametrize(
    "x",
    [_INT, _INT.astype(np.float32) + 0.7, _INT.astype(np.float64) - 0.3, _INT.reshape(1, 2, 3)],
    ids=["int64", "float32", "float64", "3d"],
)
def test_one_hot_encoder_ints(x: np.ndarray) -> None:
    # floats truncate toward zero (-1.3 is -1, unknown here: an all-zero row)
    check("OneHotEncoder", {"X": x}, [("Y", F)], {"cats_int64s": [1, 3, 5, 7, -2, 1]})


def test_one_hot_encoder_unknown_category() -> None:
    attrs = {"cats_int64s": [1, 3, 5]}
    check("OneHotEncoder", {"X": _INT}, [("Y", F)], attrs)  # zeros=1 (default): all-zero rows
    model = ml_model("OneHotEncoder", {"X": _INT}, [("Y", F)], dict(attrs, zeros=0))
    with pytest.raises(EpoxyError, match="unknown category"):
        run_epoxy(model, {"X": _INT})
    # string categories never match an int input (and back): zeros, as onnxruntime
    check("OneHotEncoder", {"X": _STR}, [("Y", F)], attrs)


@pytest.mark.parametrize("attrs", [
    {"cats_strings": ["a", "b", "c"], "cats_int64s": [1, 3, 5]},
    {"cats_strings": ["a", "b", "c"], "cats_int64s": [1, 3, 5], "default_int64": 42, "default_string": "?"},
    {"cats_strings": ["a", "b", "a"], "cats_int64s": [1, 1, 5]},  # duplicates: the last one wins
], ids=["defaults", "custom_defaults", "duplicates"])
def test_category_mapper(attrs: dict) -> None:
    got = check("CategoryMapper", {"X": _STR}, [("Y", I64)], attrs)
    assert got[0].dtype == np.int64
    got = check("CategoryMapper", {"X": _INT}, [("Y", S)], attrs)
    assert got[0].dtype == object
    check("CategoryMapper", {"X": _STR[0]}, [("Y", I64)], attrs)


_A = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
_B = np.array([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]], np.float32)
_C3 = np.arange(8, dtype=np.float32).reshape(2, 2, 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
@pytest.mark.parametrize("inputs,dims", [
    ((_A, _B), [2, 3]),
    ((_A, _B), [1, 3]),  # truncated
    ((_A, _B), [3, 2]),  # padded with zeros, then truncated
    ((_A, _C3), [2, 4]),  # 3-D flattened per row
    ((_A[:1], _B[0]), [2, 3]),  # 1-D is one row
], ids=["exact", "truncate", "pad", "3d", "1d"])
def test_feature_vectorizer(dtype: type, inputs: tuple, dims: list[int]) -> None:
    feeds = {f"x{i}": x.astype(dtype) for i, x in enumerate(inputs)}
    got = check("FeatureVectorizer", feeds, [("Y", F)], {"inputdimensions": dims})
    assert got[0].shape == (inputs[0].shape[0] if inputs[0].ndim > 1 else 1, sum(dims))


def test_feature_vectorizer_mixed_input_types() -> None:
    # the schema binds one type for all inputs; mixed ones still concatenate as float32
    feeds = {"a": _A, "b": _B.astype(np.int64)}
    got = run_epoxy(ml_model("FeatureVectorizer", feeds, [("Y", F)], {"inputdimensions": [2, 3]}), feeds)[0]
    expected = run_ort(ml_model("FeatureVectorizer", {"a": _A, "b": _B}, [("Y", F)], {"inputdimensions": [2, 3]}),
                       {"a": _A, "b": _B})[0]
    np.testing.assert_array_equal(got, expected)
