"""Random generators for kernels without a ``seed`` attribute, seeded by ``epoxy.set_seed``.

onnxruntime's ``set_seed(n)`` makes unseeded random ops (RandomNormal, Dropout in training
mode, ...) repeat between processes. Providers draw their generators here so one call seeds
every provider's random kernels; a node's own ``seed`` attribute still takes precedence.
"""

from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_seeded: np.random.Generator | None = None


def set_seed(seed: int) -> None:
    """Seed every later unseeded random draw in this process (``None`` restores fresh entropy)."""
    global _seeded
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be an int >= 0 or None, got {seed!r}")
    with _lock:
        _seeded = None if seed is None else np.random.default_rng(int(seed))


def unseeded_generator() -> np.random.Generator:
    """A generator for one draw of a node without a seed: fresh entropy, or the next one
    of the sequence ``set_seed`` started."""
    with _lock:
        if _seeded is None:
            return np.random.default_rng()
        return np.random.default_rng(int(_seeded.integers(0, 2**63)))
