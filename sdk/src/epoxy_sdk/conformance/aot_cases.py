"""What the ahead-of-time scope feeds ``import_compiled``: the provider's own blobs, and
damaged or foreign versions of them that it must refuse (SDK API 1.2).

The core checks a blob's size and sha256 against its context record before a provider sees
it, but a record can be edited along with its blob, and a blob can come from another build
or machine: each provider checks its own (format, target, options, a length and a digest of
its payload) and answers with :class:`epoxy.errors.ArtifactRefused`.

Each damage comes with the ``trusted`` flag it can have when it reaches a provider through
the core. A blob whose bytes were altered is never trusted (its record's sha256 is signed,
so whoever edits one breaks the signature): those are handed over untrusted, and a provider
may rely on a trusted blob's bytes being the ones signed. A blob that is whole but made
elsewhere (another format, target or options) can be this user's own, signed: those are
handed over trusted, so a provider refusing unsigned machine code still has to check them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epoxy.contract import CompiledArtifact, FusedGroup, SubgraphSpec

#: the reason a provider without the optional methods has its ahead-of-time tests skipped
NOT_IMPLEMENTED = "provider does not implement export_compiled (optional, SDK API 1.2)"
#: a format name no provider writes
FOREIGN_FORMAT = "epoxy.conformance.foreign/1"


@dataclass(frozen=True)
class Damage:
    """One way an artifact can be unfit: ``what`` names it in failure messages."""

    id: str
    what: str
    make: Callable[[CompiledArtifact], CompiledArtifact]


def _altered(artifact: CompiledArtifact, blob: bytes) -> CompiledArtifact:
    """Other bytes under the same record: the signature no longer holds."""
    return dataclasses.replace(artifact, blob=blob, trusted=False)


def _elsewhere(artifact: CompiledArtifact, **fields: Any) -> CompiledArtifact:
    """The same bytes recorded differently, as this user's epoxy may have signed them."""
    return dataclasses.replace(artifact, trusted=True, **fields)


def _flip_middle(blob: bytes) -> bytes:
    flipped = bytearray(blob)
    flipped[len(flipped) // 2] ^= 0xFF
    return bytes(flipped)


def _random_bytes(blob: bytes) -> bytes:
    noise = np.random.default_rng(18).bytes(max(len(blob), 64))
    return noise if noise != blob else noise[::-1]


DAMAGES: tuple[Damage, ...] = (
    Damage("truncated", "a blob cut to half its length (untrusted)",
           lambda a: _altered(a, a.blob[:len(a.blob) // 2])),
    Damage("empty", "an empty blob (untrusted)", lambda a: _altered(a, b"")),
    Damage("flipped-byte", "a blob with its middle byte flipped (untrusted)",
           lambda a: _altered(a, _flip_middle(a.blob))),
    Damage("random-bytes", "random bytes under the provider's own format name (untrusted)",
           lambda a: _altered(a, _random_bytes(a.blob))),
    Damage("foreign-format", f"the provider's blob under another format name ({FOREIGN_FORMAT!r}, trusted)",
           lambda a: _elsewhere(a, format=FOREIGN_FORMAT)),
    Damage("other-target", "the provider's blob recorded for another target (trusted)",
           lambda a: _elsewhere(a, target=f"{a.target} (another target)")),
    Damage("other-options", "the provider's blob recorded with other provider options (trusted)",
           lambda a: _elsewhere(a, options={**a.options, "epoxy_conformance_option": "other"})),
)


@dataclass(frozen=True)
class ExportedGroup:
    """A group the provider compiled in a kit session, and the artifact it exported."""

    model: str
    subgraph: SubgraphSpec
    artifact: CompiledArtifact

    @property
    def label(self) -> str:
        return f"{self.model}/{self.subgraph.group.label}"


@dataclass
class Exports:
    """What the provider exported over the kit's models; ``problems``: groups whose export
    raised or returned something that is not a :class:`CompiledArtifact`."""

    groups: list[ExportedGroup]
    problems: list[str]
    declined: int = 0  # groups for which export_compiled returned None
    #: the sessions the groups were compiled in, kept alive with them: a group's graph reads its
    #: session's model, whose weights the session forgets when it goes
    sessions: list[Any] = field(default_factory=list)


def export_groups(models: Sequence[tuple[str, Any, Mapping[str, Any]]],
                  build: Callable[[Any, Mapping[str, Any]], Any]) -> Exports:
    """Build a session per ``(id, model, session kwargs)`` with ``build`` while the core
    captures every compiled group (``epoxy.aot.capture``), exactly as ``epoxy compile`` does."""
    from epoxy.aot.capture import capturing
    from epoxy.errors import UnsupportedOpError

    exports = Exports([], [])
    for model_id, model, kwargs in models:
        with capturing() as capture:
            try:
                exports.sessions.append(build(model, kwargs))
            except UnsupportedOpError:  # part of the model claimed, no cpu fallback installed
                continue
        for group in capture.groups:
            where = f"{model_id}/{group.label}"
            if group.artifact is None:
                if "export_compiled raised" in group.reason:
                    exports.problems.append(f"{where}: {group.reason}")
                else:
                    exports.declined += 1
                continue
            if not isinstance(group.artifact, CompiledArtifact):
                exports.problems.append(f"{where}: export_compiled returned {type(group.artifact).__name__}, "
                                        "not a CompiledArtifact")
                continue
            spec = SubgraphSpec(FusedGroup(group.nodes, group.label), group.graph, group.inputs, group.outputs)
            exports.groups.append(ExportedGroup(model_id, spec, group.artifact))
    return exports


def artifact_problems(artifact: CompiledArtifact) -> list[str]:
    """What is wrong with the fields of an exported artifact (empty when nothing)."""
    problems = []
    if not isinstance(artifact.format, str) or "/" not in artifact.format:
        problems.append(f"format {artifact.format!r} should name the layout with a version, e.g. 'vendor.kind/1'")
    if not isinstance(artifact.blob, bytes) or not artifact.blob:
        problems.append(f"blob must be non-empty bytes, got {type(artifact.blob).__name__} "
                        f"of length {len(artifact.blob) if hasattr(artifact.blob, '__len__') else '?'}")
    if not isinstance(artifact.target, str):
        problems.append(f"target must be a str, got {type(artifact.target).__name__}")
    options = artifact.options
    if not isinstance(options, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in options.items()):
        problems.append(f"options must map str to str, got {options!r}")
    if artifact.trusted:
        problems.append("trusted is set by the core when it reads a signed model; an export leaves it False")
    return problems
