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


def optimize(model: ir.Model, passes: Sequence[dict[str, Any]], level: str, providers: Sequence[str],
             notes: list[str] | None = None) -> list[str]:
    """Apply passes in registration order; return the names of passes that changed the model.

    A ``Gradient`` node differentiates the graph slice between its ``xs`` and ``y``, which
    it names in attributes: folding, fusing or renaming anything there would leave it
    without a rule or a value, so a model with one runs only passes registered as
    ``gradient_safe`` (the others are listed in ``notes``).
    """
    enabled = LEVEL_ORDER[level]
    changed: list[str] = []
    training = has_gradient(model.graph)
    skipped: list[str] = []
    for entry in passes:
        if LEVEL_ORDER.get(entry["level"], 99) > enabled:
            continue
        if training and not entry.get("gradient_safe", False):
            skipped.append(getattr(entry["pass"], "name", None) or type(entry["pass"]).__name__)
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
    if skipped and notes is not None:
        notes.append(f"model contains a Gradient node: optimization passes skipped to keep its slice intact: "
                     f"{', '.join(skipped)}")
    return changed


def has_gradient(graph: ir.Graph) -> bool:
    """Whether ``graph`` or any subgraph in it holds an ``ai.onnx.preview.training`` Gradient."""
    for node in ir.traversal.RecursiveGraphIterator(graph):
        if node.op_type == "Gradient" and node.domain == "ai.onnx.preview.training":
            return True
    return False
