"""Strided, unpadded 1x1 convolutions as their stride-1 twin on the subsampled input.

Why: a 1x1 layer of stride 2 reads one input position in four. On the rows route (output
positions as the GEMM's rows, ``kernels_conv_rows``) every row tile gathered its positions
from all over the input planes; copied out first (numpy's strided copy: ~0.13 ms for
resnet50's 256 x 56 x 56), the layer is a plain 1x1 layer on a quarter of the map, and the
route that suits that map runs it (``pgemm`` on big maps, the rows route on small ones).
resnet50's projection shortcuts inside the model, 1 thread, us, before / after: 256 -> 512 on
56x56 2192 / 1691, 512 -> 1024 on 28x28 2003 / 1787, 1024 -> 2048 on 14x14 2793 / 2720; the
model 0.985 / 0.992 at 1 / 2 threads (bench/README.md, session 38).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .kernels_conv import PreparedConvCall
from .scratch import scratch


def subsamples(kernel: tuple[int, ...], strides: Any, begin: Any, end: Any) -> bool:
    """Whether a 2-D layer is a strided 1x1 layer without padding (dilation does not matter for a
    1x1 kernel), which :class:`SubsampledCall` runs."""
    return (tuple(kernel) == (1, 1) and len(strides) == 2 and any(int(s) > 1 for s in strides)
            and not any(begin) and not any(end))


class SubsampledCall(PreparedConvCall):
    """A strided 1x1 layer for one input shape: the input's every ``strides``-th position copied
    into a per-thread buffer, then ``inner`` (the stride-1 layer's prepared call for that
    subsampled shape) on it. The interface of the other prepared calls."""

    __slots__ = ("_inner", "_steps", "activation_done", "dtype", "out_shape", "shape")

    def __init__(self, shape: tuple[int, ...], inner: Any, strides: tuple[int, ...]) -> None:
        self.shape, self._inner = shape, inner
        self._steps = (slice(None), slice(None), slice(None, None, int(strides[0])), slice(None, None, int(strides[1])))
        self.dtype, self.out_shape = inner.dtype, inner.out_shape
        self.activation_done = bool(getattr(inner, "activation_done", False))

    def __call__(self, x: np.ndarray, z: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
        inner = self._inner
        sub = scratch("subsampled.input", int(np.prod(inner.shape)), self.dtype).reshape(inner.shape)
        np.copyto(sub, x[self._steps])
        return inner(sub, z) if out is None else inner(sub, z, out)
