"""MaxPool over 8-bit codes (a QDQ model's pools, moved onto its codes by the core's
``qdq_passthrough``) on the compiled row-buffer kernel: the same codes as the numpy path, for
the geometries it takes, with the type's minimum in the data next to the padding."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node
from _jit_cases import run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_pool_rows  # noqa: E402

GEOMETRIES = [
    ({"kernel_shape": [3, 3], "strides": [2, 2]}, (1, 16, 27, 27)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (2, 8, 17, 16)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, (1, 5, 13, 13)),
    ({"kernel_shape": [2, 3], "strides": [1, 1], "pads": [0, 1, 1, 2]}, (1, 4, 9, 9)),
    ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 3, 8, 112)),  # rows split even / odd
]


def _spy(monkeypatch) -> list[str]:
    ran: list[str] = []
    real = kernels_pool_rows.RowsPoolCall.__call__
    monkeypatch.setattr(kernels_pool_rows.RowsPoolCall, "__call__",
                        lambda self, x: ran.append(str(x.dtype)) or real(self, x))
    return ran


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("attrs", "shape"), GEOMETRIES, ids=[str(g[0]) for g in GEOMETRIES])
def test_code_max_pools_run_compiled_with_the_numpy_paths_codes(monkeypatch, dtype, attrs, shape):
    info = np.iinfo(dtype)
    x = np.random.default_rng(sum(shape)).integers(info.min, info.max + 1, shape).astype(dtype)
    x[..., 0, :] = info.min  # the identity itself in the data, next to the padding
    case = one_node("MaxPool", [In(x)], attrs, 13)
    numpy_path = run_cpu(case, False)
    ran = _spy(monkeypatch)
    compiled = run_cpu(case, True, runs=2)
    assert ran == [np.dtype(dtype).name] * 2
    np.testing.assert_array_equal(compiled[0], numpy_path[0])
    assert compiled[0].dtype == np.dtype(dtype)

