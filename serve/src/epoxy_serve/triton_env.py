"""The process environment PyTriton's tritonserver needs, set before it is launched (PyTriton
copies ``os.environ`` then), so a user just runs ``epoxy serve --engine triton``:

- libpython on ``LD_LIBRARY_PATH``: the Python backend stub links against it, and a pyenv/uv/conda
  interpreter keeps it in its own lib folder, off the loader's path;
- ``PYTRITON_NO_TENSORSTORE=1`` unless the user set it: a model's first instance starts the
  shared-memory tensor store (a process of its own) before it opens the socket its other
  instances read their config from within a hard 1 s, and on a busy machine the store's start
  takes longer: the model then fails to load ("Timeout occurred while waiting for config
  file"). Without the store, tensors travel base64-encoded over PyTriton's socket, which costs
  little for the small tensors of one request. Setting it empty keeps the store."""

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


NO_TENSORSTORE = "PYTRITON_NO_TENSORSTORE"


def prepare_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Everything tritonserver's launch needs from this process's environment (see the module)."""
    env = os.environ if environ is None else environ
    ensure_libpython_on_path(env)
    env.setdefault(NO_TENSORSTORE, "1")


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
