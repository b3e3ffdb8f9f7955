"""One checked framing for the blobs providers export (SDK API 1.2, ``epoxy compile``).

A provider's ``import_compiled`` must refuse a cut, padded, altered or foreign blob before a
byte reaches its native library. The framing that makes that possible is the same for every
provider, so it lives here once. Layout, little endian::

    magic        8 bytes   the provider's own (b"EPXOVCM\\0")
    layout       u16       the provider's blob layout number
    reserved     u16       0
    header len   u32       at most ``max_header`` (1 MiB by default)
    payload len  u64
    sha256       32 bytes  over the 24 bytes above, the header and the payload
    header       JSON object (utf-8, sorted keys): {"header": <the provider's>,
                 "sections": [[name, length], ...]} (sections sorted by name)
    payload      the sections' bytes, one after another

Every byte before the payload is checked: the magic and layout (with the reserved field)
compared, the lengths added up against the blob's size (a header length over the cap is
refused before anything is read or allocated), the digest recomputed over the prefix's
fields, header and payload. Only then is the header parsed, and the section table must add
up to the payload. ``verify_digest=False`` skips the hash alone, for a blob whose bytes the
core already proved whole (``CompiledArtifact.trusted``: its signed record holds the blob's
sha256); the other checks still run. Sections come back as ``memoryview`` slices of the
blob, without copies.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: the prefix: magic, layout, reserved, header length, payload length, sha256
_PREFIX = struct.Struct("<8sHHIQ32s")
#: its size in bytes (56): the header starts here
PREFIX_SIZE = _PREFIX.size
#: how many leading prefix bytes the digest covers (all but the digest itself)
_HASHED_PREFIX = PREFIX_SIZE - 32
#: the section name a single ``bytes`` payload is stored under
PAYLOAD = "payload"
_U16, _U64 = (1 << 16) - 1, (1 << 64) - 1

BlobLike = bytes | bytearray | memoryview


class BlobFrameError(ValueError):
    """The bytes are not a whole, unaltered blob of this frame; the message says what is wrong
    (a provider raises it again as ``ArtifactRefused(str(exc), provider=...)``)."""


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


@dataclass(frozen=True)
class BlobFrame:
    """The framing of one provider's blobs: its ``magic`` (exactly 8 bytes), its ``layout``
    number (bump it when what the frame carries changes) and ``owner``, the name refusals
    give (``"ep-openvino"``). Frozen: define one per provider, at module level."""

    magic: bytes
    layout: int
    owner: str
    #: a header longer than this is not one we wrote (keeps a flipped length from a huge read)
    max_header: int = 1 << 20

    def __post_init__(self) -> None:
        if not isinstance(self.magic, bytes) or len(self.magic) != 8:
            raise ValueError(f"BlobFrame magic must be 8 bytes, got {self.magic!r}")
        if not 0 <= self.layout <= _U16:
            raise ValueError(f"BlobFrame layout must fit in 16 bits, got {self.layout}")
        if not self.owner:
            raise ValueError("BlobFrame owner must name the provider")
        if not 0 < self.max_header < 1 << 32:
            raise ValueError(f"BlobFrame max_header must be in 1..2**32-1, got {self.max_header}")

    # -------------------------------------------------------------------------- writing
    def pack(self, header: Mapping[str, Any], sections: Mapping[str, BlobLike] | BlobLike) -> bytes:
        """The blob of ``header`` (JSON-able) and ``sections`` (name -> bytes, or one ``bytes``
        payload stored as :data:`PAYLOAD`). Deterministic: the same arguments give the same
        bytes, whatever the mappings' order. Raises TypeError/ValueError for a header JSON
        cannot hold or one longer than ``max_header`` (a bug in the writer, not a refusal)."""
        parts = {PAYLOAD: sections} if isinstance(sections, (bytes, bytearray, memoryview)) else dict(sections)
        names = sorted(parts)
        if not all(isinstance(n, str) for n in names):
            raise TypeError(f"{self.owner} blob section names must be str, got {names!r}")
        views = [memoryview(parts[n]).cast("B") for n in names]
        table = [[n, v.nbytes] for n, v in zip(names, views)]
        text = json.dumps({"header": dict(header), "sections": table}, sort_keys=True, separators=(",", ":"),
                          allow_nan=False).encode()
        if len(text) > self.max_header:
            raise ValueError(f"{self.owner} blob header is {len(text)} bytes, more than the {self.max_header} "
                             "this frame reads back")
        fields = _PREFIX.pack(self.magic, self.layout, 0, len(text), sum(v.nbytes for v in views), bytes(32))
        digest = hashlib.sha256(fields[:_HASHED_PREFIX])
        digest.update(text)
        for view in views:
            digest.update(view)
        return b"".join((fields[:_HASHED_PREFIX], digest.digest(), text, *views))

    # -------------------------------------------------------------------------- reading
    def unpack(self, data: BlobLike, *, verify_digest: bool = True) -> tuple[dict[str, Any], dict[str, memoryview]]:
        """(header, sections) of a blob :meth:`pack` wrote with this frame; :class:`BlobFrameError`
        for anything else. Sections are slices of ``data`` (no copies; ``bytes(view)`` when a
        library needs bytes). ``verify_digest=False``: see the module docstring."""
        view = memoryview(data).cast("B")
        size = len(view)
        if size < PREFIX_SIZE:
            raise self._error(f"truncated (cut short): {size} bytes, shorter than its {PREFIX_SIZE}-byte prefix")
        magic, layout, reserved, header_len, payload_len, digest = _PREFIX.unpack_from(view)
        if magic != self.magic:
            raise BlobFrameError(f"not {_article(self.owner)} {self.owner} blob (magic {bytes(magic)!r}, "
                                 f"expected {self.magic!r})")
        if layout != self.layout or reserved:
            raise self._error(f"layout {layout}.{reserved}, this {self.owner} reads layout {self.layout}.0")
        if header_len > self.max_header:
            raise self._error(f"header length {header_len} is over the {self.max_header} bytes a header may have "
                              "(corrupted or not written by this frame)")
        expected = PREFIX_SIZE + header_len + payload_len
        if size != expected:
            what = "truncated (cut short)" if size < expected else "longer than its prefix says (extended)"
            raise self._error(f"{what}: {size} bytes, its prefix says {expected}")
        if verify_digest:
            check = hashlib.sha256(view[:_HASHED_PREFIX])
            check.update(view[PREFIX_SIZE:])
            if check.digest() != digest:
                raise self._error("corrupted: the sha256 of its prefix, header and payload differs from the "
                                  "recorded one")
        header, table = self._parse_header(view[PREFIX_SIZE:PREFIX_SIZE + header_len])
        if sum(length for _name, length in table) != payload_len:
            raise self._error(f"section lengths add up to {sum(length for _n, length in table)} bytes, the payload "
                              f"is {payload_len}")
        sections: dict[str, memoryview] = {}
        at = PREFIX_SIZE + header_len
        for name, length in table:
            sections[name] = view[at:at + length]
            at += length
        return header, sections

    def unpack_payload(self, data: BlobLike, *, verify_digest: bool = True) -> tuple[dict[str, Any], memoryview]:
        """(header, payload) of a blob packed with one ``bytes`` payload (see :meth:`pack`)."""
        header, sections = self.unpack(data, verify_digest=verify_digest)
        if set(sections) != {PAYLOAD}:
            raise self._error(f"holds sections {sorted(sections)}, expected the single {PAYLOAD!r}")
        return header, sections[PAYLOAD]

    def _parse_header(self, text: memoryview) -> tuple[dict[str, Any], list[tuple[str, int]]]:
        try:
            outer = json.loads(bytes(text))
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            raise self._error(f"header is not valid JSON ({exc})") from None
        if not isinstance(outer, dict) or set(outer) != {"header", "sections"} or not isinstance(outer["header"], dict):
            raise self._error("header is not a JSON object of this frame ({'header': {...}, 'sections': [...]})")
        table: list[tuple[str, int]] = []
        seen: set[str] = set()
        entries: list[Any] = outer["sections"] if isinstance(outer["sections"], list) else [None]
        for entry in entries:
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                    and type(entry[1]) is int and 0 <= entry[1] <= _U64 and entry[0] not in seen):
                raise self._error(f"section table entry {entry!r} is not a new [name, length]")
            seen.add(entry[0])
            table.append((entry[0], entry[1]))
        return outer["header"], table

    def _error(self, reason: str) -> BlobFrameError:
        return BlobFrameError(f"{self.owner} blob {reason}")
