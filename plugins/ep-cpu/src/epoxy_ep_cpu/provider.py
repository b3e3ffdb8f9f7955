"""The cpu provider: the kit's KernelProvider, building kernels under this provider's options,
plus fused elementwise groups when the jit tier runs (:mod:`.fused_groups`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from epoxy.contract import Capability, Device, FusedGroup, GraphSpec, KernelFn, NodeSpec, SubgraphSpec
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.kit.elementwise import elementwise_groups, lower_group

from . import jit
from .settings import CpuSettings, building_with

#: label prefix of this provider's fused elementwise groups (the partition report shows it)
GROUP_PREFIX = "cpu_ew_"


class CpuProvider(KernelProvider):
    """Kernel factories see ``settings`` (through ``settings.current()``) while they build."""

    def __init__(
        self, name: str, device: Device, registry: KernelRegistry, options: Mapping[str, Any], settings: CpuSettings
    ) -> None:
        super().__init__(name, device, registry, options)
        self.settings = settings
        #: this provider's resolved jit thread count, filled by the first jit kernel it builds
        self._jit_memo: dict[str, int] = {}

    def claims(self, node: NodeSpec) -> str | None:
        with building_with(self.settings):
            return super().claims(node)

    def kernel(self, node: NodeSpec) -> KernelFn:
        with building_with(self.settings), jit.remembering(self._jit_memo):
            return super().kernel(node)

    def capability(self, graph: GraphSpec) -> Capability:
        """Single nodes, plus fused elementwise groups when their loop can run here (jit on,
        fusion not turned off, numba importable: probed only when a group formed, so a model
        without one never imports numba)."""
        single = super().capability(graph)
        from . import fused_groups

        if not (self.settings.jit and self.settings.fuse_elementwise):
            return single
        claimed = set(single.nodes)
        may_take = lambda n: n.index in claimed and fused_groups.fusable(graph, n)  # noqa: E731
        found = [g for g in elementwise_groups(graph, may_take, same_shape=True) if fused_groups.pays(graph, g)]
        if not found or not jit.availability().available:
            return single
        grouped = {i for g in found for i in g}
        groups = tuple(FusedGroup(g, f"{GROUP_PREFIX}{k}") for k, g in enumerate(found))
        return Capability(nodes=tuple(i for i in single.nodes if i not in grouped), groups=groups,
                          declined=single.declined)

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        """A fused elementwise group: its generated loop, with the nodes' own kernels as the
        path for sizes where the loop does not pay (see :mod:`.fused_groups`)."""
        from .fused_groups import FusedElementwise, per_node

        graph = subgraph.graph
        if not subgraph.group.label.startswith(GROUP_PREFIX):
            return super().compile(subgraph)
        nodes = [graph.nodes[i] for i in sorted(subgraph.group.nodes)]
        steps = [(self.kernel(n), n.inputs, n.outputs) for n in nodes]
        fallback = per_node(steps, subgraph.inputs, subgraph.outputs)
        program, used = lower_group(graph, subgraph.group.nodes, subgraph.inputs, subgraph.outputs)
        dtype = np.dtype(graph.value_type(subgraph.outputs[0]).dtype).name
        in_dtypes = [np.dtype(graph.value_type(subgraph.inputs[k]).dtype).name for k in used]
        with building_with(self.settings), jit.remembering(self._jit_memo):
            nthreads = jit.thread_count()
        return FusedElementwise(program, used, dtype, in_dtypes, fallback, nthreads)
