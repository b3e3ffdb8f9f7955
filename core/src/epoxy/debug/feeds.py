"""Inputs for a check: files given on the command line, or seeded random values made from
the model's declared input types.

Random values: floats standard normal, integers in ``[0, 4)`` (small enough to be a valid
index, axis count or repeat almost anywhere), bools half true; symbolic dims are 1 unless
``dims`` names them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError

Feeds = dict[str, np.ndarray]

#: integer inputs are drawn from [0, INT_HIGH)
INT_HIGH = 4


def declared_inputs(model: Any) -> list[tuple[str, np.dtype[Any], tuple[int | str, ...]]]:
    """(name, dtype, shape) of each graph input that is not an initializer."""
    from onnx import helper

    constants = {t.name for t in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in constants:
            continue
        if not value.type.HasField("tensor_type"):
            raise InvalidArgumentError(f"input {value.name!r}: random values are made for tensor inputs only; "
                                       "give this one with --inputs")
        tensor = value.type.tensor_type
        if not tensor.HasField("shape"):
            raise InvalidArgumentError(f"input {value.name!r} has no declared rank: give it with --inputs")
        dims: list[int | str] = []
        for d in tensor.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?"))
        out.append((value.name, np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)), tuple(dims)))
    return out


def random_feeds(model: Any, seed: int = 0, dims: Mapping[str, int] | None = None, int_high: int = INT_HIGH) -> Feeds:
    """One seeded random value per graph input, from its declared type and shape (integers
    in ``[0, int_high)``)."""
    rng = np.random.default_rng(seed)
    dims = dict(dims or {})
    feeds: Feeds = {}
    for name, dtype, declared in declared_inputs(model):
        shape = tuple(d if isinstance(d, int) and d > 0 else dims.get(str(d), 1) for d in declared)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[name] = rng.integers(0, int_high, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[name] = rng.random(shape) < 0.5
        else:
            raise InvalidArgumentError(f"input {name!r}: no random values for dtype {dtype}; give it with --inputs")
    return feeds


def check_names(model: Any, feeds: Mapping[str, Any]) -> None:
    """Every input given, nothing unknown: a usage error named up front, not a failed run."""
    constants = {t.name for t in model.graph.initializer}
    required = [v.name for v in model.graph.input if v.name not in constants]
    known = {v.name for v in model.graph.input}
    missing = [n for n in required if n not in feeds]
    if missing:
        raise InvalidArgumentError(f"input {missing[0]!r} has no value (the model's inputs are {required})")
    unknown = [n for n in feeds if n not in known]
    if unknown:
        raise InvalidArgumentError(f"{unknown[0]!r} is not an input of the model (its inputs are {required})")


def parse_dims(specs: Sequence[str]) -> dict[str, int]:
    """``["batch=4"]`` -> ``{"batch": 4}``."""
    out = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name or not value.isdigit():
            raise InvalidArgumentError(f"--dim must look like name=N, got {spec!r}")
        out[name] = int(value)
    return out


def load_inputs(specs: Sequence[str], flag: str = "--inputs") -> Feeds:
    """``name=file.npy`` entries and ``file.npz`` archives (every array, by its key), as the
    commands taking input files read them (``flag`` names the option in errors)."""
    feeds: Feeds = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep and spec.endswith(".npz"):
            feeds.update(_load_npz(Path(spec), flag))
            continue
        if not sep or not name or not path:
            raise InvalidArgumentError(f"{flag} takes name=file.npy or file.npz, got {spec!r}")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"{flag} {name}: cannot read {path}: {exc}") from exc
    return feeds


def _load_npz(path: Path, flag: str) -> Feeds:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"{flag}: cannot read {path}: {exc}") from exc
