"""Partition and plan a graph: the one path the session's main graph and every control-flow
body take, so both skip a failing provider, expand unclaimed functions and fold constants
the same way.

A provider whose ``capability()``, ``kernel()`` or ``compile()`` raises is dropped and the
graph partitioned again without it, the reason handed to ``on_skip``; that is an error
instead when the provider is the fallback, the last one left, unknown, or when strict mode
(``EPOXY_STRICT_PLUGINS=1``) is on. The core's own provider or the fallback refusing the
model itself (a control-flow node the spec does not allow, an attribute out of range, a size
past the memory limit) is the model's error: its ``InvalidGraphError`` or
``ResourceLimitError`` is raised as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass

import onnx_ir as ir

from ..contract import Provider, ValueType
from ..errors import InvalidGraphError, ProviderError, ResourceLimitError
from ..graph.graph_spec import CoreGraph
from ..partition.expand import partition_graph
from ..partition.partitioner import Partition
from ..plugins import strict_mode
from .plan_builder import BuiltPlan, build_plan

#: builds the core's control-flow provider over the providers left (it compiles bodies over them)
CoreFactory = Callable[[list[tuple[str, Provider]]], tuple[str, Provider]]


@dataclass
class Planned:
    """What ``partition_and_plan`` made, and with which providers (failed ones dropped)."""

    graph: CoreGraph
    partition: Partition
    built: BuiltPlan
    providers: list[tuple[str, Provider]]
    core: Provider | None


#: what a provider raises when the model itself is at fault; from the fallback (or the core)
#: it reaches the user as it is, from any other provider it only drops that provider
MODEL_ERRORS = (InvalidGraphError, ResourceLimitError)


def without_failed(exc: ProviderError, providers: list[tuple[str, Provider]],
                   fallback: str | None) -> list[tuple[str, Provider]]:
    """``providers`` less the one ``exc`` names, or ``exc`` re-raised when it cannot be skipped."""
    failed = exc.provider
    names = [name for name, _ in providers]
    if failed is None or failed == fallback or failed not in names or len(providers) < 2 or strict_mode():
        raise exc
    return [(name, p) for name, p in providers if name != failed]


def partition_and_plan(
    ir_graph: ir.Graph,
    opsets: MutableMapping[str, int],
    providers: Sequence[tuple[str, Provider]],
    fallback: str | None,
    *,
    core: CoreFactory | None = None,
    on_skip: Callable[[ProviderError], None] | None = None,
    outer_inputs: Sequence[str] = (),
    outer_types: Mapping[str, ValueType] | None = None,
    on_expand: Callable[[], None] | None = None,
    notes: list[str] | None = None,
    fold_constants: bool = True,
    on_partitioned: Callable[[], None] | None = None,
) -> Planned:
    """Partition ``ir_graph`` over ``providers`` (the core's control-flow provider first, when
    ``core`` builds one) and plan it; see the module docstring for failing providers.
    ``on_partitioned`` is called between the two (the session times the phases apart)."""
    chosen = list(providers)
    while True:
        control = core(chosen) if core is not None else None
        everyone = ([control] if control is not None else []) + chosen
        try:
            graph, parts = partition_graph(ir_graph, opsets, everyone, fallback, outer_inputs=outer_inputs,
                                           outer_types=outer_types, on_expand=on_expand, notes=notes)
            if on_partitioned is not None:
                on_partitioned()
            built = build_plan(graph, parts, dict(everyone), fold_constants=fold_constants)
        except ProviderError as exc:
            refused = exc.__cause__ if isinstance(exc.__cause__, MODEL_ERRORS) else None
            judges = {fallback, control[0] if control is not None else None} - {None}
            if refused is not None and exc.provider in judges:
                # the core (spec checks) or the fallback refused the model itself (an invalid
                # attribute, a size past the limit): the model's error, not a provider failure
                raise refused from None
            chosen = without_failed(exc, chosen, fallback)
            if on_skip is not None:
                on_skip(exc)
            continue
        return Planned(graph, parts, built, chosen, control[1] if control is not None else None)
