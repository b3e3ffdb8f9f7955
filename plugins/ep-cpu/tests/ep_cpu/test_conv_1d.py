"""1-D convolutions run as 2-D ones of height 1 (``ops/conv._lifted_1d``): the same values as
the numpy path (jit off), the ONNX reference and onnxruntime, over strides, dilations, pads,
auto_pad, groups, batch sizes, FusedConv's residual (full and broadcast) and activation; the
compiled 2-D paths' prepared calls run them; a wrong input rank is a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from _hostile import In, one_node, run_onnxruntime, run_reference
from _jit_cases import close, run_cpu

import epoxy

CASES = [
    ((1, 16, 40), (32, 16, 3), {"pads": [1, 1]}),  # a whisper encoder's first layer
    ((1, 32, 40), (32, 32, 3), {"pads": [1, 1], "strides": [2]}),  # its second
    ((2, 5, 23), (7, 5, 4), {"pads": [2, 1], "dilations": [2]}),
    ((3, 4, 17), (4, 1, 5), {"group": 4, "pads": [2, 2]}),  # depthwise, batch 3
    ((1, 6, 19), (9, 2, 3), {"group": 3, "strides": [3]}),  # grouped
    ((1, 8, 12), (8, 8, 1), {}),  # pointwise
    ((1, 4, 9), (6, 4, 3), {"auto_pad": "SAME_UPPER", "strides": [2]}),
    ((1, 4, 10), (6, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 8), (5, 3, 3), {}),  # no pads, no bias
]


def _ids(cases):
    return [f"{c[0]}-{c[1]}-{sorted(c[2].items())}" for c in cases]


def _data(seed, x_shape, w_shape, dtype, bias=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype) if bias else None
    return x, w, b


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES, ids=_ids(CASES))
def test_matches_numpy_path_reference_and_onnxruntime(x_shape, w_shape, attrs, dtype):
    x, w, b = _data(sum(x_shape), x_shape, w_shape, dtype, bias=bool(attrs))
    inputs = [x, In(w, const=True)] + ([In(b, const=True)] if b is not None else [])
    case = one_node("Conv", inputs, attrs, 22)
    on, off, ref = run_cpu(case, True, runs=3), run_cpu(case, False, runs=2), run_reference(case)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    close(on, ref, tol, tol * 10)
    close(off, ref, tol, tol * 10)
    if dtype == np.float32:
        close(on, run_onnxruntime(case), 1e-5, 1e-4)


@pytest.mark.parametrize("const_weight", [True, False])
def test_runs_on_the_compiled_2d_paths(monkeypatch, const_weight):
    """With jit on, the layer's later runs go through a prepared 2-D call, fed a height-1 view."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_conv, kernels_conv_gemm, kernels_conv_small

    seen: list[tuple[int, ...]] = []
    for cls in (kernels_conv.Conv2dCall, kernels_conv_gemm.GridConvCall, kernels_conv_small.SmallConvCall):
        real = cls.__call__
        monkeypatch.setattr(cls, "__call__", lambda self, x, z, _real=real: seen.append(x.shape) or _real(self, x, z))
    x, w, b = _data(1, (1, 16, 40), (32, 16, 3), np.float32)
    case = one_node("Conv", [x, In(w, const=const_weight), In(b, const=True)], {"pads": [1, 1]}, 22)
    out = run_cpu(case, True, runs=3)
    close(out, run_reference(case), 1e-5, 1e-4)
    assert seen == ([(1, 16, 1, 40)] * 3 if const_weight else [])  # a fed weight: the general 2-D path


ACTS = [("Relu", ()), ("LeakyRelu", (0.2,)), ("Sigmoid", ()), ("", ())]


@pytest.mark.parametrize(("act", "params"), ACTS, ids=[a or "none" for a, _ in ACTS])
@pytest.mark.parametrize("residual", ["none", "full", "broadcast", "channel"])
def test_fused_conv_residual_and_activation(act, params, residual):
    x, w, b = _data(3, (2, 6, 21), (8, 6, 3), np.float32)
    rng = np.random.default_rng(9)
    z = {"none": None, "full": rng.standard_normal((2, 8, 10)), "broadcast": rng.standard_normal((1, 8, 1)),
         "channel": rng.standard_normal((8, 1))}[residual]
    z = None if z is None else z.astype(np.float32)
    attrs = {"pads": [1, 0], "strides": [2], **({"activation": act} if act else {}),
             **({"activation_params": list(params)} if params else {})}
    case = one_node("FusedConv", [x, In(w, const=True), In(b, const=True), z], attrs, 1, domain="com.microsoft")
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert on[0].shape == (2, 8, 10)
    close(on, off, 1e-5, 1e-5)
    if residual in ("none", "full"):  # onnxruntime's Z is the output's shape
        close(on, run_onnxruntime(case), 1e-5, 1e-4)


def test_wrong_input_rank_is_a_clear_error():
    """A 1-D layer fed a 4-D input (its input has no static shape) says what it needs."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    with pytest.raises(epoxy.EpoxyError, match=r"1-D convolution .*3-D input.*\(1, 3, 5, 5\)"):
        sess.run(None, {"x": np.ones((1, 3, 5, 5), np.float32)})
    np.testing.assert_allclose(sess.run(None, {"x": np.ones((1, 3, 5), np.float32)})[0], np.full((1, 4, 3), 9.0))
