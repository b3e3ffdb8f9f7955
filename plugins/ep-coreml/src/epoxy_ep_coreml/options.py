"""Provider options, validated by :data:`TABLE` without importing coremltools."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from epoxy.kit.options import KINDS, Option, OptionTable
from epoxy.kit.user_dirs import user_cache_dir

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
    """``$EPOXY_COREML_CACHE_DIR``, else ``<user cache dir>/epoxy/coreml``."""
    return user_cache_dir("coreml", ENV_CACHE_DIR)


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
#: an enum whose help lists the 16 targets readably ("iOS15-18 | macOS12-15 | ...")
_TARGET = replace(KINDS["enum"], describe=lambda option: _version_ranges(option.choices))
#: The one table of options: ``create`` parses with it and ``CoreMLProviderFactory.options()``
#: returns ``TABLE.describe()``, so what ``epoxy providers`` shows is what ``create`` accepts.
TABLE: OptionTable[CoreMLOptions] = OptionTable("coreml", [
    Option("compute_units", "enum", _D.compute_units, "where Core ML may run", choices=COMPUTE_UNITS),
    Option("compute_precision", "enum", _D.compute_precision, "arithmetic precision of the converted programs",
           choices=COMPUTE_PRECISIONS, aliases={"float32": "fp32", "float16": "fp16"},
           notes="fp32 matches the cpu provider; fp16 is faster on the GPU/Neural Engine"),
    Option("minimum_deployment_target", _TARGET, _D.minimum_deployment_target, "oldest OS the packages must load on",
           choices=DEPLOYMENT_TARGETS, notes="newer targets unlock newer MIL ops"),
    Option("cache_dir", "path", _D.cache_dir, "where converted .mlpackage files are kept",
           default_text=f"${ENV_CACHE_DIR}, else $XDG_CACHE_HOME/epoxy/coreml or ~/.cache/epoxy/coreml"),
], CoreMLOptions)
#: option name -> one-line help (what ``CoreMLProviderFactory.options()`` returns)
OPTIONS: dict[str, str] = TABLE.describe()
KNOWN_OPTIONS = TABLE.names
#: ``parse_options(options) -> CoreMLOptions``; unknown names or bad values raise ``InvalidArgumentError``
parse_options = TABLE.parse
