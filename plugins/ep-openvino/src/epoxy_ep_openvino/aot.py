"""Export and import of compiled groups (``epoxy compile``): OpenVINO's own
``CompiledModel.export_model`` / ``Core.import_model`` wrapped in :mod:`.artifacts`' layout.

A group with dynamic input dims exports the dynamic compiled model ``compile`` built; its
per-shape specializations are not in the blob and are compiled again in the background, as
in a fresh session.
"""

from __future__ import annotations

import time
from typing import Any

from epoxy.contract import CompiledArtifact, SubgraphSpec
from epoxy.errors import ArtifactRefused

from . import artifacts
from .runtime import PROVIDER_NAME, first_line


def identity(provider: Any) -> artifacts.Identity:
    """The OpenVINO build, device and shaping options of ``provider`` (an OpenVINOProvider)."""
    try:
        name = str(provider.core.get_property(provider.ov_device, "FULL_DEVICE_NAME"))
    except Exception:  # noqa: BLE001 - AUTO/HETERO cannot name one device: the epoxy label stands in
        name = provider.device.label
    return artifacts.Identity(str(provider.ov.__version__), provider.ov_device, name,
                              artifacts.shaping_options(provider.config))


def target(mine: artifacts.Identity) -> str:
    """``CompiledArtifact.target``: the OpenVINO device and the hardware it names."""
    return f"{mine.device} ({mine.device_name})"


def export(provider: Any, compiled: Any, in_names: list[set[str]], out_names: list[set[str]],
           subgraph: SubgraphSpec) -> CompiledArtifact:
    """``compiled`` (an ``openvino.CompiledModel`` built for ``subgraph``) as an artifact."""
    exported = compiled.export_model()
    payload = exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported)
    mine = identity(provider)
    boundary = {"inputs": list(subgraph.inputs), "outputs": list(subgraph.outputs),
                "in_ports": [sorted(n) for n in in_names], "out_ports": [sorted(n) for n in out_names]}
    return CompiledArtifact(artifacts.FORMAT, artifacts.pack(mine, boundary, payload), target(mine),
                            dict(mine.options))


def _refuse(reason: str) -> ArtifactRefused:
    return ArtifactRefused(reason, provider=PROVIDER_NAME)


def load(provider: Any, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> tuple[Any, float]:
    """(compiled model, seconds the import took) of ``artifact``, imported for ``subgraph``; every check
    on the artifact and the blob runs before OpenVINO sees a byte."""
    if artifact.format != artifacts.FORMAT:
        raise _refuse(f"blob format {artifact.format!r}, this provider reads {artifacts.FORMAT!r}")
    mine = identity(provider)
    if not artifact.trusted and not artifacts.data_only(mine.device):
        raise _refuse(f"blob for OpenVINO device {mine.device} holds compiled kernels and is not signed "
                      "by this user's key")
    if artifact.target != target(mine):
        raise _refuse(f"blob compiled for {artifact.target!r}, this provider runs on {target(mine)!r}")
    artifacts.check_options(artifact.options, mine.options)
    header, payload = artifacts.unpack(artifact.blob, verify_digest=not artifact.trusted)
    artifacts.check_identity(header, mine)
    artifacts.check_boundary(header, subgraph.inputs, subgraph.outputs)
    t0 = time.perf_counter()
    try:
        compiled = provider.core.import_model(bytes(payload), provider.ov_device,
                                              artifacts.import_config(provider.config))
    except Exception as exc:  # noqa: BLE001 - OpenVINO's own checks (its ISA, its format) refused it
        raise _refuse(f"openvino could not import the blob: {first_line(exc)}") from exc
    seconds = time.perf_counter() - t0
    _check_ports(compiled, header)
    return compiled, seconds


def _check_ports(compiled: Any, header: dict[str, Any]) -> None:
    """The imported model's ports carry the names recorded at export (the group binds by them)."""
    got = ([sorted(p.get_names()) for p in compiled.inputs], [sorted(p.get_names()) for p in compiled.outputs])
    want = (header.get("in_ports"), header.get("out_ports"))
    if [list(g) for g in got] != [list(w or ()) for w in want]:
        raise _refuse(f"imported model's ports {got} differ from the ones exported {want}")
