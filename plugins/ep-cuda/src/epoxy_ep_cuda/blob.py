"""The byte layout of an exported cuda group: a checked header, then named sections.

::

    b"EPXCUDA\\0"  u32 layout  u32 header length  header (JSON, utf-8)  section bytes...

The header lists every section as ``[name, length, sha256]`` and the digest of all section
bytes together; :func:`unpack` checks lengths and digests before anything is parsed, so a
cut or edited blob is refused with the reason (:class:`BlobError`) and never reaches JSON,
numpy or the CUDA driver.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from typing import Any

MAGIC = b"EPXCUDA\0"
LAYOUT = 1
_PREFIX = struct.Struct("<8sII")
#: a header larger than this is not one we wrote (keeps a corrupted length from allocating)
MAX_HEADER = 1 << 20


class BlobError(ValueError):
    """The bytes are not a whole blob of this layout; the message says what is wrong."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pack(header: Mapping[str, Any], sections: Mapping[str, bytes]) -> bytes:
    """``header`` (JSON-able) plus ``sections``, in the layout above (deterministic)."""
    names = sorted(sections)
    payload = b"".join(sections[n] for n in names)
    full = {**header, "sections": [[n, len(sections[n]), sha256(sections[n])] for n in names],
            "payload_sha256": sha256(payload)}
    text = json.dumps(full, sort_keys=True, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, LAYOUT, len(text)) + text + payload


def unpack(data: bytes) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(header, sections) of a blob :func:`pack` wrote; :class:`BlobError` otherwise."""
    if len(data) < _PREFIX.size:
        raise BlobError(f"blob is {len(data)} bytes, shorter than its {_PREFIX.size}-byte prefix (cut short)")
    magic, layout, size = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise BlobError("blob does not start with the ep-cuda magic (not an ep-cuda blob, or corrupted)")
    if layout != LAYOUT:
        raise BlobError(f"blob layout {layout}, this ep-cuda reads layout {LAYOUT}")
    if size > MAX_HEADER or _PREFIX.size + size > len(data):
        raise BlobError(f"blob header claims {size} bytes, the blob has {len(data) - _PREFIX.size} (cut short)")
    try:
        header = json.loads(data[_PREFIX.size:_PREFIX.size + size])
        listed = [(str(n), int(length), str(digest)) for n, length, digest in header["sections"]]
        payload_digest = str(header["payload_sha256"])
    except (ValueError, TypeError, KeyError) as exc:
        raise BlobError(f"blob header is not valid ({type(exc).__name__}: {exc})") from None
    payload = data[_PREFIX.size + size:]
    if len(payload) != sum(length for _n, length, _d in listed):
        raise BlobError(f"blob payload is {len(payload)} bytes, its header lists "
                        f"{sum(length for _n, length, _d in listed)} (cut short or extended)")
    if sha256(payload) != payload_digest:
        raise BlobError("blob payload's sha256 differs from its header's (corrupted)")
    sections, at = {}, 0
    for name, length, digest in listed:
        sections[name] = payload[at:at + length]
        at += length
        if sha256(sections[name]) != digest:
            raise BlobError(f"blob section {name!r} is corrupted (sha256 differs)")
    return header, sections
