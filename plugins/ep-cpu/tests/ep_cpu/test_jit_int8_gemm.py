"""The jit tier's int8 GEMM (jit/kernels_int8_gemm.py, AVX512-VNNI) against exact int64 products,
the numpy path (jit off: float32-BLAS chunks) and onnxruntime, in the integer ops that use it.

The kernel is exact, so every comparison is for equality. On a CPU without AVX512-VNNI the
kernel's own tests are skipped with that reason, and the routing tests check that the float32
path runs instead (the session-level tests run on every machine)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime
from _jit_cases import close, run_cpu

from epoxy_sdk.conformance.onnxruntime_oracle import onnxruntime_saturates_u8s8

pytest.importorskip("numba")

from epoxy.kit import is_aligned  # noqa: E402
from epoxy_ep_cpu.jit import kernels_int8_gemm as int8_gemm  # noqa: E402

needs_vnni = pytest.mark.skipif(int8_gemm.support() is not None, reason=f"int8 GEMM: {int8_gemm.support()}")


def _codes(rng: np.random.Generator, dtype, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def _exact(a, b, za, zb) -> np.ndarray:
    """``(a - za) @ (b - zb)`` in int64, wrapped to int32 as an int32 accumulator would."""
    left = a.astype(np.int64) - (0 if za is None else np.int64(za))
    right = b.astype(np.int64) - (0 if zb is None else zb.astype(np.int64))
    return (left @ right).astype(np.int32)


@needs_vnni
@pytest.mark.parametrize(("a_dtype", "b_dtype"), list(itertools.product([np.uint8, np.int8], repeat=2)))
@pytest.mark.parametrize("a_shape,n", [((64, 768), 96), ((3, 37, 130), 61), ((65, 70), 9), ((4, 64), 4)],
                         ids=["aligned-k", "batched-odd", "odd", "one-tile"])
@pytest.mark.parametrize("b_zero", ["none", "scalar", "per-column"])
@pytest.mark.parametrize("a_zero", [False, True])
def test_kernel_is_exact(monkeypatch, a_dtype, b_dtype, a_shape, n, b_zero, a_zero):
    """Every signedness pair, zero points absent, scalar or per column (and the activations'),
    shapes that need row, column and K padding, batched rows; threads forced on."""
    rng = np.random.default_rng(sum(a_shape) + n)
    a = _codes(rng, a_dtype, a_shape)
    b = _codes(rng, b_dtype, (a_shape[-1], n))
    zb = {"none": None, "scalar": _codes(rng, b_dtype, ()), "per-column": _codes(rng, b_dtype, (n,))}[b_zero]
    za = _codes(rng, a_dtype, ()) if a_zero else None
    monkeypatch.setattr(int8_gemm, "MIN_MACS", 0)
    monkeypatch.setattr(int8_gemm, "MACS_PER_THREAD", 1)
    got = int8_gemm.PackedInt8Weights(b, zb, nthreads=2).matmul(a, za)
    assert got is not None and got.dtype == np.int32 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, _exact(a, b, za, zb))


@needs_vnni
@pytest.mark.parametrize("rows", [1, 5, 6, 7, 13, 100])
@pytest.mark.parametrize("n", [16, 48, 64, 80, 200])
def test_kernel_reads_rows_in_place_and_takes_every_edge_tile(monkeypatch, rows, n):
    """Rows of a wider array are read where they are (no copy: the row stride is passed to the
    kernel); every row count left over by the 6-row tiles and every column tile width (16 to 64)
    gives the exact product, on one thread and split over two."""
    rng = np.random.default_rng(rows * 1000 + n)
    wide = _codes(rng, np.uint8, (rows, 96))
    a = wide[:, :64]  # K = 64: a multiple of 4, rows 96 bytes apart
    b = _codes(rng, np.int8, (64, n))
    monkeypatch.setattr(int8_gemm, "MIN_MACS", 0)
    copies: list[tuple[int, ...]] = []
    real_empty = np.empty
    monkeypatch.setattr(int8_gemm.np, "empty", lambda shape, dtype=None: (copies.append((shape, dtype)),
                                                                        real_empty(shape, dtype=dtype))[1])
    for threads, per_thread in ((1, 1 << 40), (2, 1)):
        monkeypatch.setattr(int8_gemm, "MACS_PER_THREAD", per_thread)
        got = int8_gemm.PackedInt8Weights(b, None, nthreads=threads).matmul(a, None)
        np.testing.assert_array_equal(got, _exact(a, b, None, None))
    # the activations were never copied (into (M, Kp) rows; the packing's aligned byte buffers are 1-D)
    assert all(dtype != np.uint8 or np.ndim(shape) == 0 for shape, dtype in copies), copies


@needs_vnni
def test_kernel_wraps_like_an_int32_accumulator():
    """Sums past int32 (K = 65536 of 255 * -128) wrap exactly as the float32 path's int64 -> int32."""
    k = int8_gemm.MAX_K
    a = np.full((4, k), 255, np.uint8)
    b = np.full((k, 4), -128, np.int8)
    got = int8_gemm.PackedInt8Weights(b, np.array(-128, np.int8) + 0, 1).matmul(a, np.array(1, np.uint8))
    np.testing.assert_array_equal(got, _exact(a, b, np.uint8(1), np.array(-128, np.int8)))


def test_what_the_kernel_leaves_to_the_float_path():
    """Small products, per-row activation zero points and K past MAX_K are refused (None or
    not ``fits``), so the float32-chunk path runs them."""
    b = np.zeros((32, 32), np.int8)
    packed = int8_gemm.PackedInt8Weights(b, None, 1)
    assert is_aligned(packed._packed)  # B's register loads on cache lines
    grouped = int8_gemm.GroupedInt8Weights([b[:, :16], b[:, 16:]], [None, None], 1)
    assert is_aligned(grouped._packed) and all(is_aligned(part._packed) for part in grouped._parts)
    assert packed.matmul(np.zeros((16, 32), np.uint8), None) is None  # 16 k multiply-adds < MIN_MACS
    assert packed.matmul(np.zeros((2048, 32), np.uint8), np.zeros(2048, np.uint8)) is None  # per row
    assert not int8_gemm.PackedInt8Weights.fits(np.zeros((int8_gemm.MAX_K + 1, 4), np.int8), None)
    assert not int8_gemm.PackedInt8Weights.fits(b, np.zeros(3, np.int8))  # neither one nor N
    assert not int8_gemm.PackedInt8Weights.fits(b, np.zeros((), np.uint8))  # other dtype


def _count_kernel_products(monkeypatch) -> list[tuple[int, ...]]:
    seen: list[tuple[int, ...]] = []
    real = int8_gemm.PackedInt8Weights.matmul

    def counting(self, a, zero_point):
        done = real(self, a, zero_point)
        if done is not None:
            seen.append(a.shape)
        return done

    monkeypatch.setattr(int8_gemm.PackedInt8Weights, "matmul", counting)
    return seen


def _matmul_integer(rng, a_shape, n, a_dtype=np.uint8, b_dtype=np.int8):
    a = _codes(rng, a_dtype, a_shape)
    b = _codes(rng, b_dtype, (a_shape[-1], n))
    za, zb = _codes(rng, a_dtype, ()), _codes(rng, b_dtype, (n,))
    return one_node("MatMulInteger", [a, In(b, const=True), za, In(zb, const=True)], {}, 10), (a, b, za, zb)


@pytest.mark.parametrize(("a_dtype", "b_dtype"), [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)])
def test_matmul_integer_runs_the_kernel_when_it_can(monkeypatch, a_dtype, b_dtype):
    """MatMulInteger with constant weights: the kernel takes it on a VNNI CPU (counted), the
    float32 path elsewhere; either way the result is the exact product, the numpy path's and
    onnxruntime's."""
    case, (a, b, za, zb) = _matmul_integer(np.random.default_rng(3), (2, 64, 256), 128, a_dtype, b_dtype)
    seen = _count_kernel_products(monkeypatch)
    on = run_cpu(case, True, runs=2)
    assert seen == ([(2, 64, 256)] * 2 if int8_gemm.support() is None else [])
    close(on, [_exact(a, b, za, zb)], 0, 0)
    close(on, run_cpu(case, False), 0, 0)
    # onnxruntime's CPU kernel takes u8 x s8, exactly only where it does not saturate (_ort_int8)
    if a_dtype == np.uint8 and b_dtype == np.int8 and not onnxruntime_saturates_u8s8():
        close(on, run_onnxruntime(case), 0, 0)


def test_without_vnni_the_float_path_runs(monkeypatch):
    """A CPU without AVX512-VNNI (simulated): no weights are packed for the kernel and the
    products are still exact."""
    monkeypatch.setattr(int8_gemm, "support", lambda: "this CPU lacks avx512vnni")
    made: list[int] = []
    real_init = int8_gemm.PackedInt8Weights.__init__
    monkeypatch.setattr(int8_gemm.PackedInt8Weights, "__init__",
                        lambda self, *args: made.append(1) or real_init(self, *args))
    case, (a, b, za, zb) = _matmul_integer(np.random.default_rng(4), (64, 256), 128)
    close(run_cpu(case, True), [_exact(a, b, za, zb)], 0, 0)
    assert made == []


@needs_vnni
def test_qlinear_matmul_and_dynamic_quantize_matmul_use_the_kernel(monkeypatch):
    """The other integer products with constant weights: QLinearMatMul (requantized output)
    and com.microsoft DynamicQuantizeMatMul (float output) equal the numpy path exactly and
    onnxruntime within its float rounding, with the kernel counted."""
    rng = np.random.default_rng(5)
    a = _codes(rng, np.uint8, (128, 256))
    w = _codes(rng, np.int8, (256, 64))
    seen = _count_kernel_products(monkeypatch)
    qlinear = one_node("QLinearMatMul", [a, np.float32(0.02), np.uint8(120), In(w, const=True),
                                         In(np.float32(0.01), const=True), In(np.int8(0), const=True),
                                         np.float32(0.5), np.uint8(128)], {}, 10)
    on = run_cpu(qlinear, True)
    close(on, run_cpu(qlinear, False), 0, 0)
    close(on, run_onnxruntime(qlinear), 0, 1)  # onnxruntime rounds its requantization in float32
    x = rng.standard_normal((128, 256)).astype(np.float32)
    dynamic = one_node("DynamicQuantizeMatMul", [x, In(w, const=True), In(np.full(64, 0.01, np.float32), const=True)],
                       {}, 1, domain="com.microsoft")
    on = run_cpu(dynamic, True)
    close(on, run_cpu(dynamic, False), 0, 0)
    close(on, run_onnxruntime(dynamic), 1e-5, 1e-4)
    assert seen == [(128, 256), (128, 256)]


@needs_vnni
def test_a_forked_child_runs_threaded_products(monkeypatch):
    """After a fork the parent's pool threads are gone: the child builds its own pool and a
    two-thread product finishes (it would wait forever on the parent's executor)."""
    import multiprocessing

    monkeypatch.setattr(int8_gemm, "MACS_PER_THREAD", 1)
    rng = np.random.default_rng(11)
    a, b = _codes(rng, np.uint8, (64, 256)), _codes(rng, np.int8, (256, 64))
    packed = int8_gemm.PackedInt8Weights(b, None, nthreads=2)
    want = _exact(a, b, None, None)
    np.testing.assert_array_equal(packed.matmul(a, None), want)  # the parent's pool exists now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(packed.matmul, (a, None)).get(timeout=60)
    np.testing.assert_array_equal(got, want)


#: (scale, bias) per output column: products on half steps (exact ties), a hair above or below
#: one (float32 rounds them onto the tie: the float64 steps must decide), large biases near the
#: float32 limit, small and random scales
_HALF_STEP_COLUMNS = [(0.5, 0), (float(np.float32(0.1)), 0), (float(np.float32(1 / 3)), 1), (float(np.float32(0.1)), 5),
                      (2.0 ** -7, -64), (float(np.float32(0.001)), 1234), (float(np.float32(1e-5)), -77_777),
                      (float(np.float32(3e-7)), (1 << 23) - 300), (float(np.float32(0.7)), -3),
                      (float(np.float32(1.5)), -128), (float(np.float32(0.25)), 7), (float(np.float32(0.0625)), -9),
                      (float(np.float32(0.2)), 2), (float(np.float32(0.3)), -11), (float(np.float32(0.9)), 0),
                      (float(np.float32(0.45)), 3)]


@needs_vnni
@pytest.mark.parametrize("y_dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("large_bias", [False, True], ids=["float32-epilogue", "float64-epilogue"])
def test_requantizing_epilogue_on_half_steps(monkeypatch, y_dtype, large_bias):
    """The requantizing epilogue's codes equal the numpy path's float64 steps on sums chosen to
    land on, and a float32 rounding away from, half steps: where float32 rounding alone would
    give another code (asserted to happen in this data), the epilogue takes the float64 steps
    for that vector. A bias of 2**23 or more selects the float64 epilogue for every vector."""
    scales = np.array([s for s, _ in _HALF_STEP_COLUMNS], np.float64)
    biases = np.array([b for _, b in _HALF_STEP_COLUMNS], np.int64)
    if large_bias:
        biases[0] = 1 << 23
    monkeypatch.setattr(int8_gemm, "MIN_MACS", 0)
    k, n = 4, len(_HALF_STEP_COLUMNS)
    b = np.zeros((k, n), np.int8)
    b[0] = 1  # every column's sum is the row's first code
    a = np.zeros((256 * 6, k), np.uint8)
    a[:, 0] = np.tile(np.arange(256), 6)
    packed = int8_gemm.PackedInt8Weights(b, None, 1)
    info = np.iinfo(y_dtype)
    zp = np.array(3 if y_dtype == np.uint8 else -2, y_dtype)
    terms = packed.requantization(biases.astype(np.int32), scales, zp)
    assert terms.epilogue == ("requantize" if large_bias else "requantize_f32")
    got = packed.requantized(a, np.uint8(0), terms)
    exact = a[:, :1].astype(np.float64) + biases[None, :]
    want = np.clip(np.rint(exact * scales[None, :]) + float(zp), info.min, info.max).astype(y_dtype)
    np.testing.assert_array_equal(got, want)
    if not large_bias:  # the data does reach the cases the float64 fallback is for
        single = np.rint(exact.astype(np.float32) * scales.astype(np.float32)[None, :]).astype(np.float64)
        assert (np.clip(single + float(zp), info.min, info.max) != want).any()
