"""Run the registered passes whose level is enabled and whose provider scope applies
(a scoped pass runs only when its provider is the session's first choice).

Passes are ``onnx_ir`` passes (callables taking an ``ir.Model`` and returning a
``PassResult``). Levels nest: ``basic`` < ``extended`` < ``all``; ``disable`` runs none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from ..errors import EpoxyError, InvalidArgumentError, ModelLoadError
from ..graph.walk import all_nodes
from ..kit.passes import OpCensus, op_census

LEVEL_ORDER = {"disable": 0, "basic": 1, "extended": 2, "all": 3}
#: the levels a pass may register at (``disable`` runs nothing, so no pass registers there)
PASS_LEVELS = ("basic", "extended", "all")


@dataclass(frozen=True)
class PassRegistration:
    """One pass as ``epoxy_register_passes`` registered it, checked when registered.

    Order: passes run in registration order, plugin by plugin as the plugin manager lists
    them: the core's own passes first (they register first), then each plugin's, so a
    plugin's fusions see the core's folding and canonical forms."""

    pass_: Callable[[ir.Model], Any]
    level: str = "basic"
    providers: tuple[str, ...] | None = None
    gradient_safe: bool = False
    plugin: str = ""

    def __post_init__(self) -> None:
        if self.level not in PASS_LEVELS:
            raise InvalidArgumentError(
                f"pass {self.name} registered at level {self.level!r}; levels are {PASS_LEVELS} "
                "(a pass at an unknown level would never run)")
        if not callable(self.pass_):
            raise InvalidArgumentError(f"pass {self.pass_!r} is not callable (an onnx_ir pass is)")
        if self.providers is not None and (not self.providers or not all(
                isinstance(p, str) and p for p in self.providers)):
            raise InvalidArgumentError(f"pass {self.name}: providers must be None or provider names, "
                                       f"got {self.providers!r}")

    @property
    def name(self) -> str:
        return getattr(self.pass_, "name", None) or type(self.pass_).__name__


def optimize(model: ir.Model, passes: Sequence[PassRegistration], level: str, providers: Sequence[str],
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
    with op_census(model) as census:
        model = _run_passes(model, passes, enabled, training, providers, census, changed, skipped)
    if skipped and notes is not None:
        notes.append(f"model contains a Gradient node: optimization passes skipped to keep its slice intact: "
                     f"{', '.join(skipped)}")
    return changed


def _run_passes(model: ir.Model, passes: Sequence[PassRegistration], enabled: int, training: bool,
                providers: Sequence[str], census: OpCensus, changed: list[str], skipped: list[str]) -> ir.Model:
    for entry in passes:
        if LEVEL_ORDER[entry.level] > enabled:
            continue
        if training and not entry.gradient_safe:
            skipped.append(entry.name)
            continue
        scope = entry.providers
        # a provider-scoped pass rewrites nodes into ops only that provider runs, so it
        # applies only when that provider has first pick (not when it is merely the fallback)
        if scope is not None and (not providers or providers[0] not in scope):
            continue
        name = entry.name
        try:
            result = entry.pass_(model)
        except EpoxyError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"optimization pass {name} failed: {type(exc).__name__}: {exc}") from exc
        if result.modified or result.model is not model:
            census.reset(result.model)
        model = result.model
        if result.modified:
            changed.append(name)
    return model


def has_gradient(graph: ir.Graph) -> bool:
    """Whether ``graph`` or any subgraph in it holds an ``ai.onnx.preview.training`` Gradient."""
    for node in all_nodes(graph):
        if node.op_type == "Gradient" and node.domain == "ai.onnx.preview.training":
            return True
    return False


def _everyones_pass(passes: Sequence[PassRegistration], level: str, kind: type) -> PassRegistration | None:
    """The first pass of class ``kind`` that ``level`` runs for every provider, if any."""
    enabled = LEVEL_ORDER[level]
    for entry in passes:
        if isinstance(entry.pass_, kind) and entry.providers is None and LEVEL_ORDER[entry.level] <= enabled:
            return entry
    return None


def constant_lifting_pass(passes: Sequence[PassRegistration], level: str) -> str | None:
    """The name of a pass ``level`` runs that lifts every ``value`` Constant node (onnx_ir's
    LiftConstantsToInitializersPass, no size limit, for every provider), if any: loading may
    then lift them on the protobuf first (:mod:`epoxy.load.constant_nodes`), to the same graph."""
    from onnx_ir.passes.common import LiftConstantsToInitializersPass

    entry = _everyones_pass(passes, level, LiftConstantsToInitializersPass)
    if entry is None or entry.pass_.size_limit != 0:  # type: ignore[attr-defined]
        return None
    return entry.name


@dataclass(frozen=True)
class LoadTimePasses:
    """The passes ``level`` runs for every provider whose work loading may do first, on the
    protobuf, to the same graph (None: the pass does not run, so loading does nothing of it).

    ``lift_constants``: Constant nodes to initializers (:mod:`epoxy.load.constant_nodes`);
    ``legacy_inputs``: an IR < 4 model's initializer inputs (:mod:`epoxy.load.legacy_inputs`);
    ``fold_fills``: ConstantOfShape folds, with the pass's element limit, and
    ``drop_unread``: the initializers they leave unread, which the dead-node pass would
    remove (:mod:`epoxy.load.constant_fills`)."""

    lift_constants: str | None = None
    legacy_inputs: str | None = None
    fold_fills: tuple[str, int] | None = None
    drop_unread: str | None = None

    @classmethod
    def of(cls, passes: Sequence[PassRegistration], level: str) -> LoadTimePasses:
        from .passes import ConstantFoldingPass, DeadNodeRemovalPass, LegacyInitializerInputsPass

        folding = _everyones_pass(passes, level, ConstantFoldingPass)
        legacy = _everyones_pass(passes, level, LegacyInitializerInputsPass)
        dead = _everyones_pass(passes, level, DeadNodeRemovalPass)
        return cls(
            lift_constants=constant_lifting_pass(passes, level),
            legacy_inputs=None if legacy is None else legacy.name,
            fold_fills=None if folding is None else (folding.name, int(folding.pass_.max_elements)),  # type: ignore[attr-defined]
            drop_unread=None if dead is None or folding is None else dead.name)


def with_work_done_while_loading(applied: list[str], done: Sequence[str],
                                 passes: Sequence[PassRegistration]) -> list[str]:
    """``applied`` (pass names, in registration order) with the passes whose work loading
    did (``done``) added where they run: the session reports them as applied."""
    order = {entry.name: i for i, entry in enumerate(passes)}
    result = list(applied)
    for name in done:
        if name in result:
            continue
        rank = order.get(name, -1)
        at = next((i for i, other in enumerate(result) if order.get(other, -1) > rank), len(result))
        result.insert(at, name)
    return result
