"""Entry point module (``epoxy.providers: coreml``): cheap to import, never imports coremltools."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import CoreMLProviderFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(CoreMLProviderFactory())
