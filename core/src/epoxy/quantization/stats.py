"""What calibration hands on: one histogram per tensor, and ranges computed from them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from epoxy.quantization.histogram import Histogram
from epoxy.quantization.methods import METHODS
from epoxy.quantization.params import Range


@dataclass(frozen=True)
class CalibrationStats(Mapping[str, Histogram]):
    """Histograms by tensor name (a read-only mapping) and the number of batches seen.

    The histograms are collected once; every method reads the same ones, so trying several
    methods costs no second pass over the data.
    """

    histograms: Mapping[str, Histogram]
    batches: int

    def __getitem__(self, name: str) -> Histogram:
        return self.histograms[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.histograms)

    def __len__(self) -> int:
        return len(self.histograms)

    def range(self, name: str, method: str = "minmax", **options: Any) -> Range:
        """The range ``method`` (a key of :data:`METHODS`) gives tensor ``name``."""
        return _method(method)(self.histograms[name], **options)

    def ranges(self, method: str = "minmax", **options: Any) -> dict[str, Range]:
        """The range ``method`` gives every tensor."""
        fn = _method(method)
        return {name: fn(h, **options) for name, h in self.histograms.items()}


def _method(method: str) -> Any:
    try:
        return METHODS[method]
    except KeyError:
        raise ValueError(f"unknown calibration method {method!r}; known: {', '.join(METHODS)}") from None
