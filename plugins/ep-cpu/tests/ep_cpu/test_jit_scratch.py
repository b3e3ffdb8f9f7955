"""``jit/scratch.py``: per-thread reused buffers for kernel temporaries, and the grid GEMM
convolution that uses them giving the same values when layers of different sizes take turns
on one thread (a reused buffer is never read before it is written)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

pytest.importorskip("numba")

from epoxy.kit import is_aligned  # noqa: E402
from epoxy_ep_cpu.jit import scratch as scratch_module  # noqa: E402
from epoxy_ep_cpu.jit.scratch import scratch  # noqa: E402

F32 = np.dtype(np.float32)


def test_a_slot_reuses_its_buffer_and_grows():
    a = scratch("test.a", 1000, F32)
    b = scratch("test.a", 10, F32)
    assert a.shape == (1000,) and b.shape == (10,) and b.dtype == F32 and np.shares_memory(a, b)
    assert is_aligned(a) and is_aligned(scratch("test.b", 3, np.dtype(np.int8)))  # on cache lines
    grown = scratch("test.a", 5000, F32)
    assert grown.shape == (5000,) and np.shares_memory(grown, scratch("test.a", 4000, F32))
    assert not np.shares_memory(grown, scratch("test.other", 4000, F32))  # slots are apart


def test_a_request_asked_again_gets_its_view_back(monkeypatch):
    first = scratch("test.v", 100, F32)
    assert scratch("test.v", 100, F32) is first  # no slicing and viewing per call
    other = scratch("test.v", 50, np.dtype(np.float64))
    assert other.dtype == np.float64 and other.shape == (50,) and np.shares_memory(first, other)
    grown = scratch("test.v", 100_000, F32)  # the slot's buffer is replaced: its views go with it
    again = scratch("test.v", 100, F32)
    assert again is not first and np.shares_memory(again, grown) and not np.shares_memory(again, first)
    monkeypatch.setattr(scratch_module, "MAX_VIEWS", 2)
    views = [scratch("test.w", n, F32) for n in (1, 2, 3)]  # the third clears the first two
    assert scratch("test.w", 3, F32) is views[2] and scratch("test.w", 1, F32) is not views[0]


def test_threads_get_their_own_buffers():
    here = scratch("test.t", 256, F32)
    seen: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: seen.append(scratch("test.t", 256, F32)))
    worker.start()
    worker.join()
    assert not np.shares_memory(here, seen[0])


def test_larger_requests_than_the_cap_are_not_kept(monkeypatch):
    monkeypatch.setattr(scratch_module, "MAX_RETAINED_BYTES", 4096)
    big = scratch("test.big", 2048, F32)  # 8 KiB: fresh, not kept
    assert is_aligned(big)
    assert not np.shares_memory(big, scratch("test.big", 2048, F32))
    assert not np.shares_memory(big, scratch("test.big", 16, F32))


def test_grid_convolutions_of_different_sizes_keep_their_values(monkeypatch, no_small_conv):
    """Two group-1 strided layers (the grid GEMM path) alternating on one thread, each against
    the numpy path: the smaller one reads the larger one's scratch without stale data."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import epoxy
    from epoxy_ep_cpu.jit import kernels_conv_gemm

    slots: list[str] = []
    monkeypatch.setattr(kernels_conv_gemm, "scratch", lambda slot, *a: slots.append(slot) or scratch(slot, *a))
    rng = np.random.default_rng(3)

    def model(c: int, m: int, hw: int) -> bytes:
        w = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])],
                                  "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(w, "w")])
        return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()

    # 6 outputs: not whole 4-channel blocks, so the direct kernel does not keep this tiny layer
    layers = [(model(3, 16, 64), (1, 3, 64, 64)), (model(8, 6, 20), (1, 8, 20, 20))]
    sessions = [(epoxy.InferenceSession(m, providers=[("cpu", {"jit": "on"})]),
                 epoxy.InferenceSession(m, providers=[("cpu", {"jit": "off"})]), shape) for m, shape in layers]
    for _ in range(2):
        for jit_on, jit_off, shape in sessions:
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(jit_on.run(None, {"x": x})[0], jit_off.run(None, {"x": x})[0],
                                       rtol=1e-5, atol=1e-5)
    assert slots.count("grid.cols") == 4  # both layers ran the grid GEMM, twice each
