"""How much matrix work a compiled group does, so a tiny one runs on one OpenVINO thread.

Why: OpenVINO's CPU plugin spreads every inference over its ``INFERENCE_NUM_THREADS``, and
waking and joining the extra threads costs more than a tiny graph's arithmetic. Measured on
the exporter models at 2 threads (bench/README.md, session 31), a group compiled on one thread
ran faster than on two for every batch-1 model, all below 1 M multiply-adds (dynamo
mobilenetv3 0.111 -> 0.067 ms, convnext 0.197 -> 0.101, BERT 0.188 -> 0.097, whisper 0.119 ->
0.074), while from 1.5 M on two threads won as often as not (efficientnet batch 8, 3.5 M: 0.211
against 0.260; whisper batch 8, 4.8 M: 0.205 against 0.248). Only the matrix ops are counted:
everything else in these graphs is a pass over memory, cheap next to them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

#: the default ``one_thread_below_macs``: the measurements above
ONE_THREAD_BELOW_MACS = 1_000_000


def _matmul_depth(op: Any) -> int:
    """The reduction length of a MatMul: A's last axis, or its second to last when transposed."""
    a = op.get_input_partial_shape(0).to_shape()
    if len(a) == 1:
        return int(a[0])
    return int(a[-2] if op.get_attributes().get("transpose_a", False) else a[-1])


def _conv_depth(op: Any) -> int:
    """A Convolution's multiply-adds per output: input channels x kernel (weight [O, I, k...])."""
    return math.prod(int(d) for d in op.get_input_partial_shape(1).to_shape()[1:])


def _group_conv_depth(op: Any) -> int:
    """A GroupConvolution's multiply-adds per output (weight [G, O/G, I/G, k...])."""
    return math.prod(int(d) for d in op.get_input_partial_shape(1).to_shape()[2:])


#: OpenVINO op type -> multiply-adds per output element
MATRIX_OPS: dict[str, Callable[[Any], int]] = {
    "MatMul": _matmul_depth,
    "Convolution": _conv_depth,
    "GroupConvolution": _group_conv_depth,
}
#: heavy ops this estimate cannot size: a graph holding one keeps the configured threads
UNSIZED_OPS = frozenset({
    "ConvolutionBackpropData", "GroupConvolutionBackpropData", "DeformableConvolution", "BinaryConvolution",
    "Einsum", "LSTMSequence", "GRUSequence", "RNNSequence", "LSTMCell", "GRUCell", "RNNCell",
    "ScaledDotProductAttention", "Loop", "TensorIterator", "If",
})


def multiply_adds(model: Any) -> int | None:
    """The multiply-adds of ``model``'s (an ``openvino.Model``) matrix ops, or None when a shape
    is not static or the model holds an op this estimate cannot size."""
    total = 0
    for op in model.get_ordered_ops():
        kind = op.get_type_name()
        if kind in UNSIZED_OPS:
            return None
        depth = MATRIX_OPS.get(kind)
        if depth is None:
            continue
        out = op.get_output_partial_shape(0)
        if not out.is_static or not all(op.get_input_partial_shape(i).is_static for i in range(op.get_input_size())):
            return None
        total += math.prod(int(d) for d in out.to_shape()) * depth(op)
    return total


def one_thread_config(config: dict[str, Any], model: Any, below: float,
                      device: str) -> tuple[dict[str, Any], int | None]:
    """``config`` for compiling ``model`` on ``device``, with ``INFERENCE_NUM_THREADS`` 1 when the
    model's matrix work is sized and below ``below`` multiply-adds (0: never), only on the CPU
    plugin (the property is the CPU's) and when more than one thread was allowed; and that work
    when it did so (None: the configured threads stand)."""
    if below <= 0 or device != "CPU" or int(config.get("INFERENCE_NUM_THREADS", 0) or 0) == 1:
        return config, None
    work = multiply_adds(model)
    if work is None or work >= below:
        return config, None
    return {**config, "INFERENCE_NUM_THREADS": 1}, work
