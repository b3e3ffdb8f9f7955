"""``com.epoxy.cpu::ChannelShuffle(x, group=G)``: ShuffleNet's ``Reshape -> Transpose -> Reshape``
as one op (written by the core's ChannelShufflePass): channel ``g * C/G + j`` of the 4-D input
goes to channel ``j * G + g``.

Int8 codes that come in channels last (an NCHW view, as QLinearConv hands codes on: ``_layout``)
go out channels last, from one pass over them; the depthwise layer after a shuffle then reads
them without a transpose. Anything else comes out C-ordered NCHW from one copy of whole planes,
as the three ops made.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec

from .. import jit
from ..registry import KERNELS
from ._attr_checks import invalid
from ._layout import as_nchw, channels_last
from .fused import DOMAIN


class ChannelShuffleError(ValueError):
    """A ChannelShuffle node's input is not 4-D with channels divisible by its group."""


@KERNELS.register("ChannelShuffle", 1, domain=DOMAIN)
def channel_shuffle(node: NodeSpec) -> Callable[[np.ndarray], np.ndarray]:
    group = int(node.attr("group", 0) or 0)
    if group < 1:
        raise invalid(node, f"attribute group must be a positive integer, got {node.attr('group')!r}")
    compiled = jit.kernels("shuffle")
    nthreads = jit.thread_count() if compiled is not None else 1

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim != 4 or x.shape[1] % group:
            raise ChannelShuffleError(f"node {node.name!r} ({node.op_type}): input x must be 4-D (N, C, H, W) "
                                      f"with C divisible by group {group}, got shape {list(x.shape)}")
        n, c, h, w = x.shape
        per_group = c // group
        nhwc = channels_last(x) if compiled is not None else None  # only jit kernels write them
        if nhwc is None or x.size == 0:  # whole planes move: one contiguous copy each
            return np.ascontiguousarray(x.reshape(n, group, per_group, h, w).transpose(0, 2, 1, 3, 4)).reshape(x.shape)
        y = np.empty((n, h, w, c), dtype=x.dtype)
        compiled.shuffle(nhwc.reshape(-1, c), y.reshape(-1, c), group, per_group, nthreads)
        return as_nchw(y)

    return run
