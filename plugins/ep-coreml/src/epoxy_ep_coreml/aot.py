"""Export and import of converted Core ML groups (SDK API 1.2, ``epoxy compile``).

The blob is framed by :class:`epoxy.kit.BlobFrame` (magic ``b"EPXCOREM"``, layout 2: the
lengths and one sha256 over the prefix's fields, header and payload). The header names this
package's and coremltools' versions, the conversion options (``compute_precision``,
``minimum_deployment_target``; ``compute_units`` is recorded but chosen by the importing
session, it only matters when loading), the group's cache key and the feature mapping (ONNX
boundary names <-> Core ML ``input_N``/``output_N``). The payload is :mod:`.archive`'s deterministic zip of
``model.mlpackage/`` and, when exported on macOS, ``model.mlmodelc/`` (Core ML's compiled
form, so a Mac skips compiling too).

Importing checks the frame, the header and every archive entry before extracting (to
``<cache_dir>/imported/<sha256 of the payload>/``), then loads the package *without converting*; in
convert-only mode (Linux) it only checks and extracts, the kernel refusing to run as a
converted one does. The blob is data that coremltools and Core ML parse (protobuf, MIL,
weights), not machine code, so a blob not signed by this user's key is accepted: what is
trusted is those parsers, on input whose size, digest and paths were checked here.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from epoxy.contract import CompiledArtifact, KernelFn, SubgraphSpec
from epoxy.errors import ArtifactRefused
from epoxy.kit import BlobFrame, BlobFrameError

from . import archive
from .program import CompiledPackage, _coremltools_version, group_key, plan_features
from .version import __version__

FORMAT = "coreml.mlpackage/1"
#: the blob's framing (layout 1 was this module's own framing, before epoxy.kit's)
FRAME = BlobFrame(b"EPXCOREM", 2, "ep-coreml")
PACKAGE, COMPILED = "model.mlpackage", "model.mlmodelc"
NAME = "coreml"


def _refuse(reason: str) -> ArtifactRefused:
    return ArtifactRefused(reason, provider=NAME)


def _options(provider: Any) -> dict[str, str]:
    return dict(provider.options.conversion_key())


# ---------------------------------------------------------------------------- export
def export_group(provider: Any, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
    package: CompiledPackage | None = provider.exports.get(kernel)
    if package is None:
        return None
    folders: list[tuple[str, Path]] = []
    if package.path is not None:
        folders.append((PACKAGE, package.path))
        compiled = _compiled_path(getattr(kernel, "mlmodel", None))
        if compiled is not None:
            folders.append((COMPILED, compiled))
    payload = archive.pack(folders)
    header = {
        "format": FORMAT, "provider_version": __version__, "coremltools": _coremltools_version(),
        "options": _options(provider), "compute_units": provider.options.compute_units,
        "manifest": package.manifest(), "contents": [prefix for prefix, _ in folders],
    }
    return CompiledArtifact(FORMAT, FRAME.pack(header, payload), provider.options.minimum_deployment_target,
                            _options(provider))


def _compiled_path(model: Any) -> Path | None:
    """Core ML's compiled ``.mlmodelc`` of a loaded model (macOS, coremltools >= 8), else None."""
    getter = getattr(model, "get_compiled_model_path", None)
    if getter is None:
        return None
    try:
        path = Path(getter())
    except Exception:  # noqa: BLE001 - no compiled form: the package alone is exported
        return None
    return path if path.is_dir() else None


# ---------------------------------------------------------------------------- import
def read_blob(data: bytes, *, verify_digest: bool = True) -> tuple[dict[str, Any], memoryview]:
    """(header, payload), checked by :data:`FRAME`: magic, layout, lengths, digest (skipped
    only for a trusted blob, whose bytes the core checked against its signed record)."""
    try:
        return FRAME.unpack_payload(data, verify_digest=verify_digest)
    except BlobFrameError as exc:
        raise _refuse(str(exc)) from None


def _check_header(provider: Any, artifact: CompiledArtifact, header: dict[str, Any]) -> None:
    options = _options(provider)
    checks = [
        (header.get("format") == FORMAT, f"blob layout {header.get('format')!r}, expected {FORMAT!r}"),
        (header.get("provider_version") == __version__,
         f"blob written by ep-coreml {header.get('provider_version')}, this is {__version__}"),
        (header.get("coremltools") == _coremltools_version(),
         f"blob converted by coremltools {header.get('coremltools')}, this is {_coremltools_version()}"),
        (header.get("options") == options and dict(artifact.options) == options,
         f"blob converted with {header.get('options')}, this session uses {options}"),
        (artifact.target == provider.options.minimum_deployment_target,
         f"blob targets {artifact.target!r}, this session {provider.options.minimum_deployment_target!r}"),
    ]
    for ok, reason in checks:
        if not ok:
            raise _refuse(reason)


def import_group(provider: Any, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
    from .runner import _refuse as refusing_kernel
    from .runner import can_predict, make_runner

    if artifact.format != FORMAT:
        raise _refuse(f"blob format {artifact.format!r}, this ep-coreml reads {FORMAT!r}")
    header, payload = read_blob(artifact.blob, verify_digest=not artifact.trusted)
    _check_header(provider, artifact, header)
    facts = provider._facts_for(subgraph.graph)
    key = group_key(subgraph, facts, provider.options)
    manifest = header.get("manifest") or {}
    if manifest.get("key") != key:
        raise _refuse("blob was converted from other nodes, constants or boundary types")
    try:
        inputs, outputs, baked = plan_features(subgraph, facts)
    except ValueError as exc:
        raise _refuse(f"group cannot be fed from a blob: {exc}") from None
    package = CompiledPackage(key, None, inputs, outputs, baked, cached=True)
    if manifest != package.manifest() | {"package": manifest.get("package")}:
        raise _refuse("blob's feature mapping differs from this group's")
    contents = header.get("contents") or []
    needs_package = any(f.coreml_name is not None for f in outputs)
    if needs_package != (PACKAGE in contents):
        raise _refuse("blob lacks the group's .mlpackage" if needs_package else "blob holds an unexpected package")
    if needs_package:
        folder = _extracted(provider, payload, contents)
        package.path = folder / PACKAGE
    provider.compiled.append((subgraph.group.label, package))
    if provider.convert_only or not can_predict():
        kernel = refusing_kernel(subgraph.group.label, package)
    else:
        compiled = package.path.parent / COMPILED if package.path is not None else None
        model = _compiled_loader(compiled, provider.options.compute_units) \
            if compiled is not None and compiled.is_dir() else None
        kernel = make_runner(subgraph, facts, package, provider.options, model=model)
    provider.exports[kernel] = package
    return kernel


def _extracted(provider: Any, payload: memoryview | bytes, contents: list[str]) -> Path:
    """The payload unpacked under the cache, by its own digest (reused when already there:
    the folder's name is computed here, never taken from the blob)."""
    payload = bytes(payload)  # one copy; zipfile's BytesIO then shares it
    try:
        entries = archive.names(payload)
    except archive.ArchiveError as exc:
        raise _refuse(f"blob archive refused: {exc}") from None
    allowed = tuple(f"{c}/" for c in contents if c in (PACKAGE, COMPILED))
    stray = [e for e in entries if not e.startswith(allowed)]
    if stray:
        raise _refuse(f"blob archive holds entries outside {list(allowed)}: {stray[:3]}")
    folder = provider.options.resolved_cache_dir() / "imported" / hashlib.sha256(payload).hexdigest()
    if not (folder / PACKAGE).is_dir():
        try:
            archive.extract(payload, folder)
        except archive.ArchiveError as exc:
            raise _refuse(f"blob archive refused: {exc}") from None
    return folder


def _load_compiled(path: Path, compute_units: str) -> Any:
    """``coremltools.models.CompiledMLModel`` of an ``.mlmodelc`` (macOS)."""
    from . import _ct

    ct = _ct.coremltools()
    with _ct.quiet():
        return ct.models.CompiledMLModel(str(path), compute_units=getattr(ct.ComputeUnit, compute_units))


#: how an exported ``.mlmodelc`` is loaded (macOS only; None elsewhere keeps the package path)
_compiled_loader: Any = _load_compiled if sys.platform == "darwin" else (lambda _path, _units: None)
