"""A provider seen through a compiled model: its blobs pinned, its compiled groups recorded.

:func:`wrap` puts an :class:`AotProvider` around each provider of a session that either reads
a compiled model (the provider gets back exactly the groups it compiled, and
``import_compiled`` runs instead of ``compile``) or is being compiled by ``epoxy compile``
(each group it compiles is exported). Everything else is the provider's own: attributes are
delegated, so ``session.get_provider(...)`` keeps its provider-specific methods.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contract import Capability, FusedGroup, GraphSpec, KernelFn, NodeSpec, Provider, SubgraphSpec
from ..errors import ArtifactRefused
from .capture import Capture, CapturedGroup
from .reader import PinnedGroup


@dataclass(frozen=True)
class RecordedPartition:
    """The compiled model's partition: node name -> provider, the declines per node, and the
    providers (in priority order, with their versions) that answered."""

    owner: Mapping[str, str]
    declined: Mapping[str, Sequence[tuple[str, str]]]
    providers: Sequence[str] = ()
    versions: Mapping[str, str] = field(default_factory=dict)

    def answers_for(self, names: Sequence[str], versions: Mapping[str, str]) -> bool:
        """True when these providers, in this order and at these versions, are the ones that
        answered when the model was compiled: their answers would be the same again."""
        return list(names) == list(self.providers) and all(versions.get(n) == self.versions.get(n) for n in names)

    @classmethod
    def of(cls, metadata: Mapping[str, Any] | None) -> RecordedPartition | None:
        """From the model's ``epoxy.compiled`` record; ``None`` when absent or malformed."""
        owner = (metadata or {}).get("partition")
        declined = (metadata or {}).get("declined") or {}
        if not isinstance(owner, dict) or not isinstance(declined, dict):
            return None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in owner.items()):
            return None
        pairs: dict[str, list[tuple[str, str]]] = {}
        for node, items in declined.items():
            if not isinstance(items, list):
                return None
            pairs[node] = [(str(p[0]), str(p[1])) for p in items if isinstance(p, list) and len(p) == 2]
        providers = (metadata or {}).get("providers") or []
        versions = (metadata or {}).get("provider_versions") or {}
        if not isinstance(providers, list) or not isinstance(versions, dict):
            return None
        return cls(owner, pairs, [str(p) for p in providers], {str(k): str(v) for k, v in versions.items()})


@dataclass
class ArtifactLedger:
    """Per compiled group of the model: what became of its blob (the partition report's
    ``artifacts``), and the warnings to raise for blobs not used."""

    status: dict[str, str] = field(default_factory=dict)

    def loaded(self, label: str, text: str) -> None:
        self.status[label] = text

    def not_used(self, label: str, why: str) -> None:
        self.status[label] = why
        warnings.warn(f"compiled group {label!r}: {why}", RuntimeWarning, stacklevel=6)


class AotProvider:
    """Wraps one provider (see the module docstring)."""

    def __init__(self, inner: Provider, pinned: Sequence[PinnedGroup], ledger: ArtifactLedger,
                 capture: Capture | None, recorded: RecordedPartition | None = None) -> None:
        self._inner = inner
        self._pinned = {group.label: group for group in pinned if group.artifact is not None}
        self._recorded = recorded
        self._ledger = ledger
        self._capture = capture
        self._claimed: dict[str, tuple[int, ...]] = {}

    def __getattr__(self, name: str) -> Any:  # name, device, allocator and any extra method
        return getattr(self._inner, name)

    @property
    def wrapped(self) -> Provider:
        """The provider itself."""
        return self._inner

    def capability(self, graph: GraphSpec) -> Capability:
        """The provider's answer, with its pinned groups claimed first (their nodes found by
        name: a control-flow body, which lacks them, is answered as usual); the provider's
        own groups that overlap them are left out."""
        index = {node.name: node.index for node in graph.nodes}
        answer = self._recorded_answer(graph, index)
        if answer is not None:
            return answer
        answer = self._inner.capability(graph)
        if not self._pinned:
            return answer
        pinned_groups: list[FusedGroup] = []
        taken: set[int] = set()
        for label, group in self._pinned.items():
            indices = [index.get(name) for name in group.nodes]
            if None in indices:
                continue
            nodes = tuple(sorted(i for i in indices if i is not None))
            self._claimed[label] = nodes
            pinned_groups.append(FusedGroup(nodes, label))
            taken.update(nodes)
        if not pinned_groups:
            return answer
        own = tuple(FusedGroup(g.nodes, _fresh_label(g.label, self._pinned))
                    for g in answer.groups if not taken.intersection(g.nodes))
        singles = tuple(i for i in answer.nodes if i not in taken)
        return Capability(nodes=singles, groups=tuple(pinned_groups) + own, declined=answer.declined)

    def _recorded_answer(self, graph: GraphSpec, index: Mapping[str, int]) -> Capability | None:
        """The partition recorded when the model was compiled, for the graph it was recorded
        on (same node names, every pinned group found): the provider's own ``capability`` is
        what the blobs save (openvino converts the whole graph there), and the provider is
        the version that answered it then. ``None`` to ask the provider."""
        recorded = self._recorded
        if recorded is None or set(index) != set(recorded.owner):
            return None
        groups = []
        for label, group in self._pinned.items():
            if not all(name in index for name in group.nodes):
                return None
            nodes = tuple(sorted(index[name] for name in group.nodes))
            self._claimed[label] = nodes
            groups.append(FusedGroup(nodes, label))
        in_groups = {i for g in groups for i in g.nodes}
        mine = self.name
        singles = tuple(index[n] for n, owner in recorded.owner.items() if owner == mine and index[n] not in in_groups)
        declined = {index[n]: reason for n, owner in recorded.owner.items() if owner != mine
                    for provider, reason in recorded.declined.get(n, ()) if provider == mine}
        return Capability(nodes=singles, groups=tuple(groups), declined=declined)

    def unplaced(self) -> list[str]:
        """Labels of pinned groups never handed to ``compile`` (nodes missing from the graph,
        or taken by a provider listed before this one)."""
        return [label for label in self._pinned if label not in self._ledger.status]

    def kernel(self, node: NodeSpec) -> KernelFn:
        return self._inner.kernel(node)

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        label = subgraph.group.label
        group = self._pinned.get(label)
        kernel = None
        if group is not None and self._claimed.get(label) == tuple(sorted(subgraph.group.nodes)):
            kernel = self._import(group, subgraph)
        started = time.perf_counter()
        if kernel is None:
            if self._capture is not None:
                self._capture.say("compile", self.name, label, len(subgraph.group.nodes))
            kernel = self._inner.compile(subgraph)
        if self._capture is not None:
            self._export(kernel, subgraph, time.perf_counter() - started)
        return kernel

    def _import(self, group: PinnedGroup, subgraph: SubgraphSpec) -> KernelFn | None:
        importer = getattr(self._inner, "import_compiled", None)
        assert group.artifact is not None
        if importer is None:
            self._ledger.not_used(group.label, f"compiled again: provider {self.name!r} cannot import compiled groups")
            return None
        try:
            kernel = importer(subgraph, group.artifact)
        except ArtifactRefused as exc:
            self._ledger.not_used(group.label, f"compiled again: {self.name} refused the blob: {exc}")
            return None
        except Exception as exc:  # noqa: BLE001 - a failing import must not take the session down
            self._ledger.not_used(group.label, f"compiled again: {self.name}.import_compiled raised "
                                               f"{type(exc).__name__}: {exc}")
            return None
        trust = "signed by this user's key" if group.artifact.trusted else "not signed by this user's key"
        self._ledger.loaded(group.label, f"loaded from the compiled blob ({len(group.artifact.blob)} bytes, "
                                         f"{group.artifact.format}, {trust})")
        return kernel

    def _export(self, kernel: KernelFn, subgraph: SubgraphSpec, seconds: float) -> None:
        assert self._capture is not None
        exporter = getattr(self._inner, "export_compiled", None)
        artifact, reason = None, ""
        if exporter is None:
            reason = f"provider {self.name!r} cannot export compiled groups"
        else:
            try:
                artifact = exporter(kernel, subgraph)
            except Exception as exc:  # noqa: BLE001 - reported, the group keeps its nodes
                reason = f"export_compiled raised {type(exc).__name__}: {exc}"
            else:
                if artifact is None:
                    reason = "the provider keeps nothing for this group"
        group = subgraph.group
        self._capture.groups.append(CapturedGroup(self.name, group.label, subgraph.graph, tuple(group.nodes),
                                                  subgraph.inputs, subgraph.outputs, artifact, reason, seconds))
        self._capture.say("compiled", self.name, group.label, len(group.nodes), seconds)


def _fresh_label(label: str, pinned: Mapping[str, Any]) -> str:
    return label if label not in pinned else f"{label}_fresh"


def wrap(providers: list[tuple[str, Provider]], pinned: Sequence[PinnedGroup], versions: Mapping[str, str],
         ledger: ArtifactLedger, capture: Capture | None,
         recorded: RecordedPartition | None = None) -> list[tuple[str, Provider]]:
    """The session's providers, wrapped where a compiled model or a capture needs it; the
    groups pinned to providers the session lacks, or to another version, go in ``ledger``."""
    names = {name for name, _ in providers}
    for group in pinned:
        if group.artifact is None:
            ledger.not_used(group.label, f"compiled again: {group.reason}")
        elif group.provider not in names:
            ledger.not_used(group.label, f"compiled for provider {group.provider!r}, which this session does not "
                                         "use: its kept nodes run on the session's providers")
        elif versions.get(group.provider) != group.provider_version:
            ledger.not_used(group.label, f"compiled again: compiled by {group.provider} "
                                         f"{group.provider_version}, this is {versions.get(group.provider)}")
    usable = [g for g in pinned if g.artifact is not None and g.provider in names
              and versions.get(g.provider) == g.provider_version]
    order = [name for name, _ in providers]
    if recorded is not None and not (len(usable) == len(pinned) and recorded.answers_for(order, versions)):
        recorded = None  # another provider set, version or a blob not used: every provider is asked
    if not usable and capture is None and recorded is None:
        return providers
    return [(name, AotProvider(provider, [g for g in usable if g.provider == name], ledger, capture, recorded))
            for name, provider in providers]
