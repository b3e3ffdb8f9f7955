"""Random generators: RandomUniform(Like), RandomNormal(Like) (1, 22), Bernoulli (15, 22),
Multinomial (7, 22).

A ``seed`` attribute makes a node deterministic: every run draws from a generator seeded
with it (no state is kept between runs). Without a seed every run draws fresh values, from
the sequence ``epoxy.set_seed`` started when it was called (``epoxy.kit.random``).
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported
from epoxy.kit.random import unseeded_generator

from ..registry import KERNELS
from ._attr_checks import check_at_least, static_dim
from ._util import output_guard


def _dtype(elem_type: int, op: str) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(int(elem_type)))
    except Exception as exc:  # noqa: BLE001 - unknown enum value
        raise Unsupported(f"{op}: unsupported dtype {elem_type}") from exc


def _rng_factory(node: NodeSpec):
    seed = node.attr("seed")
    if seed is None:
        return unseeded_generator
    # the seed is a float attribute: use its exact bits as the integer seed
    bits = int(np.asarray(float(seed), dtype=np.float64).view(np.uint64))
    return lambda: np.random.default_rng(bits)


def _shape(node: NodeSpec) -> tuple[int, ...]:
    """The ``shape`` attribute; its output (drawn in float64) is refused now when too large."""
    shape = node.attr("shape")
    if shape is None:
        raise Unsupported(f"{node.op_type} needs the shape attribute")
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise Unsupported(f"{node.op_type}: negative dimension in shape {dims}")
    output_guard(node)(dims, np.dtype(np.float64))
    return dims


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
    return rng.uniform(low, high, size=shape)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], mean: float, scale: float) -> np.ndarray:
    return rng.normal(mean, scale, size=shape)


@KERNELS.register("RandomUniform", (1, 22))
def random_uniform(node: NodeSpec):
    dtype = _dtype(node.attr("dtype", 1), node.op_type)
    shape = _shape(node)
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    make_rng = _rng_factory(node)

    def run() -> np.ndarray:
        return _uniform(make_rng(), shape, low, high).astype(dtype)

    return run


@KERNELS.register("RandomNormal", (1, 22))
def random_normal(node: NodeSpec):
    dtype = _dtype(node.attr("dtype", 1), node.op_type)
    shape = _shape(node)
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))
    make_rng = _rng_factory(node)

    def run() -> np.ndarray:
        return _normal(make_rng(), shape, mean, scale).astype(dtype)

    return run


def _like_dtype(node: NodeSpec) -> np.dtype | None:
    dt = node.attr("dtype")
    return _dtype(dt, node.op_type) if dt is not None else None


@KERNELS.register("RandomUniformLike", (1, 22))
def random_uniform_like(node: NodeSpec):
    dtype = _like_dtype(node)
    low, high = float(node.attr("low", 0.0)), float(node.attr("high", 1.0))
    make_rng = _rng_factory(node)

    def run(x: np.ndarray) -> np.ndarray:
        return _uniform(make_rng(), x.shape, low, high).astype(dtype or x.dtype)

    return run


@KERNELS.register("RandomNormalLike", (1, 22))
def random_normal_like(node: NodeSpec):
    dtype = _like_dtype(node)
    mean, scale = float(node.attr("mean", 0.0)), float(node.attr("scale", 1.0))
    make_rng = _rng_factory(node)

    def run(x: np.ndarray) -> np.ndarray:
        return _normal(make_rng(), x.shape, mean, scale).astype(dtype or x.dtype)

    return run


@KERNELS.register("Bernoulli", (15, 22))
def bernoulli(node: NodeSpec):
    dtype = _like_dtype(node)
    make_rng = _rng_factory(node)

    def run(p: np.ndarray) -> np.ndarray:
        draws = make_rng().random(size=p.shape) < p.astype(np.float64)
        return draws.astype(dtype or p.dtype)

    return run


@KERNELS.register("Multinomial", (7, 22))
def multinomial(node: NodeSpec):
    dtype = _dtype(node.attr("dtype", 6), node.op_type)
    if dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise Unsupported(f"Multinomial: output dtype must be int32 or int64, not {dtype}")
    samples = int(node.attr("sample_size", 1))
    check_at_least(node, "sample_size", (samples,), 0)
    make_rng = _rng_factory(node)
    guard = output_guard(node)  # the draws are float64, batch x sample_size
    batch_dim = static_dim(node, 0, 0)
    if batch_dim is not None:
        guard((batch_dim, samples), np.dtype(np.float64))

    def run(logits: np.ndarray) -> np.ndarray:
        if logits.ndim != 2:
            raise ValueError(f"Multinomial expects [batch, classes] input, got {logits.shape}")
        batch, classes = logits.shape
        guard((batch, samples), np.dtype(np.float64))
        if batch == 0 or samples == 0 or classes == 0:
            return np.zeros((batch, samples), dtype=dtype)
        lg = logits.astype(np.float64)
        m = np.max(lg, axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        w = np.exp(lg - m)
        cdf = np.cumsum(w, axis=1)
        cdf = cdf / cdf[:, -1:]
        # one sorted search for all rows: row r's cdf lives in (r, r + 1]
        offsets = np.arange(batch, dtype=np.float64)[:, None]
        u = make_rng().random(size=(batch, samples))
        pos = np.searchsorted((cdf + offsets).reshape(-1), (u + offsets).reshape(-1), side="right")
        idx = pos.reshape(batch, samples) - np.arange(batch)[:, None] * classes
        return np.clip(idx, 0, classes - 1).astype(dtype)

    return run
