"""Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7, 9).

Every mode is separable, so the N-D resize is a sequence of 1-D resamplings, one per
resized axis. Each 1-D resampling is a small gather: for every output position a few input
indices (``taps``) and their weights, applied with ``np.take`` along the axis.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attr_checks import invalid
from ._flags import flag
from ._util import constant_input, output_guard
from ._util import text_or as _str

_CTMS = {
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}
_F64 = np.dtype(np.float64)


def _source_coords(
    ctm: str, out_len: int, in_len: int, scale: float, start: float, end: float
) -> np.ndarray:
    """Coordinate in the input axis (float64) of every output position."""
    x = np.arange(out_len, dtype=np.float64)
    # the "resized length" of the formulas: in_len * scale, fractional when scales are given
    width = in_len * scale
    if ctm == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        adjustment = out_len / width
        offset = (in_len / 2.0) * (1.0 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        if width > 1:
            return (x + 0.5) / scale - 0.5
        return np.zeros_like(x)
    if ctm == "align_corners":
        if width > 1:
            return x * ((in_len - 1) / (width - 1))
        return np.zeros_like(x)
    if ctm == "asymmetric":
        return x / scale
    if ctm == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if ctm == "tf_crop_and_resize":
        if width > 1:
            return start * (in_len - 1) + x * ((end - start) * (in_len - 1) / (width - 1))
        return np.full_like(x, 0.5 * (start + end) * (in_len - 1))
    raise ValueError(f"unknown coordinate_transformation_mode {ctm!r}")


def _nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        idx = np.ceil(x - 0.5)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif nearest_mode == "floor":
        idx = np.floor(x)
    else:
        idx = np.ceil(x)
    return idx


def _cubic_kernel(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    t2 = t * t
    t3 = t2 * t
    near = (a + 2.0) * t3 - (a + 3.0) * t2 + 1.0
    far = a * t3 - 5.0 * a * t2 + 8.0 * a * t - 4.0 * a
    return np.where(t <= 1.0, near, np.where(t < 2.0, far, 0.0))


def _taps(
    x: np.ndarray,
    in_len: int,
    scale: float,
    mode: str,
    nearest_mode: str,
    cubic_a: float,
    antialias: bool,
    exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(indices (O, K) int64, weights (O, K) float64 or None for nearest)."""
    if mode == "nearest":
        idx = _nearest_index(x, nearest_mode)
        idx = np.clip(idx, 0, in_len - 1).astype(np.int64)
        return idx[:, None], None
    s = min(scale, 1.0) if antialias else 1.0
    radius = (1.0 if mode == "linear" else 2.0) / s
    first = int(np.floor(-radius)) + 1
    offsets = np.arange(first, 2 - first, dtype=np.float64)
    base = np.floor(x)
    pos = base[:, None] + offsets[None, :]
    dist = (pos - x[:, None]) * s
    if mode == "linear":
        w = np.maximum(0.0, 1.0 - np.abs(dist))
    else:
        w = _cubic_kernel(dist, cubic_a)
    outside = (pos < 0) | (pos > in_len - 1)
    if antialias and s < 1.0:
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    if exclude_outside:
        w = np.where(outside, 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(pos, 0, in_len - 1).astype(np.int64)
    # drop taps that never contribute (keeps the gather small)
    keep = np.any(w != 0, axis=0)
    if not keep.all() and keep.any():
        idx, w = idx[:, keep], w[:, keep]
    return idx, w


def _resample_axis(data: np.ndarray, axis: int, idx: np.ndarray, w: np.ndarray | None) -> np.ndarray:
    if w is None:
        return np.take(data, idx[:, 0], axis=axis)
    shape = [1] * data.ndim
    shape[axis] = idx.shape[0]
    out = None
    for k in range(idx.shape[1]):  # a handful of taps, not elements
        term = np.take(data, idx[:, k], axis=axis) * w[:, k].reshape(shape)
        out = term if out is None else out + term
    return out


class _Resizer:
    def __init__(
        self,
        mode: str,
        ctm: str,
        nearest_mode: str,
        cubic_a: float,
        exclude_outside: bool,
        extrapolation_value: float,
        antialias: bool,
        axes: tuple[int, ...] | None,
        keep_aspect: str,
        legacy: bool = False,
        *,
        node: NodeSpec,
        guard: Callable[[Sequence[int], np.dtype], None],
    ) -> None:
        if mode not in ("nearest", "linear", "cubic"):
            raise Unsupported(f"Resize mode {mode!r} is not supported")
        if ctm not in _CTMS:
            raise Unsupported(f"Resize coordinate_transformation_mode {ctm!r} is not supported")
        if nearest_mode not in _NEAREST_MODES:
            raise Unsupported(f"Resize nearest_mode {nearest_mode!r} is not supported")
        if keep_aspect not in ("stretch", "not_larger", "not_smaller"):
            raise Unsupported(f"Resize keep_aspect_ratio_policy {keep_aspect!r} is not supported")
        self.mode = mode
        self.ctm = ctm
        self.nearest_mode = nearest_mode
        self.cubic_a = cubic_a
        self.exclude_outside = exclude_outside
        self.extrapolation_value = extrapolation_value
        self.antialias = antialias
        self.axes = axes
        self.keep_aspect = keep_aspect
        self.legacy = legacy
        self.node = node
        self.guard = guard  # output size from scales/sizes values: checked before allocating

    def check_values(self, scales: np.ndarray | None, sizes: np.ndarray | None) -> None:
        """Scales must be finite and positive, sizes non-negative: anything else is refused
        naming the input (called at session creation for constant inputs, else per run)."""
        if scales is not None and scales.size > 0:
            sc = np.asarray(scales, dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(sc) & (sc > 0)):
                raise invalid(self.node, f"input 'scales' = {sc.tolist()} must hold finite values > 0")
        if sizes is not None and sizes.size > 0:
            sz = np.asarray(sizes).reshape(-1)
            if np.any(sz < 0):
                raise invalid(self.node, f"input 'sizes' = {sz.tolist()} must hold values >= 0")

    def check_constants(self, scales_index: int, sizes_index: int | None) -> _Resizer:
        """:meth:`check_values` on the scales / sizes inputs that are constants."""
        sizes = constant_input(self.node, sizes_index) if sizes_index is not None else None
        self.check_values(constant_input(self.node, scales_index), sizes)
        return self

    def __call__(
        self,
        x: np.ndarray,
        roi: np.ndarray | None = None,
        scales: np.ndarray | None = None,
        sizes: np.ndarray | None = None,
    ) -> np.ndarray:
        rank = x.ndim
        if self.axes is None:
            axes = list(range(rank))
        else:
            axes = [a + rank if a < 0 else a for a in self.axes]
        n = len(axes)
        in_shape = [int(d) for d in x.shape]
        out_shape = list(in_shape)
        axis_scale = [1.0] * rank
        self.check_values(scales, sizes)
        if scales is not None and scales.size > 0:
            if sizes is not None and sizes.size > 0:
                raise ValueError("Resize: only one of scales and sizes may be given")
            sc = np.asarray(scales, dtype=np.float64).reshape(-1)
            if sc.size != n:
                raise ValueError(f"Resize: {sc.size} scales for {n} axes")
            for a, s in zip(axes, sc):
                axis_scale[a] = float(s)
                out_shape[a] = int(np.floor(in_shape[a] * float(s)))
        elif sizes is not None and sizes.size > 0:
            sz = np.asarray(sizes, dtype=np.int64).reshape(-1)
            if sz.size != n:
                raise ValueError(f"Resize: {sz.size} sizes for {n} axes")
            if self.keep_aspect != "stretch":
                ratios = [sz[i] / in_shape[a] for i, a in enumerate(axes)]
                common = min(ratios) if self.keep_aspect == "not_larger" else max(ratios)
                for a in axes:
                    axis_scale[a] = float(common)
                    out_shape[a] = int(np.floor(common * in_shape[a] + 0.5))
            else:
                for i, a in enumerate(axes):
                    out_shape[a] = int(sz[i])
                    axis_scale[a] = out_shape[a] / in_shape[a] if in_shape[a] else 1.0
        else:
            raise ValueError("Resize: one of scales and sizes is required")

        starts = [0.0] * rank
        ends = [1.0] * rank
        if self.ctm == "tf_crop_and_resize" and roi is not None and roi.size > 0:
            r = np.asarray(roi, dtype=np.float64).reshape(-1)
            if r.size == 2 * n:
                for i, a in enumerate(axes):
                    starts[a], ends[a] = float(r[i]), float(r[n + i])
            elif r.size == 2 * rank:
                for a in range(rank):
                    starts[a], ends[a] = float(r[a]), float(r[rank + a])
            else:
                raise ValueError(f"Resize: roi of size {r.size} for {n} axes")

        if x.size == 0 or any(d == 0 for d in out_shape):
            return np.zeros(out_shape, dtype=x.dtype)
        self.guard(out_shape, _F64 if self.mode != "nearest" else x.dtype)  # interpolation works in float64

        interp = self.mode != "nearest"
        work = x
        if interp:
            work = x.astype(np.float64) if x.dtype != np.float64 else x
        mask = None
        todo = []
        for a in range(rank):
            identity = (
                out_shape[a] == in_shape[a]
                and axis_scale[a] == 1.0
                and self.ctm != "tf_crop_and_resize"
            )
            if not identity:
                todo.append(a)
        # shrink first: later axes then have less data to process
        todo.sort(key=lambda a: out_shape[a] / in_shape[a])
        for a in todo:
            coords = _source_coords(
                self.ctm, out_shape[a], in_shape[a], axis_scale[a], starts[a], ends[a]
            )
            idx, w = _taps(
                coords,
                in_shape[a],
                axis_scale[a],
                self.mode,
                # Upsample / Resize-10 ("simple" rounding): down when enlarging, up when shrinking
                ("ceil" if axis_scale[a] < 1.0 else "floor") if self.legacy else self.nearest_mode,
                self.cubic_a,
                self.antialias,
                self.exclude_outside,
            )
            work = _resample_axis(work, a, idx, w)
            if self.ctm == "tf_crop_and_resize":
                out_of_range = (coords < 0) | (coords > in_shape[a] - 1)
                if out_of_range.any():
                    shape = [1] * rank
                    shape[a] = out_shape[a]
                    m = out_of_range.reshape(shape)
                    mask = m if mask is None else (mask | m)
        if mask is not None:
            work = np.where(mask, np.asarray(self.extrapolation_value).astype(work.dtype), work)
        return _saturate(work, x.dtype) if interp else work


def _saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Interpolated values (float64) in the input's dtype, clamped to its range as the ONNX
    reference casts them: integers round half to even; floats clamp to the largest finite
    value, so an overflowing interpolation (and an inf input) ends at +-max, NaN stays NaN."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    if dtype == np.bool_:
        return values != 0
    top = float(ml_dtypes.finfo(dtype).max)
    return np.clip(values, -top, top).astype(dtype, copy=False)


def _common(node: NodeSpec, *, v18: bool) -> _Resizer:
    axes = node.attr("axes") if v18 else None
    return _Resizer(
        mode=_str(node.attr("mode"), "nearest"),
        ctm=_str(node.attr("coordinate_transformation_mode"), "half_pixel"),
        nearest_mode=_str(node.attr("nearest_mode"), "round_prefer_floor"),
        cubic_a=float(node.attr("cubic_coeff_a", -0.75)),
        exclude_outside=flag(node, "exclude_outside", 0),
        extrapolation_value=float(node.attr("extrapolation_value", 0.0)),
        antialias=flag(node, "antialias", 0) if v18 else False,
        axes=tuple(int(a) for a in axes) if axes is not None else None,
        keep_aspect=_str(node.attr("keep_aspect_ratio_policy"), "stretch") if v18 else "stretch",
        node=node,
        guard=output_guard(node),
    )


def _legacy(node: NodeSpec) -> _Resizer:
    """Upsample-7/9 and Resize-10: asymmetric coordinates; nearest rounds down when
    enlarging and up when shrinking (as onnxruntime does)."""
    mode = _str(node.attr("mode"), "nearest")
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise Unsupported(f"mode {mode!r} is not supported (nearest or linear)")
    return _Resizer(mode, "asymmetric", "floor", -0.75, False, 0.0, False, None, "stretch", legacy=True,
                    node=node, guard=output_guard(node))


@KERNELS.register("Resize", 10)
def resize_10(node: NodeSpec):
    resizer = _legacy(node).check_constants(1, None)

    def run(x: np.ndarray, scales: np.ndarray) -> np.ndarray:
        return resizer(x, None, scales, None)

    return run


@KERNELS.register("Resize", (11, 13))
def resize_11(node: NodeSpec):
    resizer = _common(node, v18=False).check_constants(2, 3)

    def run(x, roi=None, scales=None, sizes=None):
        return resizer(x, roi, scales, sizes)

    return run


@KERNELS.register("Resize", (18, 19))
def resize_18(node: NodeSpec):
    resizer = _common(node, v18=True).check_constants(2, 3)

    def run(x, roi=None, scales=None, sizes=None):
        return resizer(x, roi, scales, sizes)

    return run


@KERNELS.register("Upsample", 7)
def upsample_7(node: NodeSpec):
    resizer = _legacy(node)
    scales = node.attr("scales")
    if scales is None:
        raise Unsupported("Upsample-7 needs the scales attribute")
    scales_arr = np.asarray(scales, dtype=np.float32)
    resizer.check_values(scales_arr, None)

    def run(x: np.ndarray) -> np.ndarray:
        return resizer(x, None, scales_arr, None)

    return run


@KERNELS.register("Upsample", 9)
def upsample_9(node: NodeSpec):
    resizer = _legacy(node).check_constants(1, None)

    def run(x: np.ndarray, scales: np.ndarray) -> np.ndarray:
        return resizer(x, None, scales, None)

    return run
