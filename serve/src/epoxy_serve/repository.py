"""Where models come from: one .onnx file, or a model repository folder in Triton's layout
(``NAME/VERSION/model.onnx``) or flat (``NAME.onnx``, ``NAME/model.onnx``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotFound


@dataclass(frozen=True)
class ModelSource:
    """A model file served as ``name`` at ``version``."""

    name: str
    version: str
    path: Path


def _versions(folder: Path) -> list[ModelSource]:
    found = []
    for sub in sorted(folder.iterdir(), key=lambda p: (len(p.name), p.name)):
        if sub.is_dir() and sub.name.isdigit() and (sub / "model.onnx").is_file():
            found.append(ModelSource(folder.name, sub.name, sub / "model.onnx"))
    if not found and (folder / "model.onnx").is_file():
        found.append(ModelSource(folder.name, "1", folder / "model.onnx"))
    return found


def discover(path: str | Path, name: str | None = None) -> list[ModelSource]:
    """The models under ``path``, sorted by name then version; ``name`` renames a single file."""
    root = Path(path)
    if root.is_file():
        if root.suffix != ".onnx":
            raise ModelNotFound(f"{root}: not an .onnx file")
        return [ModelSource(name or root.stem, "1", root)]
    if not root.is_dir():
        raise ModelNotFound(f"{root}: no such file or model repository folder")
    if name is not None:
        raise ModelNotFound(f"--name renames a single model file; {root} is a repository (its folders name the models)")
    found: list[ModelSource] = []
    for entry in sorted(root.iterdir()):
        if entry.is_file() and entry.suffix == ".onnx":
            found.append(ModelSource(entry.stem, "1", entry))
        elif entry.is_dir():
            found.extend(_versions(entry))
    if not found:
        raise ModelNotFound(f"{root}: no models (expected NAME.onnx, NAME/model.onnx or NAME/VERSION/model.onnx)")
    names = [s.name for s in found]
    clash = sorted({(s.name, s.version) for s in found if names.count(s.name) > 1
                    and sum(1 for t in found if (t.name, t.version) == (s.name, s.version)) > 1})
    if clash:
        raise ModelNotFound(f"{root}: model {clash[0][0]!r} version {clash[0][1]} is given twice")
    return found
