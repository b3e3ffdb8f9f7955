"""Provider options, validated without importing coremltools."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epoxy.errors import InvalidArgumentError

COMPUTE_UNITS = ("CPU_ONLY", "CPU_AND_GPU", "CPU_AND_NE", "ALL")
COMPUTE_PRECISIONS = ("fp32", "fp16")
#: ML Programs need at least iOS15 / macOS12 / tvOS15 / watchOS8.
DEPLOYMENT_TARGETS = (
    "iOS15", "iOS16", "iOS17", "iOS18",
    "macOS12", "macOS13", "macOS14", "macOS15",
    "tvOS15", "tvOS16", "tvOS17", "tvOS18",
    "watchOS8", "watchOS9", "watchOS10", "watchOS11",
)
#: The MIL opset each target maps to (coremltools aliases macOS/tvOS/watchOS onto iOS).
OPSET_OF_TARGET = {
    **{f"iOS{v}": v for v in (15, 16, 17, 18)},
    **{f"macOS{v}": v + 3 for v in (12, 13, 14, 15)},
    **{f"tvOS{v}": v for v in (15, 16, 17, 18)},
    **{f"watchOS{v}": v + 7 for v in (8, 9, 10, 11)},
}
ENV_CACHE_DIR = "EPOXY_COREML_CACHE_DIR"


def default_cache_dir() -> Path:
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "epoxy" / "coreml"


@dataclass(frozen=True)
class CoreMLOptions:
    """``compute_units``: where Core ML may run (CPU_ONLY, CPU_AND_GPU, CPU_AND_NE, ALL).
    ``compute_precision``: fp32 (default, matches the cpu provider) or fp16 (faster on the
    GPU/Neural Engine). ``minimum_deployment_target``: oldest OS the packages must load on
    (iOS15 default; newer targets unlock newer MIL op versions). ``cache_dir``: where
    ``.mlpackage`` files are kept, keyed by a hash of the subgraph and these options."""

    compute_units: str = "ALL"
    compute_precision: str = "fp32"
    minimum_deployment_target: str = "iOS15"
    cache_dir: Path | None = None

    @property
    def opset(self) -> int:
        """The iOS MIL opset version the target implies (15..18)."""
        return OPSET_OF_TARGET[self.minimum_deployment_target]

    def resolved_cache_dir(self) -> Path:
        return self.cache_dir if self.cache_dir is not None else default_cache_dir()

    def conversion_key(self) -> dict[str, str]:
        """What changes the converted package (compute units only matter when loading)."""
        return {"compute_precision": self.compute_precision,
                "minimum_deployment_target": self.minimum_deployment_target}


def _version_ranges(targets: tuple[str, ...]) -> str:
    """``("iOS15", "iOS16", "macOS12")`` -> ``"iOS15-16 | macOS12"``: a long list, readable."""
    by_os: dict[str, list[str]] = {}
    for target in targets:
        os_name = target.rstrip("0123456789")
        by_os.setdefault(os_name, []).append(target[len(os_name):])
    return " | ".join(f"{n}{v[0]}-{v[-1]}" if len(v) > 1 else f"{n}{v[0]}" for n, v in by_os.items())


_D = CoreMLOptions()
#: option name -> one-line help (``CoreMLProviderFactory.options()``); ``parse_options``
#: rejects every other name, so what ``epoxy providers`` shows is what ``create`` accepts.
OPTIONS: dict[str, str] = {
    "compute_units": f"where Core ML may run: {' | '.join(COMPUTE_UNITS)} (default {_D.compute_units})",
    "compute_precision": f"{' | '.join(COMPUTE_PRECISIONS)} (default {_D.compute_precision}, matches the cpu "
                         "provider; fp16 is faster on the GPU/Neural Engine)",
    "minimum_deployment_target": f"oldest OS the packages must load on: {_version_ranges(DEPLOYMENT_TARGETS)} "
                                 f"(default {_D.minimum_deployment_target}; newer targets unlock newer MIL ops)",
    "cache_dir": f"where converted .mlpackage files are kept (default ${ENV_CACHE_DIR}, else "
                 "$XDG_CACHE_HOME/epoxy/coreml or ~/.cache/epoxy/coreml)",
}
KNOWN_OPTIONS = tuple(OPTIONS)


def _choice(name: str, value: Any, allowed: tuple[str, ...], *, fold_case: bool) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"coreml provider: option {name!r} must be a string, one of {list(allowed)}; got {value!r}")
    lookup = {a.lower(): a for a in allowed} if fold_case else {a: a for a in allowed}
    key = value.strip().lower() if fold_case else value.strip()
    if key not in lookup:
        raise InvalidArgumentError(f"coreml provider: option {name!r} must be one of {list(allowed)}; got {value!r}")
    return lookup[key]


def parse_options(options: Mapping[str, Any] | None) -> CoreMLOptions:
    """Validate user options; unknown names or values raise :class:`InvalidArgumentError`."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise InvalidArgumentError(
            f"coreml provider: unknown options {unknown}; known options: {list(KNOWN_OPTIONS)}"
        )
    kwargs: dict[str, Any] = {}
    if "compute_units" in options:
        kwargs["compute_units"] = _choice("compute_units", options["compute_units"], COMPUTE_UNITS, fold_case=True)
    if "compute_precision" in options:
        value = options["compute_precision"]
        if isinstance(value, str) and value.strip().lower() in ("float32", "float16"):
            value = "fp" + value.strip()[-2:]
        kwargs["compute_precision"] = _choice("compute_precision", value, COMPUTE_PRECISIONS, fold_case=True)
    if "minimum_deployment_target" in options:
        kwargs["minimum_deployment_target"] = _choice(
            "minimum_deployment_target", options["minimum_deployment_target"], DEPLOYMENT_TARGETS, fold_case=True)
    if "cache_dir" in options:
        value = options["cache_dir"]
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise InvalidArgumentError(f"coreml provider: option 'cache_dir' must be a path; got {value!r}")
        kwargs["cache_dir"] = None if value is None else Path(value)
    return CoreMLOptions(**kwargs)
