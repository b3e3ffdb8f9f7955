"""Provider options that change how kernels are built (not what they compute, beyond rounding).

Kernel factories take only the node; the options of the provider building them are set in a
context variable for the duration of each factory call (``building_with``), so two sessions
with different options never see each other's, and the hot path reads nothing.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: ``conv_winograd`` values: which Winograd variants float convolutions may use
CONV_WINOGRAD = {
    # F(4x4, 3x3) for float32 layers where it is fastest, F(2x2, 3x3) elsewhere (default)
    "auto": ("F(4,3)", "F(2,3)"),
    # F(2x2, 3x3) only: rounding error ~1e-6 relative instead of ~1e-5
    "f23": ("F(2,3)",),
    # none: direct (im2col / row-shift) convolution, the summation order of a plain GEMM
    "off": (),
}


@dataclass(frozen=True)
class CpuSettings:
    """The cpu provider's options, validated."""

    conv_winograd: str = "auto"

    @property
    def winograd_paths(self) -> tuple[str, ...]:
        return CONV_WINOGRAD[self.conv_winograd]

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> CpuSettings:
        from epoxy.errors import InvalidArgumentError

        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise InvalidArgumentError(f"cpu provider: unknown options {unknown}; known options: {sorted(OPTIONS)}")
        value = options.get("conv_winograd", cls.conv_winograd)
        if value not in CONV_WINOGRAD:
            raise InvalidArgumentError(
                f"cpu provider: conv_winograd={value!r}; expected one of {sorted(CONV_WINOGRAD)}"
            )
        return cls(conv_winograd=value)


DEFAULT = CpuSettings()

#: option name -> one-line help (``CpuProviderFactory.options()``); ``from_options`` rejects
#: every other name, so what ``epoxy providers`` shows is what ``create`` accepts.
OPTIONS: Mapping[str, str] = {
    "conv_winograd": (
        f"Winograd for float 3x3 stride-1 Conv: {' | '.join(CONV_WINOGRAD)} (default {DEFAULT.conv_winograd}); "
        "auto: F(4x4,3x3) where fastest, else F(2x2,3x3); f23: F(2x2,3x3) only (~1e-6 relative "
        "rounding instead of ~1e-5); off: direct im2col/GEMM"
    ),
}
_current: contextvars.ContextVar[CpuSettings] = contextvars.ContextVar("epoxy_cpu_settings", default=DEFAULT)


def current() -> CpuSettings:
    """The options of the provider building a kernel right now (defaults outside a build)."""
    return _current.get()


@contextmanager
def building_with(settings: CpuSettings) -> Iterator[None]:
    token = _current.set(settings)
    try:
        yield
    finally:
        _current.reset(token)
