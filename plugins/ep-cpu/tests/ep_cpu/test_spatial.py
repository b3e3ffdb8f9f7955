"""GridSample, AffineGrid, RoiAlign, NonMaxSuppression, ImageDecoder kernels."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import epoxy


def _model(op, feeds, out_ranks, attrs, opset, consts=None, out_elem=None):  # type: ignore[no-untyped-def]
    consts = consts or {}
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    first = next(iter(feeds.values()))
    elem = out_elem or helper.np_dtype_to_tensor_dtype(first.dtype)
    outputs = [helper.make_tensor_value_info(f"Y{i}", elem, [None] * r) for i, r in enumerate(out_ranks)]
    names = list(feeds) + list(consts)
    node = helper.make_node(op, names, [o.name for o in outputs], **attrs)
    graph = helper.make_graph(
        [node], "g", inputs, outputs, initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _run(model, feeds):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)


def _ref(model, feeds):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ReferenceEvaluator(model).run(None, feeds)


_RNG = np.random.default_rng(0)


# ----------------------------------------------------------------------------- GridSample


@pytest.mark.parametrize(
    "mode,padding,align,rank",
    [
        c
        for c in itertools.product(
            ["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1], [2, 3]
        )
        # cubic is 2-D only; the reference pads cubic "border" taps differently from torch/ort
        if not (c[0] == "cubic" and (c[3] == 3 or c[1] == "border"))
    ],
)
def test_grid_sample_matches_reference(mode: str, padding: str, align: int, rank: int) -> None:
    spatial = (4, 5) if rank == 2 else (3, 4, 5)
    out_spatial = (3, 6) if rank == 2 else (2, 3, 4)
    x = _RNG.standard_normal((2, 3, *spatial)).astype(np.float32)
    grid = _RNG.uniform(-1.4, 1.4, (2, *out_spatial, rank)).astype(np.float32)
    feeds = {"X": x, "G": grid}
    model = _model("GridSample", feeds, [rank + 2], {"mode": mode, "padding_mode": padding, "align_corners": align}, 20)
    got = _run(model, feeds)[0]
    assert got.dtype == np.float32 and got.shape == (2, 3, *out_spatial)
    np.testing.assert_allclose(got, _ref(model, feeds)[0], rtol=1e-5, atol=1e-5)


def test_grid_sample_16_bilinear_identity_grid() -> None:
    x = np.arange(12, dtype=np.float64).reshape(1, 1, 3, 4)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 3), np.linspace(-1, 1, 4), indexing="ij")
    grid = np.stack([xs, ys], axis=-1)[None]
    feeds = {"X": x, "G": grid}
    model = _model("GridSample", feeds, [4], {"mode": "bilinear", "align_corners": 1}, 16)
    got = _run(model, feeds)[0]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, x, atol=1e-12)


def test_grid_sample_zeros_padding_outside_is_zero() -> None:
    x = np.ones((1, 1, 2, 2), np.float32)
    grid = np.full((1, 1, 2, 2), 5.0, np.float32)
    feeds = {"X": x, "G": grid}
    model = _model("GridSample", feeds, [4], {}, 20)
    np.testing.assert_array_equal(_run(model, feeds)[0], np.zeros((1, 1, 1, 2), np.float32))


# ----------------------------------------------------------------------------- AffineGrid


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 1, 3, 4, 2], [2, 1, 1, 3]])
def test_affine_grid_matches_reference(align: int, size: list[int]) -> None:
    r = len(size) - 2
    theta = _RNG.standard_normal((2, r, r + 1)).astype(np.float32)
    feeds = {"theta": theta}
    consts = {"size": np.array(size, np.int64)}
    model = _model("AffineGrid", feeds, [r + 2], {"align_corners": align}, 20, consts=consts)
    got = _run(model, feeds)[0]
    assert got.shape == (2, *size[2:], r) and got.dtype == np.float32
    if align and 1 in size[2:]:
        # a single position sits at 0 (as in torch); the onnx reference puts it at -1
        return
    np.testing.assert_allclose(got, _ref(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_affine_grid_single_position_is_centered() -> None:
    theta = np.array([[[1, 0, 0], [0, 1, 0]]], np.float64)
    for align in (0, 1):
        consts = {"size": np.array([1, 1, 1, 1], np.int64)}
        model = _model("AffineGrid", {"theta": theta}, [4], {"align_corners": align}, 20, consts=consts)
        np.testing.assert_array_equal(_run(model, {"theta": theta})[0], np.zeros((1, 1, 1, 2)))


# ----------------------------------------------------------------------------- RoiAlign


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
@pytest.mark.parametrize("ctm", ["half_pixel", "output_half_pixel"])
def test_roi_align_matches_reference(mode: str, sampling_ratio: int, ctm: str) -> None:
    x = _RNG.standard_normal((2, 3, 8, 9)).astype(np.float32)
    rois = np.array([[0, 0, 5, 6], [1.5, 2.2, 7.9, 7.1], [-2, -1, 3, 12], [4, 4, 4.2, 4.1]], np.float32)
    batch = np.array([0, 1, 1, 0], np.int64)
    feeds = {"X": x, "rois": rois, "batch_indices": batch}
    attrs = {
        "mode": mode,
        "output_height": 3,
        "output_width": 2,
        "sampling_ratio": sampling_ratio,
        "spatial_scale": 0.75,
        "coordinate_transformation_mode": ctm,
    }
    model = _model("RoiAlign", feeds, [4], attrs, 16)
    got = _run(model, feeds)[0]
    assert got.shape == (4, 3, 3, 2)
    np.testing.assert_allclose(got, _ref(model, feeds)[0], rtol=1e-5, atol=1e-5)


def test_roi_align_no_rois() -> None:
    feeds = {
        "X": np.ones((1, 2, 4, 4), np.float32),
        "rois": np.zeros((0, 4), np.float32),
        "batch_indices": np.zeros((0,), np.int64),
    }
    got = _run(_model("RoiAlign", feeds, [4], {"output_height": 2, "output_width": 2}, 16), feeds)[0]
    assert got.shape == (0, 2, 2, 2)


# ----------------------------------------------------------------------------- NonMaxSuppression


def _nms(boxes, scores, consts, center=0):  # type: ignore[no-untyped-def]
    feeds = {"boxes": boxes, "scores": scores}
    attrs = {"center_point_box": center}
    model = _model("NonMaxSuppression", feeds, [2], attrs, 11, consts=consts, out_elem=TensorProto.INT64)
    return _run(model, feeds)[0]


_BOXES = np.array(
    [
        [
            [0.0, 0.0, 1.0, 1.0],
            [0.0, 0.1, 1.0, 1.1],
            [0.0, -0.1, 1.0, 0.9],
            [0.0, 10.0, 1.0, 11.0],
            [0.0, 10.1, 1.0, 11.1],
            [0.0, 100.0, 1.0, 101.0],
        ]
    ],
    np.float32,
)
_SCORES = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)


def test_nms_suppress_by_iou() -> None:
    consts = {"max": np.array([3], np.int64), "iou": np.array([0.5], np.float32), "score": np.zeros(1, np.float32)}
    got = _nms(_BOXES, _SCORES, consts)
    np.testing.assert_array_equal(got, [[0, 0, 3], [0, 0, 0], [0, 0, 5]])
    assert got.dtype == np.int64


def test_nms_score_threshold_and_flipped_corners() -> None:
    flipped = _BOXES[:, :, [2, 3, 0, 1]]
    consts = {"max": np.array([10], np.int64), "iou": np.array([0.5], np.float32), "score": np.array([0.4], np.float32)}
    np.testing.assert_array_equal(_nms(flipped, _SCORES, consts), [[0, 0, 3], [0, 0, 0]])


def test_nms_center_point_format_and_no_max_output() -> None:
    centers = np.array([[[0.5, 0.5, 1.0, 1.0], [0.5, 0.6, 1.0, 1.0], [0.5, 10.5, 1.0, 1.0]]], np.float32)
    scores = np.array([[[0.9, 0.8, 0.7]]], np.float32)
    consts = {"max": np.array([5], np.int64), "iou": np.array([0.5], np.float32)}
    np.testing.assert_array_equal(_nms(centers, scores, consts, center=1), [[0, 0, 0], [0, 0, 2]])
    assert _nms(centers, scores, {}).shape == (0, 3)


def test_nms_batches_and_classes_with_ties() -> None:
    boxes = np.tile(_BOXES, (2, 1, 1))
    scores = np.ones((2, 2, 6), np.float32)
    consts = {"max": np.array([2], np.int64), "iou": np.array([0.5], np.float32)}
    got = _nms(boxes, scores, consts)
    expected = [[b, c, i] for b in range(2) for c in range(2) for i in (0, 3)]
    np.testing.assert_array_equal(got, expected)


# ----------------------------------------------------------------------------- ImageDecoder


def test_image_decoder_without_pillow_is_declined() -> None:
    try:
        import PIL  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Pillow is installed")
    feeds = {"data": np.zeros(10, np.uint8)}
    model = _model("ImageDecoder", feeds, [3], {}, 20)
    with pytest.raises(Exception, match="Pillow"):
        _run(model, feeds)


@pytest.mark.parametrize("fmt", ["RGB", "BGR", "Grayscale"])
def test_image_decoder_png(fmt: str) -> None:
    pil_image = pytest.importorskip("PIL.Image")
    import io

    rgb = _RNG.integers(0, 256, (5, 7, 3), dtype=np.uint8)
    buf = io.BytesIO()
    pil_image.fromarray(rgb, "RGB").save(buf, format="PNG")
    feeds = {"data": np.frombuffer(buf.getvalue(), np.uint8).copy()}
    got = _run(_model("ImageDecoder", feeds, [3], {"pixel_format": fmt}, 20), feeds)[0]
    assert got.dtype == np.uint8
    if fmt == "RGB":
        np.testing.assert_array_equal(got, rgb)
    elif fmt == "BGR":
        np.testing.assert_array_equal(got, rgb[:, :, ::-1])
    else:
        assert got.shape == (5, 7, 1)
