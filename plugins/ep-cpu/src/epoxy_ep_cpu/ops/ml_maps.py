"""ai.onnx.ml ops reading or writing maps: ZipMap (1), CastMap (1), DictVectorizer (1).

At run time a map is a Python ``dict`` (str or int keys, Python scalars as values; the
session's feed validation makes them so) and a ``seq(map)`` a ``list`` of dicts, which is
what onnxruntime returns for ZipMap. Where onnxruntime's behaviour is not in the spec it
is followed (noted at each place), so results compare equal.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec, ValueType
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._util import as_text

ML = "ai.onnx.ml"
_INT64_MIN = np.iinfo(np.int64).min


def _where(node: NodeSpec) -> str:
    return f"{node.op_type} node {node.name!r}"


def _map_type(node: NodeSpec, index: int = 0) -> ValueType | None:
    """The declared map type of input ``index`` (None when unknown or not a map)."""
    if index < len(node.input_types) and node.input_types[index].kind == "map":
        return node.input_types[index]
    return None


def _check_map(node: NodeSpec, value: Any) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{_where(node)}: expected a map (dict) input, got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------- ZipMap


@KERNELS.register("ZipMap", 1, domain=ML)
def zip_map(node: NodeSpec):
    strings = node.attr("classlabels_strings") or ()
    ints = node.attr("classlabels_int64s") or ()
    if bool(strings) == bool(ints):
        raise Unsupported(f"{_where(node)}: exactly one of classlabels_strings and classlabels_int64s must be "
                          f"given (non-empty); got {'both' if strings else 'neither'}")
    labels: list[Any] = [as_text(s) for s in strings] if strings else [int(i) for i in ints]
    # a repeated label keeps its last column; keys in ascending order, the order
    # onnxruntime's (ordered) maps come back in
    column = {label: j for j, label in enumerate(labels)}
    keys = sorted(column)
    columns = np.asarray([column[k] for k in keys], dtype=np.int64)
    n_labels = len(labels)

    def run(x: np.ndarray) -> list[dict[Any, float]]:
        if x.ndim not in (1, 2):
            raise ValueError(f"{_where(node)}: input must be 1-D [C] or 2-D [N, C], got shape {list(x.shape)}")
        rows = x.reshape(1, -1) if x.ndim == 1 else x
        if rows.shape[1] != n_labels:
            raise ValueError(f"{_where(node)}: input has {rows.shape[1]} scores per row but the node has "
                             f"{n_labels} class labels (input shape {list(x.shape)})")
        # float32 scores as Python floats (exact), as onnxruntime returns them
        table = rows[:, columns].astype(np.float32, copy=False).tolist()
        return [dict(zip(keys, row)) for row in table]

    return run


# --------------------------------------------------------------------------- CastMap

_CAST_TO = {"TO_FLOAT": np.dtype(np.float32), "TO_STRING": np.dtype(object), "TO_INT64": np.dtype(np.int64)}
_MAP_FORMS = ("DENSE", "SPARSE")
#: onnxruntime pads SPARSE outputs with these (for strings its literal text is "0.f")
_PAD = {"TO_FLOAT": 0.0, "TO_STRING": "0.f", "TO_INT64": 0}

# C's strtof/strtoll read the longest numeric prefix after leading white space (std::stof,
# std::stoll: what onnxruntime uses), so "1.5abc" is 1.5 and " 7 " is 7
_C_FLOAT = re.compile(r"\s*([+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?))", re.IGNORECASE)
_C_INT = re.compile(r"\s*([+-]?\d+)")


def _text_to_float(node: NodeSpec, key: int, text: str) -> float:
    match = _C_FLOAT.match(text)
    if match is None:
        raise ValueError(f"{_where(node)}: value {text!r:.40} of key {key} is not a number (cast_to TO_FLOAT)")
    value = float(match.group(1))
    with np.errstate(over="ignore"):
        narrowed = np.float32(value)
    if np.isinf(narrowed) and not np.isinf(value):
        raise ValueError(f"{_where(node)}: value {text!r:.40} of key {key} is out of float range")
    return float(narrowed)


def _text_to_int(node: NodeSpec, key: int, text: str) -> int:
    match = _C_INT.match(text)
    if match is None:
        raise ValueError(f"{_where(node)}: value {text!r:.40} of key {key} is not an integer (cast_to TO_INT64)")
    value = int(match.group(1))
    if not _INT64_MIN <= value <= np.iinfo(np.int64).max:
        raise ValueError(f"{_where(node)}: value {text!r:.40} of key {key} is out of int64 range")
    return value


def _floats_to(values: Sequence[float], cast_to: str) -> np.ndarray:
    floats = np.asarray(values, dtype=np.float32)
    if cast_to == "TO_FLOAT":
        return floats
    if cast_to == "TO_INT64":
        # truncation toward zero; NaN and values out of int64's range give INT64_MIN,
        # as onnxruntime's float -> int64 conversion does on x86
        out = np.full(floats.shape, _INT64_MIN, dtype=np.int64)
        wide = floats.astype(np.float64)
        ok = np.isfinite(wide) & (wide >= -(2.0**63)) & (wide < 2.0**63)
        out[ok] = wide[ok].astype(np.int64)
        return out
    # C's "%f" of the float (std::to_string): six decimals
    return np.asarray([f"{v:f}" for v in floats.astype(np.float64).tolist()], dtype=object)


def _texts_to(node: NodeSpec, keys: Sequence[int], values: Sequence[Any], cast_to: str) -> np.ndarray:
    texts = [as_text(v) for v in values]
    if cast_to == "TO_STRING":
        return np.asarray(texts, dtype=object).reshape(len(texts))
    if cast_to == "TO_FLOAT":
        return np.asarray([_text_to_float(node, k, t) for k, t in zip(keys, texts)], dtype=np.float32)
    return np.asarray([_text_to_int(node, k, t) for k, t in zip(keys, texts)], dtype=np.int64)


@KERNELS.register("CastMap", 1, domain=ML)
def cast_map(node: NodeSpec):
    cast_to = as_text(node.attr("cast_to", "TO_FLOAT"))
    map_form = as_text(node.attr("map_form", "DENSE"))
    max_map = int(node.attr("max_map", 1))
    if cast_to not in _CAST_TO:
        raise Unsupported(f"{_where(node)}: cast_to {cast_to!r} is not one of {sorted(_CAST_TO)}")
    if map_form not in _MAP_FORMS:
        raise Unsupported(f"{_where(node)}: map_form {map_form!r} is not one of {list(_MAP_FORMS)}")
    if map_form == "SPARSE" and max_map <= 0:
        raise Unsupported(f"{_where(node)}: max_map must be > 0 when map_form is SPARSE, got {max_map}")
    declared = _map_type(node)
    if declared is not None and declared.key_dtype is not None and declared.key_dtype != np.dtype(np.int64):
        raise Unsupported(f"{_where(node)}: input keys must be int64, the input is declared with "
                          f"{declared.key_dtype} keys")
    out_dtype = _CAST_TO[cast_to]
    pad = _PAD[cast_to]

    def convert(keys: list[int], values: list[Any]) -> np.ndarray:
        if not values:
            return np.empty(0, dtype=out_dtype)
        if any(isinstance(v, (str, bytes)) for v in values):  # map(int64, string)
            return _texts_to(node, keys, values, cast_to)
        return _floats_to(values, cast_to)

    def run(m: Any) -> np.ndarray:
        items = sorted(_check_map(node, m).items())  # ascending keys, as onnxruntime's ordered map
        if map_form == "DENSE":
            return convert([k for k, _ in items], [v for _, v in items]).reshape(1, -1)
        if items and items[0][0] < 0:
            raise ValueError(f"{_where(node)}: negative keys are not allowed with map_form SPARSE "
                             f"(smallest key {items[0][0]})")
        kept = [(k, v) for k, v in items if k < max_map]  # keys at or above max_map are dropped
        out = np.full(max_map, pad, dtype=out_dtype)
        if kept:
            out[np.asarray([k for k, _ in kept], dtype=np.int64)] = convert([k for k, _ in kept],
                                                                            [v for _, v in kept])
        return out.reshape(1, max_map)

    return run


# --------------------------------------------------------------------------- DictVectorizer


def _vocabulary(node: NodeSpec, key_dtype: np.dtype | None) -> tuple[list[Any], str]:
    """The vocabulary the input's keys are looked up in, and which attribute held it."""
    strings = [as_text(s) for s in node.attr("string_vocabulary") or ()]
    ints = [int(i) for i in node.attr("int64_vocabulary") or ()]
    if key_dtype is not None:  # onnxruntime reads the vocabulary of the input's key type
        use_strings = key_dtype == np.dtype(object)
        vocabulary, attr = (strings, "string_vocabulary") if use_strings else (ints, "int64_vocabulary")
        if not vocabulary:
            raise Unsupported(f"{_where(node)}: the input has {'string' if use_strings else 'int64'} keys but "
                              f"{attr} is missing or empty")
        return vocabulary, attr
    if bool(strings) == bool(ints):
        raise Unsupported(f"{_where(node)}: exactly one of string_vocabulary and int64_vocabulary must be given "
                          f"(non-empty); got {'both' if strings else 'neither'}")
    return (strings, "string_vocabulary") if strings else (ints, "int64_vocabulary")


@KERNELS.register("DictVectorizer", 1, domain=ML)
def dict_vectorizer(node: NodeSpec):
    declared = _map_type(node)
    key_dtype = declared.key_dtype if declared is not None else None
    vocabulary, attr = _vocabulary(node, key_dtype)
    string_keys = attr == "string_vocabulary"
    # a key listed twice fills every one of its columns (onnxruntime does the same)
    positions: dict[Any, list[int]] = {}
    for j, key in enumerate(vocabulary):
        positions.setdefault(key, []).append(j)
    size = len(vocabulary)
    value_dtype = declared.element.dtype if declared is not None and declared.element is not None else None
    if value_dtype is None and node.output_types and node.output_types[0].dtype is not None:
        value_dtype = node.output_types[0].dtype

    def run(m: Any) -> np.ndarray:
        items = _check_map(node, m)
        dtype = value_dtype
        if dtype is None:  # untyped input: the values say
            sample = next(iter(items.values()), 0.0)
            dtype = np.dtype(object) if isinstance(sample, (str, bytes)) else np.dtype(np.float32)
        out = np.full(size, "" if dtype == np.dtype(object) else 0, dtype=dtype)
        columns: list[int] = []
        values: list[Any] = []
        for key, value in items.items():
            if isinstance(key, str) != string_keys:
                raise TypeError(f"{_where(node)}: key {key!r:.40} does not match {attr}")
            found = positions.get(key)
            if found is not None:
                columns.extend(found)
                values.extend([value] * len(found))
        if columns:
            out[np.asarray(columns, dtype=np.int64)] = values
        return out.reshape(1, size)

    return run
