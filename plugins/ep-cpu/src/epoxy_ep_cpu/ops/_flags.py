"""How 0/1 attributes read when a model holds another value (``keepdims=7``, ``ceil_mode=1000``).

The spec allows only 0 and 1; epoxy reads the other values as the ONNX reference evaluator
does, so results match the reference. For almost every attribute that is "nonzero is true"
(``keepdims=7`` keeps the dims); a few the reference compares with 1, so any other value is
false; they are listed in :data:`ONLY_ONE_IS_TRUE`. onnxruntime reads some of these values
as false and refuses others: docs/ORT_COMPAT.md lists the difference.
"""

from __future__ import annotations

from epoxy.contract import NodeSpec

#: (op_type, attribute) -> the first opset from which the reference reads "nonzero is true"
#: again (None: at every opset); below it only the value 1 is true
ONLY_ONE_IS_TRUE: dict[tuple[str, str], int | None] = {
    ("Reshape", "allowzero"): None,
    ("Mod", "fmod"): None,
    ("AffineGrid", "align_corners"): None,
    ("HannWindow", "periodic"): None,
    ("HammingWindow", "periodic"): None,
    ("ReduceMax", "keepdims"): 18,
    ("ReduceMin", "keepdims"): 18,
}


def flag(node: NodeSpec, name: str, default: int) -> bool:
    """A 0/1 attribute as the ONNX reference reads it (see the module docstring)."""
    value = int(node.attr(name, default))
    key = (node.op_type, name)
    if not node.domain and key in ONLY_ONE_IS_TRUE:
        until = ONLY_ONE_IS_TRUE[key]
        if until is None or node.opset < until:
            return value == 1
    return value != 0
