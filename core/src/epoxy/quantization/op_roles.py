"""Which ops a static int8 chain covers and how each takes part: the one registry both writers
(QDQ and QOperator) read, kept apart so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["weighted", "own", "shared", "activation"]


@dataclass(frozen=True)
class OpRole:
    """How a quantizable op takes part in the int8 chain.

    ``weighted``: has weights (and a bias) and anchors the chain. ``own``: its output gets its own
    calibrated scale (Add, Mul, Concat, average pooling). ``shared``: moves or picks values
    without arithmetic, so its output reuses its input's scale and zero point (onnxruntime's
    convention: the Q/DQ pair passes through it). ``activation``: Relu/Clip, folded into the
    producer's output range when it is the producer's only reader. ``data`` lists the input
    indices that are tensors to quantize (None: all); the rest (shapes, axes, bounds) stay.
    """

    role: Role
    data: tuple[int, ...] | None = (0,)


#: op type -> role: the registry the planner reads (add an op here, not an if/else below)
OP_ROLES: dict[str, OpRole] = {
    "Conv": OpRole("weighted", (0, 1)), "ConvTranspose": OpRole("weighted", (0, 1)),
    "MatMul": OpRole("weighted", (0, 1)), "Gemm": OpRole("weighted", (0, 1)),
    "Add": OpRole("own", None), "Sum": OpRole("own", None), "Mul": OpRole("own", None), "Concat": OpRole("own", None),
    "AveragePool": OpRole("own"), "GlobalAveragePool": OpRole("own"),
    "MaxPool": OpRole("shared"), "GlobalMaxPool": OpRole("shared"), "Reshape": OpRole("shared"),
    "Flatten": OpRole("shared"), "Transpose": OpRole("shared"), "Squeeze": OpRole("shared"),
    "Unsqueeze": OpRole("shared"), "Resize": OpRole("shared"),
    "Relu": OpRole("activation"), "Clip": OpRole("activation"),
}
