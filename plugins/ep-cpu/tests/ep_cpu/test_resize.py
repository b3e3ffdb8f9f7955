"""Resize (10, 11, 13, 18, 19) and Upsample (7, 9) kernels."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy

_NAMES = ["X", "roi", "scales", "sizes"]


def _model(
    op: str,
    x: np.ndarray,
    consts: dict[str, np.ndarray],
    attrs: dict,
    opset: int,
    input_names: list[str] | None = None,
) -> onnx.ModelProto:
    names = input_names or _NAMES
    used = [n for n in names if n == "X" or n in consts]
    last = max(names.index(n) for n in used)
    node_inputs = [n if (n == "X" or n in consts) else "" for n in names[: last + 1]]
    node = helper.make_node(op, node_inputs, ["Y"], **attrs)
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", elem, list(x.shape))],
        [helper.make_tensor_value_info("Y", elem, [None] * x.ndim)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"]).run(None, {"X": x})[0]


def _reference(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, {"X": x})[0]


_X = np.random.default_rng(0).standard_normal((1, 2, 4, 6)).astype(np.float32)

_CASES = list(
    itertools.product(
        ["nearest", "linear", "cubic"],
        ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"],
        [("scales", [1.0, 1.0, 0.5, 1.5]), ("scales", [1.0, 1.0, 2.0, 0.75]), ("sizes", [1, 2, 7, 3])],
    )
)


@pytest.mark.parametrize("mode,ctm,spec", _CASES)
def test_resize_matches_reference(mode: str, ctm: str, spec: tuple) -> None:
    consts: dict[str, np.ndarray] = {}
    if ctm == "tf_crop_and_resize":
        consts["roi"] = np.array([0, 0, 0.15, -0.1, 1, 1, 0.85, 1.2], np.float32)
    if spec[0] == "scales":
        consts["scales"] = np.array(spec[1], np.float32)
    else:
        consts["sizes"] = np.array(spec[1], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "extrapolation_value": -7.0}
    model = _model("Resize", _X, consts, attrs, 19)
    np.testing.assert_allclose(_run(model, _X), _reference(model, _X), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("exclude_outside", [0, 1])
def test_resize_antialias_and_exclude_outside(mode: str, exclude_outside: int) -> None:
    x = np.random.default_rng(1).standard_normal((1, 1, 9, 11)).astype(np.float32)
    attrs = {"mode": mode, "antialias": 1, "exclude_outside": exclude_outside, "cubic_coeff_a": -0.5}
    model = _model("Resize", x, {"scales": np.array([1, 1, 0.4, 0.6], np.float32)}, attrs, 18)
    np.testing.assert_allclose(_run(model, x), _reference(model, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes(nearest_mode: str) -> None:
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode, "coordinate_transformation_mode": "asymmetric"}
    model = _model("Resize", _X, {"sizes": np.array([1, 2, 8, 9], np.int64)}, attrs, 13)
    np.testing.assert_array_equal(_run(model, _X), _reference(model, _X))


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio_with_negative_axes(policy: str) -> None:
    attrs = {"mode": "linear", "axes": [-2, -1], "keep_aspect_ratio_policy": policy}
    model = _model("Resize", _X, {"sizes": np.array([7, 8], np.int64)}, attrs, 18)
    got = _run(model, _X)
    ref_model = _model("Resize", _X, {"sizes": np.array([7, 8], np.int64)}, {**attrs, "axes": [2, 3]}, 18)
    expected = _reference(ref_model, _X)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_resize_opset11_empty_scales_uses_sizes() -> None:
    consts = {
        "roi": np.zeros(0, np.float32),
        "scales": np.zeros(0, np.float32),
        "sizes": np.array([1, 2, 3, 3], np.int64),
    }
    model = _model("Resize", _X, consts, {"mode": "linear"}, 11)
    np.testing.assert_allclose(_run(model, _X), _reference(model, _X), rtol=1e-5, atol=1e-6)


def test_resize_integer_nearest_is_exact() -> None:
    x = np.arange(12, dtype=np.uint8).reshape(1, 1, 3, 4)
    model = _model("Resize", x, {"scales": np.array([1, 1, 2, 2], np.float32)}, {"mode": "nearest"}, 19)
    got = _run(model, x)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(2, axis=3))


def test_resize_integer_linear_rounds_and_keeps_dtype() -> None:
    x = np.array([[0, 255]], dtype=np.uint8)
    attrs = {"mode": "linear", "coordinate_transformation_mode": "align_corners"}
    model = _model("Resize", x, {"sizes": np.array([1, 3], np.int64)}, attrs, 19)
    got = _run(model, x)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, [[0, 128, 255]])


def test_resize_empty_tensor() -> None:
    x = np.zeros((0, 2, 3, 3), np.float32)
    model = _model("Resize", x, {"scales": np.array([1, 1, 2, 2], np.float32)}, {"mode": "linear"}, 19)
    got = _run(model, x)
    assert got.shape == (0, 2, 6, 6) and got.dtype == np.float32


def test_resize_does_not_modify_input() -> None:
    x = _X.copy()
    model = _model("Resize", x, {"scales": np.array([1, 1, 2, 2], np.float32)}, {"mode": "cubic"}, 19)
    _run(model, x)
    np.testing.assert_array_equal(x, _X)


def _asymmetric_linear_1d(v: np.ndarray, out: int, scale: float) -> np.ndarray:
    src = np.arange(out) / scale
    lo = np.floor(src).astype(int)
    hi = np.minimum(lo + 1, v.size - 1)
    lo = np.minimum(lo, v.size - 1)
    f = src - np.floor(src)
    return v[lo] * (1 - f) + v[hi] * f


def test_resize_10_and_upsample_9_match_hand_computation() -> None:
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 2, 4)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    for op, opset in (("Resize", 10), ("Upsample", 9)):
        names = ["X", "scales"]
        nearest = _run(_model(op, x, {"scales": scales}, {"mode": "nearest"}, opset, names), x)
        rows = np.floor(np.arange(4) / 2.0).astype(int)
        cols = np.floor(np.arange(6) / 1.5).astype(int)
        np.testing.assert_array_equal(nearest[0, 0], x[0, 0][rows][:, cols])
        linear = _run(_model(op, x, {"scales": scales}, {"mode": "linear"}, opset, names), x)
        by_cols = np.stack([_asymmetric_linear_1d(r, 6, 1.5) for r in x[0, 0]])
        expected = np.stack([_asymmetric_linear_1d(c, 4, 2.0) for c in by_cols.T]).T
        assert linear.shape == (1, 1, 4, 6)
        np.testing.assert_allclose(linear[0, 0], expected, rtol=1e-6)


def test_upsample_7_scales_attribute() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    node = helper.make_node("Upsample", ["X"], ["Y"], mode="nearest", scales=[1.0, 1.0, 2.0, 3.0])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 1, 2, 2])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None] * 4)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 7)])
    model.ir_version = 8
    got = _run(model, x)
    np.testing.assert_array_equal(got, x.repeat(2, axis=2).repeat(3, axis=3))
