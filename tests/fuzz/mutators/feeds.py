"""Hostile feeds on an intact model: wrong dtype, rank or shape, NaN/Inf, huge dims (within the
worker's memory cap), empty tensors, non-contiguous/Fortran/read-only arrays, object arrays,
Python lists and scalars, missing, extra and None feeds."""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
from feedspec import View, Zeros

from .common import Draft

DTYPES = ["float32", "float64", "float16", "int64", "int32", "int8", "uint8", "uint64", "bool", "complex64", "str"]
#: bytes of the largest feed a case builds: over the session's limit (256 MiB by default), and
#: twice of it still under the worker's cap (1 GiB beyond its imports), so that a runtime may copy it
HUGE_BYTES = 320 << 20


def _pick(rng: random.Random, draft: Draft) -> tuple[str, Any] | None:
    if not draft.feeds:
        return None
    name = rng.choice(sorted(draft.feeds))
    return name, draft.feeds[name]


def _array(value: Any) -> np.ndarray | None:
    return value if isinstance(value, np.ndarray) and value.dtype != object else None


def wrong_dtype(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None or _array(picked[1]) is None:
        return None
    name, array = picked
    dtype = rng.choice(DTYPES)
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # overflow, complex to real: meant
        warnings.simplefilter("ignore")
        draft.feeds[name] = array.astype(dtype) if dtype != "str" else array.astype(str)
    return f"feed {name!r} cast to {dtype}"


def wrong_rank_or_shape(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None or _array(picked[1]) is None:
        return None
    name, array = picked
    choice = rng.randrange(4)
    if choice == 0:
        new = array[np.newaxis]
    elif choice == 1 and array.ndim > 1:
        new = array.reshape(-1)
    elif choice == 2 and array.ndim and array.shape[-1]:
        new = np.concatenate([array, array], axis=-1)
    else:
        new = np.asarray(array.reshape(-1)[:1].sum(dtype=array.dtype) if array.dtype != bool else True)
    draft.feeds[name] = new
    return f"feed {name!r} reshaped {list(array.shape)} -> {list(new.shape)}"


def non_finite(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None or _array(picked[1]) is None or picked[1].dtype.kind != "f" or not picked[1].size:
        return None
    name, array = picked
    array = array.copy()
    flat = array.reshape(-1)
    for _ in range(rng.randrange(1, 4)):
        flat[rng.randrange(flat.size)] = rng.choice([np.nan, np.inf, -np.inf, -0.0, np.finfo(array.dtype).max])
    if rng.random() < 0.2:
        flat[:] = rng.choice([np.nan, np.inf, -np.inf])
    draft.feeds[name] = array
    return f"feed {name!r} given NaN/Inf"


def huge(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None or _array(picked[1]) is None or any(isinstance(v, Zeros) for v in draft.feeds.values()):
        return None  # one huge feed per case: two would not fit the worker
    name, array = picked
    dtype = array.dtype if array.dtype.type.__module__ == "numpy" else np.dtype(np.float32)
    budget = rng.choice([HUGE_BYTES, HUGE_BYTES // 8, 64 << 10]) // max(dtype.itemsize, 1)
    rank = max(array.ndim, 1)
    shape = list(array.shape) or [1]
    axis = rng.randrange(rank)
    rest = int(np.prod([d for i, d in enumerate(shape) if i != axis] or [1])) or 1
    shape[axis] = max(budget // rest, 1)
    draft.feeds[name] = Zeros(tuple(shape), dtype.str)
    return f"feed {name!r} of shape {shape} ({dtype.name})"


def empty(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None or _array(picked[1]) is None:
        return None
    name, array = picked
    shape = list(array.shape) or [0]
    shape[rng.randrange(len(shape))] = 0
    draft.feeds[name] = np.zeros(shape, array.dtype)
    return f"feed {name!r} empty {shape}"


def layout(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None or _array(picked[1]) is None:
        return None
    name, array = picked
    kind = rng.choice(["strided", "fortran", "readonly", "list", "scalar"])
    draft.feeds[name] = View(kind, array)
    return f"feed {name!r} given as {kind}"


def objects(rng: random.Random, draft: Draft) -> str | None:
    picked = _pick(rng, draft)
    if picked is None:
        return None
    name, value = picked
    shape = value.shape if isinstance(value, np.ndarray) and value.size <= 4096 else (2,)
    items: list[Any] = ["a", 1, None, 2.5, [1, 2], {"k": 1}, "", "\udcff" if rng.random() < 0.1 else "b"]
    array = np.empty(shape, dtype=object)
    flat = array.reshape(-1)
    for i in range(flat.size):
        flat[i] = rng.choice(items)
    draft.feeds[name] = array
    return f"feed {name!r} an object array"


def missing_extra_none(rng: random.Random, draft: Draft) -> str | None:
    if draft.feeds is None:
        return None
    choice = rng.randrange(4)
    if choice == 0 and draft.feeds:
        name = rng.choice(sorted(draft.feeds))
        del draft.feeds[name]
        return f"feed {name!r} missing"
    if choice == 1:
        draft.feeds[rng.choice(["extra", "", "x" * 1000])] = np.zeros(2, np.float32)
        return "an extra feed"
    if choice == 2 and draft.feeds:
        name = rng.choice(sorted(draft.feeds))
        draft.feeds[name] = None
        return f"feed {name!r} is None"
    if draft.feeds:
        name = rng.choice(sorted(draft.feeds))
        draft.feeds[name] = [draft.feeds[name]] if rng.random() < 0.5 else []
        return f"feed {name!r} wrapped in a list"
    return None


MUTATIONS = [wrong_dtype, wrong_rank_or_shape, wrong_rank_or_shape, non_finite, non_finite, huge, empty, layout,
             layout, objects, missing_extra_none]
