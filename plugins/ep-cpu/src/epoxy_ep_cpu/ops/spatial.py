"""Spatial / image ops: GridSample (16, 20, 22), AffineGrid (20), RoiAlign (10, 16, 22),
NonMaxSuppression (10, 11), ImageDecoder (20, needs Pillow)."""

from __future__ import annotations

import itertools

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attr_checks import check_at_least, invalid
from ._flags import flag
from ._util import constant_input, output_guard
from ._util import text_or as _str

# --------------------------------------------------------------------------- GridSample


def _unnormalize(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return (g + 1.0) * 0.5 * (size - 1)
    return ((g + 1.0) * size - 1.0) * 0.5


def _reflect(c: np.ndarray, twice_low: float, twice_high: float) -> np.ndarray:
    if twice_low == twice_high:
        return np.zeros_like(c)
    low = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    d = np.abs(c - low)
    extra = np.fmod(d, span)
    flips = np.floor(d / span)
    return np.where(np.fmod(flips, 2.0) == 0, extra + low, span - extra + low)


def _pad_coord(c: np.ndarray, size: int, padding: str, align_corners: bool) -> np.ndarray:
    """Apply border / reflection padding to a source coordinate (zeros: unchanged)."""
    if padding == "border":
        return np.clip(c, 0.0, size - 1.0)
    if padding == "reflection":
        if align_corners:
            c = _reflect(c, 0.0, 2.0 * (size - 1))
        else:
            c = _reflect(c, -1.0, 2.0 * size - 1.0)
        return np.clip(c, 0.0, size - 1.0)
    return c


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    """Weights of taps at offsets -1, 0, 1, 2 for fractional position t in [0, 1)."""

    def near(d: np.ndarray) -> np.ndarray:
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0

    def far(d: np.ndarray) -> np.ndarray:
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a

    return [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]


class _GridSampler:
    def __init__(self, mode: str, padding: str, align_corners: bool) -> None:
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
        if mode not in ("linear", "nearest", "cubic"):
            raise Unsupported(f"GridSample mode {mode!r} is not supported")
        if padding not in ("zeros", "border", "reflection"):
            raise Unsupported(f"GridSample padding_mode {padding!r} is not supported")
        self.mode = mode
        self.padding = padding
        self.align_corners = align_corners

    def __call__(self, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
        n, c = x.shape[:2]
        spatial = tuple(int(d) for d in x.shape[2:])
        r = len(spatial)
        if grid.shape[-1] != r or grid.ndim != r + 2:
            raise ValueError(f"GridSample: grid shape {grid.shape} does not match input {x.shape}")
        if self.mode == "cubic" and r != 2:
            raise ValueError("GridSample: cubic mode supports 4-D input only")
        out_spatial = grid.shape[1:-1]
        out_dtype = x.dtype
        p = int(np.prod(out_spatial, dtype=np.int64))
        if x.size == 0 or p == 0 or n == 0:
            return np.zeros((n, c, *out_spatial), dtype=out_dtype)
        g = grid.astype(np.float64).reshape(n, p, r)
        xf = x.reshape(n, c, -1).astype(np.float64)
        # per spatial dim d (0 = first spatial dim), grid component r-1-d
        coords = []
        for d in range(r):
            coords.append(_unnormalize(g[:, :, r - 1 - d], spatial[d], self.align_corners))
        strides = [int(np.prod(spatial[d + 1 :], dtype=np.int64)) for d in range(r)]

        # per-dim lists of (index, weight) taps
        taps: list[list[tuple[np.ndarray, np.ndarray]]] = []
        for d in range(r):
            size = spatial[d]
            cd = coords[d]
            if self.mode == "cubic":
                base = np.floor(cd)
                ws = _cubic_weights(cd - base)
                dim_taps = []
                for k, w in zip((-1, 0, 1, 2), ws):
                    pos = base + k
                    if self.padding != "zeros":
                        pos = _pad_coord(pos, size, self.padding, self.align_corners)
                    dim_taps.append((pos, w))
            else:
                cd = _pad_coord(cd, size, self.padding, self.align_corners)
                if self.mode == "nearest":
                    dim_taps = [(np.rint(cd), np.ones_like(cd))]
                else:
                    base = np.floor(cd)
                    frac = cd - base
                    dim_taps = [(base, 1.0 - frac), (base + 1.0, frac)]
            taps.append(dim_taps)

        out = np.zeros((n, c, p), dtype=np.float64)
        for combo in itertools.product(*taps):  # 1, 2**r or 16 corner combinations
            flat = np.zeros((n, p), dtype=np.int64)
            weight = np.ones((n, p), dtype=np.float64)
            valid = np.ones((n, p), dtype=bool)
            for d, (pos, w) in enumerate(combo):
                size = spatial[d]
                inside = (pos >= 0) & (pos <= size - 1)
                valid &= inside
                idx = np.clip(pos, 0, size - 1).astype(np.int64)
                flat += idx * strides[d]
                weight = weight * w
            weight = np.where(valid, weight, 0.0)
            vals = np.take_along_axis(xf, flat[:, None, :], axis=2)
            out += vals * weight[:, None, :]
        return out.reshape(n, c, *out_spatial).astype(out_dtype)


@KERNELS.register("GridSample", 16)
def grid_sample_16(node: NodeSpec):
    return _GridSampler(
        _str(node.attr("mode"), "bilinear"),
        _str(node.attr("padding_mode"), "zeros"),
        flag(node, "align_corners", 0),
    )


@KERNELS.register("GridSample", (20, 22))
def grid_sample_20(node: NodeSpec):
    return _GridSampler(
        _str(node.attr("mode"), "linear"),
        _str(node.attr("padding_mode"), "zeros"),
        flag(node, "align_corners", 0),
    )


# --------------------------------------------------------------------------- AffineGrid


def _base_positions(n: int, align_corners: bool) -> np.ndarray:
    if n <= 1:
        return np.zeros(max(n, 0), dtype=np.float64)
    if align_corners:
        return np.linspace(-1.0, 1.0, n, dtype=np.float64)
    return (2.0 * np.arange(n, dtype=np.float64) + 1.0) / n - 1.0


@KERNELS.register("AffineGrid", 20)
def affine_grid(node: NodeSpec):
    align_corners = flag(node, "align_corners", 0)
    guard = output_guard(node)

    def check_size(dims: list[int]) -> None:
        """The grid is sized from the ``size`` input: refused when negative or too large
        (in float64, as it is computed), at session creation when ``size`` is a constant."""
        if any(d < 0 for d in dims):
            raise invalid(node, f"input 'size' = {dims} must hold values >= 0")
        if len(dims) in (4, 5):
            guard((dims[0], *dims[2:], len(dims) - 2), np.dtype(np.float64))

    size_const = constant_input(node, 1)
    if size_const is not None:
        check_size([int(v) for v in size_const.reshape(-1)])

    def run(theta: np.ndarray, size: np.ndarray) -> np.ndarray:
        dims = [int(v) for v in np.asarray(size).reshape(-1)]
        check_size(dims)
        n = dims[0]
        spatial = dims[2:]
        r = len(spatial)
        if r not in (2, 3) or theta.shape[1:] != (r, r + 1):
            raise ValueError(f"AffineGrid: theta {theta.shape} does not match size {dims}")
        # homogeneous positions, components ordered x (last dim), y, (z), 1
        axes = [_base_positions(s, align_corners) for s in spatial]
        mesh = np.meshgrid(*axes, indexing="ij")  # each of shape spatial
        comps = [mesh[r - 1 - i] for i in range(r)]
        comps.append(np.ones(spatial, dtype=np.float64))
        base = np.stack(comps, axis=-1).reshape(-1, r + 1)  # (P, r+1)
        th = theta.astype(np.float64)
        grid = np.einsum("pk,njk->npj", base, th)
        return grid.reshape(n, *spatial, r).astype(theta.dtype)

    return run


# --------------------------------------------------------------------------- RoiAlign


def _roi_axis_samples(
    start: np.ndarray, bin_size: np.ndarray, grid: np.ndarray, out: int, max_grid: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sample coordinates (R, out, max_grid) and mask of real samples."""
    ph = np.arange(out, dtype=np.float64)[None, :, None]
    i = np.arange(max_grid, dtype=np.float64)[None, None, :]
    g = grid.astype(np.float64)[:, None, None]
    pos = start[:, None, None] + ph * bin_size[:, None, None] + (i + 0.5) * bin_size[:, None, None] / g
    mask = np.broadcast_to(i < g, pos.shape)
    return pos, mask


def _roi_axis_interp(pos: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(low index, high index, low weight, high weight, valid) along one axis."""
    valid = (pos >= -1.0) & (pos <= size)
    p = np.maximum(pos, 0.0)
    low = np.floor(p).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    p = np.where(at_end, low.astype(np.float64), p)
    frac = p - low
    return low, high, 1.0 - frac, frac, valid


@KERNELS.register("RoiAlign", (10, 16, 22))
def roi_align(node: NodeSpec):
    mode = _str(node.attr("mode"), "avg")
    if mode not in ("avg", "max"):
        raise Unsupported(f"RoiAlign mode {mode!r} is not supported")
    out_h = int(node.attr("output_height", 1))
    out_w = int(node.attr("output_width", 1))
    sampling_ratio = int(node.attr("sampling_ratio", 0))
    spatial_scale = float(node.attr("spatial_scale", 1.0))
    default_ctm = "output_half_pixel" if node.opset < 16 else "half_pixel"
    ctm = _str(node.attr("coordinate_transformation_mode"), default_ctm)
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise Unsupported(f"RoiAlign coordinate_transformation_mode {ctm!r} is not supported")
    half_pixel = ctm == "half_pixel"
    check_at_least(node, "output_height", (out_h,), 1)
    check_at_least(node, "output_width", (out_w,), 1)
    check_at_least(node, "sampling_ratio", (sampling_ratio,), 0)
    guard = output_guard(node)

    def run(x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> np.ndarray:
        n_rois = rois.shape[0]
        _, c, h, w = x.shape
        # the output and the per-roi weight matrices are sized from the output_* attributes
        guard((n_rois, c, out_h, out_w), np.dtype(np.float64))
        guard((n_rois, max(out_h, out_w), max(h, w)), np.dtype(np.float64))
        if n_rois == 0:
            return np.zeros((0, c, out_h, out_w), dtype=x.dtype)
        r = rois.astype(np.float64)
        offset = 0.5 if half_pixel else 0.0
        start_w = r[:, 0] * spatial_scale - offset
        start_h = r[:, 1] * spatial_scale - offset
        roi_w = r[:, 2] * spatial_scale - offset - start_w
        roi_h = r[:, 3] * spatial_scale - offset - start_h
        if not half_pixel:
            roi_w = np.maximum(roi_w, 1.0)
            roi_h = np.maximum(roi_h, 1.0)
        bin_h = roi_h / out_h
        bin_w = roi_w / out_w
        if sampling_ratio > 0:
            grid_h = np.full(n_rois, sampling_ratio, dtype=np.int64)
            grid_w = grid_h.copy()
        else:
            grid_h = np.ceil(roi_h / out_h).astype(np.int64)
            grid_w = np.ceil(roi_w / out_w).astype(np.int64)
        count = np.maximum(grid_h * grid_w, 1).astype(np.float64)
        gh_max = max(int(grid_h.max()), 1)
        gw_max = max(int(grid_w.max()), 1)
        # samples per bin come from sampling_ratio or the roi sizes (values): bounded first
        # (avg keeps them per axis, max all at once)
        if mode == "max":
            guard((n_rois, out_h, gh_max, out_w, gw_max, c), np.dtype(np.float64))
        else:
            guard((n_rois, out_h, gh_max), np.dtype(np.float64))
            guard((n_rois, out_w, gw_max), np.dtype(np.float64))
        ys, ymask = _roi_axis_samples(start_h, bin_h, np.maximum(grid_h, 1), out_h, gh_max)
        xs, xmask = _roi_axis_samples(start_w, bin_w, np.maximum(grid_w, 1), out_w, gw_max)
        ymask = ymask & (grid_h[:, None, None] > 0)
        xmask = xmask & (grid_w[:, None, None] > 0)
        ylo, yhi, wylo, wyhi, yvalid = _roi_axis_interp(ys, h)
        xlo, xhi, wxlo, wxhi, xvalid = _roi_axis_interp(xs, w)
        b = batch_indices.astype(np.int64).reshape(-1)
        xd = x.astype(np.float64)

        if mode == "avg":
            # separable: out = Wy @ X[b] @ Wx^T with weight matrices summed over samples
            def weight_matrix(lo, hi, wlo, whi, valid, mask, size, out):
                keep = (valid & mask).astype(np.float64)
                m = np.zeros((n_rois, out, size), dtype=np.float64)
                ri = np.broadcast_to(np.arange(n_rois)[:, None, None], lo.shape)
                pi = np.broadcast_to(np.arange(out)[None, :, None], lo.shape)
                np.add.at(m, (ri, pi, lo), wlo * keep)
                np.add.at(m, (ri, pi, hi), whi * keep)
                return m

            wy = weight_matrix(ylo, yhi, wylo, wyhi, yvalid, ymask, h, out_h)
            wx = weight_matrix(xlo, xhi, wxlo, wxhi, xvalid, xmask, w, out_w)
            res = np.einsum("rph,rchw,rqw->rcpq", wy, xd[b], wx, optimize=True)
            res = res / count[:, None, None, None]
            return res.astype(x.dtype)

        # max: per sample, the max of the four weighted corners; then max over samples
        rr = np.arange(n_rois)[:, None, None, None, None]
        yl = ylo[:, :, :, None, None]
        yh = yhi[:, :, :, None, None]
        xl = xlo[:, None, None, :, :]
        xh = xhi[:, None, None, :, :]
        bb = b[rr]
        best = None
        for yi, wyv in ((yl, wylo), (yh, wyhi)):
            for xi, wxv in ((xl, wxlo), (xh, wxhi)):
                vals = xd[bb, :, yi, xi]  # (R, out_h, gh, out_w, gw, C)
                wgt = wyv[:, :, :, None, None] * wxv[:, None, None, :, :]
                term = vals * wgt[..., None]
                best = term if best is None else np.maximum(best, term)
        valid = yvalid[:, :, :, None, None] & xvalid[:, None, None, :, :]
        best = np.where(valid[..., None], best, 0.0)
        mask = ymask[:, :, :, None, None] & xmask[:, None, None, :, :]
        best = np.where(mask[..., None], best, -np.inf)
        res = best.max(axis=(2, 4))  # (R, out_h, out_w, C)
        res = np.where(np.isneginf(res), 0.0, res)
        return np.moveaxis(res, -1, 1).astype(x.dtype)

    return run


# --------------------------------------------------------------------------- NonMaxSuppression


def _corners(boxes: np.ndarray, center_point_box: bool) -> tuple[np.ndarray, ...]:
    b = boxes.astype(np.float64)
    if center_point_box:
        xc, yc, bw, bh = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
        return yc - bh / 2, xc - bw / 2, yc + bh / 2, xc + bw / 2
    y1, x1, y2, x2 = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)


def _iou_matrix(boxes: np.ndarray, center_point_box: bool) -> np.ndarray:
    y1, x1, y2, x2 = _corners(boxes, center_point_box)
    area = (y2 - y1) * (x2 - x1)
    ih = np.maximum(0.0, np.minimum(y2[:, None], y2[None, :]) - np.maximum(y1[:, None], y1[None, :]))
    iw = np.maximum(0.0, np.minimum(x2[:, None], x2[None, :]) - np.maximum(x1[:, None], x1[None, :]))
    inter = ih * iw
    union = area[:, None] + area[None, :] - inter
    ok = (area[:, None] > 0) & (area[None, :] > 0) & (union > 0)
    return np.where(ok, inter / np.where(ok, union, 1.0), 0.0)


def _scalar(v: np.ndarray | None, default: float) -> float:
    if v is None or np.asarray(v).size == 0:
        return default
    return float(np.asarray(v).reshape(-1)[0])


@KERNELS.register("NonMaxSuppression", (10, 11))
def non_max_suppression(node: NodeSpec):
    center = flag(node, "center_point_box", 0)

    def run(boxes, scores, max_output=None, iou_threshold=None, score_threshold=None):
        limit = int(_scalar(max_output, 0))
        iou_thr = _scalar(iou_threshold, 0.0)
        has_score_thr = score_threshold is not None and np.asarray(score_threshold).size > 0
        score_thr = _scalar(score_threshold, 0.0)
        n_batch, n_class = scores.shape[0], scores.shape[1]
        selected: list[np.ndarray] = []
        if limit > 0 and boxes.shape[1] > 0:
            for bi in range(n_batch):  # batches x classes, each a greedy selection
                iou = _iou_matrix(boxes[bi], center)
                for ci in range(n_class):
                    sc = scores[bi, ci].astype(np.float64)
                    order = np.argsort(-sc, kind="stable")
                    if has_score_thr:
                        order = order[sc[order] > score_thr]
                    alive = np.ones(order.size, dtype=bool)
                    chosen = []
                    sub = iou[np.ix_(order, order)]
                    for k in range(order.size):
                        if len(chosen) >= limit:
                            break
                        if not alive[k]:
                            continue
                        chosen.append(order[k])
                        alive &= ~(sub[k] > iou_thr)
                    if chosen:
                        ch = np.asarray(chosen, dtype=np.int64)
                        selected.append(
                            np.stack([np.full_like(ch, bi), np.full_like(ch, ci), ch], axis=1)
                        )
        if not selected:
            return np.zeros((0, 3), dtype=np.int64)
        return np.concatenate(selected, axis=0)

    return run


# --------------------------------------------------------------------------- ImageDecoder


@KERNELS.register("ImageDecoder", 20)
def image_decoder(node: NodeSpec):
    try:
        from PIL import Image  # noqa: F401
    except ImportError as exc:
        raise Unsupported("ImageDecoder needs Pillow, which is not installed") from exc
    import io

    from PIL import Image

    pixel_format = _str(node.attr("pixel_format"), "RGB")
    if pixel_format not in ("RGB", "BGR", "Grayscale"):
        raise Unsupported(f"ImageDecoder pixel_format {pixel_format!r} is not supported")

    def run(encoded: np.ndarray) -> np.ndarray:
        img = Image.open(io.BytesIO(np.asarray(encoded, dtype=np.uint8).tobytes()))
        if pixel_format == "Grayscale":
            arr = np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None]
        else:
            arr = np.asarray(img.convert("RGB"), dtype=np.uint8)
            if pixel_format == "BGR":
                arr = arr[:, :, ::-1]
        return np.ascontiguousarray(arr)

    return run
