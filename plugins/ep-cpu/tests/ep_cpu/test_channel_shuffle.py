"""``com.epoxy.cpu::ChannelShuffle`` (ops/channel_shuffle.py), written by the core's
ChannelShufflePass from ShuffleNet's ``Reshape -> Transpose -> Reshape``: the permuted channels
exactly, on float tensors (NCHW out) and on int8 codes a QLinearConv handed on channels last
(channels last out, read by the depthwise layer after it), jit on and off, against onnxruntime
on the three ops as written; the partition report shows the one op on cpu."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _hostile import Case, run_onnxruntime
from _jit_cases import run_cpu
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy_ep_cpu.ops.channel_shuffle import ChannelShuffleError
from epoxy_sdk.conformance.onnxruntime_oracle import weight_codes

RNG = np.random.default_rng(3)


def _shuffle_nodes(x: str, y: str, n: int, c: int, h: int, w: int, group: int) -> tuple[list, dict]:
    inits = {f"{y}_split": np.array([n, group, c // group, h, w], np.int64),
             f"{y}_back": np.array([n, c, h, w], np.int64)}
    nodes = [helper.make_node("Reshape", [x, f"{y}_split"], [f"{y}_a"]),
             helper.make_node("Transpose", [f"{y}_a"], [f"{y}_b"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", [f"{y}_b", f"{y}_back"], [y])]
    return nodes, inits


def _model(nodes: list, inits: dict, x_type: int, x_shape: list[int], y_type: int) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "shuffle", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [helper.make_tensor_value_info("y", y_type, x_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


def _ran_on_cpu(model: onnx.ModelProto, op: str) -> bool:
    sess = epoxy.InferenceSession(model.SerializeToString(), providers=["cpu"])
    return any(d.op_type == op and d.provider == "cpu" for d in sess.partition_report().nodes)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_tensors_in_nchw_move_whole_planes(dtype):
    nodes, inits = _shuffle_nodes("x", "y", 2, 12, 5, 3, 3)
    tensor = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model(nodes, inits, tensor, [2, 12, 5, 3], tensor)
    x = RNG.integers(0, 200, (2, 12, 5, 3)).astype(dtype)
    case = Case(model, {"x": x})
    want = x.reshape(2, 3, 4, 5, 3).transpose(0, 2, 1, 3, 4).reshape(2, 12, 5, 3)
    for jit in (True, False):
        (got,) = run_cpu(case, jit)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run_onnxruntime(case)[0], want)
    assert _ran_on_cpu(model, "ChannelShuffle")


@pytest.mark.parametrize("x_dtype", [np.uint8, np.int8])
def test_codes_handed_on_channels_last_stay_channels_last(monkeypatch, x_dtype):
    """QLinearConv (grouped 1x1) -> shuffle -> depthwise QLinearConv: the shuffle reads the first
    layer's channels-last codes (on a VNNI CPU, where the grouped layer runs on the int8 GEMM;
    the compiled shuffle counted) and the depthwise layer its channels-last output; codes equal
    with jit on and off, and onnxruntime's on the model as written within one code (it runs
    uint8 inputs only)."""
    pytest.importorskip("numba")
    from epoxy_ep_cpu.jit import kernels_int8_gemm, kernels_int8_grouped, kernels_shuffle

    monkeypatch.setattr(kernels_int8_grouped, "MIN_MACS", 0)
    shuffled: list[tuple[int, ...]] = []
    real = kernels_shuffle.shuffle
    monkeypatch.setattr(kernels_shuffle, "shuffle", lambda rows, *a: shuffled.append(rows.shape) or real(rows, *a))
    c, g, h, w = 64, 4, 9, 10
    info = np.iinfo(x_dtype)
    inits = {"xs": np.float32(0.05), "xz": np.array(3, x_dtype),
             "w1": weight_codes(RNG, np.int8, (c, c // g, 1, 1), activation=x_dtype), "ws": np.float32(0.01),
             "wz": np.int8(0), "ys": np.float32(0.4), "yz": np.uint8(90),
             "w2": weight_codes(RNG, np.int8, (c, 1, 3, 3)), "zs": np.float32(0.7), "zz": np.uint8(77)}
    shuffle, more = _shuffle_nodes("y1", "s", 1, c, h, w, g)
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w1", "ws", "wz", "ys", "yz"], ["y1"], group=g),
             *shuffle,
             helper.make_node("QLinearConv", ["s", "ys", "yz", "w2", "ws", "wz", "zs", "zz"], ["y"], group=c,
                              pads=[1, 1, 1, 1])]
    model = _model(nodes, {**inits, **more}, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(x_dtype)), [1, c, h, w],
                   TensorProto.UINT8)
    case = Case(model, {"x": RNG.integers(info.min, info.max + 1, (1, c, h, w)).astype(x_dtype)})
    on, off = run_cpu(case, True, runs=2), run_cpu(case, False)
    assert shuffled == ([(h * w, c)] * 2 if kernels_int8_gemm.support() is None else [])
    np.testing.assert_array_equal(on[0], off[0])
    assert on[0].flags.c_contiguous  # the session C-orders what the kernels wrote channels last
    if x_dtype == np.uint8:
        np.testing.assert_allclose(on[0].astype(int), run_onnxruntime(case)[0].astype(int), atol=1, rtol=0)
    assert _ran_on_cpu(model, "ChannelShuffle")


def test_an_input_that_does_not_split_is_refused_by_name():
    from epoxy_ep_cpu.ops.channel_shuffle import channel_shuffle

    class _Node:
        name, op_type = "shuffle7", "ChannelShuffle"

        @staticmethod
        def attr(name, default=None):
            return 4 if name == "group" else default

    run = channel_shuffle(_Node())  # type: ignore[arg-type]
    with pytest.raises(ChannelShuffleError, match=r"shuffle7.*divisible by group 4.*\[1, 6, 2, 2\]"):
        run(np.zeros((1, 6, 2, 2), np.float32))
