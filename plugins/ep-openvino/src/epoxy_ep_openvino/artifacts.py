"""The blob of an ahead-of-time compiled group (``epoxy compile``, SDK API 1.2).

Framed by :class:`epoxy.kit.BlobFrame` (magic ``b"EPXOVCM\\0"``, layout 2: prefix with the
lengths and one sha256 over the prefix's fields, header and payload), holding:

    header: the OpenVINO version, device and its full name, the compile properties that
            shape the compiled model, the group's boundary names and ports
    payload: ``CompiledModel.export_model()``'s bytes

Everything here is checked before a byte reaches OpenVINO: a cut, padded or flipped blob
fails the frame's lengths or digest (not hashed again for a blob the core verified against
its signed record: ``CompiledArtifact.trusted``), another build or device or other options
fail the header comparison. Each failure is an :class:`ArtifactRefused` naming the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from epoxy.errors import ArtifactRefused
from epoxy.kit import BlobFrame, BlobFrameError

from .runtime import PROVIDER_NAME

FORMAT = "openvino.compiled_model/1"
#: the blob's framing (layout 1 was this module's own framing, before epoxy.kit's)
FRAME = BlobFrame(b"EPXOVCM\x00", 2, "ep-openvino")

#: compile properties that only steer how the compiled model runs (threads, caching, logging):
#: ``import_model`` is given the current ones, so they need not match the blob's. Outputs do
#: not depend on them (resnet50, bert: compiled at 1 thread, imported at 2, bit-identical to a
#: fresh compile at 2). Every other property is compared.
RUNTIME_ONLY = frozenset({"INFERENCE_NUM_THREADS", "CACHE_DIR", "LOG_LEVEL", "PERF_COUNT", "ENABLE_CPU_PINNING"})

#: OpenVINO devices whose exported blob is data (the CPU plugin writes the transformed model
#: as IR: XML plus weights, and builds its kernels again on import), so a blob this user's key
#: did not sign may be imported. Other devices' blobs carry compiled kernels (the GPU plugin
#: stores its OpenCL program binaries, NPU drivers their compiled blobs): refused unsigned.
DATA_ONLY_DEVICES = frozenset({"CPU"})


@dataclass(frozen=True)
class Identity:
    """What a blob must have been made with to be imported by a provider: compared field by
    field, the first difference is the refusal's reason."""

    openvino: str
    device: str
    device_name: str
    options: Mapping[str, str]

    def as_dict(self) -> dict[str, Any]:
        return {"openvino": self.openvino, "device": self.device, "device_name": self.device_name,
                "options": dict(self.options)}


def shaping_options(config: Mapping[str, Any]) -> dict[str, str]:
    """The compile properties that shape the compiled model, as strings (sorted by name)."""
    return {k: str(v) for k, v in sorted(config.items()) if k not in RUNTIME_ONLY}


def import_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The properties to import with: the provider's own, minus the cache (the blob is the cache)."""
    return {k: v for k, v in config.items() if k != "CACHE_DIR"}


def data_only(device: str) -> bool:
    """Whether ``device``'s exported blobs are data, not machine code (see DATA_ONLY_DEVICES)."""
    return device.split(".", 1)[0] in DATA_ONLY_DEVICES


def pack(identity: Identity, boundary: Mapping[str, Any], payload: bytes) -> bytes:
    """The blob: header (``identity`` + ``boundary``) and payload, in :data:`FRAME`."""
    return FRAME.pack({**identity.as_dict(), **boundary}, payload)


def _refuse(reason: str) -> ArtifactRefused:
    return ArtifactRefused(reason, provider=PROVIDER_NAME)


def unpack(blob: bytes, *, verify_digest: bool = True) -> tuple[dict[str, Any], memoryview]:
    """(header, payload) of a blob :func:`pack` wrote; refuses anything else, cut or altered.

    ``verify_digest=False`` skips hashing the payload (0.1-0.5 s for 200 MB) for a blob whose
    bytes the core already proved whole: a trusted artifact's signed record holds the blob's
    sha256, which the core checks before handing it over. Lengths and magic are checked anyway."""
    try:
        return FRAME.unpack_payload(blob, verify_digest=verify_digest)
    except BlobFrameError as exc:
        raise _refuse(str(exc)) from None


def check_identity(header: Mapping[str, Any], mine: Identity) -> None:
    """Refuse a blob made by another OpenVINO build, for another device, or with other options."""
    if header.get("openvino") != mine.openvino:
        raise _refuse(f"blob made by openvino {header.get('openvino')!r}, this is openvino {mine.openvino!r}")
    if header.get("device") != mine.device:
        raise _refuse(f"blob compiled for OpenVINO device {header.get('device')!r}, this provider runs on "
                      f"{mine.device!r}")
    if header.get("device_name") != mine.device_name:
        raise _refuse(f"blob compiled on {header.get('device_name')!r}, this device is {mine.device_name!r}")
    check_options(header.get("options"), mine.options)


def check_options(theirs: Any, mine: Mapping[str, str]) -> None:
    """Refuse when the shaping options differ; the reason lists each differing property."""
    theirs = dict(theirs) if isinstance(theirs, Mapping) else {}
    differ = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
    if differ:
        shown = ", ".join(f"{k}: blob {theirs.get(k)!r}, now {mine.get(k)!r}" for k in differ)
        raise _refuse(f"blob compiled with other options ({shown})")


def check_boundary(header: Mapping[str, Any], inputs: tuple[str, ...], outputs: tuple[str, ...]) -> None:
    """Refuse a blob compiled for another group (other boundary values)."""
    if list(header.get("inputs", ())) != list(inputs) or list(header.get("outputs", ())) != list(outputs):
        raise _refuse(f"blob compiled for a group with inputs {header.get('inputs')} and outputs "
                      f"{header.get('outputs')}, this group has {list(inputs)} and {list(outputs)}")
