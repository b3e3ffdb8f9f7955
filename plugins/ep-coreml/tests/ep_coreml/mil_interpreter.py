"""A small numpy interpreter for MIL programs reloaded from saved ``.mlpackage`` files.

Test-only: it lets Linux CI check numerically what ep-coreml wrote, without Core ML. Each
op follows the semantics documented in ``coremltools.converters.mil.mil.ops.defs`` (iOS15+),
written independently of the translator in ``epoxy_ep_coreml.ops``. Unknown ops raise, so a
conversion pass that introduces a new op type shows up as a test failure, not a silent skip.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

try:
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf)


def load_program(package: str | Path) -> Any:
    """The MIL program stored in a saved ``.mlpackage``."""
    logging.getLogger("coremltools").setLevel(logging.ERROR)
    import coremltools as ct
    from coremltools.converters.mil.frontend.milproto.load import load

    package = Path(package)
    spec = ct.utils.load_spec(str(package))
    weights = package / "Data" / "com.apple.CoreML" / "weights"
    return load(spec, specification_version=spec.specificationVersion, file_weights_dir=str(weights))


def run_program(program: Any, feeds: dict[str, np.ndarray], function: str = "main") -> dict[str, np.ndarray]:
    """Evaluate ``function`` on ``feeds`` (Core ML feature name -> array)."""
    func = program.functions[function]
    env: dict[str, Any] = {}
    for name, var in func.inputs.items():
        env[name] = np.asarray(feeds[name], dtype=_np_dtype(var.dtype))
    _run_block(func, env)
    return {var.name: np.asarray(env[var.name]) for var in func.outputs}


def op_types(program: Any, function: str = "main") -> list[str]:
    return [op.op_type for op in program.functions[function].operations]


def _np_dtype(mil_type: Any) -> Any:
    from coremltools.converters.mil.mil import types

    return types.nptype_from_builtin(mil_type)


def _positional(ufunc: np.ufunc) -> Callable[..., Any]:
    return lambda x: ufunc(x)


def _value(var: Any, env: dict[str, Any]) -> Any:
    if isinstance(var, (list, tuple)):
        return [_value(v, env) for v in var]
    if var.name in env:
        return env[var.name]
    if var.val is not None:
        return var.val
    raise KeyError(f"MIL value {var.name!r} has no value")


def _run_block(block: Any, env: dict[str, Any]) -> None:
    for op in block.operations:
        if op.op_type == "const":
            env[op.outputs[0].name] = op.outputs[0].val
            continue
        impl = OPS.get(op.op_type)
        if isinstance(impl, np.ufunc):
            impl = _positional(impl)
        if impl is None:
            raise NotImplementedError(f"the test MIL interpreter has no {op.op_type!r}")
        args = {k: _value(v, env) for k, v in op.inputs.items()}
        args = {k: (np.asarray(v) if not isinstance(v, (list, str)) else v) for k, v in args.items()}
        result = impl(**args)
        results = result if isinstance(result, tuple) else (result,)
        for var, value in zip(op.outputs, results):
            want = _np_dtype(var.dtype) if var.dtype is not None else None
            value = np.asarray(value)
            if want is not None and value.dtype != want:
                value = value.astype(want)
            env[var.name] = value


# ------------------------------------------------------------------------------- helpers


def _s(v: Any) -> Any:
    """numpy scalar / 0-d array -> Python value."""
    return np.asarray(v).item() if v is not None else None


def _ints(v: Any) -> list[int]:
    return [int(t) for t in np.asarray(v).reshape(-1)]


def _spatial_pads(pad_type: str, in_sizes: list[int], kernel: list[int], strides: list[int],
                  dilations: list[int], pad: Any, ceil_mode: bool = False) -> list[tuple[int, int]]:
    n = len(in_sizes)
    pad_type = str(pad_type)
    if pad_type == "valid":
        pads = [(0, 0)] * n
    elif pad_type == "custom":
        p = _ints(pad) if pad is not None else [0] * (2 * n)
        pads = [(p[2 * i], p[2 * i + 1]) for i in range(n)]
    elif pad_type in ("same", "same_lower"):
        pads = []
        for i in range(n):
            out = -(-in_sizes[i] // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i], 0)
            small, big = total // 2, total - total // 2
            pads.append((small, big) if pad_type == "same" else (big, small))
    else:
        raise NotImplementedError(pad_type)
    if ceil_mode:
        adjusted = []
        for i, (b, e) in enumerate(pads):
            eff = (kernel[i] - 1) * dilations[i] + 1
            span = in_sizes[i] + b + e - eff
            out = -(-span // strides[i]) + 1
            need = (out - 1) * strides[i] + eff - (in_sizes[i] + b + e)
            adjusted.append((b, e + max(need, 0)))
        pads = adjusted
    return pads


def _windows(xp: np.ndarray, kernel: list[int], strides: list[int], dilations: list[int]) -> np.ndarray:
    """(N, C, *out, *kernel) view of sliding windows over the spatial dims of ``xp``."""
    n = len(kernel)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    axes = tuple(range(2, 2 + n))
    w = np.lib.stride_tricks.sliding_window_view(xp, eff, axis=axes)
    index = (
        [slice(None), slice(None)] + [slice(None, None, s) for s in strides] + [slice(None, None, d) for d in dilations]
    )
    return w[tuple(index)]


# ------------------------------------------------------------------------------- ops


def conv(x, weight, bias=None, strides=None, pad_type="valid", pad=None, dilations=None, groups=1):
    n = x.ndim - 2
    kernel = list(weight.shape[2:])
    strides = _ints(strides) if strides is not None else [1] * n
    dilations = _ints(dilations) if dilations is not None else [1] * n
    pads = _spatial_pads(_s(pad_type), list(x.shape[2:]), kernel, strides, dilations, pad)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    win = _windows(xp, kernel, strides, dilations)  # N, C, *O, *K
    g = int(_s(groups))
    N, C = x.shape[:2]
    M = weight.shape[0]
    out_sizes = win.shape[2:2 + n]
    win = win.reshape((N, g, C // g) + tuple(out_sizes) + tuple(kernel))
    w = weight.reshape((g, M // g, C // g) + tuple(kernel))
    letters = "opq"[:n]
    klet = "xyz"[:n]
    y = np.einsum(f"ngc{letters}{klet},gmc{klet}->ngm{letters}", win.astype(np.float64), w.astype(np.float64))
    y = y.reshape((N, M) + tuple(out_sizes))
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return y.astype(x.dtype)


def conv_transpose(x, weight, bias=None, pad=None, output_shape=None, pad_type="valid", strides=None,
                   dilations=None, groups=1):
    n = x.ndim - 2
    kernel = list(weight.shape[2:])
    strides = _ints(strides) if strides is not None else [1] * n
    dilations = _ints(dilations) if dilations is not None else [1] * n
    g = int(_s(groups))
    N, C = x.shape[:2]
    Mg = weight.shape[1]
    full = [(x.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 for i in range(n)]
    y = np.zeros((N, g, Mg, *full))
    xg = x.reshape((N, g, C // g) + x.shape[2:]).astype(np.float64)
    wg = weight.reshape((g, C // g, Mg) + tuple(kernel)).astype(np.float64)
    letters = "opq"[:n]
    for offs in itertools.product(*[range(k) for k in kernel]):
        contrib = np.einsum(f"ngc{letters},gcm->ngm{letters}", xg, wg[(slice(None), slice(None), slice(None)) + offs])
        index = [slice(None)] * 3 + [slice(o * d, o * d + (x.shape[2 + i] - 1) * s + 1, s)
                                     for i, (o, d, s) in enumerate(zip(offs, dilations, strides))]
        y[tuple(index)] += contrib
    y = y.reshape((N, g * Mg, *full))
    pad_type = str(_s(pad_type))
    if pad_type == "custom":
        p = _ints(pad)
        index = [slice(None), slice(None)] + [slice(p[2 * i], full[i] - p[2 * i + 1]) for i in range(n)]
        y = y[tuple(index)]
    elif pad_type != "valid":
        raise NotImplementedError(f"conv_transpose pad_type {pad_type}")
    if output_shape is not None and tuple(_ints(output_shape))[-n:] != tuple(y.shape[2:]):
        raise NotImplementedError(f"conv_transpose output_shape {_ints(output_shape)} for a {y.shape} result")
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * n)
    return y.astype(x.dtype)


def _pool(x, kernel_sizes, strides, pad_type, pad, ceil_mode, fill, reduce):
    kernel = _ints(kernel_sizes)
    n = len(kernel)
    strides = _ints(strides) if strides is not None else [1] * n
    pads = _spatial_pads(_s(pad_type), list(x.shape[2:]), kernel, strides, [1] * n, pad,
                         bool(_s(ceil_mode)) if ceil_mode is not None else False)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + pads, constant_values=fill)
    mask = np.pad(np.ones(x.shape[2:]), pads)
    win = _windows(xp, kernel, strides, [1] * n)
    mwin = np.lib.stride_tricks.sliding_window_view(mask, kernel)[tuple(slice(None, None, s) for s in strides)]
    axes = tuple(range(-n, 0))
    return reduce(win, mwin, axes)


def max_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=None):
    return _pool(x, kernel_sizes, strides, pad_type, pad, ceil_mode, -np.inf,
                 lambda w, m, a: w.max(axis=a)).astype(x.dtype)


def avg_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, exclude_padding_from_average=False,
             ceil_mode=None):
    exclude = bool(_s(exclude_padding_from_average))

    def reduce(w, m, a):
        total = w.sum(axis=a)
        count = m.sum(axis=a) if exclude else float(np.prod([w.shape[i] for i in a]))
        return total / count
    return _pool(x, kernel_sizes, strides, pad_type, pad, ceil_mode, 0.0, reduce).astype(x.dtype)


def l2_pool(x, kernel_sizes, strides=None, pad_type="valid", pad=None, ceil_mode=None):
    return _pool(x, kernel_sizes, strides, pad_type, pad, ceil_mode, 0.0,
                 lambda w, m, a: np.sqrt((w * w).sum(axis=a))).astype(x.dtype)


def linear(x, weight, bias=None):
    y = x.astype(np.float64) @ weight.T.astype(np.float64)
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype)


def matmul(x, y, transpose_x=False, transpose_y=False):
    if _s(transpose_x):
        x = np.swapaxes(x, -1, -2)
    if _s(transpose_y):
        y = np.swapaxes(y, -1, -2)
    return np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def _channel(v, rank):
    return np.asarray(v).reshape((1, -1) + (1,) * (rank - 2))


def batch_norm(x, mean, variance, gamma=None, beta=None, epsilon=1e-5):
    r = x.ndim
    y = (x - _channel(mean, r)) / np.sqrt(_channel(variance, r) + _s(epsilon))
    if gamma is not None:
        y = y * _channel(gamma, r)
    if beta is not None:
        y = y + _channel(beta, r)
    return y.astype(x.dtype)


def instance_norm(x, gamma=None, beta=None, epsilon=1e-5):
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + _s(epsilon))
    if gamma is not None:
        y = y * _channel(gamma, x.ndim)
    if beta is not None:
        y = y + _channel(beta, x.ndim)
    return y.astype(x.dtype)


def layer_norm(x, axes=None, gamma=None, beta=None, epsilon=1e-5):
    axes_t = tuple(a % x.ndim for a in _ints(axes)) if axes is not None else tuple(range(x.ndim))
    mean = x.mean(axis=axes_t, keepdims=True)
    var = x.var(axis=axes_t, keepdims=True)
    y = (x - mean) / np.sqrt(var + _s(epsilon))
    shape = [x.shape[i] if i in axes_t else 1 for i in range(x.ndim)]
    if gamma is not None:
        y = y * np.asarray(gamma).reshape(shape)
    if beta is not None:
        y = y + np.asarray(beta).reshape(shape)
    return y.astype(x.dtype)


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0):
    size = int(_s(size))
    sq = x.astype(np.float64) ** 2
    C = x.shape[1]
    acc = np.zeros_like(sq)
    lo, hi = (size - 1) // 2, size // 2
    for c in range(C):
        acc[:, c] = sq[:, max(0, c - lo):min(C, c + hi + 1)].sum(axis=1)
    return (x / (_s(k) + _s(alpha) / size * acc) ** _s(beta)).astype(x.dtype)


def softmax(x, axis=-1):
    a = int(_s(axis))
    e = np.exp(x - x.max(axis=a, keepdims=True))
    return (e / e.sum(axis=a, keepdims=True)).astype(x.dtype)


def _reduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    def op(x, axes=None, keep_dims=False):
        ax = tuple(a % x.ndim for a in _ints(axes)) if axes is not None else tuple(range(x.ndim))
        return np.asarray(fn(x.astype(np.float64), ax, bool(_s(keep_dims)))).astype(x.dtype)
    return op


def _argreduce(fn: Callable[..., Any]) -> Callable[..., Any]:
    def op(x, axis=-1, keep_dims=False):
        a = int(_s(axis))
        y = fn(x, axis=a)
        if _s(keep_dims):
            y = np.expand_dims(y, a)
        return y.astype(np.int32)
    return op


def reshape(x, shape):
    return x.reshape(_ints(shape))


def transpose(x, perm):
    return np.transpose(x, _ints(perm))


def concat(values, axis, interleave=False):
    if _s(interleave):
        raise NotImplementedError("concat interleave")
    return np.concatenate([np.asarray(v) for v in values], axis=int(_s(axis)))


def split(x, num_splits=None, split_sizes=None, axis=0):
    a = int(_s(axis))
    if split_sizes is not None:
        bounds = np.cumsum(_ints(split_sizes))[:-1]
        return tuple(np.split(x, bounds, axis=a))
    return tuple(np.split(x, int(_s(num_splits)), axis=a))


def slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None):
    rank = x.ndim
    begin, end = _ints(begin), _ints(end)
    stride = _ints(stride) if stride is not None else [1] * rank
    bm = [bool(b) for b in np.asarray(begin_mask).reshape(-1)] if begin_mask is not None else [False] * rank
    em = [bool(b) for b in np.asarray(end_mask).reshape(-1)] if end_mask is not None else [False] * rank
    sm = [bool(b) for b in np.asarray(squeeze_mask).reshape(-1)] if squeeze_mask is not None else [False] * rank
    index = []
    for i in range(rank):
        dim = x.shape[i]
        b = None if bm[i] else (begin[i] + dim if begin[i] < 0 else begin[i])
        e = None if em[i] else (end[i] + dim if end[i] < 0 else end[i])
        index.append(b if sm[i] else slice(b, e, stride[i]))
    return x[tuple(index)]


def slice_by_size(x, begin, size):
    begin, size = _ints(begin), _ints(size)
    return x[tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size))]


def gather(x, indices, axis=0, batch_dims=0, validate_indices=False):
    if int(_s(batch_dims)):
        raise NotImplementedError("gather batch_dims")
    a = int(_s(axis)) % x.ndim
    idx = np.where(indices < 0, indices + x.shape[a], indices)
    return np.take(x, idx, axis=a)


def gather_along_axis(x, indices, axis=0, validate_indices=False):
    a = int(_s(axis)) % x.ndim
    idx = np.where(indices < 0, indices + x.shape[a], indices)
    return np.take_along_axis(x, idx, axis=a)


def tile(x, reps):
    return np.tile(x, _ints(reps))


def pad(x, pad, mode="constant", constant_val=0.0):
    p = _ints(pad)
    k = len(p) // 2
    widths = [(0, 0)] * (x.ndim - k) + [(p[2 * i], p[2 * i + 1]) for i in range(k)]
    mode = str(_s(mode))
    if mode == "constant":
        return np.pad(x, widths, constant_values=_s(constant_val))
    return np.pad(x, widths, mode={"reflect": "reflect", "replicate": "edge"}[mode])


def expand_dims(x, axes):
    y = x
    rank = x.ndim + len(_ints(axes))
    for a in sorted(a % rank for a in _ints(axes)):
        y = np.expand_dims(y, a)
    return y


def squeeze(x, axes=None):
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(a % x.ndim for a in _ints(axes)))


def depth_to_space(x, block_size):
    b = int(_s(block_size))
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(x, block_size):
    b = int(_s(block_size))
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def cumsum(x, axis=0, exclusive=False, reverse=False):
    a = int(_s(axis))
    y = np.flip(x, a) if _s(reverse) else x
    out = np.cumsum(y, axis=a)
    if _s(exclusive):
        out = out - y
    return (np.flip(out, a) if _s(reverse) else out).astype(x.dtype)


def _grid(in_size: int, out_size: int, mode: str) -> np.ndarray:
    i = np.arange(out_size, dtype=np.float64)
    if mode == "STRICT_ALIGN_CORNERS":
        spacing = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        g = i * spacing
    elif mode == "ALIGN_CORNERS":
        g = i * ((in_size - 1) / (out_size - 1)) if out_size > 1 else np.array([(in_size - 1) / 2])
    elif mode == "UNALIGN_CORNERS":
        spacing = in_size / out_size
        g = i * spacing + 0.5 * spacing - 0.5
    elif mode == "DEFAULT":
        spacing = (in_size - in_size / out_size) / (out_size - 1) if out_size > 1 else 0.0
        g = i * spacing
    else:
        raise NotImplementedError(mode)
    return np.clip(g, 0, in_size - 1)


def _bilinear(x, out_h, out_w, mode):
    def interp(arr, axis, grid):
        lo = np.floor(grid).astype(int)
        hi = np.minimum(lo + 1, arr.shape[axis] - 1)
        frac = (grid - lo).reshape([-1 if a == axis % arr.ndim else 1 for a in range(arr.ndim)])
        return np.take(arr, lo, axis=axis) * (1 - frac) + np.take(arr, hi, axis=axis) * frac
    y = interp(x.astype(np.float64), -2, _grid(x.shape[-2], out_h, mode))
    y = interp(y, -1, _grid(x.shape[-1], out_w, mode))
    return y.astype(x.dtype)


def resize_bilinear(x, target_size_height=1, target_size_width=1, sampling_mode="DEFAULT"):
    return _bilinear(x, int(_s(target_size_height)), int(_s(target_size_width)), str(_s(sampling_mode)))


def upsample_bilinear(x, scale_factor_height=1, scale_factor_width=1, align_corners=True, half_pixel_centers=None):
    out_h = math.floor(x.shape[-2] * float(_s(scale_factor_height)))
    out_w = math.floor(x.shape[-1] * float(_s(scale_factor_width)))
    mode = "STRICT_ALIGN_CORNERS" if _s(align_corners) else "UNALIGN_CORNERS"
    return _bilinear(x, out_h, out_w, mode)


def upsample_nearest_neighbor(x, scale_factor_height=1, scale_factor_width=1):
    sh, sw = float(_s(scale_factor_height)), float(_s(scale_factor_width))
    out_h, out_w = math.floor(x.shape[-2] * sh), math.floor(x.shape[-1] * sw)
    rows = np.minimum(np.floor(np.arange(out_h) / sh).astype(int), x.shape[-2] - 1)
    cols = np.minimum(np.floor(np.arange(out_w) / sw).astype(int), x.shape[-1] - 1)
    return x[..., rows, :][..., cols]


_CAST = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "int16": np.int16, "int8": np.int8,
         "uint8": np.uint8, "bool": np.bool_, "fp64": np.float64, "int64": np.int64}


def cast(x, dtype):
    return x.astype(_CAST[str(_s(dtype))])


def gelu(x, mode="EXACT"):
    mode = str(_s(mode))
    xf = x.astype(np.float64)
    if mode == "EXACT":
        y = 0.5 * xf * (1 + _erf(xf / math.sqrt(2)))
    elif mode == "TANH_APPROXIMATION":
        y = 0.5 * xf * (1 + np.tanh(math.sqrt(2 / math.pi) * (xf + 0.044715 * xf ** 3)))
    else:
        y = xf / (1 + np.exp(-1.702 * xf))
    return y.astype(x.dtype)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _with_eps(fn, default):
    def op(x, epsilon=None):
        eps = default if epsilon is None else _s(epsilon)
        return fn(x, eps).astype(x.dtype)
    return op


OPS: dict[str, Callable[..., Any]] = {
    "conv": conv, "conv_transpose": conv_transpose,
    "max_pool": max_pool, "avg_pool": avg_pool, "l2_pool": l2_pool,
    "linear": linear, "matmul": matmul,
    "batch_norm": batch_norm, "instance_norm": instance_norm, "layer_norm": layer_norm,
    "local_response_norm": local_response_norm, "softmax": softmax,
    "reshape": reshape, "transpose": transpose, "concat": concat, "split": split,
    "slice_by_index": slice_by_index, "slice_by_size": slice_by_size, "gather": gather,
    "gather_along_axis": gather_along_axis, "tile": tile, "pad": pad, "expand_dims": expand_dims,
    "squeeze": squeeze, "depth_to_space": depth_to_space, "space_to_depth": space_to_depth, "cumsum": cumsum,
    "resize_bilinear": resize_bilinear, "upsample_bilinear": upsample_bilinear,
    "upsample_nearest_neighbor": upsample_nearest_neighbor, "cast": cast, "gelu": gelu,
    "identity": lambda x: x,
    "add": lambda x, y: np.add(x, y), "sub": lambda x, y: np.subtract(x, y),
    "mul": lambda x, y: np.multiply(x, y), "real_div": lambda x, y: np.true_divide(x, y),
    "floor_div": lambda x, y: np.floor_divide(x, y), "mod": lambda x, y: np.mod(x, y),
    "pow": lambda x, y: np.power(x, y), "maximum": lambda x, y: np.maximum(x, y),
    "minimum": lambda x, y: np.minimum(x, y),
    "equal": lambda x, y: np.equal(x, y), "not_equal": lambda x, y: np.not_equal(x, y),
    "greater": lambda x, y: np.greater(x, y), "greater_equal": lambda x, y: np.greater_equal(x, y),
    "less": lambda x, y: np.less(x, y), "less_equal": lambda x, y: np.less_equal(x, y),
    "logical_and": lambda x, y: np.logical_and(x, y), "logical_or": lambda x, y: np.logical_or(x, y),
    "logical_xor": lambda x, y: np.logical_xor(x, y), "logical_not": lambda x: np.logical_not(x),
    "select": lambda cond, a, b: np.where(cond, a, b),
    "abs": np.abs, "ceil": np.ceil, "floor": np.floor, "exp": np.exp, "exp2": np.exp2, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "sign": np.sign, "square": np.square, "round": np.round,
    "erf": lambda x: _erf(x).astype(x.dtype),
    "log": _with_eps(lambda x, e: np.log(x + e), 1e-45),
    "rsqrt": _with_eps(lambda x, e: 1 / np.sqrt(x + e), 1e-12),
    "inverse": _with_eps(lambda x, e: 1 / (x + e), 1e-4),
    "relu": lambda x: np.maximum(x, 0), "relu6": lambda x: np.clip(x, 0, 6),
    "sigmoid": lambda x: _sigmoid(x).astype(x.dtype),
    "silu": lambda x: (x * _sigmoid(x)).astype(x.dtype),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "softplus": lambda x: (np.logaddexp(0, x.astype(np.float64))).astype(x.dtype),
    "clip": lambda x, alpha, beta: np.clip(x, alpha, beta),
    "leaky_relu": lambda x, alpha=0.01: np.where(x >= 0, x, x * alpha).astype(x.dtype),
    "elu": lambda x, alpha=1.0: np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0))).astype(x.dtype),
    "sigmoid_hard": lambda x, alpha=0.2, beta=0.5: np.clip(alpha * x + beta, 0, 1).astype(x.dtype),
    "thresholded_relu": lambda x, alpha=1.0: np.where(x >= alpha, x, 0).astype(x.dtype),
    "prelu": lambda x, alpha: np.where(x >= 0, x, x * _channel(alpha, x.ndim)).astype(x.dtype),
    "linear_activation": lambda x, alpha=1.0, beta=0.0: (alpha * x + beta).astype(x.dtype),
    "scaled_tanh": lambda x, alpha=1.0, beta=1.0: (alpha * np.tanh(beta * x)).astype(x.dtype),
    "reduce_mean": _reduce(lambda x, a, k: x.mean(axis=a, keepdims=k)),
    "reduce_sum": _reduce(lambda x, a, k: x.sum(axis=a, keepdims=k)),
    "reduce_max": _reduce(lambda x, a, k: x.max(axis=a, keepdims=k)),
    "reduce_min": _reduce(lambda x, a, k: x.min(axis=a, keepdims=k)),
    "reduce_prod": _reduce(lambda x, a, k: x.prod(axis=a, keepdims=k)),
    "reduce_l1_norm": _reduce(lambda x, a, k: np.abs(x).sum(axis=a, keepdims=k)),
    "reduce_l2_norm": _reduce(lambda x, a, k: np.sqrt((x * x).sum(axis=a, keepdims=k))),
    "reduce_sum_square": _reduce(lambda x, a, k: (x * x).sum(axis=a, keepdims=k)),
    "reduce_log_sum": _reduce(lambda x, a, k: np.log(x.sum(axis=a, keepdims=k))),
    "reduce_log_sum_exp": _reduce(lambda x, a, k: np.log(np.exp(x).sum(axis=a, keepdims=k))),
    "reduce_argmax": _argreduce(np.argmax), "reduce_argmin": _argreduce(np.argmin),
}
