"""Feeds of a fuzz case: plain values, recipes the worker turns into values, and their files.

Feeds travel from the parent to a worker by pickle, which makes every array contiguous and
would copy a huge one. A recipe (:class:`Zeros`, :class:`View`) says what to build in the
worker instead: a big zero tensor, a strided or Fortran-ordered or read-only view, a Python
list or scalar in place of an array. ``materialize`` builds it; ``encode``/``decode`` store
feeds in a corpus folder without pickle (arrays as ``.npy``, the rest as JSON), so that a
reproducer can be read without running code from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx.helper import tensor_dtype_to_np_dtype

#: how a :class:`View` turns its base array into the value fed
VIEWS = ("strided", "fortran", "readonly", "list", "scalar")


@dataclass(frozen=True)
class Zeros:
    """A zero tensor built in the worker (a huge one costs nothing to send)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class View:
    """``base`` fed as a strided/Fortran/read-only view, a nested Python list or a Python scalar."""

    kind: str
    base: Any


def materialize_all(feeds: dict[str, Any]) -> dict[str, Any]:
    """The feeds a runtime is given."""
    return {name: materialize(value) for name, value in feeds.items()}


def materialize(value: Any) -> Any:
    """The value a runtime is fed for ``value`` (recipes built, sequences element-wise)."""
    if isinstance(value, Zeros):
        return np.zeros(value.shape, np.dtype(value.dtype))
    if isinstance(value, View):
        base = materialize(value.base)
        return _view(value.kind, np.asarray(base))
    if isinstance(value, list):
        return [materialize(v) for v in value]
    return value


def _view(kind: str, base: np.ndarray) -> Any:
    if kind == "strided":  # every other element of a twice-as-long buffer: not contiguous
        doubled = np.repeat(base.reshape(-1), 2).reshape(*base.shape[:-1], -1) if base.ndim else base
        return doubled[..., ::2] if base.ndim else base
    if kind == "fortran":
        return np.asfortranarray(base)
    if kind == "readonly":
        base = base.copy()
        base.flags.writeable = False
        return base
    if kind == "list":
        return base.tolist()
    if kind == "scalar":
        return base.reshape(-1)[0].item() if base.size else 0
    raise ValueError(f"unknown view {kind!r}")


def nbytes(value: Any) -> int:
    """What a feed costs to send (recipes: their base only)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes) if value.dtype != object else 64 * int(value.size)
    if isinstance(value, View):
        return nbytes(value.base)
    if isinstance(value, list):
        return sum(nbytes(v) for v in value)
    return 16


# -- feeds for a model ---------------------------------------------------------------------
def declared_feeds(model: onnx.ModelProto, rng: np.random.Generator, limit: int = 1 << 20) -> dict[str, Any] | None:
    """Random feeds matching the model's declared (non-initializer) tensor inputs, symbolic
    dims as 2; None when an input is not a tensor or is larger than ``limit`` elements."""
    initializers = {i.name for i in model.graph.initializer}
    feeds: dict[str, Any] = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            return None
        tensor = value.type.tensor_type
        try:
            dtype = tensor_dtype_to_np_dtype(tensor.elem_type)
        except Exception:  # noqa: BLE001 - an undefined or unknown element type: no feed to build
            return None
        shape = tuple(d.dim_value if d.HasField("dim_value") else 2 for d in tensor.shape.dim)
        if not tensor.HasField("shape"):
            shape = (2, 3)
        if any(d < 0 or d > limit for d in shape) or np.prod(shape, dtype=np.float64) > limit:
            return None
        feeds[value.name] = _random(shape, dtype, rng)
    return feeds


def _random(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f" or dtype.type.__module__ != "numpy":
        return rng.standard_normal(shape).astype(np.float32).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 3, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j).astype(dtype)
    if dtype == np.dtype(object):
        return np.full(shape, "a", dtype=object)
    return np.zeros(shape, dtype)


# -- corpus files --------------------------------------------------------------------------
def encode(feeds: dict[str, Any], folder: Path) -> dict[str, Any]:
    """JSON for ``feeds``, writing arrays as ``folder/feed-<i>.npy``."""
    counter = iter(range(1 << 30))
    return {name: _encode(value, folder, counter) for name, value in feeds.items()}


def _encode(value: Any, folder: Path, counter: Any) -> Any:
    if value is None:
        return {"none": True}
    if isinstance(value, Zeros):
        return {"zeros": list(value.shape), "dtype": value.dtype}
    if isinstance(value, View):
        return {"view": value.kind, "of": _encode(value.base, folder, counter)}
    if isinstance(value, list):
        return {"sequence": [_encode(v, folder, counter) for v in value]}
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return {"objects": [_jsonable(v) for v in value.reshape(-1)], "shape": list(value.shape)}
        name = f"feed-{next(counter)}.npy"
        if value.dtype.kind == "V" or value.dtype.type.__module__ != "numpy":  # ml_dtypes: bits + name
            bits = value.view(np.dtype(f"u{value.dtype.itemsize}"))
            np.save(folder / name, bits, allow_pickle=False)
            return {"npy": name, "dtype": value.dtype.name}
        np.save(folder / name, value, allow_pickle=False)
        return {"npy": name}
    return {"python": _jsonable(value)}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def decode(spec: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The feeds ``encode`` wrote."""
    return {name: _decode(s, folder) for name, s in spec.items()}


def _decode(spec: dict[str, Any], folder: Path) -> Any:
    if "none" in spec:
        return None
    if "zeros" in spec:
        return Zeros(tuple(spec["zeros"]), spec["dtype"])
    if "view" in spec:
        return View(spec["view"], _decode(spec["of"], folder))
    if "sequence" in spec:
        return [_decode(s, folder) for s in spec["sequence"]]
    if "objects" in spec:
        flat = np.empty(len(spec["objects"]), dtype=object)
        for i, item in enumerate(spec["objects"]):
            flat[i] = item
        return flat.reshape(spec["shape"])
    if "npy" in spec:
        array = np.load(folder / spec["npy"], allow_pickle=False)
        if "dtype" in spec:
            import ml_dtypes

            array = array.view(np.dtype(getattr(ml_dtypes, spec["dtype"])))
        return array
    return spec["python"]
