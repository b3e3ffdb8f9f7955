"""Entry point module (``epoxy.providers: cuda``): cheap to import, never imports CuPy."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import CudaProviderFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(CudaProviderFactory())
