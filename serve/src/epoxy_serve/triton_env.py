"""The process environment PyTriton's tritonserver needs: its Python backend stub links against
libpython, which a pyenv/uv/conda interpreter keeps in its own lib folder, off the loader's path.
PyTriton copies ``os.environ`` when it launches tritonserver, so putting that folder on
``LD_LIBRARY_PATH`` here, before the launch, is enough: the user need not export anything."""

from __future__ import annotations

import os
import sysconfig
from collections.abc import MutableMapping
from pathlib import Path


def libpython_dir() -> Path | None:
    """The folder holding this interpreter's shared libpython, or None (a static build)."""
    names = [sysconfig.get_config_var(key) for key in ("INSTSONAME", "LDLIBRARY")]
    for folder in (sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LIBPL")):
        if folder and any(name and (Path(folder) / name).is_file() for name in names if name and ".so" in name):
            return Path(folder)
    return None


def ensure_libpython_on_path(environ: MutableMapping[str, str] | None = None) -> Path | None:
    """Append libpython's folder to ``LD_LIBRARY_PATH`` (once) in ``environ`` (default os.environ);
    returns the folder, or None when there is no shared libpython to point at."""
    env = os.environ if environ is None else environ
    folder = libpython_dir()
    if folder is None:
        return None
    parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    if str(folder) not in parts:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*parts, str(folder)])
    return folder
