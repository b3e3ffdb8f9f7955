"""Provider options (``providers=[("cuda", {...})]``), validated on ``create`` by :data:`TABLE`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epoxy.errors import InvalidArgumentError
from epoxy.kit.options import Kind, Option, OptionTable

#: ``conv_algo`` values
CONV_ALGOS = ("auto", "im2col")


@dataclass(frozen=True)
class CudaOptions:
    """Validated options; :data:`OPTIONS` has the one-line help users see."""

    #: Cap on the bytes CuPy's device memory pool may hold for this process (None: no cap).
    #: Accepts an int or a string with a unit: "4GB", "512MiB", or a fraction of the device
    #: memory: "0.5". Kept as given: a fraction becomes bytes once the device is known.
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


_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def _limit_bytes(value: Any, device_bytes: int) -> int:
    """Bytes for a ``memory_limit`` value; ``ValueError``/``TypeError`` when it is none of the forms."""
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(value)
        return value
    if isinstance(value, float):
        if not 0 < value <= 1:
            raise ValueError(value)
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
    raise ValueError(value)


def _check_limit(value: Any, option: Option) -> Any:
    _limit_bytes(value, 1 << 40)  # validate now; the device's size is known only in the backend
    return value


MEMORY_LIMIT = Kind(_check_limit, "bytes, a size like '4GB' or '512MiB', or a fraction of device memory like 0.5",
                    "bytes (int > 0), a size like '4GB' or '512MiB', or a fraction of device memory in (0, 1]")


def parse_memory_limit(value: Any, device_bytes: int) -> int:
    """Bytes for a ``memory_limit`` option value (see :class:`CudaOptions`)."""
    try:
        return _limit_bytes(value, device_bytes)
    except (ValueError, TypeError):
        raise InvalidArgumentError(f"cuda provider: option memory_limit={value!r}; "
                                   f"expected {TABLE.options['memory_limit'].expected()}") from None


_D = CudaOptions()
#: The one table of options: ``create`` parses with it and ``CudaProviderFactory.options()``
#: returns ``TABLE.describe()``, so what ``epoxy providers`` shows is what ``create`` accepts.
TABLE: OptionTable[CudaOptions] = OptionTable("cuda", [
    Option("memory_limit", MEMORY_LIMIT, _D.memory_limit, "cap on CuPy's device memory pool (process-wide)",
           default_text="no cap"),
    Option("fuse", "bool", _D.fuse, "fuse elementwise chains into one generated kernel, and Conv+BatchNorm+Relu"),
    Option("cuda_graph", "bool", _D.cuda_graph,
           "capture the claimed graph as CUDA graphs (static shapes only; run 2 captures, later runs replay)"),
    Option("pinned", "bool", _D.pinned, "page-locked host buffers for the per-run host<->device copies"),
    Option("conv_algo", "enum", _D.conv_algo, "Conv implementation", choices=CONV_ALGOS,
           notes="auto = 1x1 as GEMM, others im2col + GEMM; im2col = im2col + GEMM for all"),
], CudaOptions)
#: option name -> one-line help (``CudaProviderFactory.options()``)
OPTIONS: dict[str, str] = TABLE.describe()
#: ``parse_options(options) -> CudaOptions``; unknown names or bad values raise ``InvalidArgumentError``
parse_options = TABLE.parse
