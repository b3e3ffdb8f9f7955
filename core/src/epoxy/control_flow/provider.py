"""The core's internal provider ("core") that runs control-flow nodes.

It comes first in every session's provider list and claims exactly the control-flow ops
(If, Loop, Scan, SequenceMap) and ``Gradient`` (which needs the whole graph). When it answers ``capability`` it compiles each of their
subgraphs once into a :class:`SubPlan`: the subgraph is partitioned over the session's
own providers (plus a nested core provider for nested control flow), function-expanded
like the main graph and planned; a kernel then runs that plan per branch / iteration.

Values a subgraph reads from enclosing scopes arrive as the node's trailing arguments
(``CoreGraph.implicit_inputs``) and are fed to the sub-plan as extra inputs.

A provider failing on a subgraph (capability(), kernel() or compile() raising) is treated
as the session treats one failing on the main graph: skipped for that subgraph, the reason
in the report notes, its nodes falling back to the next provider; in strict mode
(``EPOXY_STRICT_PLUGINS=1``), or when the fallback itself fails, it is an error.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import onnx_ir as ir

from ..contract import Capability, Device, GraphSpec, KernelFn, NodeSpec, Provider, SubgraphSpec, ValueType
from ..errors import ProviderError
from ..executor import SequentialExecutor
from ..graph_spec import CoreGraph, outer_scope_names
from ..kit.host import HostAllocator
from ..kit.registry import Unsupported

PROVIDER_NAME = "core"


class SubPlan:
    """A subgraph compiled once: feed (formal inputs + outer values), get its outputs."""

    def __init__(self, body: ir.Graph, owner: ControlFlowProvider, enclosing: CoreGraph) -> None:
        from ..functions import partition_graph
        from ..plan_builder import build_plan

        self.formal = [v.name for v in body.inputs]
        self.outer = [n for n in outer_scope_names(body) if n not in self.formal]
        outer_types = {n: enclosing.value_type(n) for n in self.outer}
        #: why providers were skipped for this subgraph (shown in the session's notes)
        self.skipped: list[str] = []
        remaining = list(owner.providers)
        while True:
            nested = ControlFlowProvider(remaining, owner.fallback)
            nested.memory_limit, nested.max_loop_iterations = owner.memory_limit, owner.max_loop_iterations
            providers = [(PROVIDER_NAME, nested), *remaining]
            try:
                graph, parts = partition_graph(
                    body, dict(enclosing.opsets), providers, owner.fallback,
                    outer_inputs=self.outer, outer_types=outer_types,
                )
                built = build_plan(graph, parts, dict(providers))
                break
            except ProviderError as exc:
                remaining = self._skip(exc, remaining, owner.fallback)
        plan = built.plan
        self.graph = graph
        self.partition = parts
        self.nested = nested
        self.in_slots = [self._slot(plan, n) for n in self.formal + self.outer]
        self.out_slots = [plan.output_slots[n] for n in graph.outputs]
        self.output_types: list[ValueType] = [graph.value_type(n) for n in graph.outputs]
        self.n_outputs = len(graph.outputs)
        self._executor = SequentialExecutor(plan)

    def _skip(self, exc: ProviderError, providers: list[tuple[str, Provider]],
               fallback: str | None) -> list[tuple[str, Provider]]:
        """``providers`` without the one that failed (noted), as the session does; re-raises
        when it cannot be skipped: the fallback, the last provider, strict mode, unknown."""
        from ..plugins import strict_mode

        failed = exc.provider
        names = [name for name, _ in providers]
        if failed is None or failed == fallback or failed not in names or len(providers) < 2 or strict_mode():
            raise exc
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        note = f"provider {failed!r} skipped for this subgraph: {reason}"
        warnings.warn(note, RuntimeWarning, stacklevel=2)
        self.skipped.append(note)
        return [(name, p) for name, p in providers if name != failed]

    @staticmethod
    def _slot(plan: Any, name: str) -> int:
        if name in plan.input_slots:
            return plan.input_slots[name]
        return plan.slot_names.index(name)  # an input shadowed by an initializer

    def run(self, values: Sequence[Any]) -> list[Any]:
        """Run once with formal inputs followed by outer values (in ``self.outer`` order)."""
        return self._executor.run(list(zip(self.in_slots, values)), self.out_slots)

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

    def __init__(self, owner: ControlFlowProvider, graph: CoreGraph, node: NodeSpec) -> None:
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


Factory = Callable[[NodeSpec, CompileContext], KernelFn]


class ControlFlowProvider:
    """Internal provider claiming control-flow nodes; see the module docstring."""

    name = PROVIDER_NAME
    #: the partition report lists this provider only for nodes it claims or truly declines
    quiet_declines = True
    #: resource limits the session sets (SessionOptions); Loop kernels read them
    memory_limit: int | None = None
    max_loop_iterations: int | None = None

    def __init__(self, providers: Sequence[tuple[str, Any]], fallback: str | None) -> None:
        self.providers = list(providers)
        self.fallback = fallback
        self.device = Device(PROVIDER_NAME, "cpu", 0, "control flow (runs subgraph plans)")
        self.allocator: Any = HostAllocator(self.device)
        self._built: dict[int, tuple[NodeSpec, KernelFn, CompileContext]] = {}

    @staticmethod
    def handles(node: NodeSpec) -> bool:
        from .kernels import FACTORIES

        return (node.domain, node.op_type) in FACTORIES

    def capability(self, graph: GraphSpec) -> Capability:
        from .kernels import FACTORIES

        self._built.clear()
        nodes: list[int] = []
        declined: dict[int, str] = {}
        if not isinstance(graph, CoreGraph):
            return Capability()
        for node in graph.nodes:
            if not self.handles(node):
                continue
            ctx = CompileContext(self, graph, node)
            try:
                fn = FACTORIES[(node.domain, node.op_type)](node, ctx)
            except Unsupported as exc:
                declined[node.index] = str(exc) or f"{node.op_type}: unsupported"
                continue
            self._built[node.index] = (node, fn, ctx)
            nodes.append(node.index)
        return Capability(nodes=tuple(nodes), declined=declined)

    def kernel(self, node: NodeSpec) -> KernelFn:
        built = self._built.get(node.index)
        if built is None or built[0] is not node:
            raise Unsupported(f"core: node {node.name!r} was not claimed in capability()")
        return built[1]

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        raise NotImplementedError("the core provider never claims fused groups")

    def body_placement(self, index: int) -> dict[str, dict[str, int]]:
        """For the node at ``index`` (claimed in the last capability()): subgraph attribute ->
        node count per provider, for the report (the node is credited to the core)."""
        built = self._built.get(index)
        if built is None:
            return {}
        return {attr: sub.placement() for attr, sub in built[2].subplans}

    def summaries(self) -> list[str]:
        """One line per claimed node saying where its subgraphs' nodes run."""
        lines = []
        for node, _fn, ctx in self._built.values():
            for attr, sub in ctx.subplans:
                lines.append(f"{node.name}.{attr}: {sub.summary()}")
        return lines
