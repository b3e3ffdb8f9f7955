"""What the translator knows about a graph before building anything: value types, and the
values computable at conversion time (initializers plus constant subexpressions such as
``ConstantOfShape(initializer)`` or ``Shape`` of a static tensor), folded with numpy.

No coremltools here: capability runs on every platform at session creation and must be cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from epoxy.contract import GraphSpec, NodeSpec, ValueType

FLOAT = frozenset({np.dtype(np.float32)})
INT = frozenset({np.dtype(np.int32), np.dtype(np.int64)})
BOOL = frozenset({np.dtype(np.bool_)})
NUMERIC = FLOAT | INT
ANY = NUMERIC | BOOL

MAX_RANK = 5  # Core ML tensors have rank <= 5
#: folding a constant bigger than this is left to the cpu provider
MAX_FOLD_ELEMENTS = 1 << 28
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def dtype_name(dt: Any) -> str:
    return "unknown" if dt is None else np.dtype(dt).name


class Facts:
    """Types and compile-time values of a graph (shared by capability and compile)."""

    def __init__(self, graph: GraphSpec) -> None:
        self.graph = graph
        self.known: dict[str, np.ndarray] = {}
        self.folded: set[int] = set()  # nodes whose every output is known
        self._fold_all()

    # -- queries ---------------------------------------------------------------------
    def vtype(self, name: str) -> ValueType:
        return self.graph.value_type(name)

    def is_known(self, name: str) -> bool:
        return bool(name) and (name in self.known or self.graph.constant(name) is not None)

    def value(self, name: str) -> np.ndarray | None:
        if name in self.known:
            return self.known[name]
        return self.graph.constant(name)

    def shape(self, name: str) -> tuple[int, ...] | None:
        value = self.value(name)
        if value is not None:
            return tuple(int(d) for d in np.shape(value))
        vt = self.vtype(name)
        if vt.is_static:
            return tuple(int(d) for d in vt.shape)  # type: ignore[union-attr]
        return None

    def dtype(self, name: str) -> np.dtype | None:
        value = self.value(name)
        if value is not None:
            return np.asarray(value).dtype
        vt = self.vtype(name)
        return None if vt.dtype is None else np.dtype(vt.dtype)

    def used(self, name: str) -> bool:
        return bool(name) and (bool(self.graph.consumers(name)) or name in self.graph.outputs)

    def tensor_problem(self, name: str, dtypes: frozenset[np.dtype], what: str) -> str | None:
        """Why a value cannot be a Core ML tensor here (None when it can)."""
        if self.is_known(name):
            dt = self.dtype(name)
            if dt not in dtypes:
                return f"{what} {name!r} has dtype {dtype_name(dt)} (supported here: {_names(dtypes)})"
            return None
        vt = self.vtype(name)
        if vt.kind != "tensor":
            return f"{what} {name!r} is not a tensor ({vt.kind})"
        dt = None if vt.dtype is None else np.dtype(vt.dtype)
        if dt not in dtypes:
            return f"{what} {name!r} has dtype {dtype_name(dt)} (supported here: {_names(dtypes)})"
        if not vt.is_static:
            return f"{what} {name!r} has a dynamic shape {vt.shape} (Core ML programs need static shapes)"
        if len(vt.shape) > MAX_RANK:  # type: ignore[arg-type]
            return f"{what} {name!r} has rank {len(vt.shape)} > {MAX_RANK} (Core ML limit)"  # type: ignore[arg-type]
        return None

    # -- constant folding ------------------------------------------------------------
    def _fold_all(self) -> None:
        for node in self.graph.nodes:
            fold = FOLDERS.get(node.op_type)
            if fold is None or node.domain not in ("", "ai.onnx"):
                continue
            try:
                values = fold(node, self)
            except _NotFoldable:
                continue
            except Exception:  # noqa: BLE001, S112 - a malformed constant chain is simply not folded
                continue
            if values is None:
                continue
            outs = [o for o in node.outputs if o]
            if len(values) != len(outs):
                continue
            if any(np.asarray(v).size > MAX_FOLD_ELEMENTS for v in values):
                continue
            for name, value in zip(outs, values):
                arr = np.asarray(value)
                want = self.vtype(name).dtype
                if want is not None and arr.dtype != np.dtype(want):
                    arr = arr.astype(want)
                self.known[name] = arr
            self.folded.add(node.index)


def _names(dtypes: frozenset[np.dtype]) -> str:
    return ", ".join(sorted(d.name for d in dtypes))


class _NotFoldable(Exception):
    pass


def _k(node: NodeSpec, facts: Facts, i: int) -> np.ndarray:
    """Known value of input ``i`` or raise _NotFoldable."""
    if i >= len(node.inputs) or not node.inputs[i]:
        raise _NotFoldable
    value = facts.value(node.inputs[i])
    if value is None:
        raise _NotFoldable
    return np.asarray(value)


def _opt(node: NodeSpec, facts: Facts, i: int) -> np.ndarray | None:
    if i >= len(node.inputs) or not node.inputs[i]:
        return None
    return _k(node, facts, i)


def _all_known(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    return [_k(node, facts, i) for i, n in enumerate(node.inputs) if n]


def _fold_constant(node: NodeSpec, facts: Facts) -> list[np.ndarray] | None:
    a = node.attributes
    if "value" in a and isinstance(a["value"], np.ndarray):
        return [a["value"]]
    if "value_float" in a:
        return [np.array(a["value_float"], np.float32)]
    if "value_int" in a:
        return [np.array(a["value_int"], np.int64)]
    if "value_floats" in a:
        return [np.array(a["value_floats"], np.float32)]
    if "value_ints" in a:
        return [np.array(a["value_ints"], np.int64)]
    return None


def _fold_constant_of_shape(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    shape = tuple(int(d) for d in _k(node, facts, 0).reshape(-1))
    value = node.attr("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    if int(np.prod(shape, dtype=np.int64)) > MAX_FOLD_ELEMENTS:
        raise _NotFoldable
    return [np.full(shape, fill[0], dtype=fill.dtype)]


def _fold_shape(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    shape = facts.shape(node.inputs[0])
    if shape is None:
        raise _NotFoldable
    start, end = node.attr("start", 0), node.attr("end", None)
    return [np.array(shape[slice(start, end)], np.int64)]


def _fold_size(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    shape = facts.shape(node.inputs[0])
    if shape is None:
        raise _NotFoldable
    return [np.array(int(np.prod(shape, dtype=np.int64)), np.int64)]


def _fold_cast(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    x = _k(node, facts, 0)
    want = facts.vtype(node.outputs[0]).dtype
    if want is None:
        raise _NotFoldable
    return [x.astype(want)]


def _axes(node: NodeSpec, facts: Facts, index: int = 1) -> list[int] | None:
    if node.opset >= 13 and node.op_type in ("Unsqueeze", "Squeeze"):
        v = _opt(node, facts, index)
        return None if v is None else [int(a) for a in v.reshape(-1)]
    axes = node.attr("axes")
    return None if axes is None else [int(a) for a in axes]


def _fold_unsqueeze(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    x = _k(node, facts, 0)
    axes = _axes(node, facts)
    if axes is None:
        raise _NotFoldable
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return [x.reshape(shape)]


def _fold_squeeze(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    x = _k(node, facts, 0)
    axes = _axes(node, facts)
    if axes is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(a % x.ndim for a in axes))]


def _fold_reshape(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    x = _k(node, facts, 0)
    if node.opset < 5:
        target = list(node.attr("shape"))
    else:
        target = [int(d) for d in _k(node, facts, 1).reshape(-1)]
    if not node.attr("allowzero", 0):
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return [x.reshape(target)]


def _fold_concat(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    return [np.concatenate(_all_known(node, facts), axis=node.attr("axis", 0))]


def _fold_gather(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    x, idx = _k(node, facts, 0), _k(node, facts, 1)
    axis = node.attr("axis", 0) % max(x.ndim, 1)
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take(x, idx, axis=axis)]


def _fold_slice(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    x = _k(node, facts, 0)
    if node.opset < 10:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = list(node.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in _k(node, facts, 1)]
        ends = [int(v) for v in _k(node, facts, 2)]
        a = _opt(node, facts, 3)
        s = _opt(node, facts, 4)
        axes = list(range(len(starts))) if a is None else [int(v) for v in a]
        steps = [1] * len(starts) if s is None else [int(v) for v in s]
    index = [slice(None)] * x.ndim
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        index[ax % x.ndim] = slice(*_clamp_slice(st, en, sp, x.shape[ax % x.ndim]))
    return [x[tuple(index)]]


def _clamp_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int | None, int]:
    """ONNX Slice bounds -> Python slice bounds (None end = run past the beginning)."""
    if step == 0:
        raise _NotFoldable
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start = min(max(start, 0), dim)
        end = min(max(end, 0), dim)
        return start, end, step
    start = min(max(start, -1), dim - 1)
    end = min(max(end, -1), dim - 1)
    return start, (None if end < 0 else end), step


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[NodeSpec, Facts], list[np.ndarray]]:
    def fold(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
        a, b = _k(node, facts, 0), _k(node, facts, 1)
        return [fn(a, b)]
    return fold


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)
    return a / b


def _fold_range(node: NodeSpec, facts: Facts) -> list[np.ndarray]:
    start, limit, delta = (_k(node, facts, i) for i in range(3))
    return [np.arange(start, limit, delta, dtype=start.dtype)]


FOLDERS: dict[str, Callable[[NodeSpec, Facts], list[np.ndarray] | None]] = {
    "Constant": _fold_constant,
    "ConstantOfShape": _fold_constant_of_shape,
    "Shape": _fold_shape,
    "Size": _fold_size,
    "Cast": _fold_cast,
    "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze,
    "Reshape": _fold_reshape,
    "Concat": _fold_concat,
    "Gather": _fold_gather,
    "Slice": _fold_slice,
    "Identity": lambda node, facts: [_k(node, facts, 0)],
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Range": _fold_range,
}
