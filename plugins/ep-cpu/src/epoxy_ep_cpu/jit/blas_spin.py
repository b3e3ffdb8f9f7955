"""OpenBLAS's idle workers put to sleep while epoxy's own threads run a parallel region.

Why: after a multi-threaded product, OpenBLAS's workers spin for ~0.1 s waiting for the next
one (its THREAD_TIMEOUT, 2^28 cycles, taken from the environment once, when the library
loads). A share epoxy hands to its own helper thread meanwhile runs time-sliced with that
spinning worker, so splitting work over two threads lost right after any BLAS call:
an RGB stem on the implicit GEMM took 1.07-1.47x the two-thread grid GEMM's time with the
worker spinning, 0.65-0.82x with it asleep (bench/README.md, session 32). OpenBLAS keeps the
timeout in a static variable that its workers compare on every turn of their wait loop; this
module finds it in the OpenBLAS numpy loaded (through the library's ELF symbol table) and
:func:`parked` sets it to OpenBLAS's minimum (2^4 cycles) for the duration of a region: the
workers go to sleep at once, and the next product wakes them as usual. The value is put back
when the last region ends, so back-to-back products keep their quick start.

Anything unexpected (another BLAS, an OpenMP build, a stripped library, a value that is not
one OpenBLAS would set) leaves OpenBLAS alone: :func:`parked` is then a no-op.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from epoxy.kit.shared_setting import SharedSetting

#: OpenBLAS's smallest timeout (it clamps THREAD_TIMEOUT to 4..30): the workers sleep at once
PARKED = 1 << 4
_SHT_SYMTAB, _STT_OBJECT, _STT_FUNC = 2, 1, 2


def _symbols(path: str, wanted: set[str]) -> dict[str, tuple[int, int, int]]:
    """``name -> (value, size, type)`` of the ``wanted`` symbols in the ELF64 little-endian
    shared object at ``path`` (its full symbol table, local symbols included); {} otherwise."""
    found: dict[str, tuple[int, int, int]] = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return found
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        for sh in sections:
            if sh[1] != _SHT_SYMTAB or sh[6] >= shnum or (sh[9] or 24) != 24:
                continue
            strtab = sections[sh[6]]
            names = {}  # offset of each wanted name in the string table -> the name
            for name in wanted:
                at = data.find(b"\0" + name.encode() + b"\0", strtab[4], strtab[4] + strtab[5])
                if at >= 0:
                    names[at + 1 - strtab[4]] = name
            table = data[sh[4]:sh[4] + sh[5] - sh[5] % 24]
            for name_at, info, _other, _shndx, value, size in struct.iter_unpack("<IBBHQQ", table):
                name = names.get(name_at)
                if name is not None and name not in found:
                    found[name] = (value, size, info & 0xF)
    return found


def _openblas_path() -> str | None:
    """numpy's BLAS when it is OpenBLAS with its own pthreads server, else None."""
    from threadpoolctl import threadpool_info

    for info in threadpool_info():
        if info.get("internal_api") == "openblas" and info.get("threading_layer") == "pthreads":
            return str(info.get("filepath") or "") or None
    return None


@functools.cache
def _timeout() -> Any:
    """OpenBLAS's ``thread_timeout`` as a ``ctypes.c_uint`` in the loaded library, or None."""
    try:
        path = _openblas_path()
        if path is None:
            return None
        symbols = _symbols(path, {"thread_timeout", "blas_thread_init"})
        value = symbols.get("thread_timeout")
        anchor = symbols.get("blas_thread_init")
        if value is None or anchor is None or value[1] != 4 or value[2] != _STT_OBJECT or anchor[2] != _STT_FUNC:
            return None
        lib = ctypes.CDLL(path)
        base = ctypes.cast(lib.blas_thread_init, ctypes.c_void_p).value
        if base is None:
            return None
        cell = ctypes.c_uint.from_address(base - anchor[0] + value[0])
        current = cell.value
        if current & (current - 1) or not PARKED <= current <= 1 << 30:  # not a timeout OpenBLAS set
            return None
        return cell
    except Exception:  # noqa: BLE001 - an unexpected library: leave OpenBLAS alone
        return None


def available() -> bool:
    """Whether :func:`parked` can put OpenBLAS's workers to sleep in this process."""
    return _timeout() is not None


def _park(cell: Any) -> int:
    kept = int(cell.value)
    cell.value = PARKED
    return kept


@functools.cache
def _parking() -> SharedSetting:
    """The one shared parking of OpenBLAS's timeout (callers checked that it was found)."""
    cell = _timeout()
    return SharedSetting(lambda: _park(cell), lambda kept: setattr(cell, "value", kept))


@contextmanager
def parked() -> Iterator[None]:
    """OpenBLAS's idle workers asleep for the duration (nested and concurrent regions share one
    parking; the last to end puts the timeout back)."""
    if _timeout() is None:
        yield
        return
    with _parking().held():
        yield
