"""MaxPool over 8-bit codes kept channels last (jit/kernels_pool_codes.py): an NCHW view of
channels-last codes (what the int8 convolutions return) is pooled on the channels-last kernel,
its result channels last again; the codes equal the numpy path's for every geometry, and
onnxruntime's where it runs the type."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import one_node, run_onnxruntime
from _jit_cases import close, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_pool_codes  # noqa: E402

GEOMETRIES = [  # (attributes, input H, W)
    ({"kernel_shape": [3, 3], "strides": [2, 2]}, 15, 15),
    ({"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}, 9, 11),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 14, 14),
    ({"kernel_shape": [2, 3], "strides": [1, 2], "pads": [0, 1, 1, 2], "dilations": [2, 1]}, 10, 9),
    ({"kernel_shape": [1, 1], "strides": [2, 2]}, 8, 8),
]


def _channels_last_codes(rng, dtype, n, c, h, w) -> np.ndarray:
    info = np.iinfo(dtype)
    nhwc = rng.integers(info.min, info.max + 1, (n, h, w, c)).astype(dtype)
    return nhwc.transpose(0, 3, 1, 2)  # NCHW view, as the int8 convolutions hand codes on


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("attrs", "h", "w"), GEOMETRIES, ids=[str(g[0]) for g in GEOMETRIES])
def test_channels_last_codes_pool_like_the_numpy_path(monkeypatch, dtype, attrs, h, w):
    x = _channels_last_codes(np.random.default_rng(h * w), dtype, 2, 24, h, w)
    case = one_node("MaxPool", [x], attrs, 12)
    seen: list[tuple[int, ...]] = []
    real = kernels_pool_codes.max_pool
    monkeypatch.setattr(kernels_pool_codes, "max_pool", lambda nhwc, *a: seen.append(nhwc.shape) or real(nhwc, *a))
    on = run_cpu(case, True, runs=2)
    assert seen == [(2, h, w, 24)] * 2  # the channels-last kernel ran, on the codes as they lie
    close(on, run_cpu(case, False), 0, 0)
    if dtype == np.uint8:
        close(on, run_onnxruntime(case), 0, 0)


def test_c_ordered_codes_keep_the_plane_kernel(monkeypatch):
    """C-ordered NCHW codes are not a channels-last view: the plane kernels run them."""
    x = np.random.default_rng(0).integers(0, 256, (1, 8, 12, 12)).astype(np.uint8)
    seen: list[int] = []
    monkeypatch.setattr(kernels_pool_codes, "max_pool", lambda *a: seen.append(1))
    case = one_node("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2]}, 12)
    close(run_cpu(case, True), run_cpu(case, False), 0, 0)
    assert seen == []
