"""Provider options (``providers=[("cuda", {...})]``), validated on ``create``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: ``conv_algo`` values
CONV_ALGOS = ("auto", "im2col")


@dataclass(frozen=True)
class CudaOptions:
    """Validated options; :data:`OPTIONS` has the one-line help users see."""

    #: Cap on the bytes CuPy's device memory pool may hold for this process (None: no cap).
    #: Accepts an int or a string with a unit: "4GB", "512MiB", or a fraction of the device
    #: memory: "0.5".
    memory_limit: int | str | float | None = None
    #: Fuse chains of elementwise ops into one generated kernel, and Conv+BatchNorm+Relu.
    fuse: bool = True
    #: Capture the claimed part of the graph as CUDA graphs (static shapes only): the
    #: first run executes normally, the second captures, later runs replay.
    cuda_graph: bool = False
    #: Use pinned (page-locked) host buffers for the per-run host<->device transfers.
    pinned: bool = True
    #: Conv implementation: "auto" (1x1 as GEMM, others im2col + GEMM), "im2col".
    conv_algo: str = "auto"


_D = CudaOptions()
_BOOL = "true | false"
#: option name -> one-line help (``CudaProviderFactory.options()``); ``parse_options``
#: rejects every other name, so what ``epoxy providers`` shows is what ``create`` accepts.
OPTIONS: dict[str, str] = {
    "memory_limit": "cap on CuPy's device memory pool (process-wide): bytes, a size like '4GB' or '512MiB', "
                    "or a fraction of device memory like 0.5 (default: no cap)",
    "fuse": f"{_BOOL}: fuse elementwise chains into one generated kernel, and Conv+BatchNorm+Relu "
            f"(default {str(_D.fuse).lower()})",
    "cuda_graph": f"{_BOOL}: capture the claimed graph as CUDA graphs (static shapes only; run 2 captures, "
                  f"later runs replay) (default {str(_D.cuda_graph).lower()})",
    "pinned": f"{_BOOL}: page-locked host buffers for the per-run host<->device copies "
              f"(default {str(_D.pinned).lower()})",
    "conv_algo": f"{' | '.join(CONV_ALGOS)} (default {_D.conv_algo}): auto = 1x1 as GEMM, others im2col + GEMM; "
                 "im2col = im2col + GEMM for all",
}
_KNOWN = set(OPTIONS)


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    from epoxy.errors import InvalidArgumentError

    raise InvalidArgumentError(f"cuda provider: option {name!r} must be a boolean, got {value!r}")


def parse_options(options: Mapping[str, Any]) -> CudaOptions:
    from epoxy.errors import InvalidArgumentError

    unknown = set(options) - _KNOWN
    if unknown:
        raise InvalidArgumentError(f"cuda provider: unknown options {sorted(unknown)}; known options: {list(OPTIONS)}")
    kw = dict(options)
    for name in ("fuse", "cuda_graph", "pinned"):
        if name in kw:
            kw[name] = _bool(name, kw[name])
    if kw.get("conv_algo", _D.conv_algo) not in CONV_ALGOS:
        raise InvalidArgumentError(f"cuda provider: conv_algo must be one of {list(CONV_ALGOS)}, got {kw['conv_algo']!r}")
    if "memory_limit" in kw and kw["memory_limit"] is not None:
        parse_memory_limit(kw["memory_limit"], 1 << 40)  # validate now
    return CudaOptions(**kw)


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_memory_limit(value: Any, device_bytes: int) -> int:
    """Bytes for a ``memory_limit`` option value (see :class:`CudaOptions`)."""
    from epoxy.errors import InvalidArgumentError

    if isinstance(value, bool):
        raise InvalidArgumentError("cuda provider: memory_limit must be bytes, a size string or a fraction")
    if isinstance(value, int):
        if value <= 0:
            raise InvalidArgumentError("cuda provider: memory_limit must be positive")
        return value
    if isinstance(value, float):
        if not 0 < value <= 1:
            raise InvalidArgumentError("cuda provider: a float memory_limit is a fraction in (0, 1]")
        return int(device_bytes * value)
    if isinstance(value, str):
        text = value.strip().upper().replace(" ", "")
        num = text.rstrip("KMGIB")
        unit = text[len(num):]
        try:
            number = float(num)
        except ValueError:
            number = -1.0
        if unit in _UNITS and number > 0:
            if unit == "" and number <= 1 and "." in num:
                return int(device_bytes * number)
            return int(number * _UNITS[unit])
    raise InvalidArgumentError(f"cuda provider: cannot read memory_limit {value!r} (e.g. 4GB, 512MiB, 0.5)")
