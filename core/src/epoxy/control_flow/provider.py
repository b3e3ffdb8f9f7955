"""The core's internal provider ("core") that runs control-flow nodes.

It comes first in every session's provider list and claims exactly the control-flow ops
(If, Loop, Scan, SequenceMap) and ``Gradient`` (which needs the whole graph). When it answers
``capability`` it compiles each of their
subgraphs once into a :class:`SubPlan`: the subgraph is partitioned over the session's
own providers (plus a nested core provider for nested control flow), function-expanded
like the main graph and planned; a kernel then runs that plan per branch / iteration.

A node the spec does not allow (a Loop whose condition is not bool, a body whose inputs or
outputs do not match the node: ``spec_checks``) is an ``InvalidGraphError``, not a decline.

Values a subgraph reads from enclosing scopes arrive as the node's trailing arguments
(``CoreGraph.implicit_inputs``) and are fed to the sub-plan as extra inputs.

A provider failing on a subgraph (capability(), kernel() or compile() raising) is treated
as the session treats one failing on the main graph: skipped for that subgraph, the reason
in the report notes, its nodes falling back to the next provider; in strict mode
(``EPOXY_STRICT_PLUGINS=1``), or when the fallback itself fails, it is an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..contract import Capability, Device, GraphSpec, KernelFn, NodeSpec, SubgraphSpec
from ..graph.graph_spec import CoreGraph
from ..kit.host import HostAllocator
from ..kit.registry import Unsupported
from .kernels import FACTORIES
from .spec_checks import check_node
from .subplan import CompileContext

PROVIDER_NAME = "core"


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
        return (node.domain, node.op_type) in FACTORIES

    def capability(self, graph: GraphSpec) -> Capability:
        self._built.clear()
        nodes: list[int] = []
        declined: dict[int, str] = {}
        if not isinstance(graph, CoreGraph):
            return Capability()
        for node in graph.nodes:
            if not self.handles(node):
                continue
            check_node(node, graph)  # a node the spec does not allow is the model's error, not a decline
            ctx = CompileContext(self, graph, node)
            try:
                fn = FACTORIES[(node.domain, node.op_type)](node, ctx)
            except Unsupported as exc:
                declined[node.index] = str(exc) or f"{node.op_type}: unsupported"
                continue
            self._built[node.index] = (node, fn, ctx)
            nodes.append(node.index)
        return Capability(nodes=tuple(nodes), declined=declined)

    def nested(self, providers: list[tuple[str, Any]]) -> tuple[str, ControlFlowProvider]:
        """The core provider of a body's own control flow, over the providers left for it."""
        inner = ControlFlowProvider(providers, self.fallback)
        inner.memory_limit, inner.max_loop_iterations = self.memory_limit, self.max_loop_iterations
        return PROVIDER_NAME, inner

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
