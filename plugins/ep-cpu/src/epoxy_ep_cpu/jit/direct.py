"""A compiled numba function called without its dispatcher's per-call typing.

Why: a numba dispatcher types every argument on every call to pick its overload; with the
14 arguments of the conv kernel that is 2.5-4.5 us, more than a tiny layer's arithmetic.
A kernel whose argument types are fixed for a prepared call (one input shape and dtype)
looks the overload up once and calls its entry point (~0.9 us).

The entry point checks dtypes and dimensions (a wrong one raises TypeError) but not
layouts: it reads a strided array as if it were contiguous. Callers pass C-contiguous
arrays only, as they did when the overload was chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def overload(dispatcher: Any, sample: Sequence[Any]) -> Callable[..., Any]:
    """``dispatcher``'s compiled overload for the types of ``sample`` (compiled, or loaded
    from numba's cache, now); the dispatcher itself when numba cannot give one."""
    import numba

    try:
        return dispatcher.compile(tuple(numba.typeof(a) for a in sample))  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - typing or an older numba: the dispatcher types per call
        return dispatcher  # type: ignore[no-any-return]
