"""A compiling test provider whose groups can be exported and imported (SDK API 1.2).

Its blob is a small JSON program (the group's node names and ops) behind a magic and a
digest; ``import_compiled`` rebuilds the kernel from it without calling ``compile``, and
counts imports, so tests can tell a blob was used.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fakes import MINI_KERNELS, Factory, FuserProvider, run_in_order

from epoxy.contract import CompiledArtifact, SubgraphSpec
from epoxy.errors import ArtifactRefused
from epoxy.kit import KernelProvider

MAGIC = b"FUSE1\n"
FORMAT = "tests.fuser/1"


@dataclass
class AotFuser(FuserProvider):
    """:class:`FuserProvider` plus export/import; ``refuse``/``crash`` make import fail."""

    imported: list[tuple[str, ...]] = field(default_factory=list)
    seen_trust: list[bool] = field(default_factory=list)
    refuse: str = ""
    crash: bool = False
    target: str = "host"
    capability_calls: int = 0

    def capability(self, graph: Any) -> Any:
        self.capability_calls += 1
        return super().capability(graph)

    def export_compiled(self, kernel: Any, subgraph: SubgraphSpec) -> CompiledArtifact:
        graph = subgraph.graph
        program = [graph.nodes[i].name for i in sorted(subgraph.group.nodes)]
        payload = json.dumps({"nodes": program}).encode()
        return CompiledArtifact(FORMAT, MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload,
                                self.target, {"mode": "plain"})

    def import_compiled(self, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> Any:
        self.seen_trust.append(artifact.trusted)
        if self.crash:
            raise RuntimeError("import exploded")
        if self.refuse:
            raise ArtifactRefused(self.refuse, provider=self.name)
        if artifact.format != FORMAT:
            raise ArtifactRefused(f"format {artifact.format!r} is not {FORMAT!r}", provider=self.name)
        if artifact.target != self.target:
            raise ArtifactRefused(f"built for {artifact.target!r}, this is {self.target!r}", provider=self.name)
        blob = artifact.blob
        if not blob.startswith(MAGIC) or len(blob) < len(MAGIC) + 64:
            raise ArtifactRefused("not a fuser blob (bad magic or cut short)", provider=self.name)
        digest, payload = blob[len(MAGIC):len(MAGIC) + 64], blob[len(MAGIC) + 64:]
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            raise ArtifactRefused("payload digest mismatch", provider=self.name)
        names = json.loads(payload)["nodes"]
        graph = subgraph.graph
        by_name = {n.name: n for n in graph.nodes}
        self.imported.append(tuple(names))
        return run_in_order(subgraph, [by_name[name] for name in names])


@dataclass
class AotFactory(Factory):
    """Keeps the providers it made, so tests can look at what they compiled or imported."""

    made: list[AotFuser] = field(default_factory=list)


def aot_factory(groups: Sequence[Sequence[str]], version: str = "0.0.1", **behaviour: Any) -> AotFactory:
    factory: AotFactory

    def make(device: Any, options: Any) -> AotFuser:
        provider = AotFuser(device, groups, **behaviour)
        factory.made.append(provider)
        return provider

    factory = AotFactory("fuser", make, 80, version=version)
    return factory


class CountingKernels(KernelProvider):
    """The mini host kernels, counting ``capability`` calls."""

    capability_calls = 0

    def capability(self, graph: Any) -> Any:
        CountingKernels.capability_calls += 1
        return super().capability(graph)


def counting_cpu_factory() -> Factory:
    return Factory("cpu", lambda d, o: CountingKernels("cpu", d, MINI_KERNELS, o))
