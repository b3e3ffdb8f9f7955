"""Validate user feeds against the model's declared inputs before anything runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..contract import ValueType
from ..errors import InvalidFeedError, ResourceLimitError
from ..graph.dtypes import describe_dtype
from ..graph.type_strings import type_string


def _describe(vt: ValueType) -> str:
    if vt.kind == "tensor":
        dims = "?" if vt.shape is None else "[" + ", ".join("?" if d is None else str(d) for d in vt.shape) + "]"
        return f"tensor({describe_dtype(vt.dtype)}) with shape {dims}"
    if vt.kind in ("map", "sequence", "optional"):
        return type_string(vt)
    return vt.kind


#: Python values converted to arrays of the input's declared dtype (onnxruntime takes them)
_PYTHON_VALUES = (list, tuple, int, float, bool, complex, str, bytes)


def _from_python(name: str, value: Any, vt: ValueType) -> np.ndarray:
    """A list or scalar as an array of the declared dtype. Unlike onnxruntime, a conversion
    that would change a value (1.5 into an int input, 2**40 into int32) is refused."""
    want = vt.dtype
    if want is not None and want == np.dtype(object):
        return _strings(name, np.array(value, dtype=object))
    try:
        array = np.asarray(value)
    except ValueError as exc:  # ragged nesting
        raise InvalidFeedError(f"input {name!r}: cannot make an array from the given {type(value).__name__}: {exc}",
                               input_name=name) from exc
    if want is None or array.dtype == want:
        return array
    if array.dtype == object:
        raise InvalidFeedError(f"input {name!r}: the {type(value).__name__} holds values numpy cannot put in one "
                               f"numeric array (mixed types, or ints beyond 64 bits); expected {describe_dtype(want)}",
                               input_name=name)
    if array.dtype.kind not in "biufc" or array.dtype.kind == "c" and want.kind != "c":
        raise InvalidFeedError(f"input {name!r}: expected {describe_dtype(want)} values, got "
                               f"{describe_dtype(array.dtype)} from a {type(value).__name__}", input_name=name)
    converted = _exact_cast(array, want)
    if converted is None:
        raise InvalidFeedError(
            f"input {name!r}: the {type(value).__name__} holds values that {describe_dtype(want)} cannot represent "
            f"exactly (e.g. fractions into an int input, or out-of-range values); pass a numpy array of "
            f"dtype {describe_dtype(want)}", input_name=name)
    return converted


def _exact_cast(array: np.ndarray, want: np.dtype) -> np.ndarray | None:
    """``array`` as ``want``, or None when that would change a value (floats into floats
    round; only overflow to inf is refused)."""
    with np.errstate(all="ignore"):
        converted = array.astype(want)
        if want.kind in "fc" and array.dtype.kind in "fc":
            # float -> float rounds (0.1 into float32, as onnxruntime does); only overflow to inf is refused
            exact = bool(np.all(np.isfinite(converted) | ~np.isfinite(array)))
        else:  # into ints or bools a conversion must keep every value
            same = (converted == array) | ((array != array) & (converted != converted))  # NaN stays NaN
            exact = converted.shape == array.shape and bool(np.all(same))
    return converted if exact else None


def _strings(name: str, array: np.ndarray) -> np.ndarray:
    """String tensors as object arrays of ``str`` (``bytes`` decoded as UTF-8)."""
    if array.dtype.kind == "S" or (array.dtype == object and any(isinstance(v, bytes) for v in array.flat)):
        try:
            return np.vectorize(lambda v: v.decode("utf-8") if isinstance(v, bytes) else v, otypes=[object])(array)
        except UnicodeDecodeError as exc:
            raise InvalidFeedError(f"input {name!r}: bytes that are not UTF-8 text: {exc}", input_name=name) from exc
    if array.dtype != object:
        array = array.astype(object)
    bad = next((v for v in array.flat if not isinstance(v, str)), None)
    if bad is not None:
        raise InvalidFeedError(f"input {name!r}: expected strings, found a {type(bad).__name__} ({bad!r:.40})",
                               input_name=name)
    return array


def check_tensor(name: str, value: Any, vt: ValueType, symbols: dict[str, int]) -> np.ndarray:
    """Return ``value`` as an ndarray if it matches ``vt``; raise naming the input otherwise."""
    if not isinstance(value, np.ndarray):
        if isinstance(value, np.generic):
            value = np.asarray(value)
        elif isinstance(value, _PYTHON_VALUES):
            try:
                value = _from_python(name, value, vt)
            except MemoryError as exc:  # a huge nested list: numpy could not hold its array
                raise ResourceLimitError(
                    f"input {name!r}: the {type(value).__name__} given is too large to convert to an array "
                    f"({_describe(vt)} expected): out of memory; pass a numpy array", value=name) from exc
        else:
            raise InvalidFeedError(
                f"input {name!r}: expected a numpy.ndarray ({_describe(vt)}), got {type(value).__name__}",
                input_name=name,
            )
    if vt.dtype is not None and vt.dtype == np.dtype(object) and value.dtype.kind in "OUS":
        value = _strings(name, value)  # strings may be fed as unicode, bytes or object arrays of either
    else:
        _check_dtype(name, value.dtype, vt)
    _check_shape(name, tuple(value.shape), vt, symbols)
    if not value.flags.writeable:
        # a read-only buffer (np.frombuffer over a request body, an Arrow block in Ray Data, a
        # memory map): compiled kernels (ep-cpu's numba tier) type read-only arrays apart and
        # would compile, and cache, a second variant of each for it, seconds in a fresh
        # process; one copy costs microseconds. The caller's buffer is never written either way.
        value = value.copy()
    return value


def check_device_tensor(name: str, value: Any, vt: ValueType, symbols: dict[str, int]) -> Any:
    """Validate a device value (one a provider's allocator accepts) through its ``dtype`` and
    ``shape`` attributes, with the same messages as host arrays; returned unchanged."""
    if vt.kind == "optional":
        vt = vt.element or ValueType()
    if vt.kind == "sequence":
        raise InvalidFeedError(f"input {name!r}: expected a sequence (list of arrays), got {type(value).__name__}",
                               input_name=name)
    if vt.kind != "tensor":
        return value
    try:
        dtype, shape = np.dtype(value.dtype), tuple(int(d) for d in value.shape)
    except (AttributeError, TypeError) as exc:
        raise InvalidFeedError(
            f"input {name!r}: device value {type(value).__name__} has no numpy-compatible dtype/shape ({exc})",
            input_name=name,
        ) from exc
    _check_dtype(name, dtype, vt)
    _check_shape(name, shape, vt, symbols)
    return value


def _check_dtype(name: str, dtype: np.dtype, vt: ValueType) -> None:
    if vt.dtype is not None and dtype != vt.dtype:
        raise InvalidFeedError(
            f"input {name!r}: expected dtype {describe_dtype(vt.dtype)}, got {describe_dtype(dtype)}",
            input_name=name,
        )


def _check_shape(name: str, shape: tuple[int, ...], vt: ValueType, symbols: dict[str, int]) -> None:
    if vt.shape is None:
        return
    if len(shape) != len(vt.shape):
        raise InvalidFeedError(
            f"input {name!r}: expected rank {len(vt.shape)} ({_describe(vt)}), got shape {list(shape)}",
            input_name=name,
        )
    for axis, (want, got) in enumerate(zip(vt.shape, shape)):
        if isinstance(want, int) and want != got:
            raise InvalidFeedError(
                f"input {name!r}: dim {axis} must be {want}, got {got} (shape {list(shape)}, "
                f"expected {_describe(vt)})",
                input_name=name,
            )
        if isinstance(want, str):
            seen = symbols.setdefault(want, got)
            if seen != got:
                raise InvalidFeedError(
                    f"input {name!r}: dim {axis} ({want!r}) is {got} but another input set {want!r}={seen}",
                    input_name=name,
                )


#: Python and numpy scalars a numeric map value may be given as
_NUMBERS = (int, float, np.integer, np.floating, np.bool_)
_NONE = object()  # "nothing found" (None itself may be the offending key or value)


def _first_not(items: list[Any], types: tuple[type, ...]) -> Any:
    """The first of ``items`` that is not an instance of ``types``, else ``_NONE``."""
    return next((v for v in items if not isinstance(v, types)), _NONE)


def check_map(name: str, value: Any, vt: ValueType) -> dict[Any, Any]:
    """A map feed: a dict whose keys are ``str`` (string keys) or ints (integer keys) and
    whose values are numbers or strings of the value type; returned as a new dict of plain
    Python keys and values (numbers rounded to the declared type, e.g. float32, as
    onnxruntime stores them). Wrong key or value types are an :class:`InvalidFeedError`."""
    want = type_string(vt)
    if not isinstance(value, Mapping):
        raise InvalidFeedError(f"input {name!r}: expected a dict ({want}), got {type(value).__name__}",
                               input_name=name)
    keys = _map_keys(name, list(value.keys()), vt.key_dtype, want)
    element = vt.element or ValueType()
    if element.kind == "tensor":
        values = _map_values(name, list(value.values()), element.dtype, want)
    else:  # maps of sequences or maps: valid ONNX, though no ai.onnx.ml op takes them
        values = [check_value(f"{name}[{k!r}]", v, element, {}) for k, v in zip(keys, value.values())]
    return dict(zip(keys, values))


def _map_keys(name: str, keys: list[Any], key_dtype: np.dtype | None, want: str) -> list[Any]:
    if key_dtype is None:
        return keys
    if key_dtype == np.dtype(object):
        return _texts(name, keys, "keys", want)
    bad = _first_not(keys, (int, np.integer))
    if bad is not _NONE:
        raise InvalidFeedError(f"input {name!r}: map keys must be ints ({want}), got key {bad!r:.40} of type "
                               f"{type(bad).__name__}", input_name=name)
    ints = [int(k) for k in keys]
    info = np.iinfo(key_dtype)
    out = next((k for k in ints if not info.min <= k <= info.max), None)
    if out is not None:
        raise InvalidFeedError(f"input {name!r}: map key {out} does not fit the key type {key_dtype} ({want})",
                               input_name=name)
    return ints


def _texts(name: str, items: list[Any], what: str, want: str) -> list[str]:
    """A map's string keys or values as ``str``; anything else is an error naming the input."""
    bad = _first_not(items, (str, bytes))
    if bad is not _NONE:
        one = "key " if what == "keys" else ""
        raise InvalidFeedError(f"input {name!r}: map {what} must be str ({want}), got {one}{bad!r:.40} of type "
                               f"{type(bad).__name__}", input_name=name)
    return [_text(name, item) for item in items]


def _text(name: str, item: str | bytes) -> str:
    """A map's string key or value as ``str`` (bytes decoded as UTF-8)."""
    if isinstance(item, bytes):
        try:
            return item.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidFeedError(f"input {name!r}: {item!r:.40} in the map is bytes that are not UTF-8 text",
                                   input_name=name) from exc
    return str(item)  # numpy.str_ -> str


def _map_values(name: str, values: list[Any], dtype: np.dtype | None, want: str) -> list[Any]:
    if dtype is None or not values:
        return values
    if dtype == np.dtype(object):
        return _texts(name, values, "values", want)
    bad = _first_not(values, _NUMBERS)
    if bad is not _NONE:
        raise InvalidFeedError(f"input {name!r}: map values must be numbers ({want}), got {bad!r:.40} of type "
                               f"{type(bad).__name__}", input_name=name)
    array = np.asarray(values)
    converted = None if array.dtype == object else _exact_cast(array, dtype)
    if converted is None:
        raise InvalidFeedError(f"input {name!r}: map values that {describe_dtype(dtype)} cannot represent exactly "
                               f"(fractions into ints, or out-of-range values); expected {want}", input_name=name)
    return converted.tolist()


def check_value(name: str, value: Any, vt: ValueType, symbols: dict[str, int]) -> Any:
    """Validate a feed of any kind (tensor, sequence, optional, map)."""
    if vt.kind == "sequence":
        element = vt.element or ValueType()
        if not isinstance(value, (list, tuple)):
            what = f"a list of dicts ({type_string(vt)})" if element.kind == "map" else "a sequence (list of arrays)"
            raise InvalidFeedError(f"input {name!r}: expected {what}, got {type(value).__name__}", input_name=name)
        return [check_value(f"{name}[{i}]", v, element, {}) for i, v in enumerate(value)]
    if vt.kind == "map":
        return check_map(name, value, vt)
    if vt.kind == "optional":
        return None if value is None else check_value(name, value, vt.element or ValueType(), symbols)
    if vt.kind == "tensor":
        return check_tensor(name, value, vt, symbols)
    return value


class ExactFeeds:
    """The common case checked fast: every feed a writable numpy array of exactly its input's
    declared dtype and rank, its static dims equal and its symbolic dims consistent. Anything else
    (a missing or unknown name, a list, a wrong dtype...) goes to :func:`check_feeds`, which
    says what is wrong; a feed this accepts passes :func:`check_feeds` unchanged."""

    def __init__(self, declared: Mapping[str, ValueType], required: set[str]) -> None:
        self._types = {name: (vt.dtype, tuple(vt.shape)) for name, vt in declared.items()
                       if vt.kind == "tensor" and vt.dtype is not None and vt.dtype != np.dtype(object)
                       and vt.shape is not None}
        self._required = frozenset(required)

    def check(self, feeds: Any) -> dict[str, Any] | None:
        """``feeds`` when they are all exact (see the class), else None."""
        if type(feeds) is not dict or not self._required.issubset(feeds):
            return None
        types = self._types
        symbols: dict[str, int] = {}
        for name, value in feeds.items():
            spec = types.get(name)
            if spec is None or type(value) is not np.ndarray or value.dtype != spec[0] or not value.flags.writeable:
                return None
            shape, want = value.shape, spec[1]
            if len(shape) != len(want):
                return None
            for dim, got in zip(want, shape):
                if dim is None:
                    continue
                if isinstance(dim, int):
                    if dim != got:
                        return None
                elif symbols.setdefault(dim, got) != got:
                    return None
        return feeds


def check_feeds(feeds: Mapping[str, Any], declared: Mapping[str, ValueType], required: set[str],
                on_device: Mapping[str, str] | None = None) -> dict[str, Any]:
    """All required inputs present, no unknown names, every value matching its type.

    ``on_device``: names of feeds a device allocator accepted (validated by attributes)."""
    if not isinstance(feeds, Mapping):
        raise InvalidFeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    unknown = [n for n in feeds if n not in declared]
    if unknown:
        raise InvalidFeedError(
            f"unknown input {unknown[0]!r}; the model's inputs are {sorted(declared)}", input_name=unknown[0]
        )
    missing = [n for n in sorted(required) if n not in feeds]
    if missing:
        raise InvalidFeedError(
            f"missing input {missing[0]!r} ({_describe(declared[missing[0]])}); "
            f"required inputs are {sorted(required)}",
            input_name=missing[0],
        )
    symbols: dict[str, int] = {}
    if not on_device:
        return {name: check_value(name, value, declared[name], symbols) for name, value in feeds.items()}
    return {name: (check_device_tensor if name in on_device else check_value)(name, value, declared[name], symbols)
            for name, value in feeds.items()}
