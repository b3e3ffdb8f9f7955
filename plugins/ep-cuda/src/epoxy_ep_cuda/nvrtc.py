"""Kernel sources -> cubin through NVRTC, and cubin -> a launchable kernel.

One compile path for every kernel the GPU backend runs, so a kernel loaded from an exported
cubin is the very binary a fresh session would build (same NVRTC, same options, same
architecture): outputs are bit-identical. Compiling needs only the NVRTC library (no GPU);
loading needs the GPU.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from epoxy.kit.user_dirs import user_cache_dir

#: options every kernel is compiled with (the architecture is added per device)
OPTIONS: tuple[str, ...] = ("--std=c++14",)
ENV_CACHE_DIR = "EPOXY_CUDA_CACHE_DIR"


def arch_of(compute_capability: str) -> str:
    """``"9.0"`` -> ``"sm_90"``: the real architecture cubins are built for."""
    major, _, minor = str(compute_capability).partition(".")
    if not major.isdigit() or not (minor or "0").isdigit():
        raise ValueError(f"compute capability {compute_capability!r} is not MAJOR.MINOR")
    return f"sm_{major}{minor or '0'}"


def version() -> str:
    """NVRTC's version as ``"13.5"`` ("missing" without CuPy or the library)."""
    try:
        from cupy.cuda import nvrtc

        major, minor = nvrtc.getVersion()
    except Exception:  # noqa: BLE001 - CuPy or the NVRTC library absent
        return "missing"
    return f"{major}.{minor}"


def compile_cubin(name: str, source: str, arch: str) -> bytes:
    """The cubin of ``source`` for ``arch`` (``sm_90``); raises with NVRTC's log on failure."""
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, f"{name}.cu", [], [])
    try:
        try:
            nvrtc.compileProgram(prog, [f"--gpu-architecture={arch}", *OPTIONS])
        except Exception as exc:
            raise RuntimeError(f"NVRTC failed on {name}: {exc}\n{nvrtc.getProgramLog(prog)}") from None
        return bytes(nvrtc.getCUBIN(prog))
    finally:
        nvrtc.destroyProgram(prog)


def cache_dir() -> Path:
    """``$EPOXY_CUDA_CACHE_DIR`` (ENV_CACHE_DIR), else ``<user cache dir>/epoxy/cuda``."""
    return user_cache_dir("cuda", ENV_CACHE_DIR)


def load(cp: Any, name: str, cubin: bytes) -> Any:
    """A kernel (called like ``cupy.RawKernel``) from a cubin. CuPy loads modules from a
    path, so the cubin is written once under :func:`cache_dir`, named by its sha256."""
    folder = cache_dir() / "cubin"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(cubin).hexdigest()}.cubin"
    if not path.exists() or path.read_bytes() != cubin:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            handle.write(cubin)
        os.replace(tmp, path)
    return cp.RawModule(path=str(path)).get_function(name)
