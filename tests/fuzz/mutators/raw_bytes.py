"""Byte mutations of the serialized model: flips, set bytes, deletions, insertions, truncation
and duplicated runs (which make protobuf length prefixes lie)."""

from __future__ import annotations

import random

from .common import Draft

MARKERS = [0x00, 0xFF, 0x7F, 0x80, 0x01, 0x08, 0x12, 0x1A, 0x22, 0x3A, 0x42]


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    buf = bytearray(data)
    done = []
    for _ in range(rng.randrange(1, 6)):
        if not buf:
            break
        op = rng.randrange(6)
        pos = rng.randrange(len(buf))
        if op == 0:
            buf[pos] ^= 1 << rng.randrange(8)
            done.append("flip")
        elif op == 1:
            buf[pos] = rng.choice(MARKERS)
            done.append("set")
        elif op == 2:
            del buf[pos: pos + rng.randrange(1, 16)]
            done.append("delete")
        elif op == 3:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
            done.append("insert")
        elif op == 4:
            del buf[pos:]
            done.append("truncate")
        else:
            start = rng.randrange(len(buf))
            buf[pos:pos] = buf[start: start + rng.randrange(1, 64)]
            done.append("duplicate")
    return bytes(buf), "bytes: " + ",".join(done)


def byte_mutations(rng: random.Random, draft: Draft) -> str | None:
    draft.data, what = mutate_bytes(rng, draft.model.SerializeToString())
    return what


MUTATIONS = [byte_mutations]
