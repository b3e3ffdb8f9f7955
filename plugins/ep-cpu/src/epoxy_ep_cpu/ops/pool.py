"""Pooling: MaxPool, AveragePool, LpPool, their Global forms, MaxUnpool.

Windows are reduced by looping over kernel *positions* (a handful of strided slices of
the padded input, each a whole-tensor numpy op), never over pixels.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from .. import jit
from ..registry import KERNELS
from ._attr_checks import check_at_least, invalid
from ._conv_util import compute_dtype, kernel_offsets, pad_spatial, padded_shape, resolve_pads
from ._flags import flag
from ._layout import as_nchw, channels_last
from ._util import buffer_guard, output_guard, work_bytes_dtype

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


#: geometries remembered per node (by input shape) and the largest input they are kept for
_SHAPES_PER_NODE = 16
_REMEMBERED_MAX_ELEMENTS = 1 << 22


class _PoolAttrs:
    def __init__(self, node: NodeSpec, *, ceil: bool = True, dil: bool = True) -> None:
        self.kernel = tuple(int(k) for k in node.attr("kernel_shape", ()))
        if not self.kernel:
            raise Unsupported(f"{node.op_type} without kernel_shape")
        nsp = len(self.kernel)
        self.nsp = nsp
        self.strides = tuple(int(s) for s in node.attr("strides", ())) or (1,) * nsp
        self.dilations = (tuple(int(s) for s in node.attr("dilations", ())) if dil else ()) or (1,) * nsp
        self.pads = tuple(int(s) for s in node.attr("pads", ())) or (0,) * (2 * nsp)
        auto_pad = node.attr("auto_pad", "NOTSET")
        if isinstance(auto_pad, bytes):
            auto_pad = auto_pad.decode()
        if auto_pad not in _AUTO_PADS:
            raise Unsupported(f"auto_pad {auto_pad!r}")
        self.auto_pad = auto_pad
        self.ceil_mode = flag(node, "ceil_mode", 0) if ceil else False
        self.node = node
        for name, values in (("kernel_shape", self.kernel), ("strides", self.strides), ("dilations", self.dilations)):
            check_at_least(node, name, values, 1)
            if len(values) != nsp:
                raise invalid(node, f"attribute {name!r} = {list(values)} has {len(values)} entries, "
                                    f"kernel_shape has {nsp}")
        if len(self.pads) != 2 * nsp:
            raise invalid(node, f"attribute 'pads' = {list(self.pads)} needs {2 * nsp} entries (begin and end "
                                f"of {nsp} spatial axes)")
        self._padded_guard = buffer_guard(node, "padded input")
        self._out_guard = output_guard(node)
        self._seen: dict[tuple, Any] = {}  # see geometry
        xt = node.input_types[0] if node.input_types else None
        if xt is not None and xt.is_static:
            self._sized(tuple(xt.shape), np.dtype(xt.dtype or np.float32))  # type: ignore[arg-type]

    def lift_1d(self) -> bool:
        """See a 1-D pool as a 2-D one of height 1, so the 2-D paths (the compiled ones and
        their prepared calls) run it: a 3-wide stride-2 MaxPool on 32 x 40 took 18.8 us a run
        on the general numpy path, 10.1 as 2-D (onnxruntime 6.0). False for other ranks."""
        if self.nsp != 1:
            return False
        self.kernel, self.strides, self.dilations = (1, *self.kernel), (1, *self.strides), (1, *self.dilations)
        self.pads = (0, self.pads[0], 0, self.pads[1])
        self.nsp = 2
        self._seen.clear()
        return True

    def _sized(self, shape: tuple[int, ...], dtype: np.dtype):
        """Geometry for an input of ``shape``, refusing first a window that does not fit
        the rank and a padded input or an output too large to allocate (pads and strides
        are attributes: at session creation when the input shape is static)."""
        if len(shape) != self.nsp + 2:
            raise invalid(self.node, f"input rank {len(shape)} does not match kernel_shape {list(self.kernel)} "
                                     f"(rank {self.nsp + 2} expected)")
        geo = resolve_pads(shape[2:], self.kernel, self.strides, self.dilations, self.pads, self.auto_pad,
                           self.ceil_mode)
        out_sp, begin, end, extra = geo
        self._padded_guard(padded_shape(shape, begin, [e + ex for e, ex in zip(end, extra)]),
                           work_bytes_dtype(dtype))
        self._out_guard(tuple(shape[:2]) + tuple(out_sp), dtype)
        return geo

    def geometry(self, x: np.ndarray):
        """:meth:`_sized` for ``x``, remembered per input shape when small (the memory left
        cannot change the verdict on small buffers; computing it is a third of a tiny pool)."""
        key = (x.shape, x.dtype)
        found = self._seen.get(key)
        if found is None:
            found = self._sized(x.shape, x.dtype)
            if x.size <= _REMEMBERED_MAX_ELEMENTS:
                if len(self._seen) >= _SHAPES_PER_NODE:
                    self._seen.clear()
                self._seen[key] = found
        return found


def _lifted_1d(a: _PoolAttrs, run_2d: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """A 1-D pool's kernel (``_PoolAttrs.lift_1d``): the input viewed with a height axis of 1,
    the 2-D kernel run, the axis dropped from its output."""

    def run(x: np.ndarray) -> np.ndarray:
        if x.ndim != 3:
            raise invalid(a.node, f"input rank {x.ndim} does not match kernel_shape [{a.kernel[1]}] "
                                  "(rank 3 expected)")
        y = run_2d(x[:, :, None, :])
        return y.reshape(y.shape[:2] + y.shape[3:])

    return run


def _max_fill_and_ufunc(dtype: np.dtype) -> tuple[Any, np.ufunc]:
    """Padding value and window reduction of MaxPool. Floats pad with NaN and reduce with
    ``fmax``, which skips NaN: a window's maximum ignores NaN inputs and is NaN only when it
    holds nothing else, as the ONNX reference reads MaxPool (it drops NaN from each window)."""
    if dtype.kind in "iu":
        return np.iinfo(dtype).min, np.maximum
    return np.nan, np.fmax


def _max_pool(x: np.ndarray, a: _PoolAttrs, want_indices: bool, storage_order: int, fast: _JitPool | None = None):
    if fast is not None and not want_indices:
        kept = fast.channels_last_max(x, a)
        if kept is not None:
            return kept, None
        call = fast.prepared(x, a)
        if call is not None:
            return call(x if x.flags.c_contiguous else np.ascontiguousarray(x)), None
    out_sp, begin, end, extra = a.geometry(x)
    n, c = x.shape[:2]
    oshape = (n, c) + tuple(out_sp)
    if any(o == 0 for o in out_sp) or n == 0 or c == 0:
        return np.empty(oshape, x.dtype), np.empty(oshape, np.int64)
    work = x
    if x.dtype.kind == "f" and x.dtype not in (np.float32, np.float64):
        work = x.astype(np.float32)
    fill, ufunc = _max_fill_and_ufunc(work.dtype)
    xp = pad_spatial(work, begin, [e + ex for e, ex in zip(end, extra)], fill)
    if not want_indices:
        if _flat_ok(xp, a):
            y = _separable_flat(xp, a, out_sp, ufunc, fill)
        else:
            y = _separable(xp, a, out_sp, ufunc, xp.dtype)
        return (y if y.dtype == x.dtype else y.astype(x.dtype)), None
    nan_aware = xp.dtype.kind == "f"
    lead = (slice(None), slice(None))
    best = None
    arg = None
    for kidx, (_, sl) in enumerate(kernel_offsets(a.kernel, a.strides, a.dilations, out_sp)):
        v = xp[lead + sl]
        if best is None:
            best = v.copy()
            if want_indices:
                arg = np.zeros(best.shape, dtype=np.int64)
        elif want_indices:
            better = v > best
            if nan_aware:  # a number beats a NaN (fmax's rule, as in the no-indices path)
                better |= np.isnan(best) & ~np.isnan(v)
            np.copyto(best, v, where=better)
            arg[better] = kidx
        else:
            np.maximum(best, v, out=best)
    y = best if best.dtype == x.dtype else best.astype(x.dtype)
    if not want_indices:
        return y, None
    # kernel position -> input coordinates -> flat index into x
    kcoords = np.unravel_index(arg, a.kernel)
    sp = x.shape[2:]
    nsp = len(sp)
    coords = []
    for i in range(nsp):
        o = np.arange(out_sp[i]).reshape((-1,) + (1,) * (nsp - 1 - i)) * a.strides[i] - begin[i]
        coords.append(o + kcoords[i] * a.dilations[i])
    flat = np.zeros(arg.shape, dtype=np.int64)
    order = range(nsp) if storage_order == 0 else reversed(range(nsp))
    for i in order:
        flat = flat * sp[i] + coords[i]
    plane = math.prod(sp)
    flat += (np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * nsp)
    return y, flat


@KERNELS.register("MaxPool", (1, 8, 10, 11, 12, 22))
def max_pool(node: NodeSpec):
    a = _PoolAttrs(node, ceil=node.opset >= 10, dil=node.opset >= 10)
    storage_order = int(node.attr("storage_order", 0))
    want = len(node.outputs) > 1 and node.outputs[1] != ""
    fast = _JitPool.build()

    def run(x: np.ndarray):
        y, idx = _max_pool(x, a, want, storage_order, fast)
        return (y, idx) if want else y

    if not want and a.lift_1d():  # the Indices output keeps the general path
        return _lifted_1d(a, run)
    return run


_UNSEEN = object()
#: (input spatial shape, output spatial shape, begin pads, end pads) -> AveragePool's divisor
#: factors per spatial axis
CountsOf = Callable[[tuple[int, ...], list[int], list[int], list[int]], list[np.ndarray]]


class _JitPool:
    """One pool node's compiled windowed pools (``jit/kernels_pool.py``) when its provider
    runs the jit tier: a prepared call per input shape and dtype, or ``None`` for a shape the
    numpy path runs (remembered like the node's geometry, for inputs of at most
    ``_REMEMBERED_MAX_ELEMENTS``)."""

    __slots__ = ("_calls", "module", "nthreads")

    def __init__(self, module: Any, nthreads: int) -> None:
        self.module, self.nthreads = module, nthreads
        self._calls: dict[tuple, Any] = {}

    @staticmethod
    def build() -> _JitPool | None:
        compiled = jit.kernels("pool")
        return _JitPool(compiled, jit.thread_count()) if compiled is not None else None

    def prepared(self, x: np.ndarray, a: _PoolAttrs, counts_of: CountsOf | None = None) -> Any:
        """The call running ``x`` (MaxPool, or AveragePool with ``counts_of``), or ``None``."""
        key = (x.shape, x.dtype)
        call = self._calls.get(key, _UNSEEN)
        if call is _UNSEEN:
            call = self._prepare(x, a, counts_of)
            if x.size <= _REMEMBERED_MAX_ELEMENTS:
                if len(self._calls) >= _SHAPES_PER_NODE:
                    self._calls.clear()
                self._calls[key] = call
        return call

    def channels_last_max(self, x: np.ndarray, a: _PoolAttrs) -> np.ndarray | None:
        """MaxPool of 8-bit codes that are an NCHW view of channels-last ones (an int8
        convolution's output) on the channels-last kernel, the result channels last again;
        None for any other input."""
        nhwc = channels_last(x)
        if nhwc is None or a.nsp != 2:
            return None
        out_sp, begin, _, _ = a.geometry(x)  # raises for a buffer too large
        if min(out_sp) <= 0 or min(begin) < 0:
            return None
        return as_nchw(self.module.codes.max_pool(nhwc, a.kernel, a.strides, a.dilations, begin, out_sp,
                                                  self.nthreads))

    def _prepare(self, x: np.ndarray, a: _PoolAttrs, counts_of: CountsOf | None) -> Any:
        out_sp, begin, end, extra = a.geometry(x)  # raises for a bad rank or a buffer too large
        if x.dtype in self.module.rows.CODES:
            return self._codes_call(x, a, out_sp, begin) if counts_of is None else None
        if counts_of is not None and _whole_map(x, a, out_sp, counts_of, begin, end):
            return functools.partial(self.module.run_global_avg, nthreads=self.nthreads)
        if min(out_sp) <= 0 or not self.module.pool2d_fits(x, begin):
            return None
        # another window over the whole image (one output per plane) stays on numpy's passes:
        # the row kernel's loops are too short there ([2048, 7, 7] 7x7 average: 0.17 ms, numpy 0.11)
        rows_fit = math.prod(out_sp) > 1 and self.module.rows.fits(a.kernel, a.strides, a.dilations, begin,
                                                                   x.shape[2:], out_sp)
        if not use_jit_pool(x, a, begin, end, extra, rows_fit):
            return None
        counts = None
        if counts_of is not None:
            ch, cw = counts_of(x.shape[2:], out_sp, begin, end)
            counts = (ch, cw)
        return self.module.prepare(x.shape, x.dtype, a.kernel, a.strides, a.dilations, begin, out_sp, counts,
                                   self.nthreads)

    def _codes_call(self, x: np.ndarray, a: _PoolAttrs, out_sp: list[int], begin: list[int]) -> Any:
        """A MaxPool over 8-bit codes (a QDQ model's pools run on its codes: ``qdq_passthrough``)
        on the row-buffer kernel, wherever its windows fit: numpy's strided passes took 0.88 ms
        of squeezenet's three code pools (1 thread), float-sized work on a quarter of the bytes."""
        rows = self.module.rows
        if x.ndim != 4 or a.nsp != 2 or x.size == 0 or min(out_sp) <= 0 or min(begin) < 0:
            return None
        if not rows.fits(a.kernel, a.strides, a.dilations, begin, x.shape[2:], out_sp):
            return None
        return rows.RowsPoolCall(x.shape, x.dtype, a.kernel, a.strides, begin, out_sp, None, self.nthreads)


#: the dtypes GlobalAveragePool's compiled kernel takes
_GLOBAL_MEAN_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _whole_map(x: np.ndarray, a: _PoolAttrs, out_sp: Sequence[int], counts_of: CountsOf, begin: Sequence[int],
               end: Sequence[int]) -> bool:
    """Whether an AveragePool's one window per plane averages exactly the whole map: resnet50's
    7x7 pool on 7x7 maps, or inception_v1's 7x7 window over 6x6 maps padded on one side without
    counting the pad. The average is then GlobalAveragePool's, and its kernel runs it ([2048,
    7, 7]: the windowed paths took 0.23 ms, 5.4x onnxruntime's, session 34; inception_v1's
    [1024, 6, 6] took 0.22 ms on numpy's passes, onnxruntime's 0.014, session 37)."""
    if not (x.ndim >= 3 and x.size > 0 and x.dtype in _GLOBAL_MEAN_DTYPES and all(o == 1 for o in out_sp)
            and all(d == 1 for d in a.dilations)):
        return False
    counts = counts_of(x.shape[2:], list(out_sp), list(begin), list(end))
    return all(int(c[0]) == size for c, size in zip(counts, x.shape[2:]))


#: stride-1 pools run compiled only on inputs of at most this many elements
_JIT_POOL_STRIDE1_MAX = 1 << 13
#: an unpadded strided pool over planes smaller than this many pixels, on more than
#: _JIT_POOL_SMALL_MAX elements, runs numpy's strided slices (see use_jit_pool)
_JIT_POOL_MIN_PLANE = 2048
_JIT_POOL_SMALL_MAX = 1 << 16


def use_jit_pool(x: np.ndarray, a: _PoolAttrs, begin: list[int], end: list[int],
                 extra: Sequence[int] = (), rows_fit: bool = False) -> bool:
    """Whether the compiled kernel runs this 2-D float MaxPool / AveragePool (pads >= 0).
    Measured against the numpy passes, 1 thread, 3x3 windows: strided pools 0.37-0.9x the
    numpy time ([8, 32, 32] s2 0.39x, [64, 112, 112] s2 0.69x (max) / 0.55x (average), [256,
    14, 14] s2 ceil 0.86x, [128, 55, 55] s2 0.83x, [256, 26, 26] s2 ceil 0.85x); stride-1 ones
    only on small inputs, where numpy's fixed cost dominates ([16, 16, 16] 0.63x; [64, 14, 14]
    1.35x, [480, 14, 14] 2x: numpy's flat passes over whole short rows beat a loop per row).
    Strided pools that need no padding over many small planes stay on numpy too: its strided
    slices win there ([256, 27, 27] s2 1.3x, [512, 13, 13] s2 1.5x; squeezenet's last MaxPool);
    ``extra`` is ceil_mode's padding past ``end``. Padded 3x3 stride-1 pools of any size run
    compiled (their whole-plane kernel: [192, 28, 28] 0.25-0.3x the numpy time). Strided
    pools of ``rows_fit`` (``kernels_pool_rows.fits``: undilated windows, each reaching the
    input) compile over small planes too: their row-buffer kernel beats numpy there
    ([256, 27, 27] s2 0.5x, [512, 28, 28] 2x2 s2 0.65x; bench/README, session 18)."""
    if x.ndim != 4 or a.nsp != 2:
        return False
    strided = a.strides != (1, 1)
    unpadded_small_planes = (strided and max(begin) == 0 and max(end) == 0 and max(extra, default=0) == 0
                             and x.shape[2] * x.shape[3] < _JIT_POOL_MIN_PLANE and x.size > _JIT_POOL_SMALL_MAX)
    return (
        x.dtype in (np.float32, np.float64)
        and min(begin) >= 0
        and min(end) >= 0
        and (strided or x.size <= _JIT_POOL_STRIDE1_MAX or _same_size_3x3(a, begin, end, extra))
        and (rows_fit or not unpadded_small_planes)
    )


def _same_size_3x3(a: _PoolAttrs, begin: list[int], end: list[int], extra: Sequence[int]) -> bool:
    """3x3 stride-1 pools padded by 1 all round (inception's branch pools): the compiled
    whole-plane kernel runs them at any size (``kernels_pool._same3_plane``)."""
    return (a.kernel == (3, 3) and a.strides == (1, 1) and a.dilations == (1, 1) and list(begin) == [1, 1]
            and list(end) == [1, 1] and max(extra, default=0) == 0)


def _window_counts(size: int, o: int, k: int, s: int, d: int, begin: int, lo: int, hi: int) -> np.ndarray:
    """Per output position: how many of its window positions fall in ``[lo, hi)``
    (coordinates in the padded input, whose origin is ``-begin``)."""
    pos = np.arange(o).reshape(-1, 1) * s + np.arange(k).reshape(1, -1) * d - begin
    return ((pos >= lo) & (pos < hi)).sum(axis=1)


def _separable(xp: np.ndarray, a: _PoolAttrs, out_sp: list[int], ufunc, dtype) -> np.ndarray:
    """Reduce the windows of ``xp`` with ``ufunc`` (add / maximum) one spatial axis at a
    time: a box window is separable, so this costs sum(kernel) ops instead of prod(kernel)."""
    cur = xp
    lead = xp.ndim - len(out_sp)
    for i, (k, s, d, o) in enumerate(zip(a.kernel, a.strides, a.dilations, out_sp)):
        pre = (slice(None),) * (lead + i)
        acc = None
        for j in range(k):
            v = cur[pre + (slice(j * d, j * d + (o - 1) * s + 1, s),)]
            if acc is None:
                acc = v.astype(dtype, copy=True)
            else:
                ufunc(acc, v, out=acc)
        cur = acc
    return cur


def _flat_ok(xp: np.ndarray, a: _PoolAttrs) -> bool:
    """Stride-1 2-D windows (1.25-1.4x on 7x7 and 14x14 images; strided ones are faster
    with ``_separable``)."""
    return (
        xp.ndim == 4
        and a.dilations == (1, 1)
        and a.strides == (1, 1)
        and xp.dtype in (np.float32, np.float64)
        and xp.size > 0
    )


def _separable_flat(xp: np.ndarray, a: _PoolAttrs, out_sp: list[int], ufunc, fill) -> np.ndarray:
    """``_separable`` for 2-D undilated windows with every operand a long run: the row pass
    reads whole (strided) rows into ``r`` (N*C, oh, wr) whose width ``wr`` is a multiple of
    the column stride; the column pass then runs over ``r`` flattened, output t reading
    ``r[s * t + j]`` (one 1-D strided op per kernel column instead of one numpy inner loop
    per short image row); the positions past ``ow`` in each row are cut off. Same operands
    in the same order as ``_separable``, so sums are bit-identical."""
    n, c, hp, wp = xp.shape
    (kh, kw), (sh, sw) = a.kernel, a.strides
    oh, ow = out_sp
    wr = -(-wp // sw) * sw
    nc = n * c
    total = nc * oh * wr
    buf = np.empty(total + kw, dtype=xp.dtype)
    buf[total:] = fill
    r = buf[:total].reshape(nc, oh, wr)
    x3 = xp.reshape(nc, hp, wp)
    rv = r[:, :, :wp] if wr != wp else r
    if wr != wp:
        r[:, :, wp:] = fill
    rows = [x3[:, i : i + (oh - 1) * sh + 1 : sh] for i in range(kh)]
    if kh == 1:
        rv[...] = rows[0]
    else:
        ufunc(rows[0], rows[1], out=rv)
        for v in rows[2:]:
            ufunc(rv, v, out=rv)
    m = total // sw
    cols = [buf[j : j + sw * (m - 1) + 1 : sw] for j in range(kw)]
    acc = np.empty(m, dtype=xp.dtype)
    if kw == 1:
        acc[...] = cols[0]
    else:
        ufunc(cols[0], cols[1], out=acc)
        for v in cols[2:]:
            ufunc(acc, v, out=acc)
    return np.ascontiguousarray(acc.reshape(n, c, oh, wr // sw)[:, :, :, :ow])


def _sum_pool(xp: np.ndarray, a: _PoolAttrs, out_sp: list[int], dtype) -> np.ndarray:
    if xp.dtype == dtype and _flat_ok(xp, a):
        return _separable_flat(xp, a, out_sp, np.add, 0)
    return _separable(xp, a, out_sp, np.add, dtype)


def _window_sums(x: np.ndarray, a: _PoolAttrs, transform: Any = None) -> tuple[Any, list[int], list[int], list[int]]:
    """Sum over every pooling window of the zero-padded input (in the compute dtype, after
    ``transform``), with the output spatial shape and pads; ``None`` sums when the output is empty."""
    out_sp, begin, end, extra = a.geometry(x)
    if any(o == 0 for o in out_sp) or x.shape[0] == 0 or x.shape[1] == 0:
        return None, out_sp, begin, end
    cdt = compute_dtype(x.dtype)
    xc = x.astype(cdt, copy=False)
    if transform is not None:
        xc = transform(xc)
    xp = pad_spatial(xc, begin, [e + ex for e, ex in zip(end, extra)], 0)
    return _sum_pool(xp, a, out_sp, cdt), out_sp, begin, end


@KERNELS.register("AveragePool", (1, 7, 10, 11, 19, 22))
def average_pool(node: NodeSpec):
    a = _PoolAttrs(node, ceil=node.opset >= 10, dil=node.opset >= 19)
    include_pad = flag(node, "count_include_pad", 0)
    fast = _JitPool.build()
    #: input spatial shape -> divisor factors per axis (the jit kernel's, computed once a shape)
    factors: dict[tuple[int, ...], list[np.ndarray]] = {}

    def axis_counts(sp: tuple[int, ...], out_sp: list[int], begin: list[int], end: list[int]) -> list[np.ndarray]:
        found = factors.get(sp)
        if found is None:
            found = []
            for i in range(len(sp)):
                lo, hi = (-begin[i], sp[i] + end[i]) if include_pad else (0, sp[i])
                found.append(_window_counts(sp[i], out_sp[i], a.kernel[i], a.strides[i], a.dilations[i], begin[i],
                                            lo, hi))
            if len(factors) < 64:
                factors[sp] = found
        return found

    def run(x: np.ndarray) -> np.ndarray:
        if fast is not None:
            call = fast.prepared(x, a, axis_counts)
            if call is not None:
                return call(x if x.flags.c_contiguous else np.ascontiguousarray(x))
        acc, out_sp, begin, end = _window_sums(x, a)
        if acc is None:
            return np.empty(x.shape[:2] + tuple(out_sp), x.dtype)
        cdt = acc.dtype
        sp = x.shape[2:]
        nsp = len(sp)
        count = None
        for i, ci in enumerate(axis_counts(sp, out_sp, begin, end)):
            ci = ci.reshape((-1,) + (1,) * (nsp - 1 - i))
            count = ci if count is None else count * ci
        acc /= np.maximum(count, 1).astype(cdt)
        return acc if acc.dtype == x.dtype else acc.astype(x.dtype)

    if a.lift_1d():
        return _lifted_1d(a, run)
    return run


def _lp(x: np.ndarray, p: float) -> np.ndarray:
    if p == 2:
        return x * x
    if p == 1:
        return np.abs(x)
    return np.abs(x) ** x.dtype.type(p)


def _root(s: np.ndarray, p: float) -> np.ndarray:
    if p == 2:
        return np.sqrt(s)
    if p == 1:
        return s
    return s ** s.dtype.type(1.0 / p)


@KERNELS.register("LpPool", (1, 2, 11, 18, 22))
def lp_pool(node: NodeSpec):
    a = _PoolAttrs(node, ceil=node.opset >= 18, dil=node.opset >= 18)
    p = float(node.attr("p", 2))

    def run(x: np.ndarray) -> np.ndarray:
        acc, out_sp, _, _ = _window_sums(x, a, lambda v: _lp(v, p))
        if acc is None:
            return np.empty(x.shape[:2] + tuple(out_sp), x.dtype)
        y = _root(acc, p)
        return y if y.dtype == x.dtype else y.astype(x.dtype)

    return run


@KERNELS.register("GlobalAveragePool", (1, 22))
def global_average_pool(node: NodeSpec):
    compiled = jit.kernels("pool")
    nthreads = jit.thread_count() if compiled is not None else 0

    def run(x: np.ndarray) -> np.ndarray:
        if compiled is not None:
            y = compiled.run_global_avg(x, nthreads)
            if y is not None:
                return y
        axes = tuple(range(2, x.ndim))
        cdt = compute_dtype(x.dtype)
        y = np.mean(x, axis=axes, keepdims=True, dtype=cdt)
        return np.asarray(y).astype(x.dtype, copy=False)

    return run


@KERNELS.register("GlobalMaxPool", (1, 22))
def global_max_pool(node: NodeSpec):
    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True))

    return run


@KERNELS.register("GlobalLpPool", (1, 2, 22))
def global_lp_pool(node: NodeSpec):
    p = float(node.attr("p", 2))

    def run(x: np.ndarray) -> np.ndarray:
        cdt = compute_dtype(x.dtype)
        s = np.sum(_lp(x.astype(cdt, copy=False), p), axis=tuple(range(2, x.ndim)), keepdims=True)
        return np.asarray(_root(np.asarray(s), p)).astype(x.dtype, copy=False)

    return run


@KERNELS.register("MaxUnpool", (9, 11, 22))
def max_unpool(node: NodeSpec):
    a = _PoolAttrs(node, ceil=False, dil=False)
    guard = output_guard(node)

    def run(x: np.ndarray, indices: np.ndarray, output_shape: np.ndarray | None = None) -> np.ndarray:
        n, c = x.shape[:2]
        nsp = x.ndim - 2
        # indices address the tensor MaxPool saw, whose shape is the inferred one
        shape = (n, c) + tuple(
            (x.shape[2 + i] - 1) * a.strides[i] + a.kernel[i] - a.pads[i] - a.pads[i + nsp] for i in range(nsp)
        )
        flat = np.asarray(indices, dtype=np.int64).reshape(-1)
        if output_shape is not None:
            target = tuple(int(v) for v in np.asarray(output_shape).reshape(-1))
            if len(target) == nsp:
                target = (n, c) + target
            if target != shape:
                coords = np.unravel_index(flat, shape)
                flat = np.ravel_multi_index(coords, target)
            shape = target
        guard(shape, x.dtype)
        out = np.zeros(shape, dtype=x.dtype)
        out.reshape(-1)[flat] = x.reshape(-1)
        return out

    return run
