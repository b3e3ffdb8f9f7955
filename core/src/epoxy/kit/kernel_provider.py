"""A ready-made provider for kernel-based back ends: capability from a kernel registry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..contract import Capability, Device, GraphSpec, KernelFn, NodeSpec, SubgraphSpec
from .host import HostAllocator
from .registry import KernelRegistry, Unsupported


class KernelProvider:
    """Claims every node its registry has a kernel for; runs them one by one on the host.

    Subclass and override ``allocator`` for a non-host device, or ``claims`` to add checks
    (dtypes, shapes) beyond the registry's own.
    """

    def __init__(
        self, name: str, device: Device, registry: KernelRegistry, options: Mapping[str, Any] | None = None
    ) -> None:
        self.name = name
        self.device = device
        self.registry = registry
        self.options = dict(options or {})
        self.allocator: Any = HostAllocator(device)
        # kernels built while answering capability, so a factory's Unsupported becomes a
        # decline reason instead of a failure after partitioning
        self._built: dict[int, tuple[NodeSpec, KernelFn]] = {}

    def claims(self, node: NodeSpec) -> str | None:
        """None when this provider runs ``node``; else the reason it declines."""
        factory, reason = self.registry.lookup(node)
        if factory is None:
            return reason
        try:
            self._built[node.index] = (node, factory(node))
        except Unsupported as exc:
            return str(exc) or f"{node.op_type}: unsupported configuration"
        return None

    def capability(self, graph: GraphSpec) -> Capability:
        self._built.clear()
        nodes: list[int] = []
        declined: dict[int, str] = {}
        for node in graph.nodes:
            reason = self.claims(node)
            if reason is None:
                nodes.append(node.index)
            else:
                declined[node.index] = reason
        return Capability(nodes=tuple(nodes), declined=declined)

    def kernel(self, node: NodeSpec) -> KernelFn:
        built = self._built.get(node.index)
        if built is not None and built[0] is node:
            return built[1]
        factory, reason = self.registry.lookup(node)
        if factory is None:
            raise Unsupported(reason or f"no kernel for {node.op_type}")
        return factory(node)

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        raise NotImplementedError(f"{self.name} runs single nodes only; it never claims fused groups")
