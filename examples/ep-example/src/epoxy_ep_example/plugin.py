"""Entry point module (``epoxy.providers: example``): every epoxy command and session imports
it, so it imports nothing heavy."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import ExampleFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(ExampleFactory())
