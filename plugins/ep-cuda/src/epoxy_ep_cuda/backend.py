"""Backends: where values live and how the few hand-written kernels run.

:class:`CupyBackend` drives a real GPU (CuPy arrays, cuBLAS through ``cupy.matmul``,
NVRTC-compiled kernels from :mod:`codegen` / :mod:`cuda_sources`, the provider's own
stream, pinned staging buffers). :class:`FakeBackend` is a simulated device for machines
without one: values live in :class:`FakeDeviceArray` (a numpy subclass standing for device
memory) and the generated kernels run through their numpy twins. Kernels are written once
against ``backend.xp`` (numpy or cupy), so the fake device exercises the same kernel code,
capability, host-value analysis, fusion and copy placement as the GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import codegen, cuda_sources, nvrtc


class FakeDeviceArray(np.ndarray):
    """A value in simulated device memory (host code must not read it directly)."""


class Backend:
    xp: Any
    name: str
    #: the architecture kernels are compiled for (``sm_90``); None: no machine code here
    arch: str | None = None

    # compiled kernels, by cache key (an ew variant tuple, or a hand-written kernel's name) ------
    def ensure(self, key: Any, name: str, source: str) -> None:
        """Compile ``source`` under ``key`` unless already there (export asks for it)."""

    def binary(self, name: str) -> bytes | None:
        """The cubin a kernel was built from here (None: none kept, or no machine code)."""
        return None

    def preload(self, key: Any, name: str, cubin: bytes) -> None:
        """Take an exported cubin as the kernel for ``key`` (no NVRTC compile)."""
        raise NotImplementedError(f"the {self.name} backend runs no machine code")

    def is_device(self, value: Any) -> bool:
        raise NotImplementedError

    def run_context(self) -> Any:
        return contextlib.nullcontext()

    # conversions used by kernel wrappers ---------------------------------------------
    def host(self, value: Any) -> np.ndarray | None:
        """Host numpy value of a small parameter input (shape, axes...)."""
        if value is None or isinstance(value, np.ndarray) and not self.is_device(value):
            return value
        self.host_syncs += 1
        return self.to_host(value)

    # elementwise ------------------------------------------------------------------------
    @staticmethod
    def out_shape(arrays: Sequence[Any]) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(*[tuple(a.shape) for a in arrays])) if arrays else ()


class FakeBackend(Backend):
    """Simulated device over numpy (tests and ``epoxy partition`` previews without a GPU)."""

    name = "fake"
    xp = np

    def __init__(self) -> None:
        self.copies_in = 0
        self.copies_out = 0
        self.host_syncs = 0
        self.implicit_uploads = 0
        self.ew_variants: set[tuple[Any, ...]] = set()
        self.programs: dict[str, codegen.Program] = {}

    def is_device(self, value: Any) -> bool:
        return isinstance(value, FakeDeviceArray)

    def to_device(self, value: np.ndarray) -> FakeDeviceArray:
        self.copies_in += 1
        return np.array(value, copy=True).view(FakeDeviceArray)

    def to_host(self, value: Any) -> np.ndarray:
        self.copies_out += 1
        return np.array(value.view(np.ndarray), copy=True)

    def dev(self, value: Any) -> Any:
        """A device input as the compute array (numpy here); uploads host values."""
        if value is None:
            return None
        if not isinstance(value, FakeDeviceArray):
            self.implicit_uploads += 1
            return np.asarray(value)
        return value.view(np.ndarray)

    def wrap(self, value: Any) -> Any:
        return np.asarray(value).view(FakeDeviceArray)

    def from_pointer(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> FakeDeviceArray:
        """Simulated device memory is host memory: an array over ``pointer``, no copy."""
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.empty(shape, dtype).view(FakeDeviceArray)
        memory = (ctypes.c_char * (count * np.dtype(dtype).itemsize)).from_address(pointer)
        return np.frombuffer(memory, dtype=dtype, count=count).reshape(shape).view(FakeDeviceArray)

    def ew(self, program: codegen.Program, inputs: Sequence[np.ndarray], out_dtypes: Sequence[str]) -> list[np.ndarray]:
        shape = self.out_shape(inputs)
        classes = codegen.classify(shape, [(tuple(a.shape), a.strides, a.flags.c_contiguous) for a in inputs])
        self.programs[program.key] = program
        self.ew_variants.add((program.key, tuple(str(a.dtype) for a in inputs), tuple(out_dtypes), classes, len(shape)))
        return [np.ascontiguousarray(o) for o in codegen.evaluate_numpy(program, inputs, out_dtypes)]

    def softmax_rows(self, x2: np.ndarray, log: bool) -> np.ndarray:
        x = x2.astype(np.float32)
        m = x.max(axis=1, keepdims=True)
        e = np.exp(x - m)
        s = e.sum(axis=1, keepdims=True)
        out = (x - m - np.log(s)) if log else e / s
        return out.astype(x2.dtype)

    def layernorm_rows(self, x2: np.ndarray, g: np.ndarray, b: np.ndarray | None, eps: float) -> np.ndarray:
        x = x2.astype(np.float32)
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        y = (x - mean) / np.sqrt(var + np.float32(eps)) * g.astype(np.float32)
        if b is not None:
            y = y + b.astype(np.float32)
        return y.astype(x2.dtype)

    def im2col(self, x: np.ndarray, k: tuple[int, int], s: tuple[int, int], p: tuple[int, int, int, int],
               d: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, s, d, out_hw
        xp_ = np.pad(x, ((0, 0), (0, 0), (p[0], max(p[2], 0) + kh * dh), (p[1], max(p[3], 0) + kw * dw)))
        cols = np.empty((n, c, kh, kw, oh, ow), dtype=x.dtype)
        for i in range(kh):
            for j in range(kw):
                cols[:, :, i, j] = xp_[:, :, i * dh: i * dh + sh * oh: sh, j * dw: j * dw + sw * ow: sw][:, :, :oh, :ow]
        return cols.reshape(n, c * kh * kw, oh * ow)

    def pool2d(self, x: np.ndarray, mode: str, k, s, p, d, out_hw, count_pad: bool) -> np.ndarray:
        n, c, h, w = x.shape
        (kh, kw), (sh, sw), (dh, dw), (oh, ow) = k, s, d, out_hw
        big = kh * dh + sh * oh + h
        fill = -np.inf if mode == "max" else 0.0
        xp_ = np.full((n, c, p[0] + big, p[1] + kw * dw + sw * ow + w), fill, dtype=np.float32)
        xp_[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
        valid = np.zeros(xp_.shape[2:], dtype=np.float32)
        valid[p[0]:p[0] + h, p[1]:p[1] + w] = 1
        padded = np.zeros_like(valid)
        padded[: p[0] + h + p[2], : p[1] + w + p[3]] = 1
        acc = np.full((n, c, oh, ow), fill, dtype=np.float32)
        cnt = np.zeros((oh, ow), dtype=np.float32)
        full = np.zeros((oh, ow), dtype=np.float32)
        for i in range(kh):
            for j in range(kw):
                sl = (slice(i * dh, i * dh + sh * oh, sh), slice(j * dw, j * dw + sw * ow, sw))
                win = xp_[(slice(None), slice(None)) + sl][:, :, :oh, :ow]
                if mode == "max":
                    acc = np.maximum(acc, win)
                else:
                    acc = acc + win
                cnt += valid[sl][:oh, :ow]
                full += padded[sl][:oh, :ow]
        if mode == "avg":
            acc = acc / (full if count_pad else np.maximum(cnt, 1))
        return acc.astype(x.dtype)

    def synchronize(self) -> None:
        pass


class CupyBackend(Backend):
    """A real GPU through CuPy. Kernels run on ``self.stream`` (a non-blocking stream)."""

    name = "cupy"
    PINNED_MAX = 64 << 20  # larger transfers (constants at creation) skip the staging buffers

    def __init__(self, device: Any, options: Any) -> None:
        from ._cuda import import_cupy
        from .options import parse_memory_limit

        cp = import_cupy()
        self.cp = self.xp = cp
        self.index = device.index
        self.device = cp.cuda.Device(self.index)
        self.pinned = bool(options.pinned)
        self.host_syncs = 0
        self.implicit_uploads = 0
        self._lock = threading.Lock()
        with self.device:
            if options.memory_limit is not None:
                limit = parse_memory_limit(options.memory_limit, device.memory_bytes or 0)
                cp.get_default_memory_pool().set_limit(size=limit)
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.sms = int(device.properties.get("multiprocessors", 0) or 0) or 80
        self.arch = nvrtc.arch_of(device.properties.get("compute_capability", "")) \
            if device.properties.get("compute_capability") else None
        #: NVRTC compiles this backend ran (imported cubins are loaded, not compiled)
        self.nvrtc_compiles = 0
        #: why kernels are built by ``cupy.RawKernel`` instead of through cubins (then none is exported)
        self.cubin_fallback: str | None = None
        self._kernels: dict[Any, Any] = {}
        self._binaries: dict[str, bytes] = {}
        self._staging: dict[int, list[list[Any]]] = {}

    # -- placement -------------------------------------------------------------------
    def is_device(self, value: Any) -> bool:
        return isinstance(value, self.cp.ndarray)

    def run_context(self) -> Any:
        stack = contextlib.ExitStack()
        stack.enter_context(self.device)
        stack.enter_context(self.stream)
        return stack

    def _staging_buffer(self, nbytes: int) -> tuple[np.ndarray, Any]:
        """A pinned host buffer of at least ``nbytes`` not in use by a pending copy."""
        size = 1 << max(12, (nbytes - 1).bit_length())
        with self._lock:
            ring = self._staging.setdefault(size, [])
            for entry in ring:
                if entry[1] is None or entry[1].done:
                    return entry[0], entry
            if len(ring) >= 4:  # wait for the oldest rather than pin more memory
                entry = ring.pop(0)
                entry[1].synchronize()
                ring.append(entry)
                return entry[0], entry
            mem = self.cp.cuda.alloc_pinned_memory(size)
            entry = [np.frombuffer(mem, dtype=np.uint8, count=size), None, mem]
            ring.append(entry)
            return entry[0], entry

    def to_device(self, value: np.ndarray) -> Any:
        cp = self.cp
        if isinstance(value, cp.ndarray):
            return value  # already on a GPU (IOBinding feeds): no copy
        value = np.ascontiguousarray(value)
        with self.device:
            out = cp.empty(value.shape, value.dtype)
            if value.nbytes == 0:
                return out
            if self.pinned and value.nbytes <= self.PINNED_MAX:
                raw, entry = self._staging_buffer(value.nbytes)
                staged = raw[: value.nbytes].view(value.dtype).reshape(value.shape)
                np.copyto(staged, value)
                out.set(staged, stream=self.stream)
                entry[1] = self.stream.record()
            else:
                out.set(value, stream=self.stream)
            return out

    def to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, self.cp.ndarray):
            return np.asarray(value)  # host-resident values (shape tensors) stay on the host
        with self.device:
            if not value.flags.c_contiguous:
                with self.stream:
                    value = self.cp.ascontiguousarray(value)
            if self.pinned and 0 < value.nbytes <= self.PINNED_MAX:
                raw, entry = self._staging_buffer(value.nbytes)
                staged = raw[: value.nbytes].view(value.dtype).reshape(value.shape)
                value.get(stream=self.stream, out=staged)
                self.stream.synchronize()
                entry[1] = None
                return staged.copy()
            out = value.get(stream=self.stream)
            self.stream.synchronize()
            return out

    def dev(self, value: Any) -> Any:
        if value is None or isinstance(value, self.cp.ndarray):
            return value
        self.implicit_uploads += 1
        return self.cp.asarray(value)

    def wrap(self, value: Any) -> Any:
        return value

    def from_pointer(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A CuPy array over device memory it does not own (the caller keeps it alive)."""
        cp = self.cp
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        memory = cp.cuda.UnownedMemory(pointer, nbytes, None, self.index)
        return cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(memory, 0))

    def synchronize(self) -> None:
        self.stream.synchronize()

    # -- kernels -------------------------------------------------------------------------
    def _build(self, name: str, source: str) -> Any:
        """NVRTC -> cubin -> kernel (:mod:`.nvrtc`), the cubin kept for export; if that path
        fails once (an old NVRTC without cubin output...), ``cupy.RawKernel`` from then on."""
        self.nvrtc_compiles += 1
        if self.arch is not None and self.cubin_fallback is None:
            try:
                cubin = nvrtc.compile_cubin(name, source, self.arch)
                kernel = nvrtc.load(self.cp, name, cubin)
            except Exception as exc:  # noqa: BLE001 - the RawKernel path below still works
                self.cubin_fallback = f"{type(exc).__name__}: {exc}"
            else:
                self._binaries[name] = cubin
                return kernel
        return self.cp.RawKernel(source, name)

    def ensure(self, key: Any, name: str, source: str) -> None:
        if key not in self._kernels:
            with self.device:
                self._kernels[key] = self._build(name, source)

    def binary(self, name: str) -> bytes | None:
        return self._binaries.get(name)

    def preload(self, key: Any, name: str, cubin: bytes) -> None:
        with self.device:
            self._kernels[key] = nvrtc.load(self.cp, name, cubin)
        self._binaries[name] = cubin

    def _kernel(self, name: str, source: str) -> Any:
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = self._build(name, source)
        return k

    def _grid(self, n: int, block: int = 256) -> int:
        return max(1, min((n + block - 1) // block, self.sms * 32))

    def ew(self, program: codegen.Program, inputs: Sequence[Any], out_dtypes: Sequence[str]) -> list[Any]:
        cp = self.cp
        shape = self.out_shape(inputs)
        classes = codegen.classify(shape, [(tuple(a.shape), a.strides, a.flags.c_contiguous) for a in inputs])
        ndim = len(shape)
        in_dt = [str(a.dtype) for a in inputs]
        name, src = (
            codegen.cuda_source(program, in_dt, out_dtypes, classes, ndim)
            if ((key := (program.key, tuple(in_dt), tuple(out_dtypes), classes, ndim)) not in self._kernels)
            else (None, None)
        )
        if name is not None and src is not None:
            self._kernels[key] = self._build(name, src)
        kern = self._kernels[key]
        outs = [cp.empty(shape, dtype=np.bool_ if d == "bool" else d) for d in out_dtypes]
        n = int(np.prod(shape, dtype=np.int64))
        if n == 0:
            return outs
        args: list[Any] = list(inputs) + outs + [np.int64(n)]
        if "b" in classes:
            args += [np.int64(d) for d in shape]
            for a, c in zip(inputs, classes):
                if c == "b":
                    full = cp.broadcast_to(a, shape)
                    args += [np.int64(st // a.itemsize) for st in full.strides]
        kern((self._grid(n),), (256,), tuple(args))
        return outs

    def softmax_rows(self, x2: Any, log: bool) -> Any:
        x2 = self.cp.ascontiguousarray(x2)
        rows, cols = x2.shape
        y = self.cp.empty_like(x2)
        if rows and cols:
            name, src = cuda_sources.softmax_source(str(x2.dtype), log)
            block = 1024 if cols >= 4096 else 256 if cols >= 256 else max(32, (cols + 31) // 32 * 32)
            self._kernel(name, src)((rows,), (block,), (x2, y, np.int64(cols)))
        return y

    def layernorm_rows(self, x2: Any, g: Any, b: Any, eps: float) -> Any:
        cp = self.cp
        x2 = cp.ascontiguousarray(x2)
        rows, cols = x2.shape
        y = cp.empty_like(x2)
        if rows and cols:
            dt = str(x2.dtype)
            name, src = cuda_sources.layernorm_source(dt, b is not None)
            block = 1024 if cols >= 4096 else 256 if cols >= 256 else max(32, (cols + 31) // 32 * 32)
            args = [x2, cp.ascontiguousarray(g.astype(x2.dtype, copy=False))]
            if b is not None:
                args.append(cp.ascontiguousarray(b.astype(x2.dtype, copy=False)))
            args += [y, np.int64(cols), np.float32(eps)]
            self._kernel(name, src)((rows,), (block,), tuple(args))
        return y

    def im2col(self, x: Any, k, s, p, d, out_hw) -> Any:
        cp = self.cp
        x = cp.ascontiguousarray(x)
        n, c, h, w = x.shape
        (kh, kw), (oh, ow) = k, out_hw
        cols = cp.empty((n, c * kh * kw, oh * ow), dtype=x.dtype)
        total = cols.size
        if total:
            name, src = cuda_sources.im2col_source(str(x.dtype))
            ints = [c, h, w, kh, kw, oh, ow, s[0], s[1], p[0], p[1], d[0], d[1]]
            self._kernel(name, src)(
                (self._grid(total),), (256,), (x, cols, np.int64(total), *[np.int32(v) for v in ints])
            )
        return cols

    def pool2d(self, x: Any, mode: str, k, s, p, d, out_hw, count_pad: bool) -> Any:
        cp = self.cp
        x = cp.ascontiguousarray(x)
        n, c, h, w = x.shape
        (kh, kw), (oh, ow) = k, out_hw
        y = cp.empty((n, c, oh, ow), dtype=x.dtype)
        total = y.size
        if total:
            name, src = cuda_sources.pool_source(str(x.dtype), mode)
            ints = [h, w, kh, kw, oh, ow, s[0], s[1], p[0], p[1], d[0], d[1], int(count_pad), p[2], p[3]]
            self._kernel(name, src)((self._grid(total),), (256,), (x, y, np.int64(total), *[np.int32(v) for v in ints]))
        return y
