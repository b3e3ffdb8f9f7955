"""A chain of per-channel constant Add/Sub/Mul/Div nodes read as one affine map.

Shared by the Conv+BN fold (the chain after the BN), the Conv fold, the BN fold and the
MatMul fold (channels on the last axis, or where a Transpose moves it).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from ...kit.passes import channel_vector, constant, is_op, sole_consumer

_OPS = ("Add", "Sub", "Mul", "Div")


def follow_affine(node_out: ir.Value, rank: int | None, channels: int, dtype: np.dtype, axis: int = 1,
                  ) -> tuple[list[ir.Node], np.ndarray | None, np.ndarray | None, ir.Value]:
    """Walk single-reader per-channel constant Add/Sub/Mul/Div nodes after ``node_out``
    (``channels`` on ``axis``): (nodes, scale, shift, last value) with ``y = x * scale +
    shift`` (None: 1 / 0)."""
    nodes: list[ir.Node] = []
    scale: np.ndarray | None = None
    shift: np.ndarray | None = None
    cur = node_out
    while True:
        nxt = sole_consumer(cur)
        if not is_op(nxt, _OPS) or len(nxt.inputs) != 2:
            break
        a, b = nxt.inputs
        if a is cur and b is not cur:
            c_value = b
        elif b is cur and a is not cur and nxt.op_type in ("Add", "Mul"):
            c_value = a
        else:
            break
        c = constant(c_value)
        if c is None or c.dtype != dtype:
            break
        vec = channel_vector(c, rank, channels, axis)
        if vec is None:
            break
        vec = vec.astype(np.float64)
        op = nxt.op_type
        if op == "Div" and not np.all(vec != 0):
            break
        s = np.ones(channels) if scale is None else scale
        t = np.zeros(channels) if shift is None else shift
        if op == "Add":
            t = t + vec
        elif op == "Sub":
            t = t - vec
        elif op == "Mul":
            s, t = s * vec, t * vec
        else:
            s, t = s / vec, t / vec
        scale = s if (op in ("Mul", "Div") or scale is not None) else None
        shift = t
        nodes.append(nxt)
        cur = nxt.outputs[0]
    return nodes, scale, shift, cur
