"""The CPU: model, the instruction-set features epoxy's kernels and BLAS pick from, cores.

On Linux this reads ``/proc/cpuinfo``; elsewhere the features are reported as unknown
(None) rather than guessed."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

#: feature shown -> the cpuinfo flags meaning it (any one present counts)
FEATURES: dict[str, tuple[str, ...]] = {
    "sse4_2": ("sse4_2",),
    "avx": ("avx",),
    "avx2": ("avx2",),
    "fma": ("fma",),
    "f16c": ("f16c",),
    "avx512f": ("avx512f",),
    "avx512bw": ("avx512bw",),
    "avx512_vnni": ("avx512_vnni",),
    "avx512_bf16": ("avx512_bf16",),
    "avx_vnni": ("avx_vnni",),
    "amx": ("amx_tile",),
    "amx_bf16": ("amx_bf16",),
    "amx_int8": ("amx_int8",),
    "neon": ("neon", "asimd"),
    "sve": ("sve",),
}

CPUINFO = Path("/proc/cpuinfo")


def parse_cpuinfo(text: str) -> tuple[str | None, set[str]]:
    """The model name and flag set of the first processor listed in a ``/proc/cpuinfo`` text."""
    model: str | None = None
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if flags and model:
                break  # end of the first processor's block
            continue
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and model is None:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    return model, flags


def features_from(flags: set[str]) -> dict[str, bool]:
    return {name: any(f in flags for f in names) for name, names in FEATURES.items()}


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def cpu_info(cpuinfo_text: str | None = None) -> dict[str, Any]:
    """Model, architecture, logical cores (all / usable by this process), features."""
    if cpuinfo_text is None:
        try:
            cpuinfo_text = CPUINFO.read_text()
        except OSError:
            cpuinfo_text = ""
    model, flags = parse_cpuinfo(cpuinfo_text)
    return {
        "model": model or platform.processor() or None,
        "architecture": platform.machine(),
        "logical_cores": os.cpu_count(),
        "usable_cores": _usable_cores(),
        "features": features_from(flags) if flags else None,
    }
