"""pluggy hook specifications: the hooks an epoxy plugin may implement.

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

    @hookspec
    def epoxy_register_policies(self, register: Callable[..., None]) -> None:
        """Register provider selection policies (SDK API 1.3).

        Called once per plugin the first time a session or ``epoxy devices`` asks for the
        policies. Call ``register(name, policy, description="...")``: ``name`` is what users
        pass as ``SessionOptions.provider_selection_policy`` or ``providers="auto:<name>"``
        (lowercase letters, digits, ``_``; not a built-in policy's name), ``policy`` is called
        as onnxruntime calls a selection delegate, ``policy(ep_devices, model_metadata,
        runtime_metadata, max_selections)``, and returns the chosen
        :class:`epoxy.devices.EpDevice` objects in priority order (a subset of ``ep_devices``,
        one device per provider). A policy is a rule over every provider's devices, which is
        why it is a hook of its own and not a factory method: a factory knows only its own
        devices. A policy that raises or returns anything else is reported and the session
        uses the default policy. Not ``firstresult``; return value ignored.
        """


def _hook_names() -> list[str]:
    return [name for name in vars(EpoxySpecs) if name.startswith("epoxy_")]


HOOK_NAMES: list[str] = _hook_names()

__all__ = ["HOOK_NAMES", "EpoxySpecs", "PROJECT_NAME", "hookimpl", "hookspec", "Any"]
