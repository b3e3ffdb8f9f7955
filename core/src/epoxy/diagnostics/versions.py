"""Versions of epoxy's distributions and of the libraries whose version changes its results."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

#: dependencies whose versions matter in a bug report, in the order shown
KEY_DEPENDENCIES = ("numpy", "onnx", "onnx-ir", "numba", "llvmlite", "openvino", "onnxruntime", "ml_dtypes",
                    "pluggy", "threadpoolctl", "rich")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def epoxy_distributions() -> dict[str, str]:
    """Every installed ``epoxy-*`` distribution (core, SDK, each plugin), by name."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip()
        if name.lower().replace("_", "-").startswith("epoxy-") or name.lower() == "epoxy":
            found[name] = dist.version
    return dict(sorted(found.items()))


def package_versions() -> dict[str, Any]:
    """``{"epoxy": {dist: version}, "dependencies": {name: version or None}}``; None: not installed."""
    return {"epoxy": epoxy_distributions(), "dependencies": {n: _version(n) for n in KEY_DEPENDENCIES}}


def platform_info() -> dict[str, str]:
    """Python and operating system."""
    return {
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_executable": sys.executable,
        "os": platform.platform(),
        "machine": platform.machine(),
    }
