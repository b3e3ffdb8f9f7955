"""OpenVINO itself, imported lazily and shared: one ``openvino.Core`` per process.

Both the factory (device enumeration) and the provider (compilation) need it; keeping it here
lets neither import the other.
"""

from __future__ import annotations

from typing import Any

from epoxy.contract import ProviderUnavailable

PROVIDER_NAME = "openvino"


def import_openvino() -> Any:
    """``import openvino`` or raise :class:`ProviderUnavailable` saying why."""
    try:
        import openvino
    except Exception as exc:  # ImportError, or a broken install (missing shared libraries...)
        text = str(exc).strip().splitlines()
        raise ProviderUnavailable(
            f"openvino is not usable: {type(exc).__name__}: {text[0] if text else ''} "
            "(pip install openvino)"
        ) from exc
    return openvino


_CORE: Any = None


def shared_core() -> Any:
    """One ``openvino.Core`` per process (creating one costs milliseconds and loads plugins)."""
    global _CORE
    if _CORE is None:
        ov = import_openvino()
        _CORE = ov.Core()
    return _CORE


def first_line(exc: BaseException) -> str:
    """``Type: message`` with OpenVINO's informative line (its messages start with source locations)."""
    text = str(exc).strip().splitlines()
    informative = [t.strip() for t in text if t.strip() and not t.strip().startswith(("Check ", "Exception from"))]
    line = (informative or text or [""])[0]
    return f"{type(exc).__name__}: {line}"[:400]
