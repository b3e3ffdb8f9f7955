"""The jit tier's float32 few-rows GEMM (jit/kernels_sgemm.py, AVX-512) against float64 products,
and in the ops that use it (MatMul, Gemm, FusedMatMul with constant weights) against onnxruntime
and the numpy path (jit off), with proof that the kernel ran.

Sums run in another order than OpenBLAS's, so values are compared within a float32 bound that
grows with K. On a CPU without AVX-512 the kernel's own tests are skipped with that reason and the
session-level tests check that BLAS runs every product instead."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy.kit import is_aligned

pytest.importorskip("numba")
ort = pytest.importorskip("onnxruntime")

from epoxy_ep_cpu.jit import kernels_sgemm as sgemm  # noqa: E402

needs_float_gemm = pytest.mark.skipif(sgemm.support() is not None, reason=f"float32 GEMM: {sgemm.support()}")


def _bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element, a float32 bound on the error of any summation order: K ulps of sum |a||b|."""
    return (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) * a.shape[-1] * 2.0 ** -23 + 1e-30


def _check(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == want.shape and got.dtype == np.float32
    excess = np.abs(got - want) - _bound(a, b)
    assert (excess <= 0).all(), f"off by more than the bound at {np.unravel_index(np.argmax(excess), excess.shape)}"


@needs_float_gemm
@pytest.mark.parametrize("m", [2, 5, 6, 7, 13, 32])
@pytest.mark.parametrize("k", [1, 3, 255, 256, 257, 700])
@pytest.mark.parametrize("n", [1, 15, 16, 48, 64, 80, 200])
def test_kernel_takes_every_edge_tile_and_k_block(monkeypatch, m: int, k: int, n: int) -> None:
    """Row tiles of 1-6 rows, column tiles of 16-64 (N padded to 16), K below, at and across the
    256-row blocks; on one thread and with the column tiles split over two."""
    rng = np.random.default_rng(m * 10000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    monkeypatch.setattr(sgemm, "MIN_MACS", 0)
    for threads, per_thread in ((1, 1 << 40), (2, 1)):
        monkeypatch.setattr(sgemm, "MACS_PER_THREAD", per_thread)
        packed = sgemm.PackedFloatWeights(b, threads)
        assert packed.takes(a) and is_aligned(packed._packed)  # every column tile's rows on cache lines
        got = packed.matmul(a)
        assert got.flags.c_contiguous
        _check(got, a, b)


@needs_float_gemm
@pytest.mark.parametrize("native", [True, False], ids=["native-pool", "executor"])
def test_column_shares_on_two_threads_give_the_one_thread_bits(monkeypatch, native: bool) -> None:
    """Split over two threads, the product's column tiles run as shares on the native pool's
    spinning helper (a C share calling the kernel by address) or, with the pool off, on the
    executor's threads; each column is summed by one thread in the same order, so the bits
    equal one thread's."""
    from epoxy_ep_cpu.jit import native_pool, threads

    if native and not threads.native():
        pytest.skip("no native pool here (a BLAS other than OpenBLAS)")
    monkeypatch.setattr(threads, "_NATIVE", native)
    runs: list[int] = []
    real_run = native_pool.NativePool.run
    monkeypatch.setattr(native_pool.NativePool, "run", lambda self, fn, argv, bounds: runs.append(len(bounds) - 1)
                        or real_run(self, fn, argv, bounds))
    rng = np.random.default_rng(7)
    a = rng.standard_normal((48, 300)).astype(np.float32)
    b = rng.standard_normal((300, 200)).astype(np.float32)  # 4 column tiles, the last 8 columns padding
    monkeypatch.setattr(sgemm, "MACS_PER_THREAD", 1)
    one = sgemm.PackedFloatWeights(b, 1).matmul_any(a)
    two = sgemm.PackedFloatWeights(b, 2).matmul_any(a)
    np.testing.assert_array_equal(two, one)
    _check(two, a, b)
    assert runs == ([2] if native else [])


@needs_float_gemm
@pytest.mark.parametrize("per_thread", [1 << 16, 1 << 40])
def test_one_row_products_split_by_their_weights(monkeypatch, per_thread: int) -> None:
    """A classifier head at batch 1 (one row, 640 K multiply-adds: under MACS_PER_THREAD)
    splits over two threads once its packed weights reach WEIGHTS_PER_THREAD a thread (its
    cost is streaming them), with one thread's bits; below that it stays whole."""
    from epoxy_ep_cpu.jit import native_pool, threads

    if not threads.native():
        pytest.skip("no native pool here (a BLAS other than OpenBLAS)")
    runs: list[int] = []
    real_run = native_pool.NativePool.run
    monkeypatch.setattr(native_pool.NativePool, "run", lambda self, fn, argv, bounds: runs.append(len(bounds) - 1)
                        or real_run(self, fn, argv, bounds))
    monkeypatch.setattr(sgemm, "WEIGHTS_PER_THREAD", per_thread)
    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 640)).astype(np.float32)
    b = rng.standard_normal((640, 1000)).astype(np.float32)  # 640 K weights: 2 shares of 64 K
    one = sgemm.PackedFloatWeights(b, 1).matmul_any(a)
    two = sgemm.PackedFloatWeights(b, 2).matmul_any(a)
    np.testing.assert_array_equal(two, one)
    _check(two, a, b)
    assert runs == ([2] if per_thread == 1 << 16 else [])


@needs_float_gemm
def test_rows_are_read_in_place_weights_may_be_a_transposed_view_and_out_is_cleared(monkeypatch) -> None:
    """Rows of a wider array (a row stride past K), Gemm's transB weights as a transposed view,
    and a planned output buffer holding garbage: the product overwrites it."""
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((9, 400)).astype(np.float32)
    a = wide[:, 10:310]  # K = 300, rows 400 floats apart
    w_t = rng.standard_normal((96, 300)).astype(np.float32)  # (N, K), as torch writes a Linear
    packed = sgemm.PackedFloatWeights(w_t.T, 2)
    monkeypatch.setattr(sgemm, "MIN_MACS", 0)
    monkeypatch.setattr(sgemm, "MACS_PER_THREAD", 1)
    assert packed.takes(a)
    out = np.full((9, 96), np.nan, dtype=np.float32)
    got = packed.matmul(a, out)
    assert got is out
    _check(out, a, w_t.T)


@needs_float_gemm
def test_non_finite_values_spread_as_in_blas() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((4, 512)).astype(np.float32)
    b = rng.standard_normal((512, 640)).astype(np.float32)
    a[0, 7], a[1, 9], b[3, 5] = np.inf, np.nan, -np.inf
    got = sgemm.PackedFloatWeights(b, 1).matmul(a)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-3)


def test_routing_leaves_what_blas_does_better() -> None:
    """One row (BLAS's matrix-vector product), more than MAX_ROWS rows, too few multiply-adds,
    float64 and rows that are not unit-stride along K stay on BLAS."""
    b = np.zeros((512, 1024), np.float32)
    assert sgemm.fits(b) and not sgemm.fits(b.astype(np.float64)) and not sgemm.fits(np.zeros((16, 16), np.float32))
    assert sgemm.gains(2, 512, 1024) and sgemm.gains(sgemm.MAX_ROWS, 512, 1024)
    assert not sgemm.gains(1, 512, 1024) and not sgemm.gains(sgemm.MAX_ROWS + 1, 512, 1024)
    assert not sgemm.gains(4, 16, 16)
    packed = sgemm.PackedFloatWeights(b, 1)
    assert packed.takes(np.zeros((8, 512), np.float32))
    assert not packed.takes(np.zeros((8, 512), np.float64))
    assert not packed.takes(np.zeros((512, 8), np.float32).T)  # K steps of 8 floats
    assert not packed.takes(np.zeros((8, 256), np.float32))  # another K


# --------------------------------------------------------------------------- in the ops

K, N = 384, 330  # 127k weights: a batch of 16 is 2M multiply-adds; N not a multiple of 16


def _model(op: str) -> onnx.ModelProto:
    """A dense layer as the exporters write it, with a dynamic batch axis."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((K, N)) / np.sqrt(K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    dims: list[Any] = ["batch", K]
    if op == "MatMul":
        nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
        inits = [numpy_helper.from_array(w, "W")]
    elif op == "MatMul3d":  # (batch, tokens, K) rows flattened into one product
        dims = ["batch", 2, K]
        nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
        inits = [numpy_helper.from_array(w, "W")]
    elif op == "Gemm":  # torch's Linear: transB, with alpha and beta not 1
        nodes = [helper.make_node("Gemm", ["x", "Wt", "B"], ["y"], transB=1, alpha=0.5, beta=2.0)]
        inits = [numpy_helper.from_array(np.ascontiguousarray(w.T), "Wt"), numpy_helper.from_array(bias, "B")]
    else:  # FusedMatMul: MatMul + Add + Relu on 3-D rows
        dims = ["batch", 2, K]
        nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "B"], ["a"]),
                 helper.make_node("Relu", ["a"], ["y"])]
        inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(bias, "B")]
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _spy(monkeypatch) -> list[tuple[int, ...]]:
    calls: list[tuple[int, ...]] = []
    real = sgemm.PackedFloatWeights.matmul

    def matmul(self, a, out=None):
        calls.append(a.shape)
        return real(self, a, out)

    monkeypatch.setattr(sgemm.PackedFloatWeights, "matmul", matmul)
    return calls


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op", ["MatMul", "MatMul3d", "Gemm", "FusedMatMul"])
@pytest.mark.parametrize("batch", [1, 2, 7, 16, 40])
def test_dense_layers_match_onnxruntime_and_take_the_kernel_at_few_rows(monkeypatch, op: str, batch: int,
                                                                        threads: int) -> None:
    """These weights (127 K floats) are owned on one thread, and on two where OpenBLAS's idle
    workers can be parked: every product takes the kernel, one row and 80 included; else it
    takes 2-32 rows. Outputs match onnxruntime's."""
    model = _model(op)
    rows = batch * (2 if op in ("MatMul3d", "FusedMatMul") else 1)
    shape = (batch, 2, K) if op in ("MatMul3d", "FusedMatMul") else (batch, K)
    x = np.random.default_rng(batch).standard_normal(shape).astype(np.float32)
    data = model.SerializeToString()
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    calls = _spy(monkeypatch)
    options = epoxy.SessionOptions()
    options.intra_op_num_threads = threads
    for jit in (True, False):
        sess = epoxy.InferenceSession(data, options, providers=[("cpu", {"jit": jit})])
        got = sess.run(None, {"x": x})[0]
        again = sess.run(None, {"x": x})[0]
        assert got.flags.c_contiguous  # the padded columns were cut off by a copy, not a view
        np.testing.assert_array_equal(again, got)  # the packed weights are reused as they are
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        owned = sgemm.owns(np.zeros((K, N), np.float32), threads)  # 2 threads: where OpenBLAS can be parked
        taken = sgemm.support() is None and jit and (owned or sgemm.gains(rows, K, N))
        assert (len(calls) == 2) == taken, (jit, rows, calls)
        calls.clear()


def test_a_layer_owns_its_weights_between_2_16_floats_and_32_mb() -> None:
    """Owned (every product on the packed copy, the original released): float32 2-D weights of
    MIN_OWNED_WEIGHTS up to MAX_OWNED_BYTES (a larger one's packing, while its original is still
    held, would add its whole size to the peak RSS); on two threads only where OpenBLAS's idle
    workers can be parked."""
    from epoxy_ep_cpu.jit import blas_spin

    assert sgemm.owns(np.empty((256, 256), np.float32), 1)
    assert not sgemm.owns(np.empty((128, 256), np.float32), 1)  # 2^15 weights: below MIN_OWNED_WEIGHTS
    assert not sgemm.owns(np.empty((4097, 2048), np.float32), 1)  # 33.6 MB: above MAX_OWNED_BYTES
    assert not sgemm.owns(np.empty((256, 256), np.float64), 1)
    assert sgemm.owns(np.empty((256, 256), np.float32), 2) == blas_spin.available()


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_an_owned_layers_original_weight_is_freed_fused_or_not(monkeypatch, op: str) -> None:
    """On one thread an owned layer's weight is released and nothing keeps its memory: not
    the kernel, not the inner kernel a FusedGemm wraps (whose NodeSpec copies the constants)."""
    import gc

    from epoxy.testing import watch_constant_buffers

    if sgemm.support() is not None:
        pytest.skip(f"the few-rows kernel cannot run here: {sgemm.support()}")
    bases = watch_constant_buffers(monkeypatch)
    w = np.random.default_rng(2).standard_normal((512, 256)).astype(np.float32)  # 2^17 weights: owned
    first = (helper.make_node("Gemm", ["x", "W"], ["g"], transB=1) if op == "Gemm"
             else helper.make_node("MatMul", ["x", "W"], ["g"]))
    graph = helper.make_graph([first, helper.make_node("Relu", ["g"], ["y"])], "dense",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w if op == "Gemm" else np.ascontiguousarray(w.T), "W")])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    options = epoxy.SessionOptions()
    options.intra_op_num_threads = 1
    sess = epoxy.InferenceSession(data, options, providers=[("cpu", {"jit": True})])  # also under EPOXY_CPU_JIT=0
    x = np.random.default_rng(3).standard_normal((4, 256)).astype(np.float32)
    np.testing.assert_allclose(sess.run(None, {"x": x})[0], np.maximum(x @ w.T, 0), rtol=1e-4, atol=1e-4)
    assert sess._released_constants == ["W"]
    gc.collect()
    assert bases["W"]() is None
