"""Entry point module (``epoxy.providers: example_compiler``): every epoxy command and session imports
it, so it imports nothing heavy."""

from __future__ import annotations

from typing import Any

from epoxy.hookspecs import hookimpl

from .factory import ExampleCompilerFactory


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(ExampleCompilerFactory())
