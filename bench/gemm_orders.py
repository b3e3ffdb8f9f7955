"""Column tiles or row tiles outermost: ep-cpu's LLVM-IR convolution GEMMs, layer by layer.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/gemm_orders.py

Why: with column tiles (64 output positions) outermost, every column tile stores into every
output channel's plane: 64-256 write streams (and as many residual streams), more than the
prefetchers follow, so inside a model, where the output is not in cache, the stores wait on
memory. Row tiles (6 channels) outermost write each plane as one run and re-read the input
from L2 once a row tile, which costs where the input does not fit there (bench/README.md,
session 38). Prints, per layer, the 1x1 GEMM (``pgemm`` / ``pgemm_rows``) and the implicit
3x3/7x7 GEMM (``fgemm`` / ``fgemm_rows`` / ``igemm`` + the store pass), one thread, us: "hot"
calls back to back, "cold" after touching 64 MB. Each driver's output is checked against the
others' bit for bit first.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

import numpy as np

from epoxy_ep_cpu.jit import implicit_fused_ir, kernels_conv_implicit, llvm_module, pointwise_gemm_ir

_TOUCH = np.ones(64 << 20, np.uint8)

#: (input channels, output channels, map side): the light models' 1x1 layers
POINTWISE = [(64, 256, 56), (256, 64, 56), (64, 64, 56), (16, 64, 55), (64, 16, 55), (128, 512, 28), (512, 128, 28),
             (32, 128, 27)]
#: (input shape, weight shape, strides, pads): stems and 3x3 layers on the implicit GEMM
IMPLICIT = [((1, 3, 224, 224), (64, 3, 3, 3), (2, 2), (0, 0, 0, 0)),
            ((1, 3, 224, 224), (24, 3, 3, 3), (2, 2), (1, 1, 1, 1)),
            ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
            ((1, 128, 56, 56), (32, 128, 3, 3), (1, 1), (1, 1, 1, 1)),
            ((1, 16, 56, 56), (64, 16, 3, 3), (1, 1), (1, 1, 1, 1))]


def timed(fns: dict[str, Callable[[], object]], rounds: int = 5, calls: int = 8) -> dict[str, float]:
    """Best-of-rounds median us of each function, hot and after a 64 MB touch, alternated."""
    out: dict[str, float] = {}
    for mode in ("hot", "cold"):
        for _ in range(rounds):
            for name, fn in fns.items():
                seen = []
                for _ in range(calls):
                    if mode == "cold":
                        _TOUCH[::64] += 1
                    t0 = time.perf_counter()
                    fn()
                    seen.append(time.perf_counter() - t0)
                key = f"{mode} {name}"
                out[key] = min(out.get(key, 1e9), sorted(seen)[calls // 2] * 1e6)
    return out


def pointwise(modules: dict, c: int, m: int, side: int) -> dict[str, float]:
    rng = np.random.default_rng(c + m)
    plane = side * side
    body = plane // 16 * 16
    x = rng.standard_normal((c, plane)).astype(np.float32)
    w = rng.standard_normal((m, c)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    rowoff = np.arange(c, dtype=np.int64) * plane
    params = np.zeros(2, np.float32)
    ys = {name: np.empty((m, plane), np.float32) for name in ("pgemm", "pgemm_rows")}

    def run(name: str) -> Callable[[], object]:
        return lambda: modules[name](w.ctypes.data, rowoff.ctypes.data, x.ctypes.data, ys[name].ctypes.data, c,
                                     plane, m, c, 64, body, bias.ctypes.data, None, 1, params.ctypes.data)

    fns = {name: run(name) for name in ys}
    for fn in fns.values():
        fn()
    assert np.array_equal(ys["pgemm"][:, :body], ys["pgemm_rows"][:, :body])
    return timed(fns)


def implicit(modules: dict, shape, w_shape, strides, pads) -> dict[str, float]:
    rng = np.random.default_rng(sum(w_shape))
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    n, c, h, wd = shape
    m, _, kh, kw = w_shape
    oh, ow = (h + pads[0] + pads[2] - kh) // strides[0] + 1, (wd + pads[1] + pads[3] - kw) // strides[1] + 1
    two_pass = kernels_conv_implicit.ImplicitConvCall(shape, np.dtype(np.float32), w, bias, strides, (1, 1), pads[:2],
                                                      (oh, ow), 1, 0.0, 0.0, 1)
    two_pass._fused = None
    pdims, dims, size, rowoff = kernels_conv_implicit.phase_grid(shape, w_shape, strides, (1, 1), pads[:2], (oh, ow))
    wq = int(dims[3])
    cols = -(-((oh - 1) * wq + ow) // 16) * 16
    grid = np.zeros(n * size + 16, np.float32)
    a = np.ascontiguousarray(w.reshape(m, -1))
    params = np.zeros(2, np.float32)
    fields = dict(wq=wq, ow=ow, oh=oh, xstep=int(c * dims[1]), ystep=m * oh * ow, act=1)
    geo = np.array([fields[f] for f in implicit_fused_ir.GEO_FIELDS], np.int64)
    ys = {name: np.empty((n, m, oh, ow), np.float32) for name in ("fgemm", "fgemm_rows", "two-pass")}
    flat = x.reshape(-1)

    def run(name: str) -> Callable[[], object]:
        def call() -> None:
            kernels_conv_implicit.pad_planes(flat, grid, pdims, 0, n * c)
            modules[name](a.ctypes.data, rowoff.ctypes.data, grid.ctypes.data, ys[name].ctypes.data, m, a.shape[1], n,
                          cols, bias.ctypes.data, None, params.ctypes.data, geo.ctypes.data)
        return call

    fns = {"fgemm": run("fgemm"), "fgemm_rows": run("fgemm_rows"),
           "two-pass": lambda: two_pass(x, None, ys["two-pass"])}
    for fn in fns.values():
        fn()
    assert np.array_equal(ys["fgemm"], ys["two-pass"]) and np.array_equal(ys["fgemm_rows"], ys["two-pass"])
    return timed(fns)


def main() -> None:
    reason = llvm_module.missing(["avx512f"])
    if reason:
        raise SystemExit(f"these kernels need AVX-512: {reason}")
    p_sig = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 6 + [ctypes.c_void_p] * 2 + [ctypes.c_int64, ctypes.c_void_p]
    f_sig = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_void_p] * 4
    # each dict keeps its engine (key "engine"), which owns the compiled code
    plain = llvm_module.compile_functions(pointwise_gemm_ir.module_ir(), {n: p_sig for n in ("pgemm", "pgemm_rows")})
    fused = llvm_module.compile_functions(implicit_fused_ir.module_ir(), {n: f_sig for n in ("fgemm", "fgemm_rows")})
    modules = {**plain, **fused, "engines": (plain["engine"], fused["engine"])}
    print("### 1x1 layers, 1 thread, us (hot / after a 64 MB touch)")
    print("| layer | pgemm hot | pgemm_rows hot | pgemm cold | pgemm_rows cold |\n|---|---:|---:|---:|---:|")
    for c, m, side in POINTWISE:
        t = pointwise(modules, c, m, side)
        print(f"| {c} -> {m} on {side}x{side} | {t['hot pgemm']:.0f} | {t['hot pgemm_rows']:.0f} | "
              f"{t['cold pgemm']:.0f} | {t['cold pgemm_rows']:.0f} |")
    print("\n### implicit GEMM layers, 1 thread, us (hot / after a 64 MB touch)")
    print("| layer | fgemm | fgemm_rows | two-pass | fgemm cold | fgemm_rows cold | two-pass cold |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for shape, w_shape, strides, pads in IMPLICIT:
        t = implicit(modules, shape, w_shape, strides, pads)
        print(f"| {shape[1:]} x {w_shape} s{strides[0]} | " + " | ".join(
            f"{t[f'{mode} {name}']:.0f}" for mode in ("hot", "cold") for name in ("fgemm", "fgemm_rows", "two-pass"))
              + " |")


if __name__ == "__main__":
    main()
