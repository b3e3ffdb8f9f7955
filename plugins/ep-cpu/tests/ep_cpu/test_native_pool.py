"""The native pool (jit/native_pool.py): shares handed to helpers that never take the GIL,
the shares numba kernels and OpenBLAS products become (jit/native_shares.py), and the
thread policy around them (jit/threads.py: OpenBLAS set to one thread, the count sessions
still get)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from epoxy_ep_cpu.jit import llvm_module, native_pool, native_shares, threads  # noqa: E402

if not threads.native():
    pytest.skip("the native pool needs numpy's OpenBLAS with its own threads", allow_module_level=True)


@numba.njit(nogil=True, cache=True)
def _mark(out, scale, offset, flag, first, last):  # pragma: no cover - compiled
    """out[i] = i * scale + offset (+1000 when ``flag``) for i in [first, last), and count
    the writes of each element in out2-style: out is float64, written once per element."""
    for i in range(first, last):
        out[i] += i * scale + offset + (1000.0 if flag else 0.0) + 1.0


def _split(total: int, count: int, *args) -> None:
    fn = _mark
    threads.Split(fn, fn, args, total, count)(*args)


@pytest.mark.parametrize(("total", "count"), [(10, 2), (7, 2), (3, 3), (64, 2), (2, 2)])
def test_a_split_covers_every_element_once_with_the_arguments_it_was_given(total, count):
    out = np.zeros(total)
    _split(total, count, out, 0.5, 3, True)
    want = np.arange(total) * 0.5 + 3 + 1000 + 1
    np.testing.assert_array_equal(out, want)  # written once each: += would show a second write


@numba.njit(nogil=True, cache=True)
def _rows(grid, index, alpha, beta, k, on, first, last):  # pragma: no cover - compiled
    for r in range(first, last):
        for c in range(grid.shape[1]):
            grid[r, c] = index[r] * alpha + beta * k + (1.0 if on else 0.0) + c


def test_arguments_of_every_kind_reach_the_kernel_on_the_helper():
    """2-D and int64 arrays, float32 and Python floats, ints and bools travel in argv."""
    kernel = _rows
    grid = np.zeros((6, 5), np.float32)
    index = np.arange(6, dtype=np.int64) * 3
    threads.Split(kernel, kernel, (grid, index, np.float32(0.25), 2.5, 4, True), 6, 2)(
        grid, index, np.float32(0.25), 2.5, 4, True)
    want = (index[:, None] * 0.25 + 2.5 * 4 + 1.0 + np.arange(5)[None, :]).astype(np.float32)
    np.testing.assert_array_equal(grid, want)


def test_kernels_of_one_argument_kinds_share_one_adapter_and_any_kernel_can_be_called():
    @numba.njit(nogil=True)
    def local(out, first, last):  # pragma: no cover - compiled
        for i in range(first, last):
            out[i] = i

    @numba.njit(nogil=True)
    def other(out, first, last):  # pragma: no cover - compiled
        for i in range(first, last):
            out[i] = -i

    out = np.zeros(10)
    one, two = native_shares.kernel_share(local, (out,)), native_shares.kernel_share(other, (out,))
    assert one is not None and two is not None and one[0] == two[0]  # the same compiled adapter
    threads.Split(local, local, (out,), 10, 2)(out)
    np.testing.assert_array_equal(out, np.arange(10))
    threads.Split(other, other, (out,), 10, 2)(out)
    np.testing.assert_array_equal(out, -np.arange(10))


def test_a_strided_argument_falls_back_to_the_executor_pool():
    out = np.zeros((8, 2))[:, 0]  # not contiguous: cannot travel as a pointer and a shape
    assert native_shares.kernel_share(_mark, (out, 1.0, 0, False)) is None
    _split(8, 2, out, 1.0, 0, False)
    np.testing.assert_array_equal(out, np.arange(8) + 1.0)


def test_a_second_caller_runs_its_shares_itself_while_the_helpers_are_taken():
    pool = native_pool.pool(1)
    out = np.zeros(64)
    share = native_shares.kernel_share(_mark, (out, 1.0, 0, False))
    assert share is not None
    argv = np.empty(share[2], np.int64)
    share[1](argv, out, 1.0, 0, False)
    with pool._busy:  # another thread's shares hold the helpers
        assert pool.run(share[0], argv, native_pool.bounds_for(64, 2)) is False
    assert pool.run(share[0], argv, native_pool.bounds_for(64, 2)) is True
    np.testing.assert_array_equal(out, np.arange(64) + 1.0)


def test_helpers_that_fell_asleep_wake_for_the_next_share(monkeypatch):
    """An idle helper sleeps after its spin budget; the next share wakes it, and quiesce()
    sends a spinning one to sleep at once."""
    monkeypatch.setattr(native_pool, "SPIN_CYCLES", 1)
    pool = native_pool.NativePool(1)
    try:
        out = np.zeros(32)
        share = native_shares.kernel_share(_mark, (out, 1.0, 0, False))
        argv = np.empty(share[2], np.int64)
        for _ in range(5):
            out[:] = 0
            share[1](argv, out, 1.0, 0, False)
            assert pool.run(share[0], argv, native_pool.bounds_for(32, 2))
            np.testing.assert_array_equal(out, np.arange(32) + 1.0)
            pool.quiesce()
            threading.Event().wait(0.01)
    finally:
        pool.stop()
    assert pool._awake == 0


def test_concurrent_sessions_of_one_model_give_serial_results():
    """Threads splitting at once: one holds the helpers, the others run their shares alone."""
    outs = [np.zeros(4096) for _ in range(6)]
    errors: list[BaseException] = []

    def work(out):
        try:
            for _ in range(50):
                out[:] = 0
                _split(4096, 2, out, 2.0, 1, False)
                np.testing.assert_array_equal(out, np.arange(4096) * 2.0 + 2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(o,)) for o in outs]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors


_PRODUCTS = [
    ("stack", (36, 24, 40), (36, 40, 50)),
    ("rows", (300, 64), (64, 40)),
    ("columns", (16, 64), (64, 3025)),
    ("vector", (1, 900), (900, 700)),
    ("broadcast weights", (24, 40), (1, 40, 333)),
]


@pytest.mark.parametrize(("how", "a_shape", "b_shape"), _PRODUCTS, ids=[p[0] for p in _PRODUCTS])
@pytest.mark.parametrize("transposed", [False, True], ids=["b", "b.T"])
def test_split_products_equal_numpy_on_one_blas_thread(how, a_shape, b_shape, transposed):
    """Each share is OpenBLAS on its block (OpenBLAS is on one thread here once a session
    pinned it; the check pins it too): within float32 rounding of the whole product, and equal
    to it bit for bit on AVX-512 CPUs, where OpenBLAS rounds a block as it rounds the whole
    (seen with its SkylakeX kernels and with its Haswell ones forced there; on an AVX2-only
    AMD EPYC, its Haswell kernels rounded 2-6 % of a column split's outputs differently)."""
    if transposed and len(b_shape) != 2:
        pytest.skip("a transposed right operand is a 2-D layout")
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(3)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape[::-1] if transposed else b_shape).astype(np.float32)
    b = b.T if transposed else b
    if len(b_shape) == 3 and b_shape[0] == 1:
        b = b[0]
        a = np.broadcast_to(a, (1, *a.shape))[0]
    out = np.empty(np.matmul(a, b).shape, np.float32)
    split = threads.SplitMatmul(a, b, out, 2)
    assert split._template is not None
    with threadpool_limits(1):
        split(a, b, out)
        whole = np.matmul(a, b)
    depth = a.shape[-1]
    bound = 2 * depth * np.finfo(np.float32).eps * np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64))
    assert (np.abs(out.astype(np.float64) - whole) <= bound).all()
    # sgemv on column blocks of b rounds as its own everywhere
    if how != "vector" and llvm_module.missing(("avx512f",)) is None:
        np.testing.assert_array_equal(out, whole)


def test_products_too_shallow_to_gain_stay_whole(monkeypatch):
    """Products of fewer than MIN_SPLIT_DEPTH inner rows stay whole: 32 on AVX-512, where they
    are memory-bound (64x16 @ 16x3025 took longer in two shares), 4 on AVX2, where they split
    well (OpenBLAS's Haswell kernels)."""
    assert native_shares.MIN_SPLIT_DEPTH == (32 if llvm_module.missing(llvm_module.AVX512) is None else 4)
    monkeypatch.setattr(native_shares, "MIN_SPLIT_DEPTH", 32)
    a, b = np.ones((64, 16), np.float32), np.ones((16, 3025), np.float32)
    out = np.empty((64, 3025), np.float32)
    assert threads.SplitMatmul(a, b, out, 2)._template is None  # too shallow: no split
    np.testing.assert_array_equal(threads.SplitMatmul(a, b, out, 2)(a, b, out), a @ b)
    monkeypatch.setattr(native_shares, "MIN_SPLIT_DEPTH", 4)
    split = threads.SplitMatmul(a, b, out, 2)
    assert split._template is not None or not threads.native()
    np.testing.assert_allclose(split(a, b, out), a @ b)


def test_two_thread_sessions_set_openblas_to_one_thread_and_later_sessions_keep_their_count():
    """A session on two jit threads sets numpy's OpenBLAS to one (its helpers split the
    products); a session built after it without intra_op_num_threads still gets two, and
    one asking for one gets one."""
    from onnx import TensorProto, helper

    import epoxy
    from epoxy.run.threads import set_blas_threads
    from epoxy_ep_cpu import jit

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def count(options=None) -> int:
        memo: dict[str, int] = {}
        epoxy.InferenceSession(model.SerializeToString(), sess_options=options, providers=["cpu"])
        with jit.remembering(memo):
            return jit.thread_count()

    set_blas_threads(2)
    assert count(epoxy.SessionOptions(intra_op_num_threads=2)) == 2
    assert threads.blas_count() == 1
    assert count() == 2
    assert count(epoxy.SessionOptions(intra_op_num_threads=1)) == 1
    assert count(epoxy.SessionOptions(intra_op_num_threads=2)) == 2
    assert threads.blas_count() == 1
    set_blas_threads(2)  # another session (another provider) sets the process's count again
    a, b = np.ones((64, 64), np.float32), np.ones((64, 4096), np.float32)
    out = np.empty((64, 4096), np.float32)
    threads.SplitMatmul(a, b, out, 2)(a, b, out)  # the next split product sets it back
    assert threads.blas_count() == 1
    assert count() == 2


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_planes_split_on_the_native_pool_equal_one_thread(monkeypatch, stride):
    """A depthwise layer on the plane kernel splits its planes over the pool (from one
    multiply-add here) and gives one thread's values bit for bit."""
    from onnx import TensorProto, helper, numpy_helper

    import epoxy
    from epoxy_ep_cpu.jit import kernels_depthwise

    rng = np.random.default_rng(5)
    w = rng.standard_normal((24, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=24, pads=[1, 1, 1, 1], strides=[stride, stride])
    out = 12 // stride
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, out, out])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.standard_normal((1, 24, 12, 12)).astype(np.float32)
    monkeypatch.setattr(kernels_depthwise, "kernel_kind", lambda *a, **k: "grid")  # the plane kernel on both
    one = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True, "jit_threads": 1})]).run(None, {"x": x})
    monkeypatch.setattr(kernels_depthwise, "NATIVE_MACS_PER_SHARE", 1)
    splits: list[int] = []
    real = threads.Split.__call__
    monkeypatch.setattr(threads.Split, "__call__", lambda self, *a: splits.append(self._count) or real(self, *a))
    two = epoxy.InferenceSession(model, providers=[("cpu", {"jit": True, "jit_threads": 2})])
    for _ in range(2):
        np.testing.assert_array_equal(two.run(None, {"x": x})[0], one[0])
    assert splits == [2, 2]


def test_a_split_into_more_shares_grows_the_pool_and_the_old_one_ends():
    old = native_pool.pool(1)
    out = np.zeros(90)
    _split(90, 4, out, 1.0, 0, False)  # three helpers: a new pool replaces the one-helper pool
    np.testing.assert_array_equal(out, np.arange(90) + 1.0)
    assert native_pool.pool(1).helpers >= 3
    assert all(not t.is_alive() for t in old._threads) or old is native_pool.pool(1)


def test_a_helper_that_never_comes_leaves_its_share_to_the_caller():
    """The caller claims each helper share not started when its own is done (a helper whose
    vCPU is taken would otherwise cost a scheduler time slice): with the helper gone, every
    share still runs exactly once, on the caller."""
    pool = native_pool.NativePool(1)
    pool.stop()  # the helper thread has ended: nobody else will claim share 1
    out = np.zeros(40)
    share = native_shares.kernel_share(_mark, (out, 1.0, 0, False))
    argv = np.empty(share[2], np.int64)
    share[1](argv, out, 1.0, 0, False)
    for round_ in range(1, 4):
        out[:] = 0
        assert pool.run(share[0], argv, native_pool.bounds_for(40, 2))
        np.testing.assert_array_equal(out, np.arange(40) + 1.0)  # written once each
        assert pool.taken() == round_


def test_shares_raced_for_by_caller_and_helper_run_once():
    """Caller and awake helper race for share 1 every call (which wins depends on the
    scheduler): each element is written exactly once either way."""
    pool = native_pool.NativePool(1)
    try:
        out = np.zeros(1 << 16)
        share = native_shares.kernel_share(_mark, (out, 1.0, 0, False))
        argv = np.empty(share[2], np.int64)
        share[1](argv, out, 1.0, 0, False)
        for _ in range(50):
            out[:] = 0
            assert pool.run(share[0], argv, native_pool.bounds_for(out.size, 2))
            np.testing.assert_array_equal(out, np.arange(out.size) + 1.0)
    finally:
        pool.stop()


def test_a_helper_counted_awake_but_asleep_costs_a_share_not_a_hang():
    """The caller reads the awake count without the lock (a run then is one compiled call): a
    helper that went to sleep in between misses the post, and the caller claims its share."""
    pool = native_pool.NativePool(1)
    try:
        pool._awake = 1  # stale: the helper was born asleep and nothing woke it
        out = np.zeros(48)
        share = native_shares.kernel_share(_mark, (out, 1.0, 0, False))
        argv = np.empty(share[2], np.int64)
        share[1](argv, out, 1.0, 0, False)
        assert pool.run(share[0], argv, native_pool.bounds_for(48, 2))
        np.testing.assert_array_equal(out, np.arange(48) + 1.0)
        assert pool.taken() == 1
    finally:
        pool._awake = 0
        pool.stop()


def test_dense_products_too_small_to_split_go_straight_to_numpy(monkeypatch):
    """A constant-weight product on two threads decides once per rows' shape: too few
    multiply-adds to split (a classifier head at batch 1) is numpy's product, with no split
    wrapper on every call; a larger one splits on the native pool. Both give numpy's values."""
    from epoxy_ep_cpu import jit
    from epoxy_ep_cpu.ops._dense_weights import DenseWeights

    monkeypatch.setattr(jit, "thread_count", lambda: 2)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((128, 96)).astype(np.float32)  # below the owned-weights size
    dense = DenseWeights(w)
    assert not dense.owned
    small, large = rng.standard_normal((1, 128)).astype(np.float32), rng.standard_normal((512, 128)).astype(np.float32)
    np.testing.assert_allclose(dense.product(small), small @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dense.product(large), large @ w, rtol=1e-4, atol=1e-4)
    assert dense._splits[small.shape] is False
    assert isinstance(dense._splits[large.shape], threads.SplitMatmul)
