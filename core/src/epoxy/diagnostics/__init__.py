"""What a bug report needs to know about this machine and this install, gathered without
building a session: versions, CPU, BLAS, environment. ``epoxy doctor`` prints it and adds
the provider listing."""

from __future__ import annotations

from typing import Any

from .blas import thread_pools
from .cpu import cpu_info
from .env import environment
from .versions import package_versions, platform_info


def collect(env: dict[str, str] | None = None) -> dict[str, Any]:
    """Every section but the providers, as plain data. ``env``: the environment to report
    (a snapshot taken before plugins load: some set defaults of their own)."""
    return {
        "platform": platform_info(),
        "packages": package_versions(),
        "cpu": cpu_info(),
        "thread_pools": thread_pools(),
        "environment": environment(env),
    }


__all__ = ["collect", "cpu_info", "environment", "package_versions", "platform_info", "thread_pools"]
