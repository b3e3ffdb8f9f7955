"""A control-flow body compiled once (:class:`SubPlan`), and what a control-flow kernel
factory gets to compile its bodies with (:class:`CompileContext`).

A body is partitioned and planned by ``epoxy.plan.compile_graph.partition_and_plan``, the
path the session's main graph takes: the body's nodes go to the session's providers, its own
control flow to a nested core provider, a failing provider is skipped for that body.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import onnx_ir as ir

from ..contract import NodeSpec, ValueType
from ..errors import InvalidGraphError, ProviderError
from ..graph.graph_spec import CoreGraph, outer_scope_names, value_name
from ..kit.registry import Unsupported
from ..plan.compile_graph import partition_and_plan
from ..run.executor import RUN_STOP, SequentialExecutor

if TYPE_CHECKING:  # the provider imports this module
    from .provider import ControlFlowProvider


class SubPlan:
    """A subgraph compiled once: feed (formal inputs + outer values), get its outputs."""

    def __init__(self, body: ir.Graph, owner: Any, enclosing: CoreGraph) -> None:
        """``owner``: the :class:`~epoxy.control_flow.provider.ControlFlowProvider` compiling the
        node; its providers plan the body, its ``nested`` builds the body's own control flow."""
        self.formal = [value_name(v) for v in body.inputs]
        self.outer = [n for n in outer_scope_names(body) if n not in self.formal]
        outer_types = {n: enclosing.value_type(n) for n in self.outer}
        #: why providers were skipped for this subgraph (shown in the session's notes)
        self.skipped: list[str] = []

        def skipped(exc: ProviderError) -> None:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            note = f"provider {exc.provider!r} skipped for this subgraph: {reason}"
            warnings.warn(note, RuntimeWarning, stacklevel=2)
            self.skipped.append(note)

        planned = partition_and_plan(body, dict(enclosing.opsets), owner.providers, owner.fallback,
                                     core=owner.nested, on_skip=skipped, outer_inputs=self.outer,
                                     outer_types=outer_types)
        plan = planned.built.plan
        graph = planned.graph
        self.graph = graph
        self.partition = planned.partition
        # owner.nested built it: a ControlFlowProvider, never None
        self.nested = cast("ControlFlowProvider", planned.core)
        self.in_slots = [self._slot(plan, n) for n in self.formal + self.outer]
        self.out_slots = [plan.output_slots[n] for n in graph.outputs]
        self.output_types: list[ValueType] = [graph.value_type(n) for n in graph.outputs]
        self.n_outputs = len(graph.outputs)
        self._executor = SequentialExecutor(plan)

    @staticmethod
    def _slot(plan: Any, name: str) -> int:
        if name in plan.input_slots:
            return plan.input_slots[name]
        return plan.slot_names.index(name)  # an input shadowed by an initializer

    def run(self, values: Sequence[Any]) -> list[Any]:
        """Run once with formal inputs followed by outer values (in ``self.outer`` order);
        the body's steps check the enclosing run's stop condition, as the main graph's do."""
        return self._executor.run(list(zip(self.in_slots, values)), self.out_slots, RUN_STOP.get())

    def placement(self) -> dict[str, int]:
        """Node count per provider in this subgraph (its control-flow nodes count as core)."""
        counts: dict[str, int] = {}
        for d in self.partition.decisions:
            counts[d.provider] = counts.get(d.provider, 0) + 1
        return counts

    def summary(self) -> str:
        counts = self.placement()
        inner = "; ".join(self.nested.summaries())
        text = ", ".join(f"{n} on {p}" for p, n in counts.items()) or "no nodes"
        text += "".join(f"; {note}" for note in self.skipped)
        return text + (f" [{inner}]" if inner else "")


class CompileContext:
    """What a control-flow kernel factory needs beyond its NodeSpec."""

    def __init__(self, owner: Any, graph: CoreGraph, node: NodeSpec) -> None:
        self.owner = owner
        self.graph = graph
        self.node = node
        self.implicit: tuple[str, ...] = graph.implicit_inputs.get(node.index, ())
        self.subplans: list[tuple[str, SubPlan]] = []

    def compile(self, attr: str) -> SubPlan:
        body = self.node.attributes.get(attr)
        if not isinstance(body, ir.Graph):
            raise Unsupported(f"{self.node.op_type}: attribute {attr!r} is missing or not a graph")
        try:
            sub = SubPlan(body, self.owner, self.graph)
        except InvalidGraphError as exc:  # the body's own nodes break the spec: say where the body is
            raise InvalidGraphError(f"in {attr} of {self.node.op_type} node {self.node.name!r}: {exc}",
                                    node=exc.node) from exc
        except (Unsupported, ProviderError):
            raise  # a provider failure SubPlan could not skip is an error, as on the main graph
        except Exception as exc:  # the subgraph cannot run here: decline, saying why
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise Unsupported(f"{attr}: {type(exc).__name__}: {first}") from exc
        self.subplans.append((attr, sub))
        return sub

    def outer_positions(self, sub: SubPlan) -> list[int]:
        """Where each of ``sub``'s outer values sits among the node's implicit arguments."""
        return [self.implicit.index(n) for n in sub.outer]
