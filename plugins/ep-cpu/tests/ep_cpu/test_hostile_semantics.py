"""Hostile values that must not change what epoxy computes (issue #16): NaN and Inf
inputs, and 0/1 attributes holding another value. The ONNX reference evaluator is the
oracle (the spec's reading); where epoxy deliberately departs from it, a test says so."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, outcome, run_epoxy, run_onnxruntime, run_reference, same
from onnx import TensorProto

INF, NAN = np.inf, np.nan


def f32(*values: float) -> np.ndarray:
    return np.array(values, np.float32)


def _pool_input() -> np.ndarray:
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    x[0, 0, 0, 0] = NAN
    x[0, 0, 2, 3] = NAN
    x[0, 0, 3, 3] = INF
    return x


_ROWS = np.array([[1, INF, 2, 3], [1, 2, NAN, 3], [-INF, 1, 2, 3], [INF, INF, 1, 1],
                  [-INF, -INF, -INF, -INF], [-INF, 1, INF, 2], [1, 2, 3, 4]], np.float32)
_REDUCE = np.array([[1, NAN, 3], [NAN, 2, 1], [1, 2, 3], [-INF, NAN, INF]], np.float32)
_BIG = np.array([[[[3e38, 3e38], [-3e38, 3e38]]]], np.float32)

# (id, op, inputs, attrs, opset, n_out): epoxy must give what the reference gives
NAN_INF_CASES = [
    ("softmax-13", "Softmax", [_ROWS], {"axis": 1}, 13, 1),
    ("softmax-11", "Softmax", [_ROWS], {"axis": 1}, 11, 1),
    ("logsoftmax-13", "LogSoftmax", [_ROWS], {"axis": 1}, 13, 1),
    ("logsoftmax-11", "LogSoftmax", [_ROWS], {"axis": 1}, 11, 1),
    ("hardmax-13", "Hardmax", [_ROWS], {"axis": 1}, 13, 1),
    ("maxpool", "MaxPool", [_pool_input()], {"kernel_shape": [2, 2]}, 12, 1),
    ("maxpool-padded", "MaxPool", [_pool_input()], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 12, 1),
    ("maxpool-f64", "MaxPool", [_pool_input().astype(np.float64)], {"kernel_shape": [2, 2]}, 12, 1),
    ("globalmaxpool", "GlobalMaxPool", [_pool_input()], {}, 22, 1),
    ("globalaveragepool", "GlobalAveragePool", [_pool_input()], {}, 22, 1),
    ("reducemax", "ReduceMax", [_REDUCE], {"keepdims": 1}, 18, 1),
    ("reducemin", "ReduceMin", [_REDUCE], {"keepdims": 1}, 18, 1),
    ("reducesum", "ReduceSum", [_REDUCE], {"keepdims": 0}, 18, 1),
    ("reducelogsumexp", "ReduceLogSumExp", [np.array([[1, INF, 3], [-INF, -INF, 2]], np.float32)], {}, 18, 1),
    ("argmax", "ArgMax", [_REDUCE], {"axis": 1}, 13, 1),
    ("argmin-last", "ArgMin", [_REDUCE], {"axis": 1, "select_last_index": 1}, 13, 1),
    ("resize-linear-nan-inf", "Resize", [np.array([[[[NAN, 1], [2, INF]]]], np.float32), None,
                                          f32(1, 1, 2, 2)], {"mode": "linear"}, 19, 1),
    ("resize-cubic-overflow", "Resize", [_BIG, None, f32(1, 1, 2, 2)], {"mode": "cubic"}, 19, 1),
    ("resize-linear-overflow-f16", "Resize", [np.full((1, 1, 2, 2), 65000, np.float16), None, f32(1, 1, 1.5, 1.5)],
     {"mode": "cubic"}, 19, 1),
    ("resize-linear-inf-f64", "Resize", [np.array([[[[1, INF], [-INF, 2]]]]), None, f32(1, 1, 2, 2)],
     {"mode": "linear"}, 19, 1),
] + [
    (f"dynamicquantizelinear-{i}", "DynamicQuantizeLinear", [x], {}, 11, 3)
    for i, x in enumerate([f32(1, NAN, 3), f32(1, INF, 3), f32(-INF, 1, 3), f32(3e38, -3e38, 1), f32(NAN, NAN),
                           f32(0, 0), f32(INF, -INF), f32(1e-45, 0), f32(-2, -1), f32(0.5, 7.25, -1.5)])
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "opset", "n_out"),
                         [pytest.param(*c[1:], id=c[0]) for c in NAN_INF_CASES])
def test_nan_and_inf_follow_the_reference(op, inputs, attrs, opset, n_out):
    case = one_node(op, inputs, attrs, opset, n_out)
    got, want = run_epoxy(case), run_reference(case)
    assert same(got, want), f"{op}: epoxy {got} != reference {want}"


def test_softmax_row_holding_inf_is_nan_as_onnxruntime_gives_it():
    """The issue's case: epoxy gave 0.0 where the reference and onnxruntime give NaN."""
    case = one_node("Softmax", [f32(1, INF, 2).reshape(1, 3)], {"axis": -1}, 13)
    assert np.isnan(run_epoxy(case)[0]).all()
    assert same(run_epoxy(case), run_onnxruntime(case))


def test_maxpool_skips_nan_and_an_all_nan_window_is_nan():
    """fmax semantics, as the reference reads unit-stride windows (it drops NaN; a window
    of NaN only is an error there, NaN here). The indices output points at the maximum."""
    x = _pool_input()
    y, idx = run_epoxy(one_node("MaxPool", [x], {"kernel_shape": [2, 2]}, 12, n_out=2))
    np.testing.assert_array_equal(y[0, 0], [[5, 6, 7], [9, 10, 10], [13, 14, INF]])
    np.testing.assert_array_equal(idx[0, 0], [[5, 6, 7], [9, 10, 10], [13, 14, 15]])
    only_nan = np.full((1, 1, 2, 2), NAN, np.float32)
    for attrs in ({"kernel_shape": [2, 2]}, {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}):
        assert np.isnan(run_epoxy(one_node("MaxPool", [only_nan], attrs, 12))[0]).all()


def test_maxpool_strided_windows_skip_nan_too():
    """Deliberate: the reference's strided MaxPool keeps a NaN that comes first in a window
    (a scan from the first element) and drops it elsewhere; epoxy skips NaN wherever it is,
    as its unit-stride path and onnxruntime do."""
    case = one_node("MaxPool", [_pool_input()], {"kernel_shape": [2, 2], "strides": [2, 2]}, 12)
    np.testing.assert_array_equal(run_epoxy(case)[0][0, 0], [[5, 7], [13, INF]])
    assert np.isnan(run_reference(case)[0][0, 0, 0, 0])  # the departure, as the reference stands
    assert same(run_epoxy(case), run_onnxruntime(case))


@pytest.mark.parametrize("op", ["AveragePool", "LpPool"])
def test_average_and_lp_pools_propagate_nan_as_onnxruntime_does(op):
    """Deliberate: the reference drops NaN inputs from these windows too (its padding
    marker is NaN), so a window's average silently ignores a NaN input; epoxy keeps IEEE
    arithmetic, as onnxruntime and GlobalAveragePool (in both) do."""
    case = one_node(op, [_pool_input()], {"kernel_shape": [2, 2]}, 18)
    got = run_epoxy(case)[0][0, 0]
    assert np.isnan(got[0, 0]) and np.isnan(got[1, 2])  # windows holding a NaN input
    assert np.isfinite(got[0, 1]) and np.isfinite(got[1, 0])
    assert same(run_epoxy(case), run_onnxruntime(case))


def test_resize_saturates_to_the_finite_range_like_the_reference():
    """An interpolation beyond float32's range ends at +-max, not inf (reference: saturate
    cast); nearest copies values, so an inf input stays inf there."""
    x = np.array([[[[3e38, 3e38], [-3e38, 3e38]]]], np.float32)
    y = run_epoxy(one_node("Resize", [x, None, f32(1, 1, 2, 2)], {"mode": "cubic"}, 19))[0]
    top = np.finfo(np.float32).max
    assert np.isfinite(y).all() and y.max() == top and y.min() == -top
    x_inf = np.array([[[[INF, 1.0]]]], np.float32)
    near = run_epoxy(one_node("Resize", [x_inf, None, f32(1, 1, 1, 2)], {"mode": "nearest"}, 19))[0]
    assert near[0, 0, 0, 0] == INF


# -------------------------------------------------------------------------------------------
# 0/1 attributes holding another value: epoxy reads them as the reference does


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


_RNG = np.random.default_rng(7)
_X4 = _RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
_M23 = _RNG.standard_normal((2, 3)).astype(np.float32)
_M32 = _RNG.standard_normal((3, 2)).astype(np.float32)
_TIES = np.array([[3, 1, 3, 2], [0, 5, 5, 1]], np.float32)
_SEQ = _RNG.standard_normal((1, 2, 3, 4)).astype(np.float32)
_COS = _RNG.standard_normal((1, 3, 2)).astype(np.float32)
_BOXES = np.array([[[0, 0, 2, 2], [1, 1, 2, 2]]], np.float32)  # IoU 0.25 as corners, 1/7 as centres

# (op, opset, attribute, inputs, other attributes, n_out, how the reference reads 7,
#  values equal to the reference's)
READINGS = [
    ("ReduceSum", 13, "keepdims", [_TIES, _i64(1)], {}, 1, 1, True),
    ("ReduceMean", 18, "keepdims", [_TIES, _i64(1)], {}, 1, 1, True),
    ("ReduceMax", 18, "keepdims", [_TIES, _i64(1)], {}, 1, 1, True),
    ("ReduceMax", 13, "keepdims", [_TIES], {"axes": [1]}, 1, 0, True),
    ("ReduceMin", 11, "keepdims", [_TIES], {"axes": [1]}, 1, 0, True),
    ("ReduceSum", 18, "noop_with_empty_axes", [_TIES, _i64()], {}, 1, 1, True),
    ("ArgMax", 13, "keepdims", [_TIES], {"axis": 1}, 1, 1, True),
    ("ArgMax", 13, "select_last_index", [_TIES], {"axis": 1}, 1, 1, True),
    ("ArgMin", 13, "select_last_index", [-_TIES], {"axis": 1}, 1, 1, True),
    ("MaxPool", 12, "ceil_mode", [_X4], {"kernel_shape": [2, 2], "strides": [2, 2]}, 1, 1, True),
    ("AveragePool", 19, "ceil_mode", [_X4], {"kernel_shape": [2, 2], "strides": [2, 2]}, 1, 1, True),
    ("AveragePool", 19, "count_include_pad", [_X4], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, 1, 1, True),
    # LpPool's partial windows differ from the reference at ceil_mode=1 as well (epoxy ==
    # onnxruntime there): the reading is what is compared
    ("LpPool", 18, "ceil_mode", [_X4], {"kernel_shape": [2, 2], "strides": [2, 2]}, 1, 1, False),
    ("Gemm", 13, "transA", [_M32, _M32], {}, 1, 1, True),
    ("Gemm", 13, "transB", [_M23, _M23], {}, 1, 1, True),
    ("Reshape", 14, "allowzero", [_M23, _i64(0, 3)], {}, 1, 0, True),
    ("CumSum", 14, "exclusive", [_TIES, np.array(1, np.int64)], {}, 1, 1, True),
    ("CumSum", 14, "reverse", [_TIES, np.array(1, np.int64)], {}, 1, 1, True),
    ("TopK", 11, "largest", [_TIES, _i64(2)], {}, 2, 1, True),
    ("Trilu", 14, "upper", [_M23], {}, 1, 1, True),
    ("IsInf", 20, "detect_negative", [f32(INF, -INF, 1)], {}, 1, 1, True),
    ("IsInf", 20, "detect_positive", [f32(INF, -INF, 1)], {}, 1, 1, True),
    ("Mod", 13, "fmod", [np.array([5, -3], np.int32), np.array([-3, 2], np.int32)], {}, 1, 0, True),
    ("Resize", 19, "antialias", [_X4, None, f32(1, 1, 0.6, 0.6)], {"mode": "linear"}, 1, 1, True),
    # cubic Resize differs from the reference at exclude_outside=0 and 1 alike: the reading is compared
    ("Resize", 19, "exclude_outside", [_X4, None, f32(1, 1, 1.5, 1.5)], {"mode": "cubic"}, 1, 1, False),
    ("GridSample", 20, "align_corners", [_X4, _RNG.uniform(-1.2, 1.2, (1, 3, 3, 2)).astype(np.float32)], {}, 1, 1,
     True),
    ("AffineGrid", 20, "align_corners", [np.array([[[1, 0.2, 0], [0.1, 1, 0]]], np.float32), _i64(1, 1, 3, 3)], {},
     1, 0, True),
    ("DFT", 20, "onesided", [_RNG.standard_normal((1, 4, 1)).astype(np.float32), None, np.array(1, np.int64)], {},
     1, 1, True),
    ("DFT", 20, "inverse", [_RNG.standard_normal((1, 4, 2)).astype(np.float32), None, np.array(1, np.int64)], {},
     1, 1, True),
    ("STFT", 17, "onesided", [_RNG.standard_normal((1, 16, 1)).astype(np.float32), np.array(4, np.int64), None,
                              np.array(8, np.int64)], {}, 1, 1, True),
    ("HannWindow", 17, "periodic", [np.array(8, np.int64)], {}, 1, 0, True),
    ("HammingWindow", 17, "periodic", [np.array(8, np.int64)], {}, 1, 0, True),
    ("BlackmanWindow", 17, "periodic", [np.array(8, np.int64)], {}, 1, 1, True),
    ("Cast", 19, "saturate", [f32(1e6, -1e6)], {"to": TensorProto.FLOAT8E4M3FN}, 1, 1, True),
    ("QuantizeLinear", 21, "saturate", [f32(1e6, -1e6), np.array(1, np.float32)],
     {"output_dtype": TensorProto.FLOAT8E4M3FN}, 1, 1, True),
    ("Attention", 23, "is_causal", [_SEQ, _SEQ, _SEQ], {}, 1, 1, True),
    ("RotaryEmbedding", 23, "interleaved", [_SEQ, _COS, _COS], {}, 1, 1, True),
    ("NonMaxSuppression", 11, "center_point_box", [_BOXES, np.array([[[0.9, 0.8]]], np.float32), _i64(2),
                                                   f32(0.2)], {}, 1, 1, True),
    ("BatchNormalization", 15, "training_mode", [_X4, np.ones(2, np.float32), np.zeros(2, np.float32),
                                                 np.zeros(2, np.float32), np.ones(2, np.float32)], {}, 1, 1, True),
]


def _reading_case(row, value: int):
    op, opset, attr, inputs, attrs, n_out, _, _ = row
    return one_node(op, [In(x) if x is not None else None for x in inputs], {**attrs, attr: value}, opset, n_out)


@pytest.mark.parametrize("value", [7, -1])
@pytest.mark.parametrize("row", READINGS, ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in READINGS])
def test_out_of_range_flags_read_as_the_reference_reads_them(row, value):
    reading, values_match = row[6], row[7]
    ref = outcome(run_reference, _reading_case(row, value))
    assert same(ref, outcome(run_reference, _reading_case(row, reading))), "the table's reading is not the reference's"
    got = outcome(run_epoxy, _reading_case(row, value))
    assert same(got, outcome(run_epoxy, _reading_case(row, reading)))
    other = outcome(run_epoxy, _reading_case(row, 1 - reading))
    assert not same(got, other), "this case cannot tell the readings apart"
    if values_match:
        assert same(got, ref)


@pytest.mark.parametrize(("op", "opset", "attr", "inputs", "attrs"), [
    ("ReduceSum", 13, "keepdims", [_TIES, _i64(1)], {}),
    ("MaxPool", 12, "ceil_mode", [_X4], {"kernel_shape": [2, 2], "strides": [2, 2]}),
])
def test_onnxruntime_reads_some_of_them_as_false(op, opset, attr, inputs, attrs):
    """Why docs/ORT_COMPAT.md has the row: onnxruntime reads ``keepdims=7`` and
    ``ceil_mode=1000`` as 0, epoxy (and the reference) as 1."""
    pytest.importorskip("onnxruntime")
    for value in (7, 1000):
        odd = one_node(op, inputs, {**attrs, attr: value}, opset)
        assert same(run_onnxruntime(odd), run_onnxruntime(one_node(op, inputs, {**attrs, attr: 0}, opset)))
        assert same(run_epoxy(odd), run_epoxy(one_node(op, inputs, {**attrs, attr: 1}, opset)))
