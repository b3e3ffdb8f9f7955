"""Run the registered passes whose level is enabled and whose provider scope applies
(a scoped pass runs only when its provider is the session's first choice).

Passes are ``onnx_ir`` passes (callables taking an ``ir.Model`` and returning a
``PassResult``). Levels nest: ``basic`` < ``extended`` < ``all``; ``disable`` runs none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from ..errors import EpoxyError, ModelLoadError

LEVEL_ORDER = {"disable": 0, "basic": 1, "extended": 2, "all": 3}


def optimize(model: ir.Model, passes: Sequence[dict[str, Any]], level: str, providers: Sequence[str]) -> list[str]:
    """Apply passes in registration order; return the names of passes that changed the model."""
    enabled = LEVEL_ORDER[level]
    changed: list[str] = []
    for entry in passes:
        if LEVEL_ORDER.get(entry["level"], 99) > enabled:
            continue
        scope = entry["providers"]
        # a provider-scoped pass rewrites nodes into ops only that provider runs, so it
        # applies only when that provider has first pick (not when it is merely the fallback)
        if scope is not None and (not providers or providers[0] not in scope):
            continue
        pass_ = entry["pass"]
        name = getattr(pass_, "name", None) or type(pass_).__name__
        try:
            result = pass_(model)
        except EpoxyError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"optimization pass {name} failed: {type(exc).__name__}: {exc}") from exc
        model = result.model
        if result.modified:
            changed.append(name)
    return changed
