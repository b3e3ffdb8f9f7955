"""Error statistics between a value and its reference, and the pass rule numpy uses.

A value passes when ``|a - b| <= atol + rtol * |b|`` everywhere (``b`` the reference), NaNs
in the same places and infinities of the same sign counting as equal. Integer and bool
values must match exactly. Statistics are computed in float64 so they are not themselves
the error.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: defaults: loose enough for float32 kernels that sum in another order (BLAS, OpenVINO,
#: onnxruntime), tight enough that a 1% error on a value of order 1 fails
DEFAULT_RTOL = 1e-3
DEFAULT_ATOL = 1e-4


@dataclass(frozen=True)
class Stats:
    """How far one value is from its reference."""

    max_abs: float
    mean_abs: float
    max_rel: float
    cosine: float
    nan: int  # NaNs in the value under test
    inf: int
    ref_nan: int
    ref_inf: int
    mismatches: int  # elements failing the tolerance
    size: int
    passed: bool
    reason: str = ""  # why it failed when it is not the tolerance (shape, dtype kind)

    def to_dict(self) -> dict[str, Any]:
        """Plain values; NaN (not computable: a shape mismatch) as None, so the JSON is strict."""
        return {k: None if isinstance(v, float) and np.isnan(v) else v for k, v in asdict(self).items()}


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def _mismatch(reason: str, size: int) -> Stats:
    nan = float("nan")
    return Stats(nan, nan, nan, nan, 0, 0, 0, 0, size, size, False, reason)


def compare(value: np.ndarray, reference: np.ndarray, rtol: float, atol: float) -> Stats:
    """Statistics of ``value`` against ``reference`` (same shape expected)."""
    a, b = np.asarray(value), np.asarray(reference)
    if a.shape != b.shape:
        return _mismatch(f"shape {list(a.shape)} != reference {list(b.shape)}", max(a.size, b.size))
    exact = a.dtype.kind in "iub" or b.dtype.kind in "iub"
    if a.dtype.kind in "OSUV" or b.dtype.kind in "OSUV":
        same = int(np.sum(a != b)) if a.dtype == b.dtype else a.size
        return Stats(0.0, 0.0, 0.0, 1.0, 0, 0, 0, 0, same, a.size, same == 0,
                     "" if same == 0 else "values differ")
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        a, b = np.abs(a), np.abs(b)
    x = a.astype(np.float64).ravel()
    y = b.astype(np.float64).ravel()
    nan_x, nan_y = np.isnan(x), np.isnan(y)
    inf_x, inf_y = np.isinf(x), np.isinf(y)
    finite = ~(nan_x | nan_y | inf_x | inf_y)
    diff = np.abs(x[finite] - y[finite])
    limit = 0.0 if exact else atol + rtol * np.abs(y[finite])
    bad_finite = int(np.sum(diff > limit))
    special = ~finite
    # NaN matches NaN, +inf matches +inf; anything else where either side is special fails
    same_special = (nan_x & nan_y) | (inf_x & inf_y & (np.sign(x) == np.sign(y)))
    bad_special = int(np.sum(special & ~same_special))
    mismatches = bad_finite + bad_special
    denom = np.abs(y[finite])
    rel = diff / np.maximum(denom, np.finfo(np.float64).tiny)
    rel = np.where(diff == 0, 0.0, rel)
    return Stats(
        max_abs=float(diff.max()) if diff.size else 0.0,
        mean_abs=float(diff.mean()) if diff.size else 0.0,
        max_rel=float(rel.max()) if rel.size else 0.0,
        cosine=_cosine(np.where(finite, x, 0.0), np.where(finite, y, 0.0)),
        nan=int(nan_x.sum()), inf=int(inf_x.sum()), ref_nan=int(nan_y.sum()), ref_inf=int(inf_y.sum()),
        mismatches=mismatches, size=int(x.size), passed=mismatches == 0,
        reason="" if mismatches == 0 or bad_special == 0 else f"{bad_special} NaN/Inf where the reference differs",
    )


def worst(a: Stats, b: Stats) -> Stats:
    """Two runs' statistics of one value merged: the worse of each."""
    def top(x: float, y: float) -> float:
        return x if np.isnan(x) or (not np.isnan(y) and x >= y) else y

    return Stats(
        max_abs=top(a.max_abs, b.max_abs), mean_abs=top(a.mean_abs, b.mean_abs), max_rel=top(a.max_rel, b.max_rel),
        cosine=min(a.cosine, b.cosine), nan=max(a.nan, b.nan), inf=max(a.inf, b.inf),
        ref_nan=max(a.ref_nan, b.ref_nan), ref_inf=max(a.ref_inf, b.ref_inf),
        mismatches=max(a.mismatches, b.mismatches), size=max(a.size, b.size), passed=a.passed and b.passed,
        reason=a.reason or b.reason,
    )
