"""The tuning cache: ``max_performance`` decisions kept per model, input shapes, machine and
provider versions, so a session measures a model once.

One JSON file per (model bytes, input shapes) under ``$EPOXY_TUNE_CACHE_DIR``, else
``<user cache dir>/epoxy/tune``. The file records the machine and the installed providers'
versions and devices it was measured with; an entry made on another machine (a shared home
folder) is *foreign*, one whose providers or devices changed since is *stale*, one that cannot
be read is *unreadable*: each is ignored with a note saying so, and the model is measured again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kit.user_dirs import user_cache_dir
from ..version import __version__
from .inventory import EpDevice, host_cpu

CACHE_ENV = "EPOXY_TUNE_CACHE_DIR"
#: bumped when the entry layout changes; other layouts are stale
FORMAT = 1


def cache_dir() -> Path:
    return user_cache_dir("tune", CACHE_ENV)


def model_digest(source: Any, proto: Any = None) -> str:
    """sha256 of the model as given: a file's bytes, the bytes, or a ModelProto serialized.
    For a file whose weights are external data (``proto``: the model loaded without them),
    each data file's name, size and modification time count too: new weights, new key."""
    digest = hashlib.sha256()
    if isinstance(source, (bytes, bytearray, memoryview)):
        digest.update(source)
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        for location in sorted(_external_files(proto)):
            data = Path(source).parent / location
            stat = data.stat() if data.is_file() else None
            digest.update(f"{location}:{stat.st_size}:{stat.st_mtime_ns}".encode() if stat else location.encode())
    else:
        digest.update(source.SerializeToString())
    return digest.hexdigest()


def _external_files(proto: Any) -> set[str]:
    """The external data files a model's initializers name."""
    if proto is None:
        return set()
    found = set()
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                found.add(entry.value)
    return found


def machine() -> dict[str, Any]:
    """What makes a measurement this machine's: host name, CPU model and count, OS."""
    return {"host": platform.node(), "cpu": host_cpu()[1], "cores": os.cpu_count() or 1,
            "system": platform.system(), "arch": platform.machine()}


def environment(ep_devices: Sequence[EpDevice]) -> dict[str, Any]:
    """What makes a measurement these providers': epoxy's version, each provider's version,
    the devices they drive."""
    return {"epoxy": __version__,
            "providers": {ep.ep_name: ep.ep_version for ep in ep_devices},
            "devices": sorted(f"{ep.ep_name}:{ep.device_index}:{ep.device.label}:{ep.device.name}"
                              for ep in ep_devices)}


@dataclass(frozen=True)
class TuneKey:
    """Which measurement an entry holds: the model's digest and its input shapes."""

    model_sha256: str
    shapes: Mapping[str, tuple[int, ...]]

    def as_dict(self) -> dict[str, Any]:
        return {"model_sha256": self.model_sha256, "shapes": {k: list(v) for k, v in sorted(self.shapes.items())}}

    @property
    def file_name(self) -> str:
        text = json.dumps(self.as_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32] + ".json"


@dataclass(frozen=True)
class CachedDecision:
    """A usable entry: the chosen (provider, device index) pairs, the table, when."""

    chosen: list[tuple[str, int]]
    table: list[dict[str, Any]]
    created: str
    path: Path


def read(key: TuneKey, ep_devices: Sequence[EpDevice]) -> tuple[CachedDecision | None, str | None]:
    """The entry for ``key`` when it is usable here, else ``None`` and (when a file was there)
    why it was ignored."""
    path = cache_dir() / key.file_name
    if not path.is_file():
        return None, None
    try:
        entry = json.loads(path.read_text())
        chosen = [(str(p), int(i)) for p, i in entry["chosen"]]
        fmt, table, created = entry["format"], list(entry["table"]), str(entry["created"])
        recorded_key, recorded_machine, recorded_env = entry["key"], entry["machine"], entry["environment"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"tuning cache entry {path} ignored: unreadable ({type(exc).__name__}: {exc})"
    if fmt != FORMAT or recorded_key != key.as_dict():
        return None, f"tuning cache entry {path} ignored: stale (another entry layout or model)"
    here = machine()
    if recorded_machine != here:
        differ = ", ".join(f"{k} {recorded_machine.get(k)!r} here {here[k]!r}" for k in here
                           if recorded_machine.get(k) != here[k])
        return None, f"tuning cache entry {path} ignored: foreign, measured on another machine ({differ})"
    now = environment(ep_devices)
    if recorded_env != now:
        return None, f"tuning cache entry {path} ignored: stale ({_changes(recorded_env, now)})"
    return CachedDecision(chosen, table, created, path), None


def write(key: TuneKey, ep_devices: Sequence[EpDevice], chosen: Sequence[EpDevice],
          table: Sequence[Mapping[str, Any]]) -> Path:
    """Store a decision (atomically: a reader never sees half a file)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"format": FORMAT, "key": key.as_dict(), "machine": machine(), "environment": environment(ep_devices),
             "chosen": [[ep.ep_name, ep.device_index] for ep in chosen], "table": list(table),
             "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path = folder / key.file_name
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tune-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(entry, handle, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def _changes(before: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """What changed between two environments, in words."""
    parts = []
    if before.get("epoxy") != now.get("epoxy"):
        parts.append(f"epoxy {before.get('epoxy')} -> {now.get('epoxy')}")
    old, new = dict(before.get("providers", {})), dict(now.get("providers", {}))
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            parts.append(f"provider {name} {old.get(name, 'absent')} -> {new.get(name, 'absent')}")
    if before.get("devices") != now.get("devices"):
        parts.append("the devices changed")
    return "; ".join(parts) or "the providers changed"
