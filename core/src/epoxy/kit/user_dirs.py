"""Where epoxy keeps per-user files, one rule for the core and every provider.

Caches (compiled kernels, tuning decisions) go under the platform's user cache folder:
``%LOCALAPPDATA%`` on Windows, ``~/Library/Caches`` on macOS, ``$XDG_CACHE_HOME`` or
``~/.cache`` elsewhere; a part's own environment variable wins when set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_cache_root() -> Path:
    """The platform's user cache folder (not yet ``epoxy/``)."""
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def user_cache_dir(part: str, env: str | None = None) -> Path:
    """``$env`` when set (``~`` expanded), else ``<user cache folder>/epoxy/<part>``."""
    explicit = os.environ.get(env, "").strip() if env else ""
    if explicit:
        return Path(explicit).expanduser()
    return user_cache_root() / "epoxy" / part
