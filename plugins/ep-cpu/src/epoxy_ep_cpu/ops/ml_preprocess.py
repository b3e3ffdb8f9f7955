"""ai.onnx.ml feature preprocessing: Normalizer, Scaler, Imputer, OneHotEncoder,
CategoryMapper, FeatureVectorizer (all ml opset 1).

Per-feature attributes (Scaler's offset/scale, Imputer's imputed values) apply along
axis 1 of an ``[N, C, ...]`` input (axis 0 of a 1-D one), element ``i`` of the flattened
tensor taking entry ``i % C``, as onnxruntime reads them; for the usual ``[N, F]`` input that
is the last axis. Types follow onnxruntime: Normalizer, Scaler, OneHotEncoder and
FeatureVectorizer answer float32; Imputer keeps the input's type.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attr_checks import check_at_least
from ._ml_common import ML
from ._util import as_text, output_guard
from .ml import _Lookup


def _feature_axis_len(x: np.ndarray) -> int:
    return int(x.shape[1] if x.ndim >= 2 else (x.shape[0] if x.ndim == 1 else 1))


def _per_feature(values: np.ndarray, x: np.ndarray, op: str, name: str) -> np.ndarray:
    """``values`` (1 or C entries) broadcast against ``x`` flattened to ``[-1, C]``."""
    c = _feature_axis_len(x)
    if values.size == 1:
        return values.reshape(())
    if values.size != c:
        raise ValueError(f"{op}: {name} has {values.size} entries; the input has {c} features (or give 1)")
    return values


def _rows_of(x: np.ndarray, c: int) -> np.ndarray:
    return x.reshape(-1, c) if c else x.reshape(0, 0)


# --------------------------------------------------------------------------- Normalizer


@KERNELS.register("Normalizer", 1, domain=ML)
def normalizer(node: NodeSpec):
    norm = as_text(node.attr("norm", "MAX")).upper()
    if norm not in ("MAX", "L1", "L2"):
        raise Unsupported(f"Normalizer: norm {norm!r} is not one of MAX, L1, L2")

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim > 2:
            raise ValueError(f"Normalizer: input rank must be 1 or 2, got {x.ndim}")
        a = np.asarray(x, dtype=np.float64)
        rows = a.reshape(1, -1) if a.ndim == 1 else a
        if norm == "MAX":
            if rows.shape[1] == 0:
                d = np.ones((rows.shape[0], 1))
            else:
                # the largest value that is not NaN (as onnxruntime's running maximum finds)
                d = np.fmax.reduce(rows, axis=1, keepdims=True)
        elif norm == "L1":
            d = np.abs(rows).sum(axis=1, keepdims=True)
        else:
            d = np.sqrt(np.square(rows).sum(axis=1, keepdims=True))
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(d != 0, rows / np.where(d != 0, d, 1.0), rows)
        return out.reshape(x.shape).astype(np.float32)

    return run


# --------------------------------------------------------------------------- Scaler


@KERNELS.register("Scaler", 1, domain=ML)
def scaler(node: NodeSpec):
    scale = np.asarray(node.attr("scale") or (1.0,), dtype=np.float32)
    offset = np.asarray(node.attr("offset") or (0.0,), dtype=np.float32)
    if scale.size != offset.size and 1 not in (scale.size, offset.size):
        raise Unsupported(f"Scaler: scale has {scale.size} entries and offset {offset.size}")

    def run(x: np.ndarray) -> np.ndarray:
        # float32 arithmetic except for float64 inputs, as onnxruntime computes
        work = np.float64 if x.dtype == np.float64 else np.float32
        c = _feature_axis_len(x)
        sc = _per_feature(scale, x, "Scaler", "scale").astype(work)
        of = _per_feature(offset, x, "Scaler", "offset").astype(work)
        rows = _rows_of(np.asarray(x, dtype=work), c)
        return ((rows - of) * sc).reshape(x.shape).astype(np.float32)

    return run


# --------------------------------------------------------------------------- Imputer


@KERNELS.register("Imputer", 1, domain=ML)
def imputer(node: NodeSpec):
    imputed_f = np.asarray(node.attr("imputed_value_floats") or (), dtype=np.float32)
    imputed_i = np.asarray(node.attr("imputed_value_int64s") or (), dtype=np.int64)
    replaced_f = float(np.float32(node.attr("replaced_value_float", 0.0)))
    replaced_i = int(node.attr("replaced_value_int64", 0))

    def run(x: np.ndarray) -> np.ndarray:
        is_float = x.dtype.kind == "f"
        imputed = imputed_f if is_float else imputed_i
        if imputed.size == 0:
            kind = "imputed_value_floats" if is_float else "imputed_value_int64s"
            raise ValueError(f"Imputer: a {x.dtype} input needs {kind}")
        c = _feature_axis_len(x)
        # one value per feature, else the first value everywhere (as onnxruntime does)
        fill = imputed if imputed.size == c else imputed[:1]
        rows = _rows_of(x, c)
        hit = np.isnan(rows) if is_float and np.isnan(replaced_f) else rows == (replaced_f if is_float else replaced_i)
        out = np.where(hit, fill.astype(x.dtype), rows)
        return out.reshape(x.shape)

    return run


# --------------------------------------------------------------------------- OneHotEncoder


@KERNELS.register("OneHotEncoder", 1, domain=ML)
def one_hot_encoder(node: NodeSpec):
    cats_s = node.attr("cats_strings")
    cats_i = node.attr("cats_int64s")
    if bool(cats_s) == bool(cats_i):
        raise Unsupported("OneHotEncoder needs exactly one of cats_strings and cats_int64s")
    zeros = int(node.attr("zeros", 1))
    if cats_s:
        keys = np.asarray([as_text(s) for s in cats_s], dtype=object)
    else:
        keys = np.asarray(cats_i, dtype=np.int64)
    n = keys.size
    lookup = _Lookup(keys, np.arange(n, dtype=np.int64), -1)
    string_cats = keys.dtype == object

    def run(x: np.ndarray) -> np.ndarray:
        a = np.asarray(x)
        if (a.dtype == object) != string_cats:
            pos = np.full(a.shape, -1, dtype=np.int64)  # strings never match ints and back
        elif string_cats:
            pos = lookup(a)
        else:
            with np.errstate(invalid="ignore"):
                pos = lookup(np.trunc(a).astype(np.int64) if a.dtype.kind == "f" else a.astype(np.int64))
        if not zeros and np.any(pos < 0):
            raise ValueError("OneHotEncoder: unknown category and zeros = 0")
        out = np.zeros(a.shape + (n,), dtype=np.float32)
        flat = out.reshape(-1, n) if n else out.reshape(0, 0)
        p = pos.reshape(-1)
        ok = np.nonzero(p >= 0)[0]
        flat[ok, p[ok]] = 1.0
        return out

    return run


# --------------------------------------------------------------------------- CategoryMapper


@KERNELS.register("CategoryMapper", 1, domain=ML)
def category_mapper(node: NodeSpec):
    strings = np.asarray([as_text(s) for s in (node.attr("cats_strings") or ())], dtype=object)
    ints = np.asarray(node.attr("cats_int64s") or (), dtype=np.int64)
    if strings.size != ints.size:
        raise Unsupported("CategoryMapper: cats_int64s and cats_strings must have the same length")
    to_int = _Lookup(strings, ints, int(node.attr("default_int64", -1)))
    to_str = _Lookup(ints, strings, as_text(node.attr("default_string", "_Unused")))

    def run(x: np.ndarray) -> np.ndarray:
        a = np.asarray(x)
        if a.dtype == object or a.dtype.kind in "US":
            return to_int(a)
        if a.dtype.kind not in "iu":
            raise TypeError(f"CategoryMapper: expects int64 or string input, got {a.dtype}")
        return to_str(a.astype(np.int64))

    return run


# --------------------------------------------------------------------------- FeatureVectorizer


@KERNELS.register("FeatureVectorizer", 1, domain=ML)
def feature_vectorizer(node: NodeSpec):
    dims_attr = node.attr("inputdimensions")
    dims = [int(d) for d in dims_attr] if dims_attr else None
    if dims is not None and len(dims) < len(node.inputs):
        raise Unsupported(f"FeatureVectorizer: {len(node.inputs)} inputs but {len(dims)} inputdimensions")
    if dims is not None:
        check_at_least(node, "inputdimensions", dims, 0)
    guard = output_guard(node)  # the width is the sum of inputdimensions (an attribute)

    def run(*xs: np.ndarray) -> np.ndarray:
        parts = []
        rows: int | None = None
        if dims is not None and xs:
            first = np.asarray(xs[0])
            guard((first.shape[0] if first.ndim >= 2 else 1, sum(dims[: len(xs)])), np.dtype(np.float32))
        for i, x in enumerate(xs):
            a = np.asarray(x)
            n = a.shape[0] if a.ndim >= 2 else 1
            if rows is None:
                rows = n
            elif n != rows:
                raise ValueError(f"FeatureVectorizer: input {i} has {n} rows, input 0 has {rows}")
            flat = a.reshape(n, -1) if a.size or n == 0 else np.zeros((n, 0), a.dtype)
            want = dims[i] if dims is not None else flat.shape[1]
            part = np.zeros((n, want), dtype=np.float32)
            take = min(want, flat.shape[1])
            part[:, :take] = flat[:, :take]
            parts.append(part)
        if not parts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(parts, axis=1)

    return run
