"""Folders (an ``.mlpackage``, an ``.mlmodelc``) as one deterministic zip, and back, safely.

Packing walks the folder in sorted order and writes every file with a fixed timestamp and
mode, stored uncompressed, so the same package always gives the same bytes (and the same
blob digest). Unpacking checks *every* entry before writing anything: a plain relative
path (no absolute path, no drive, no ``..``, no backslash), a regular file or folder (no
symbolic link or device), no duplicate, sizes within bounds; then extracts into a fresh
folder that is renamed into place, so a refused or interrupted archive leaves nothing.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

_EPOCH = (1980, 1, 1, 0, 0, 0)
#: the most an archive may expand to (a zip bomb would be refused before writing)
MAX_TOTAL = 8 << 30


class ArchiveError(ValueError):
    """The archive cannot be extracted safely; the message names the entry and why."""


def pack(folders: Sequence[tuple[str, Path]]) -> bytes:
    """Zip of each ``(prefix, folder)``: files under ``prefix/`` with their relative paths."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        for prefix, root in sorted(folders):
            for path in sorted(p for p in root.rglob("*")):
                if path.is_symlink():
                    raise ArchiveError(f"{path} is a symbolic link; packages are plain files")
                rel = f"{prefix}/{path.relative_to(root).as_posix()}"
                info = zipfile.ZipInfo(rel + ("/" if path.is_dir() else ""), _EPOCH)
                info.external_attr = ((stat.S_IFDIR | 0o755) if path.is_dir() else (stat.S_IFREG | 0o644)) << 16
                info.create_system = 3  # unix: external_attr carries the mode
                zf.writestr(info, b"" if path.is_dir() else path.read_bytes())
    return buffer.getvalue()


def _check(infos: list[zipfile.ZipInfo]) -> None:
    seen: set[str] = set()
    total = 0
    for info in infos:
        name = info.filename
        parts = PurePosixPath(name).parts
        if (not name or name.startswith("/") or "\\" in name or "\x00" in name or ":" in parts[0]
                or any(p in ("..", ".") for p in parts)):
            raise ArchiveError(f"entry {name!r} is not a plain relative path (absolute, '..', drive or backslash)")
        mode = info.external_attr >> 16
        kind = stat.S_IFMT(mode)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            raise ArchiveError(f"entry {name!r} is a link or special file (mode {oct(mode)})")
        key = name.rstrip("/")
        if key in seen:
            raise ArchiveError(f"entry {name!r} appears twice")
        seen.add(key)
        total += info.file_size
        if info.file_size < 0 or total > MAX_TOTAL:
            raise ArchiveError(f"archive expands to more than {MAX_TOTAL} bytes")


def names(data: bytes) -> list[str]:
    """The entry names, checked as :func:`extract` checks them."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ArchiveError(f"not a readable zip archive ({type(exc).__name__}: {exc})") from None
    _check(infos)
    return [i.filename for i in infos]


def extract(data: bytes, destination: Path) -> Path:
    """Unpack into ``destination`` (created; must not exist yet); returns it."""
    names(data)  # every entry checked before the first byte is written
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            for info in zf.infolist():
                target = tmp.joinpath(*PurePosixPath(info.filename).parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "xb") as dst:  # CRC checked on read
                    shutil.copyfileobj(src, dst)
        try:
            os.replace(tmp, destination)
        except OSError:
            if not destination.exists():
                raise  # otherwise another process extracted the same digest first
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ArchiveError(f"extracting failed ({type(exc).__name__}: {exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return destination
