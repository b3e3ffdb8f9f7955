"""com.microsoft QuantizeLinear / DequantizeLinear: onnxruntime's own versions, which its
quantization tools write for 16-bit (and 4-bit) QDQ models on opsets before ai.onnx had
those types (``use_qdq_contrib_ops`` / int16 activations).

They mean what ai.onnx QuantizeLinear/DequantizeLinear-21 mean for their types (per tensor,
or per axis with ``axis``, default 1; round half to even, saturate; a missing zero point is
0 of uint8), so they run that registered kernel; only the attribute set is checked here.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._contrib_util import bad_attribute, delegate

DOMAIN = "com.microsoft"
_STANDARD_OPSET = 21
_ATTRIBUTES = ("axis",)


def _standard(node: NodeSpec):
    extra = sorted(set(node.attributes) - set(_ATTRIBUTES))
    if extra:
        raise bad_attribute(node, extra[0], node.attr(extra[0]), f"only {', '.join(_ATTRIBUTES)}")
    axis = node.attr("axis", 1)
    if not isinstance(axis, (int, np.integer)):
        raise bad_attribute(node, "axis", axis, "an int")
    return delegate(node, node.op_type, _STANDARD_OPSET, attributes={"axis": int(axis)})


@KERNELS.register("QuantizeLinear", 1, domain=DOMAIN)
def quantize_linear(node: NodeSpec):
    return _standard(node)


@KERNELS.register("DequantizeLinear", 1, domain=DOMAIN)
def dequantize_linear(node: NodeSpec):
    return _standard(node)
