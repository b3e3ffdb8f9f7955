"""``epoxy.kit.BlobFrame``: round trips, and every blob that is not whole and unaltered is
refused with its reason before a byte of it is parsed or handed on."""

from __future__ import annotations

import hashlib
import json
import struct
import tracemalloc

import pytest

from epoxy.kit import BlobFrame, BlobFrameError
from epoxy.kit.blob_frame import PAYLOAD, PREFIX_SIZE

FRAME = BlobFrame(b"EPXTEST\0", 3, "ep-test")
HEADER = {"library": "1.2.3", "inputs": ["x"], "outputs": ["y", "z"], "nested": {"b": 1, "a": [1.5, None]}}
SECTIONS = {"plan": b'{"steps": []}', "bin:k1": bytes(range(256)) * 3, "empty": b""}


def _blob() -> bytes:
    return FRAME.pack(HEADER, SECTIONS)


def _header_len(blob: bytes) -> int:
    return int.from_bytes(blob[12:16], "little")


def _refused(data: bytes | bytearray | memoryview, *words: str, frame: BlobFrame = FRAME, **kw: bool) -> str:
    with pytest.raises(BlobFrameError) as info:
        frame.unpack(data, **kw)
    text = str(info.value)
    for word in words:
        assert word in text, text
    return text


def _forged(frame: BlobFrame, text: bytes, payload: bytes, *, layout: int | None = None) -> bytes:
    """A blob with ``text`` as its raw header and a valid digest (a careful forger's)."""
    fields = struct.pack("<8sHHIQ", frame.magic, frame.layout if layout is None else layout, 0, len(text),
                         len(payload))
    return fields + hashlib.sha256(fields + text + payload).digest() + text + payload


# -- round trips -------------------------------------------------------------------------------
def test_round_trip_gives_the_header_and_sections_back():
    blob = _blob()
    header, sections = FRAME.unpack(blob)
    assert header == HEADER
    assert {name: bytes(view) for name, view in sections.items()} == SECTIONS
    assert all(isinstance(view, memoryview) for view in sections.values())


def test_sections_are_slices_of_the_blob_not_copies():
    blob = bytearray(_blob())
    _, sections = FRAME.unpack(blob)
    assert sections["bin:k1"].obj is blob
    blob[-1] ^= 0xFF  # the last section (sorted: plan) sees the change: same memory
    assert sections["plan"][-1] == blob[-1]


def test_layout_is_the_documented_one():
    blob = _blob()
    magic, layout, reserved, header_len, payload_len = struct.unpack_from("<8sHHIQ", blob)
    assert (magic, layout, reserved) == (FRAME.magic, 3, 0)
    assert PREFIX_SIZE == 56 and len(blob) == PREFIX_SIZE + header_len + payload_len
    assert hashlib.sha256(blob[:24] + blob[PREFIX_SIZE:]).digest() == blob[24:56]
    outer = json.loads(blob[PREFIX_SIZE:PREFIX_SIZE + header_len])
    assert outer["header"] == HEADER
    assert outer["sections"] == [[n, len(SECTIONS[n])] for n in sorted(SECTIONS)]
    assert blob[PREFIX_SIZE + header_len:] == b"".join(SECTIONS[n] for n in sorted(SECTIONS))


def test_output_is_deterministic_whatever_the_order():
    reordered = dict(reversed(list(SECTIONS.items())))
    header = dict(reversed(list(HEADER.items())))
    assert FRAME.pack(header, reordered) == _blob()
    assert FRAME.pack(HEADER, {k: memoryview(v) for k, v in SECTIONS.items()}) == _blob()


def test_a_single_payload_and_an_empty_blob():
    header, payload = FRAME.unpack_payload(FRAME.pack({"v": 1}, b"\x00payload"))
    assert header == {"v": 1} and bytes(payload) == b"\x00payload"
    assert FRAME.unpack(FRAME.pack({}, {})) == ({}, {})
    assert set(FRAME.unpack(FRAME.pack({}, bytearray(b"x")))[1]) == {PAYLOAD}
    with pytest.raises(BlobFrameError, match="expected the single 'payload'"):
        FRAME.unpack_payload(_blob())


def test_frame_and_writer_errors():
    for bad in ({"magic": b"short", "layout": 1}, {"magic": b"EPX\0\0\0\0\0\0", "layout": 1},
                {"magic": b"EPXTEST\0", "layout": 1 << 16}, {"magic": b"EPXTEST\0", "layout": -1}):
        with pytest.raises(ValueError):
            BlobFrame(owner="ep-test", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        BlobFrame(b"EPXTEST\0", 1, "")
    with pytest.raises(TypeError):
        FRAME.pack({"x": object()}, b"")
    with pytest.raises(ValueError):
        FRAME.pack({"x": float("nan")}, b"")
    with pytest.raises(ValueError, match="more than"):
        BlobFrame(b"EPXTEST\0", 1, "ep-test", max_header=64).pack({"x": "y" * 100}, b"")


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("keep", [0, 1, 8, PREFIX_SIZE - 1, PREFIX_SIZE, PREFIX_SIZE + 10, -1])
def test_refuses_a_cut_blob(keep):
    blob = _blob()
    text = _refused(blob[:keep] if keep >= 0 else blob[:-1], "ep-test blob truncated")
    assert "cut short" in text


def test_refuses_a_padded_blob():
    _refused(_blob() + b"\0", "longer than its prefix says")


def test_refuses_another_magic():
    text = _refused(b"EPXOTHR\0" + _blob()[8:], "not an ep-test blob", "magic")
    assert "EPXOTHR" in text
    assert "not a myvendor blob" in _refused(_blob(), frame=BlobFrame(b"MYVENDOR", 3, "myvendor"))


def test_refuses_another_layout_or_a_reserved_field():
    older = BlobFrame(FRAME.magic, 2, "ep-test")
    _refused(older.pack(HEADER, SECTIONS), "layout 2.0, this ep-test reads layout 3.0")
    blob = bytearray(_blob())
    blob[10] = 1
    _refused(bytes(blob), "layout 3.1")


def test_refuses_a_flipped_payload_byte_and_verify_digest_false_does_not():
    blob = bytearray(_blob())
    blob[-5] ^= 0x01
    _refused(bytes(blob), "ep-test blob corrupted", "sha256")
    _, sections = FRAME.unpack(bytes(blob), verify_digest=False)
    assert bytes(sections["plan"])[-5] == blob[-5]


def test_every_prefix_and_header_byte_flip_is_caught():
    """No byte before the payload can change unnoticed, each bit of it (the digest covers the
    prefix's fields, the header and the payload; the rest of the prefix is compared)."""
    blob = _blob()
    for at in range(PREFIX_SIZE + _header_len(blob)):
        for bit in range(8):
            flipped = bytearray(blob)
            flipped[at] ^= 1 << bit
            with pytest.raises(BlobFrameError):
                FRAME.unpack(bytes(flipped))


def test_without_the_digest_every_prefix_field_is_still_checked():
    """verify_digest=False trusts the bytes' integrity, not their shape: magic, layout,
    reserved and both lengths are still compared (only the 32 digest bytes go unread)."""
    blob = _blob()
    for at in range(24):
        flipped = bytearray(blob)
        flipped[at] ^= 0x01
        with pytest.raises(BlobFrameError):
            FRAME.unpack(bytes(flipped), verify_digest=False)
    _refused(blob[:-1], "truncated", verify_digest=False)
    _refused(blob + b"x", "longer", verify_digest=False)
    _refused(b"NOTMAGIC" + blob[8:], "magic", verify_digest=False)
    _refused(b"x" * 10, "truncated", verify_digest=False)


def test_a_huge_claimed_header_length_is_refused_without_allocating():
    fields = struct.pack("<8sHHIQ", FRAME.magic, FRAME.layout, 0, (1 << 32) - 1, (1 << 64) - 1)
    blob = fields + bytes(32) + b"{}"
    tracemalloc.start()
    try:
        _refused(blob, "header length 4294967295 is over", verify_digest=False)
        _refused(blob, "header length")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"refusing a 4 GiB claim allocated {peak} bytes"
    small = BlobFrame(FRAME.magic, FRAME.layout, "ep-test", max_header=16)
    _refused(_blob(), "over the 16 bytes", frame=small)


def test_a_huge_claimed_payload_length_is_refused_as_a_cut_blob():
    fields = struct.pack("<8sHHIQ", FRAME.magic, FRAME.layout, 0, 2, (1 << 64) - 1)
    _refused(fields + bytes(32) + b"{}", "truncated", verify_digest=False)


@pytest.mark.parametrize("text,reason", [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2]", "not a JSON object of this frame"),
    (b'{"header": {}}', "not a JSON object of this frame"),
    (b'{"header": [], "sections": []}', "not a JSON object of this frame"),
    (b'{"header": {}, "sections": [], "extra": 1}', "not a JSON object of this frame"),
    (b'{"header": {}, "sections": {"a": 4}}', "section table entry"),
    (b'{"header": {}, "sections": [["a", -4], ["b", 8]]}', "section table entry"),
    (b'{"header": {}, "sections": [["a", 4.0]]}', "section table entry"),
    (b'{"header": {}, "sections": [["a", true]]}', "section table entry"),
    (b'{"header": {}, "sections": [[1, 4]]}', "section table entry"),
    (b'{"header": {}, "sections": [["a", 2], ["a", 2]]}', "section table entry"),
    (b'{"header": {}, "sections": [["a", 3]]}', "section lengths add up to 3 bytes, the payload is 4"),
    (b'{"header": {}, "sections": [["a", 2], ["b", 3]]}', "section lengths add up to 5"),
])
def test_refuses_a_header_of_another_shape_even_with_a_valid_digest(text, reason):
    _refused(_forged(FRAME, text, b"abcd"), reason)


def test_refusals_are_value_errors_naming_the_owner():
    with pytest.raises(ValueError, match="^ep-test blob"):
        FRAME.unpack(_blob()[:-1])
