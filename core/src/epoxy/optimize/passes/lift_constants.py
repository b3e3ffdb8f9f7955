"""Constant nodes become initializers (onnx_ir's pass), without its slow tensor check.

``Attr.as_tensor()`` checks the value against ``TensorProtocol``, a runtime-checkable
Protocol: ~40-150 us per Constant node, 30 ms of a TorchScript-exported GPT-2's session
creation (207 Constant nodes). A ``value`` attribute of type TENSOR already holds a tensor,
so it is taken as it is; every other case goes through onnx_ir's own conversion.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir
from onnx_ir.passes.common import LiftConstantsToInitializersPass


class LiftConstantsPass(LiftConstantsToInitializersPass):
    """:class:`LiftConstantsToInitializersPass` with the ``value`` tensor read directly."""

    def _constant_node_attribute_to_tensor(self, node: Any, attr_name: str, attr_value: ir.Attr,
                                           initializer_name: str) -> Any:
        if attr_name == "value" and attr_value.type == ir.AttributeType.TENSOR:
            tensor = attr_value.value
            return None if tensor.size < self.size_limit else tensor
        return super()._constant_node_attribute_to_tensor(node, attr_name, attr_value, initializer_name)
