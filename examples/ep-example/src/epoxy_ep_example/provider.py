"""The example provider: numpy kernels run node by node on the host.

Each ``KERNELS.register`` names an op and the opsets whose definition the kernel follows;
the factory gets the node (attributes, input types, constants) once, at session creation,
and returns the kernel called on every run. Raising ``Unsupported`` declines that node with
the reason; the node then goes to the next provider.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from epoxy.contract import Device, NodeSpec
from epoxy.kit import KernelProvider, KernelRegistry, OpSupport, Unsupported

from .options import ExampleOptions

KERNELS = KernelRegistry()
FLOATS = (np.float16, np.float32, np.float64)


def floats_only(node: NodeSpec) -> str | None:
    """A registry check: ``None`` takes the node, a string declines it with that reason."""
    dtype = node.input_types[0].dtype
    return None if dtype in FLOATS else f"{node.op_type}: example runs float tensors only, not {dtype}"


@KERNELS.register("Relu", since=(6, 13, 14), check=floats_only)
def relu(node: NodeSpec) -> Any:
    return lambda x: np.maximum(x, x.dtype.type(0))


@KERNELS.register("Add", since=(7, 13, 14), check=floats_only)
def add(node: NodeSpec) -> Any:
    return np.add


@KERNELS.register("Mul", since=(7, 13, 14), check=floats_only)
def mul(node: NodeSpec) -> Any:
    return np.multiply


@KERNELS.register("MatMul", since=(1, 9, 13), check=floats_only)
def matmul(node: NodeSpec) -> Any:
    return np.matmul


@KERNELS.register("LeakyRelu", since=(6, 16), check=floats_only)
def leaky_relu(node: NodeSpec) -> Any:
    alpha = node.attr("alpha", 0.01)
    if alpha < 0:
        raise Unsupported(f"LeakyRelu alpha={alpha}: example needs alpha >= 0")
    return lambda x: np.where(x >= 0, x, x * x.dtype.type(alpha))


def supported_ops() -> list[OpSupport]:
    return KERNELS.ops()


class ExampleProvider(KernelProvider):
    """The kit's kernel provider, limited to the ops the ``ops`` option allows."""

    def __init__(self, device: Device, options: ExampleOptions) -> None:
        super().__init__("example", device, KERNELS)
        self.settings = options

    def claims(self, node: NodeSpec) -> str | None:
        allowed = self.settings.ops
        if allowed is not None and node.op_type not in allowed:
            return f"{node.op_type} is not in the example 'ops' option"
        return super().claims(node)
