"""The Core ML provider: capability over the op table, one ML Program per fused group."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from epoxy.contract import Capability, CompiledArtifact, Device, GraphSpec, KernelFn, NodeSpec, SubgraphSpec
from epoxy.errors import ProviderError
from epoxy.kit import HostAllocator

from .facts import Facts
from .grouping import plan_groups
from .options import CoreMLOptions
from .program import CompiledPackage, compile_group
from .runner import NAME, _refuse, can_predict, make_runner


class CoreMLProvider:
    """Claims fused groups only (no single-node kernels).

    ``convert_only``: compile converts and saves packages but returns a callable that refuses
    to run (what ``compile_model`` uses off macOS).
    """

    def __init__(self, device: Device, options: CoreMLOptions, *, convert_only: bool = False) -> None:
        self.name = NAME
        self.device = device
        self.options = options
        self.allocator = HostAllocator(device)
        self.convert_only = convert_only
        self.compiled: list[tuple[str, CompiledPackage]] = []  # (group label, package), in compile order
        self._facts: tuple[Any, Facts] | None = None
        #: kernel -> its converted package, for ``export_compiled``
        self.exports: weakref.WeakKeyDictionary[Any, CompiledPackage] = weakref.WeakKeyDictionary()

    def _facts_for(self, graph: GraphSpec) -> Facts:
        if self._facts is None or self._facts[0] is not graph:
            self._facts = (graph, Facts(graph))
        return self._facts[1]

    def capability(self, graph: GraphSpec) -> Capability:
        return plan_groups(graph, self._facts_for(graph)).capability()

    def kernel(self, node: NodeSpec) -> KernelFn:
        raise ProviderError(f"coreml runs fused groups only; node {node.name!r} was never claimed singly",
                            provider=NAME)

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        facts = self._facts_for(subgraph.graph)
        package = compile_group(subgraph, facts, self.options)
        self.compiled.append((subgraph.group.label, package))
        if self.convert_only or not can_predict():
            kernel = _refuse(subgraph.group.label, package)
        else:
            kernel = make_runner(subgraph, facts, package, self.options)
        self.exports[kernel] = package
        return kernel

    # -- compiled models (SDK API 1.2, :mod:`.aot`) ------------------------------------------
    def export_compiled(self, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
        """The group's ``.mlpackage`` (and ``.mlmodelc`` on macOS) as one checked blob."""
        from .aot import export_group

        return export_group(self, kernel, subgraph)

    def import_compiled(self, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
        """The group's kernel from an exported package, without converting again."""
        from .aot import import_group

        return import_group(self, subgraph, artifact)


def packages(provider: CoreMLProvider) -> Sequence[CompiledPackage]:
    return [p for _label, p in provider.compiled]
