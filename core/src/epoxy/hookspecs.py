"""pluggy hook specifications: the two hooks every epoxy plugin may implement.

Hooks hand plugins a ``register`` callback rather than a registry object, so the core can
add keyword arguments to the callback later without breaking any hook signature (hook
signatures are forever). Built-in and third-party providers go through the same hooks.

A plugin module implements hooks with :data:`hookimpl`::

    from epoxy.hookspecs import hookimpl

    @hookimpl
    def epoxy_register_providers(register):
        register(MyFactory())
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

PROJECT_NAME = "epoxy"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class EpoxySpecs:
    """Hook specifications (namespace class given to ``PluginManager.add_hookspecs``)."""

    @hookspec
    def epoxy_register_providers(self, register: Callable[..., None]) -> None:
        """Register provider factories.

        Called once per plugin when the provider registry loads (first session or CLI call).
        Call ``register(factory)`` for each :class:`epoxy.contract.ProviderFactory`.
        Not ``firstresult``: every plugin's implementation is called; return value ignored.
        """

    @hookspec
    def epoxy_register_passes(self, register: Callable[..., None]) -> None:
        """Register graph optimization passes.

        Called once per plugin when the optimizer pipeline is built. Call
        ``register(pass_, level="basic"|"extended", providers=None|("name", ...))``; a
        pass is an ``onnx_ir.passes.PassBase`` (called with an ``onnx_ir.Model``).
        ``providers`` scopes a pass to sessions using one of those providers.
        ``gradient_safe=True`` says the pass never changes the nodes, values or
        initializers a ``Gradient`` node differentiates through (it only lifts or renames
        nothing there); in a model that contains a ``Gradient`` node, only such passes run.
        Not ``firstresult``; return value ignored.
        """


def _hook_names() -> list[str]:
    return [name for name in vars(EpoxySpecs) if name.startswith("epoxy_")]


HOOK_NAMES: list[str] = _hook_names()

__all__ = ["HOOK_NAMES", "EpoxySpecs", "PROJECT_NAME", "hookimpl", "hookspec", "Any"]
