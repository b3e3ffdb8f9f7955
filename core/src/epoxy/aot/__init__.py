"""Ahead-of-time compiled models (``epoxy compile``): write, read, inspect.

Data flow: :mod:`.capture` records each group a provider compiled while a session is built,
:mod:`.writer` turns the optimized graph into a compiled model (one context node per exported
group, calling a model-local function that keeps the group's nodes), :mod:`.reader` expands
those nodes back when a session loads the model and hands each provider its blob through
:mod:`.providers`. :mod:`.format` is the on-disk record, :mod:`.signing` and :mod:`.blobs` what
the reader trusts. See docs/AOT.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..deferred_imports import lazy_attribute

if TYPE_CHECKING:
    from .compile import compile_model
    from .format import CONTEXT_DOMAIN
    from .inspect import inspect_model
    from .writer import CompileSummary

__all__ = ["CONTEXT_DOMAIN", "CompileSummary", "compile_model", "inspect_model"]

#: loaded on first use: every session imports :mod:`.capture` and :mod:`.session_cache`, which
#: must not bring in the writer and the compiler (~0.05 s of a fresh process's first session)
_LAZY = {"compile_model": "compile", "CONTEXT_DOMAIN": "format", "inspect_model": "inspect",
         "CompileSummary": "writer"}


def __getattr__(name: str) -> Any:
    return lazy_attribute(__name__, _LAZY, globals(), name)
