"""numpy's floating-point error state during a run: one ``np.errstate`` per run, not per step.

Kernels return IEEE results (inf, NaN) without numpy's RuntimeWarnings. Entering
``np.errstate`` costs ~1.5 us, more than an Add of two small tensors, so the executors run
all steps under one :func:`quiet_floats` (numpy keeps the state per thread/context, so
concurrent runs are unaffected and the caller's own state is restored after), and a kernel's
fast path may skip its own. Plan-time constant folding runs kernels under it too.

Even once per run ``np.errstate`` was 0.87 us of a 6.4 us run of a one-node model
(onnxruntime's whole run: 5.1): :class:`_QuietFloats` sets numpy's error-state context
variable itself, to the state ``np.errstate(all="ignore")`` would make from the caller's
current one, made once per distinct current state (0.13 us a run). Where numpy's internals
are not as expected, ``np.errstate`` runs as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _internals() -> tuple[Any, Any] | None:
    """numpy's error-state context variable and its state maker, or None when this numpy
    does not have them (then ``np.errstate`` is used)."""
    try:
        from numpy._core import _ufunc_config as config

        var, make = getattr(config, "_extobj_contextvar"), getattr(config, "_make_extobj")  # noqa: B009 - private: typed Any
        make(all="ignore")
    except Exception:  # noqa: BLE001 - another numpy layout: the public API
        return None
    return var, make


_INTERNALS = _internals()


class _QuietFloats:
    """``np.errstate(all="ignore")`` without its per-entry Python (see the module docstring)."""

    __slots__ = ("_token",)
    #: (the caller's state object, the ignore-all state made from it): one tuple, so threads
    #: that race on it only ever read a matching pair
    _made: tuple[Any, Any] = (None, None)

    def __enter__(self) -> None:
        var, make = _INTERNALS  # type: ignore[misc]  # only built when they exist
        current = var.get()
        seen, made = _QuietFloats._made
        if seen is not current:
            made = make(all="ignore")
            _QuietFloats._made = (current, made)
        self._token = var.set(made)

    def __exit__(self, *exc_info: Any) -> None:
        _INTERNALS[0].reset(self._token)  # type: ignore[index]


def quiet_floats() -> Any:
    """The context every step runs in: floating-point errors neither warn nor raise."""
    if _INTERNALS is None:
        return np.errstate(all="ignore")
    return _QuietFloats()
