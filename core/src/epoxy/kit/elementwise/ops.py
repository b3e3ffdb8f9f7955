"""The elementwise op table every backend shares: arity, attributes, dtype rule, numpy reference.

Why one table: ep-cuda (generated CUDA) and ep-cpu (generated numba) fuse the same ops; the
table says what an op *is* (how many operands, which attributes with which ONNX defaults,
whether its result is a truth value, whether it is a transcendental that a scalar loop
computes with a libm call), and each backend adds only how it *spells* it. The numpy
reference of an op is written for any float dtype (float32 stays float32, float64 stays
float64), so it is the oracle of both emitters.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Attrs = Mapping[str, Any]
NumpyFn = Callable[..., np.ndarray]


@dataclass(frozen=True)
class EwOp:
    """One elementwise op of a program (operands and result are float values)."""

    name: str
    arity: int
    numpy: NumpyFn
    #: attribute name -> ONNX default, read from a node by :func:`node_attrs`
    attrs: Mapping[str, Any] = field(default_factory=dict)
    #: the result is a truth value (1 or 0): comparisons and logic
    predicate: bool = False
    #: needs a libm call per element in a scalar loop (no SIMD math library there)
    transcendental: bool = False


def _like(a: Any, x: float) -> Any:
    """``x`` as a scalar of ``a``'s float dtype, so float32 math stays float32."""
    return np.asarray(a).dtype.type(x)


def np_erf(a: np.ndarray) -> np.ndarray:
    """erf elementwise (numpy has none); a slow reference, evaluated in float64."""
    x = np.asarray(a)
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _gelu(a: np.ndarray, t: Attrs) -> np.ndarray:
    if t.get("approximate", "none") == "tanh":
        inner = _like(a, 0.7978845608028654) * (a + _like(a, 0.044715) * a * a * a)
        return _like(a, 0.5) * a * (_like(a, 1) + np.tanh(inner))
    return _like(a, 0.5) * a * (_like(a, 1) + np_erf(a * _like(a, 0.7071067811865476)))


def _hard_sigmoid(a: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(a * _like(a, alpha) + _like(a, beta), 0, 1).astype(np.asarray(a).dtype)


def _truth(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.result_type(like))


def _max(a: np.ndarray, b: np.ndarray, t: Attrs) -> np.ndarray:
    return np.maximum(a, b)


def _min(a: np.ndarray, b: np.ndarray, t: Attrs) -> np.ndarray:
    return np.minimum(a, b)


def _selu(a: np.ndarray, t: Attrs) -> np.ndarray:
    gamma = _like(a, t["gamma"])
    return np.where(a <= 0, gamma * _like(a, t["alpha"]) * (np.exp(a) - _like(a, 1)), gamma * a)


_SELU = {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}
_TABLE: tuple[EwOp, ...] = (
    EwOp("Identity", 1, lambda a, t: a),
    EwOp("Neg", 1, lambda a, t: -a),
    EwOp("Abs", 1, lambda a, t: np.abs(a)),
    EwOp("Relu", 1, lambda a, t: np.where(a < 0, _like(a, 0), a)),
    EwOp("Sigmoid", 1, lambda a, t: _like(a, 1) / (_like(a, 1) + np.exp(-a)), transcendental=True),
    EwOp("Tanh", 1, lambda a, t: np.tanh(a), transcendental=True),
    EwOp("Exp", 1, lambda a, t: np.exp(a), transcendental=True),
    EwOp("Log", 1, lambda a, t: np.log(a), transcendental=True),
    EwOp("Sqrt", 1, lambda a, t: np.sqrt(a)),
    EwOp("Reciprocal", 1, lambda a, t: _like(a, 1) / a),
    EwOp("Erf", 1, lambda a, t: np_erf(a), transcendental=True),
    EwOp("Floor", 1, lambda a, t: np.floor(a)),
    EwOp("Ceil", 1, lambda a, t: np.ceil(a)),
    EwOp("Round", 1, lambda a, t: np.rint(a)),
    EwOp("Sign", 1, lambda a, t: np.sign(a)),
    EwOp("Sin", 1, lambda a, t: np.sin(a), transcendental=True),
    EwOp("Cos", 1, lambda a, t: np.cos(a), transcendental=True),
    EwOp("Softplus", 1, lambda a, t: np.log1p(np.exp(a)), transcendental=True),
    EwOp("Softsign", 1, lambda a, t: a / (_like(a, 1) + np.abs(a))),
    EwOp("LeakyRelu", 1, lambda a, t: np.where(a < 0, a * _like(a, t["alpha"]), a), {"alpha": 0.01}),
    EwOp("Elu", 1, lambda a, t: np.where(a < 0, _like(a, t["alpha"]) * (np.exp(a) - _like(a, 1)), a),
         {"alpha": 1.0}, transcendental=True),
    EwOp("Selu", 1, _selu, _SELU, transcendental=True),
    EwOp("HardSigmoid", 1, lambda a, t: _hard_sigmoid(a, t["alpha"], t["beta"]), {"alpha": 0.2, "beta": 0.5}),
    EwOp("HardSwish", 1, lambda a, t: a * _hard_sigmoid(a, 1 / 6, 0.5)),
    EwOp("Gelu", 1, _gelu, {"approximate": "none"}, transcendental=True),
    # min/max: opset < 11 attributes, or constant inputs 1 and 2 folded in (lower.node_attrs)
    EwOp("Clip", 1, lambda a, t: np.minimum(np.maximum(a, _like(a, t["min"])), _like(a, t["max"])),
         {"min": -math.inf, "max": math.inf}),
    EwOp("Not", 1, lambda a, t: _truth(a == 0, a), predicate=True),
    EwOp("Add", 2, lambda a, b, t: a + b),
    EwOp("Sub", 2, lambda a, b, t: a - b),
    EwOp("Mul", 2, lambda a, b, t: a * b),
    EwOp("Div", 2, lambda a, b, t: a / b),
    EwOp("Pow", 2, lambda a, b, t: np.power(a, b), transcendental=True),
    EwOp("Max", 2, _max),
    EwOp("Min", 2, _min),
    EwOp("PRelu", 2, lambda a, b, t: np.where(a < 0, a * b, a)),
    EwOp("Equal", 2, lambda a, b, t: _truth(a == b, a), predicate=True),
    EwOp("Less", 2, lambda a, b, t: _truth(a < b, a), predicate=True),
    EwOp("Greater", 2, lambda a, b, t: _truth(a > b, a), predicate=True),
    EwOp("LessOrEqual", 2, lambda a, b, t: _truth(a <= b, a), predicate=True),
    EwOp("GreaterOrEqual", 2, lambda a, b, t: _truth(a >= b, a), predicate=True),
    EwOp("And", 2, lambda a, b, t: _truth((a != 0) & (b != 0), a), predicate=True),
    EwOp("Or", 2, lambda a, b, t: _truth((a != 0) | (b != 0), a), predicate=True),
    EwOp("Xor", 2, lambda a, b, t: _truth((a != 0) ^ (b != 0), a), predicate=True),
    EwOp("Where", 3, lambda c, a, b, t: np.asarray(np.where(c != 0, a, b))),
    # not an ONNX op: a * b + c in one rounding step where the backend has an FMA
    EwOp("MulAdd", 3, lambda a, b, c, t: a * b + c),
)

#: op name -> its description
OPS: Mapping[str, EwOp] = {op.name: op for op in _TABLE}
#: ops with any number of inputs, folded left into the binary op named here (Mean then divides)
VARIADIC: Mapping[str, str] = {"Sum": "Add", "Max": "Max", "Min": "Min", "Mean": "Add"}
#: ONNX ops a program takes that are not in :data:`OPS`: Cast lowers to Identity (the storage
#: dtype changes on load/store, the program's value does not)
LOWERED: Mapping[str, str] = {"Cast": "Identity"}
#: inputs folded into attributes instead of read as operands (Clip's min/max, opset >= 11)
PARAM_INPUTS: Mapping[str, tuple[int, ...]] = {"Clip": (1, 2)}
