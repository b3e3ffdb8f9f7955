"""Signatures on compiled blobs: which blobs this user's epoxy wrote.

A digest proves a blob is whole; it cannot prove who made it (whoever edits the blob edits
the digest). ``epoxy compile`` signs each context record with an HMAC key private to the
user (``$EPOXY_COMPILE_KEY``, a file path, else ``$XDG_CONFIG_HOME/epoxy/compile.key``,
created 0600 on first use). On load a record that verifies is ``trusted``: providers whose
blob is machine code (ep-cuda's cubins) use only trusted blobs. To deploy compiled models to
other machines, give them the same key file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

KEY_ENV = "EPOXY_COMPILE_KEY"
KEY_BYTES = 32


def key_path() -> Path:
    """Where the key lives (the env var's path, else under the user's config dir)."""
    explicit = os.environ.get(KEY_ENV)
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "epoxy" / "compile.key"


def _read_key(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if len(data) >= 16 else None


def load_key(create: bool) -> bytes | None:
    """The user's key; made (0600, atomically) when ``create`` and none exists yet."""
    path = key_path()
    key = _read_key(path)
    if key is not None or not create:
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first: use theirs
        return _read_key(path)
    with os.fdopen(fd, "wb") as handle:
        handle.write(fresh)
    return fresh


def sign(payload: bytes) -> str:
    """Hex HMAC-SHA256 of ``payload`` with the user's key (made if needed)."""
    key = load_key(create=True)
    if key is None:
        return ""
    return hmac.new(key, payload, hashlib.sha256).hexdigest()


def verify(payload: bytes, signature: str) -> bool:
    """True when ``signature`` is this user's key's signature of ``payload``."""
    key = load_key(create=False)
    if key is None or not signature:
        return False
    return hmac.compare_digest(hmac.new(key, payload, hashlib.sha256).hexdigest(), signature)
