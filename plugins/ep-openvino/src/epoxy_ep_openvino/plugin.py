"""Entry point module (``epoxy.providers: openvino``): cheap to import, OpenVINO loads lazily."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import OpenVINOProviderFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(OpenVINOProviderFactory())
