"""The jit tier's prepared convolution call classes by route name (``ops/conv._Jit.route``).

Why one table: the benchmarks name the route a layer took (``bench/model_convs.py``,
``bench/conv_layers.py``) and the tests spy on every route (``test_concat_in_place.py``);
each kept its own list of the classes, which a new route had to be added to twice.
"""

from __future__ import annotations

from typing import Any


def call_classes() -> dict[Any, str]:
    """Each prepared convolution call class -> its route's name (imports the kernels modules:
    call it only where numba is available)."""
    from . import (
        kernels_conv,
        kernels_conv_gemm,
        kernels_conv_implicit,
        kernels_conv_rows,
        kernels_conv_small,
        kernels_conv_subsampled,
        kernels_depthwise,
        kernels_pointwise,
        kernels_winograd,
    )

    return {kernels_conv.Conv2dCall: "direct", kernels_pointwise.PointwiseCall: "pointwise",
            kernels_conv_gemm.GridConvCall: "grid", kernels_conv_implicit.ImplicitConvCall: "implicit",
            kernels_winograd.WinogradCall: "winograd", kernels_conv_small.SmallConvCall: "small",
            kernels_depthwise.DepthwiseCall: "depthwise", kernels_conv_rows.RowsConvCall: "rows",
            kernels_conv_subsampled.SubsampledCall: "subsampled"}
