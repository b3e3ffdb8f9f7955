"""Entry point module (``epoxy.providers: cpu``): cheap to import, kernels load on create."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import CpuProviderFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(CpuProviderFactory())


@hookimpl
def epoxy_register_passes(register: Any) -> None:
    # fusions into com.epoxy.cpu ops (kernels in ops/fused.py): only sessions using cpu
    from .ops.fused import cpu_passes

    for pass_ in cpu_passes():
        register(pass_, level="extended", providers=("cpu",))
