"""Real-GPU tests (``-m gpu``): skipped here unless CuPy can drive a CUDA device."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from cuda_helpers import model
from onnx import helper

import epoxy

pytestmark = pytest.mark.gpu
R = np.random.default_rng(3)


def _sessions(m: bytes, options: dict | None = None):  # type: ignore[no-untyped-def]
    s = epoxy.InferenceSession(m, providers=[("cuda", options or {}), "cpu"])
    ref = epoxy.InferenceSession(m, providers=["cpu"])
    provider = dict(s._providers)["cuda"]
    return s, ref, provider


def _backends():  # type: ignore[no-untyped-def]
    from epoxy_ep_cuda.backend import CupyBackend, FakeBackend
    from epoxy_ep_cuda.factory import CudaProviderFactory
    from epoxy_ep_cuda.options import CudaOptions

    dev = CudaProviderFactory().devices()[0]
    return CupyBackend(dev, CudaOptions()), FakeBackend()


def test_device_enumeration() -> None:
    from epoxy_ep_cuda.factory import CudaProviderFactory

    devs = CudaProviderFactory().devices()
    assert devs and devs[0].memory_bytes and devs[0].properties["compute_capability"]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_generated_kernels_match_numpy_twin(dtype: str) -> None:
    from epoxy_ep_cuda import codegen

    gpu, fake = _backends()
    cp = gpu.cp
    for op, (arity, _c, _n) in sorted(codegen.EW_OPS.items()):
        attrs = {"alpha": 0.1, "beta": 0.5, "gamma": 1.05, "min": -1.0, "max": 2.0, "approximate": "none"}
        prog = codegen.single_op_program(op, arity, attrs)
        shapes = [(2, 3, 4), (4,), (2, 1, 4)][:arity]
        xs = [(R.standard_normal(s) + 0.1).astype(dtype) for s in shapes]
        want = fake.ew(prog, xs, [dtype])[0]
        got = gpu.ew(prog, [cp.asarray(x) for x in xs], [dtype])[0]
        tol = 2e-3 if dtype == "float16" else 2e-6
        np.testing.assert_allclose(cp.asnumpy(got).astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                                   err_msg=op, equal_nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_hand_written_kernels_match(dtype: str) -> None:
    gpu, fake = _backends()
    cp = gpu.cp
    tol = 5e-3 if dtype == "float16" else 1e-5
    x2 = R.standard_normal((7, 300)).astype(dtype)
    for log in (False, True):
        np.testing.assert_allclose(
            cp.asnumpy(gpu.softmax_rows(cp.asarray(x2), log)), fake.softmax_rows(x2, log), rtol=tol, atol=tol
        )
    g, b = R.standard_normal(300).astype(dtype), R.standard_normal(300).astype(dtype)
    np.testing.assert_allclose(cp.asnumpy(gpu.layernorm_rows(cp.asarray(x2), cp.asarray(g), cp.asarray(b), 1e-5)),
                               fake.layernorm_rows(x2, g, b, 1e-5), rtol=tol * 10, atol=tol * 10)
    x4 = R.standard_normal((2, 3, 11, 9)).astype(dtype)
    args = ((3, 3), (2, 1), (1, 0, 2, 1), (1, 2), (6, 5))
    np.testing.assert_array_equal(cp.asnumpy(gpu.im2col(cp.asarray(x4), *args)), fake.im2col(x4, *args))
    for mode in ("max", "avg"):
        for cpad in (False, True):
            np.testing.assert_allclose(cp.asnumpy(gpu.pool2d(cp.asarray(x4), mode, *args, cpad)),
                                       fake.pool2d(x4, mode, *args, cpad), rtol=tol, atol=tol)


def test_session_ops_and_copies() -> None:
    x = R.standard_normal((2, 3, 8, 8)).astype(np.float32)
    inits = {"w": R.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": R.standard_normal(4).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Softmax", ["p"], ["y"], axis=-1),
    ]
    s, ref, p = _sessions(model(nodes, {"x": x}, ["y"], inits))
    np.testing.assert_allclose(s.run(None, {"x": x})[0], ref.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
    assert {d.provider for d in s.partition_report().nodes} == {"cuda"}


def _bert():  # type: ignore[no-untyped-def]
    root = Path(__file__).resolve().parents[4] / "bench"
    sys.path.insert(0, str(root))
    import models  # type: ignore[import-not-found]

    cfg = dict(hidden=128, heads=4, ffn=256, layers=2, seq=32, vocab=500, max_positions=64, batch=2)
    return models.build_bert(cfg).SerializeToString(), models.bert_feeds_factory(cfg)(np.random.default_rng(0))


@pytest.mark.parametrize(
    "options", [{}, {"fuse": False}, {"cuda_graph": True}, {"pinned": False, "memory_limit": "4GB"}]
)
def test_bert_small(options: dict) -> None:
    m, feeds = _bert()
    s, ref, p = _sessions(m, options)
    want = ref.run(None, feeds)[0]
    for _ in range(4):  # cuda_graph: eager, capture, replay, replay
        np.testing.assert_allclose(s.run(None, feeds)[0], want, rtol=1e-3, atol=1e-3)
    assert p.backend.host_syncs == 0
    if options.get("cuda_graph"):
        assert all(r.fallback_reason is None for r in p.graph_runners), [r.fallback_reason for r in p.graph_runners]
        assert sum(r.replays for r in p.graph_runners) >= 2


def test_iobinding_cupy_and_torch() -> None:
    import cupy as cp

    from epoxy_ep_cuda.iobinding import IOBinding

    m, feeds = _bert()
    s, ref, p = _sessions(m)
    want = ref.run(None, feeds)[0]
    b = IOBinding(s)
    for k, v in feeds.items():
        b.bind_input(k, cp.asarray(v))
    b.bind_output("last_hidden_state")
    (out,) = b.run()
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-3, atol=1e-3)
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    b2 = IOBinding(s)
    for k, v in feeds.items():
        b2.bind_input(k, torch.from_numpy(v).cuda())
    (out2,) = b2.run()
    t = torch.from_dlpack(out2)
    assert t.is_cuda
    np.testing.assert_allclose(t.cpu().numpy(), want, rtol=1e-3, atol=1e-3)


def test_session_run_with_cupy_feeds_and_device_outputs() -> None:
    """The core's public device contract on a real GPU: CuPy feeds skip the upload (the
    allocator accepts them), ``output_device="cuda"`` returns CuPy arrays, no host copies."""
    import cupy as cp

    m, feeds = _bert()
    s, ref, _ = _sessions(m)
    want = ref.run(None, feeds)[0]
    dev_feeds = {k: cp.asarray(v) for k, v in feeds.items()}
    first = s.get_outputs()[0].name
    assert s.io_placement().outputs[first].produced_on != "host"
    (out,) = s.run([first], dev_feeds, run_options={"output_device": "cuda"})
    assert isinstance(out, cp.ndarray)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-3, atol=1e-3)
    with pytest.raises(epoxy.InvalidFeedError, match="expected dtype"):
        s.run(None, {k: v.astype(cp.float64) if v.dtype == cp.float32 else v.astype(cp.int32)
                     for k, v in dev_feeds.items()})
