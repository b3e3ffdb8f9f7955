"""Elementwise arithmetic and unary math (numpy ufuncs, broadcasting per ONNX rules)."""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS

_BINARY = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
}


def _binary(ufunc: np.ufunc):  # type: ignore[no-untyped-def]
    def factory(node: NodeSpec):  # type: ignore[no-untyped-def]
        return ufunc

    return factory


for _op, _fn in _BINARY.items():
    KERNELS.register(_op, (7, 13, 14))(_binary(_fn))


@KERNELS.register("Relu", (6, 13, 14))
def relu(node: NodeSpec):  # type: ignore[no-untyped-def]
    def run(x: np.ndarray) -> np.ndarray:
        return np.maximum(x, x.dtype.type(0))

    return run
