"""Ahead-of-time compiled models (``epoxy compile``): write, read, inspect.

Data flow: :mod:`.capture` records each group a provider compiled while a session is built,
:mod:`.writer` turns the optimized graph into a compiled model (one context node per exported
group, calling a model-local function that keeps the group's nodes), :mod:`.reader` expands
those nodes back when a session loads the model and hands each provider its blob through
:mod:`.providers`. :mod:`.format` is the on-disk record, :mod:`.signing` and :mod:`.blobs` what
the reader trusts. See docs/AOT.md.
"""

from __future__ import annotations

from .compile import compile_model
from .format import CONTEXT_DOMAIN
from .inspect import inspect_model
from .writer import CompileSummary

__all__ = ["CONTEXT_DOMAIN", "CompileSummary", "compile_model", "inspect_model"]
