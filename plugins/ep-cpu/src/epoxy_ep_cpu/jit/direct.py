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
    try:
        return dispatcher.compile(argument_types(sample))  # type: ignore[no-any-return]
    except Exception:  # noqa: BLE001 - typing or an older numba: the dispatcher types per call
        return dispatcher  # type: ignore[no-any-return]


def argument_types(sample: Sequence[Any]) -> tuple[Any, ...]:
    """numba's types of ``sample``, a read-only array typed as a writable one.

    Why: numba types a read-only array (a bias or weight viewing a model's bytes) apart from
    a writable one, so the same kernel compiled twice in one model (densenet121's row GEMM:
    2.5 s more of a cold first run) and twice in the cache. The entry point takes either (it
    checks dtype and rank only), and the kernels write only the outputs and scratch they are
    given, arrays the provider allocated."""
    import numba
    from numba.core import types

    typed = []
    for value in sample:
        ty = numba.typeof(value)
        if isinstance(ty, types.Array) and not ty.mutable:
            ty = ty.copy(readonly=False)
        typed.append(ty)
    return tuple(typed)
