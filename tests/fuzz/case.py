"""A fuzz case, and the corpus folder format it is saved in and replayed from.

A case is everything one run needs: the files of the model's folder (``model.onnx`` plus any
external data; a name starting with ``../`` lands beside that folder, where an escaping
location would find it), files put in the worker's working directory (where a location read
relative to the working directory would find them), the feeds, the session options, and
what was done to the seed. ``save``/``load`` write and read a case as a folder::

    <folder>/case.json      name, family, description, options, feeds, file layout, outcome found
    <folder>/model.onnx     and the other files, renamed where their path is odd
    <folder>/feed-<i>.npy   array feeds (feedspec.encode)

Folders from the first harness (flat files, no ``files`` key, feeds built from the model)
still load.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import feedspec

MODEL_FILE = "model.onnx"


@dataclass
class Case:
    """One fuzz case; ``feeds`` None means: build them in the worker from the model's declared inputs."""

    name: str
    family: str
    description: str
    files: dict[str, bytes]
    feeds: dict[str, Any] | None = None
    by_path: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    cwd_files: dict[str, bytes] = field(default_factory=dict)
    #: external data pointing outside the model's folder: a run that works read what it must not
    must_refuse: bool = False
    seed: str = ""

    @property
    def model_bytes(self) -> bytes:
        return self.files[MODEL_FILE]

    @property
    def size(self) -> int:
        """Bytes of the case (files + feeds): the smallest case of a cause is its reproducer."""
        files = sum(len(b) for b in self.files.values()) + sum(len(b) for b in self.cwd_files.values())
        feeds = sum(feedspec.nbytes(v) for v in (self.feeds or {}).values())
        return files + feeds

    def payload(self) -> tuple[Any, ...]:
        """What a worker needs (pickled to it)."""
        return self.files, self.cwd_files, self.by_path, self.options, self.feeds


def _stored_name(path: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "_", path.replace("../", "up-"))[:80] or "file"
    while name in taken or name in ("case.json",) or name.startswith("feed-"):
        name = "x" + name
    taken.add(name)
    return name


def save(case: Case, folder: Path, found: str = "", detail: str = "", replay: str = "") -> Path:
    """Write ``case`` as ``folder`` (replacing what was there)."""
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        if old.is_file():
            old.unlink()
    taken: set[str] = set()
    layout = {}
    for path, data in case.files.items():
        stored = MODEL_FILE if path == MODEL_FILE else _stored_name(path, taken)
        (folder / stored).write_bytes(data)
        layout[path] = stored
    cwd_layout = {}
    for path, data in case.cwd_files.items():
        stored = _stored_name("cwd-" + path, taken)
        (folder / stored).write_bytes(data)
        cwd_layout[path] = stored
    meta = {
        "name": case.name, "family": case.family, "seed": case.seed, "description": case.description,
        "by_path": case.by_path, "options": case.options, "must_refuse": case.must_refuse,
        "files": layout, "cwd_files": cwd_layout,
        "feeds": "from-model" if case.feeds is None else feedspec.encode(case.feeds, folder),
        "found": found, "detail": detail, "replay": replay,
    }
    (folder / "case.json").write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def load(folder: Path) -> Case:
    """The case saved in ``folder`` (either format)."""
    meta = json.loads((folder / "case.json").read_text())
    if "files" in meta:
        files = {path: (folder / stored).read_bytes() for path, stored in meta["files"].items()}
        cwd_files = {path: (folder / stored).read_bytes() for path, stored in meta.get("cwd_files", {}).items()}
    else:  # first harness: every file beside case.json belongs to the model's folder
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != "case.json"}
        cwd_files = {}
    feeds = meta.get("feeds", "from-model")
    return Case(
        name=folder.name, family=meta.get("family", "legacy"), description=meta.get("description", ""),
        files=files, feeds=None if feeds == "from-model" else feedspec.decode(feeds, folder),
        by_path=bool(meta.get("by_path")), options=dict(meta.get("options") or {}), cwd_files=cwd_files,
        must_refuse=bool(meta.get("must_refuse")), seed=meta.get("seed", ""),
    )


def load_corpus(directory: Path) -> list[Case]:
    """Every case folder under ``directory``, by name."""
    if not directory.is_dir():
        return []
    return [load(p) for p in sorted(directory.iterdir()) if (p / "case.json").is_file()]
