"""Strided, unpadded 1x1 layers the rows route would take run as their stride-1 twin on the
subsampled input (jit/kernels_conv_subsampled.py): proof that the route ran, the values of the
numpy path and the ONNX reference, FusedConv's residual and activation, ``out=``, and which
layers the rule takes."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_reference
from _jit_cases import close, conv_data, run_cpu

pytest.importorskip("numba")

from epoxy_ep_cpu.jit import kernels_conv_subsampled, kernels_pointwise, kernels_sgemm  # noqa: E402

needs_float_gemm = pytest.mark.skipif(kernels_sgemm.support() is not None,
                                  reason=f"the rows route this replaces: {kernels_sgemm.support()}")


def _spy(monkeypatch) -> list[tuple[int, ...]]:
    seen: list[tuple[int, ...]] = []
    real = kernels_conv_subsampled.SubsampledCall.__call__
    monkeypatch.setattr(kernels_conv_subsampled.SubsampledCall, "__call__",
                        lambda self, x, z, out=None: seen.append(x.shape) or real(self, x, z, out))
    return seen


@needs_float_gemm
@pytest.mark.parametrize("threads", [1, 2])
def test_a_strided_1x1_layer_runs_its_twin_on_the_subsampled_input(monkeypatch, threads):
    seen = _spy(monkeypatch)
    x_shape, w_shape = (2, 256, 21, 20), (96, 256, 1, 1)  # an odd height: the last row is kept
    x, w, b = conv_data(61 + threads, x_shape, w_shape)
    case = one_node("Conv", [x, In(w, const=True), In(b, const=True)], {"strides": [2, 2]}, 22)
    (on,) = run_cpu(case, True, runs=3, jit_threads=threads)
    assert seen == [x_shape] * 3
    assert on.shape == (2, 96, 11, 10)
    close([on], run_cpu(case, False), 1e-5, 1e-4)
    close([on], run_reference(case), 1e-5, 1e-4)


@needs_float_gemm
def test_the_twin_takes_fused_conv_residual_and_activation(monkeypatch):
    seen = _spy(monkeypatch)
    x_shape, w_shape = (1, 256, 36, 32), (96, 256, 1, 1)
    x, w, b = conv_data(67, x_shape, w_shape)
    z = np.random.default_rng(67).standard_normal((1, 96, 12, 16)).astype(np.float32)
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z],
                    {"strides": [3, 2], "activation": "LeakyRelu", "activation_params": [0.2]}, 1,
                    domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert len(seen) == 2 and on[0].shape == (1, 96, 12, 16)
    close(on, off, 1e-5, 1e-4)


def test_the_call_writes_the_buffer_it_is_given():
    """``out=`` (an arena view) reaches the twin's call; the subsampled copy is what it sees."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 10, 10)).astype(np.float32)
    w = rng.standard_normal((48, 32, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    f32 = np.dtype(np.float32)
    inner = kernels_pointwise.PointwiseCall((1, 32, 5, 5), f32, w, bias, 1, 0.0, 0.0, 1)
    call = kernels_conv_subsampled.SubsampledCall(x.shape, inner, (2, 2))
    out = np.full((1, 48, 5, 5), np.nan, np.float32)
    got = call(x, None, out)
    assert got is out and call.out_shape == (1, 48, 5, 5)
    np.testing.assert_array_equal(got, inner(np.ascontiguousarray(x[:, :, ::2, ::2]), None))


@pytest.mark.parametrize(("kernel", "strides", "begin", "end", "takes"), [
    ((1, 1), (2, 2), (0, 0), (0, 0), True),
    ((1, 1), (1, 2), (0, 0), (0, 0), True),
    ((1, 1), (1, 1), (0, 0), (0, 0), False),  # the plain 1x1 paths
    ((1, 1), (2, 2), (1, 0), (0, 0), False),  # padded: the padding would be subsampled too
    ((3, 3), (2, 2), (0, 0), (0, 0), False),
])
def test_which_layers_subsample(kernel, strides, begin, end, takes):
    assert kernels_conv_subsampled.subsamples(kernel, strides, begin, end) is takes
