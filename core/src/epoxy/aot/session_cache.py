"""The session cache: a model prepared once (checked, typed, optimized, compiled) is kept on
disk, and later sessions of the same model and options start from it.

Opt-in, like OpenVINO's ``CACHE_DIR``: ``SessionOptions.session_cache_dir`` (config entry
``epoxy.session_cache_dir``), else ``$EPOXY_SESSION_CACHE_DIR`` for models given by path. An entry is an epoxy compiled
model (:mod:`epoxy.aot.writer`: the optimized graph, provider blobs inside) plus a JSON record
beside it. The record is written last, atomically, and says what the entry was made from:

* the key: the model (a file's resolved path, or the sha256 of bytes given), the session
  options that shape the prepared graph, the providers asked for with their options, the
  installed providers' versions, epoxy's version, Python and the machine's CPU;
* the files the model was read from (the model file and its external data) with their size,
  modification time and inode, checked again at every lookup, as Python checks ``.pyc``
  files against their sources: an edited model is a miss, never a stale session;
* what the first session said while preparing (load warnings, optimizer notes, the passes
  applied), so a session from the cache warns and reports the same.

A session from the cache says so in its partition report notes. An entry that cannot be
used (unreadable, or its model no longer loads) is removed with a note and the model is
prepared again. Two processes storing the same entry at once each write their own files;
the record that lands last wins, readers never see half an entry, and files another
writer may still need are removed only once they are a minute old.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..version import __version__

CACHE_ENV = "EPOXY_SESSION_CACHE_DIR"
#: bumped when the record's layout changes; other layouts are misses
FORMAT = 1
#: seconds after which another entry's files of the same key are surely not being written or read
STALE_AFTER_S = 60.0
#: session options that cannot change the prepared graph (left out of the key)
_UNKEYED_OPTIONS = frozenset({
    "enable_profiling", "profile_file_prefix", "log_severity_level", "log_verbosity_level", "logid",
    "run_timeout_s", "check_outputs", "session_cache_dir", "tune_budget_s", "use_per_session_threads",
})


@dataclass
class CachedEntry:
    """A usable entry: the compiled model to load and what its first session said."""

    model_path: Path
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    applied_passes: list[str] = field(default_factory=list)
    created: str = ""


def cache_folder(options: Any, source: Any) -> Path | None:
    """The folder the options name, or None: caching is off. The environment variable
    covers models given as file paths only: tools that build sessions of models made in
    memory (calibration, tuning, reduction) must not fill a process-wide cache with them."""
    named = str(getattr(options, "session_cache_dir", "") or "").strip()
    if not named and isinstance(source, (str, os.PathLike)):
        named = os.environ.get(CACHE_ENV, "").strip()
    return Path(named).expanduser() if named else None


def ineligible_reason(source: Any, options: Any, providers: Any) -> str | None:
    """Why a session with these arguments is built without the cache (None: it may use it).
    Sessions that write files of their own, measure providers, or take values the key
    cannot hold (initializer overrides) are built as usual."""
    if options.context_enable:
        return "it writes a compiled model (ep.context_enable)"
    if options.optimized_model_filepath:
        return "it writes its optimized model (optimized_model_filepath)"
    if options.initializer_overrides:
        return "initializers are overridden (add_initializer)"
    if options.selection_policy() is not None or isinstance(providers, str):
        return "a provider selection policy chooses the providers"
    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        return "the model is a ModelProto (give its path or bytes to cache it)"
    return None


class SessionCache:
    """One session's view of the cache: its key, and the entry's files under :attr:`folder`."""

    def __init__(self, folder: Path, source: Any, options: Any, providers: Sequence[tuple[str, Mapping[str, Any]]],
                 installed: Mapping[str, str]) -> None:
        self.folder = folder
        self.source = source
        self.key_material = {
            "format": FORMAT,
            "model": _model_identity(source),
            "options": _keyed_options(options),
            "providers": [[name, {str(k): repr(v) for k, v in sorted(opts.items())}] for name, opts in providers],
            "installed": dict(sorted(installed.items())),
            "epoxy": __version__,
            "python": sys.version.split()[0],
            "machine": _machine(),
        }
        text = json.dumps(self.key_material, sort_keys=True, default=repr)
        self.key = hashlib.sha256(text.encode()).hexdigest()[:40]
        self.stamps: list[list[Any]] = []

    def stamp_sources(self) -> None:
        """Record the model's files as they are now, before the session reads them: a file
        replaced while the session is prepared then makes the entry a miss, never stale."""
        self.stamps = [_file_stamp(p) for p in _model_files(self.source)]

    @property
    def record_path(self) -> Path:
        return self.folder / f"{self.key}.json"

    def lookup(self) -> tuple[CachedEntry | None, str | None]:
        """The entry when it is usable, else None and (when a record was there) why not."""
        path = self.record_path
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"session cache entry {path} unreadable ({exc.strerror or exc}); preparing the model again"
        try:
            record = json.loads(text)
            model_path = self.folder / str(record["model_file"])
            size, depends = int(record["model_size"]), list(record["depends_on"])
            entry = CachedEntry(model_path, list(record["warnings"]), list(record["notes"]),
                                list(record["applied_passes"]), str(record.get("created", "")))
            same_key = record["key"] == json.loads(json.dumps(self.key_material, sort_keys=True, default=repr))
        except (ValueError, KeyError, TypeError) as exc:
            return None, f"session cache entry {path} unreadable ({type(exc).__name__}: {exc}); preparing again"
        if not same_key:
            return None, f"session cache entry {path} holds another key (a hash collision?); preparing again"
        changed = [dep[0] for dep in depends if _file_stamp(Path(dep[0])) != dep]
        if changed:
            return None, f"the model changed since it was cached ({changed[0]}); preparing it again"
        try:
            if model_path.stat().st_size != size:
                return None, f"session cache entry {path}: its model file changed size; preparing again"
        except OSError:
            return None, f"session cache entry {path}: its model file {model_path.name} is gone; preparing again"
        return entry, None

    def store(self, write: Any, warnings: Sequence[str], notes: Sequence[str], applied_passes: Sequence[str]) -> Path:
        """Write an entry: ``write(path)`` writes the compiled model there (``write_compiled``);
        then the record, atomically. Older files of this key are removed."""
        self.folder.mkdir(parents=True, exist_ok=True)
        stem = f"{self.key}-{secrets.token_hex(4)}"
        model_path = self.folder / f"{stem}.onnx"
        write(model_path)
        record = {"key": self.key_material, "model_file": model_path.name, "model_size": model_path.stat().st_size,
                  "depends_on": self.stamps,
                  "warnings": list(warnings), "notes": list(notes), "applied_passes": list(applied_passes),
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        tmp = self.folder / f".{stem}.json.tmp"
        tmp.write_text(json.dumps(record, indent=1, sort_keys=True, default=repr))
        os.replace(tmp, self.record_path)
        self._remove_older(keep=stem)
        return model_path

    def discard(self) -> None:
        """Remove this key's record and files (an entry that could not be used)."""
        try:
            self.record_path.unlink(missing_ok=True)
        except OSError:
            pass
        self._remove_older(keep=None)

    def _remove_older(self, keep: str | None, grace_s: float = STALE_AFTER_S) -> None:
        """Remove this key's files but ``keep``'s; with a ``keep``, only files older than
        ``grace_s``: another process may be writing its entry of the same key right now (its
        record lands after ours), or reading the one we replace."""
        now = time.time()
        for path in self.folder.glob(f"{self.key}-*"):
            if keep is not None and path.name.startswith(keep):
                continue
            try:
                if keep is None or now - path.stat().st_mtime > grace_s:
                    path.unlink()  # a reader that has it open or mapped keeps its copy (POSIX)
            except OSError:
                pass


def _model_identity(source: Any) -> Any:
    """A file's resolved path (its contents are checked by stamp at lookup), or the sha256
    of the bytes."""
    if isinstance(source, (str, os.PathLike)):
        return ["file", str(Path(source).resolve())]
    return ["bytes", hashlib.sha256(bytes(source)).hexdigest()]


def _model_files(source: Any) -> list[Path]:
    """The files a session of ``source`` reads: the model file and its external data files."""
    if not isinstance(source, (str, os.PathLike)):
        return []
    import onnx

    path = Path(source).resolve()
    files = [path]
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - it loaded a moment ago; without it, no external files are known
        return files
    from ..load.proto_tensors import dense_parts, model_tensors

    locations = {entry.value for found in model_tensors(proto) for _, tensor in dense_parts(found)
                 for entry in tensor.external_data if entry.key == "location"}
    return files + [(path.parent / location).resolve() for location in sorted(locations)]


def _file_stamp(path: Path) -> list[Any]:
    """[path, size, mtime_ns, inode] of a file, or [path] when it cannot be read."""
    try:
        stat = path.stat()
    except OSError:
        return [str(path)]
    return [str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino]


def _keyed_options(options: Any) -> dict[str, Any]:
    """The session options that can shape the prepared graph, as text."""
    keyed = {name: str(value) for name, value in options.field_values().items() if name not in _UNKEYED_OPTIONS}
    keyed["free_dimension_overrides"] = json.dumps(options.free_dimension_overrides, sort_keys=True)
    return keyed  # config entries act through the attributes above (unknown ones have no effect)


def _machine() -> dict[str, Any]:
    """The CPU and system: provider blobs and kernel choices are made for them."""
    from ..devices.inventory import host_cpu

    return {"cpu": host_cpu()[1], "cores": os.cpu_count() or 1, "system": platform.system(),
            "arch": platform.machine()}
