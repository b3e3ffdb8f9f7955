"""Comparisons, boolean logic, bitwise ops and Where."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from .. import jit
from ..registry import KERNELS
from ._elementwise_util import arr, binary_with_legacy


def _strings(x: np.ndarray) -> np.ndarray:
    return x.astype(object) if x.dtype.kind in "US" else x


def _compare(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype.kind in "biu" and b.dtype.kind in "biu":
            # integer/bool operands (shape tensors, masks): cannot warn, always a bool result
            return arr(ufunc(a, b))
        a, b = _strings(np.asarray(a)), _strings(np.asarray(b))
        with np.errstate(all="ignore"):
            out = arr(ufunc(a, b))
        return out if out.dtype == np.bool_ else out.astype(np.bool_)

    return run


def _binary_factory(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]):
    def factory(node: NodeSpec):
        return binary_with_legacy(node, fn)

    return factory


_COMPARE = {
    "Equal": ((1, 7, 11, 13, 19), np.equal),
    "Greater": ((1, 7, 9, 13), np.greater),
    "Less": ((1, 7, 9, 13), np.less),
    "GreaterOrEqual": ((12, 16), np.greater_equal),
    "LessOrEqual": ((12, 16), np.less_equal),
}

for _op, (_versions, _ufunc) in _COMPARE.items():
    KERNELS.register(_op, _versions)(_binary_factory(_compare(_ufunc)))


# ---------------------------------------------------------------------- boolean logic


def _logic(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return arr(ufunc(a, b)).astype(np.bool_, copy=False)

    return run


for _op, _ufunc in {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}.items():
    KERNELS.register(_op, (1, 7))(_binary_factory(_logic(_ufunc)))


@KERNELS.register("Not", 1)
def not_(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        return arr(np.logical_not(x))

    return run


# ---------------------------------------------------------------------- bitwise


def _bitwise(ufunc: np.ufunc) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = arr(ufunc(a, b))
        return out if out.dtype == a.dtype else out.astype(a.dtype)

    return run


for _op, _ufunc in {"BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or, "BitwiseXor": np.bitwise_xor}.items():
    KERNELS.register(_op, 18)(_binary_factory(_bitwise(_ufunc)))


@KERNELS.register("BitwiseNot", 18)
def bitwise_not(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        return arr(np.invert(x))

    return run


@KERNELS.register("BitShift", (11, 28))
def bitshift(node: NodeSpec):
    direction = node.attr("direction", "")
    if isinstance(direction, bytes):
        direction = direction.decode()
    if direction not in ("LEFT", "RIGHT"):
        raise Unsupported(f"BitShift: direction must be LEFT or RIGHT, got {direction!r}")
    left = direction == "LEFT"

    def run(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        y = np.asarray(y)
        bits = x.dtype.itemsize * 8
        # shift amounts outside [0, bits) give only the sign fill (0, or -1 for a right
        # shift of a negative signed value); in range, numpy's shifts are C's.
        if y.dtype.kind == "i":
            out_of_range = (y < 0) | (y >= bits)
        else:
            out_of_range = y >= bits
        amount = np.where(out_of_range, 0, y).astype(x.dtype)
        shifted = np.left_shift(x, amount) if left else np.right_shift(x, amount)
        if not out_of_range.any():
            out = shifted
        else:
            if left or x.dtype.kind == "u":
                fill = np.zeros((), x.dtype)
            else:
                fill = np.where(x < 0, x.dtype.type(-1), x.dtype.type(0))
            out = np.where(out_of_range, fill, shifted)
        out = arr(out)
        return out if out.dtype == x.dtype else out.astype(x.dtype)

    return run


# ---------------------------------------------------------------------- Where


@KERNELS.register("Where", (9, 16))
def where(node: NodeSpec):
    compiled = jit.kernels("where")

    def run(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        if (type(cond) is np.ndarray and type(x) is np.ndarray and type(y) is np.ndarray
                and cond.dtype == np.bool_ and x.dtype == y.dtype and x.dtype.kind not in "USO"):
            if compiled is not None:
                done = compiled.run_where(cond, x, y)
                if done is not None:
                    return done  # type: ignore[no-any-return]
            return np.where(cond, x, y)  # the usual call: nothing to convert, an ndarray of x's dtype
        x, y = np.asarray(x), np.asarray(y)
        if x.dtype.kind in "USO" or y.dtype.kind in "USO":
            x, y = x.astype(object), y.astype(object)
        out = arr(np.where(np.asarray(cond, dtype=bool), x, y))
        return out if out.dtype == x.dtype else out.astype(x.dtype)

    return run
