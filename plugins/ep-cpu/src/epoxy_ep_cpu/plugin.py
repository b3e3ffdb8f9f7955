"""Entry point module (``epoxy.providers: cpu``): cheap to import, kernels load on create."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import CpuProviderFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(CpuProviderFactory())
