"""Where a compiled blob lies: embedded in the context node, or a side file beside the model.

Side files are confined like external data: a plain relative name inside the model's
folder, no absolute path, no ``..``, no link leaving the folder. A path that escapes is the
model's error (refused); a blob that is missing, cut short or altered is only stale (the
group is compiled again, with the reason).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

from ..errors import ModelLoadError
from .format import ContextRecord, sha256


class StaleBlob(Exception):
    """The blob cannot be used (missing, wrong size, wrong digest); the message says why."""


def side_file_name(model_path: Path, label: str) -> str:
    """``model.onnx`` + group ``openvino_group_0`` -> ``model.openvino_group_0.blob``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
    return f"{model_path.stem}.{safe}.blob"


def confined_path(relative: str, base_dir: Path | None, where: str) -> Path:
    """The side file's path, or a :class:`ModelLoadError` when it could leave the folder."""
    if base_dir is None:
        raise ModelLoadError(f"{where}: its blob is a side file ({relative!r}) but the model was not "
                             "loaded from a path, so there is no folder to find it in; compile with --embed")
    posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
    if (not relative or posix.is_absolute() or windows.is_absolute() or windows.drive
            or ".." in posix.parts or ".." in windows.parts or "\x00" in relative):
        raise ModelLoadError(f"{where}: blob path {relative!r} must be a relative name inside the model's folder")
    root = base_dir.resolve()
    path = (root / relative).resolve()
    if root not in path.parents:
        raise ModelLoadError(f"{where}: blob path {relative!r} leaves the model's folder {str(root)!r}")
    return path


def read_blob(record: ContextRecord, embedded: bytes | None, base_dir: Path | None, where: str) -> bytes:
    """The blob, checked against the record's size and digest (:class:`StaleBlob` if not)."""
    if embedded is not None:
        data = embedded
    else:
        path = confined_path(record.blob_path, base_dir, where)
        if not path.is_file():
            raise StaleBlob(f"blob file {record.blob_path!r} is missing")
        size = path.stat().st_size
        if size != record.blob_size:
            raise StaleBlob(f"blob file {record.blob_path!r} has {size} bytes, the record says {record.blob_size}")
        data = path.read_bytes()
    if len(data) != record.blob_size:
        raise StaleBlob(f"blob has {len(data)} bytes, the record says {record.blob_size} (cut short or edited)")
    if sha256(data) != record.blob_sha256:
        raise StaleBlob("blob's sha256 differs from the record's (corrupted or edited)")
    return data
