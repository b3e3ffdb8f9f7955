"""Outputs whose size comes from tensor values at run time (ConstantOfShape, Expand, Range,
Tile, Pad, Resize, OneHot, MaxUnpool, CenterCropPad, Col2Im, DFT, STFT, the window functions,
MelWeightMatrix) are checked before numpy allocates them: a clear
ResourceLimitError naming the node, the shape and the bytes, instead of a MemoryError or
the OOM killer. Without ``memory_limit_bytes`` the cap is the memory the process can still
get; with it, the smaller of the two."""

from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy import ResourceLimitError, SessionOptions
from epoxy.run import limits as core_limits

F, I64 = TensorProto.FLOAT, TensorProto.INT64
MB = 1 << 20


def _model(node, inputs, inits=(), rank=3, elem=F):
    out = helper.make_tensor_value_info("y", elem, [f"d{i}" for i in range(rank)])
    graph = helper.make_graph([node], "sized", inputs, [out], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _vi(name, elem=F, shape=("n",)):
    return helper.make_tensor_value_info(name, elem, shape)


def _i64(*values):
    return np.array(values, np.int64)


def _f32(*shape):
    return np.ones(shape, np.float32)


# op -> (node, graph inputs, feeds asking for a huge output, feeds asking for a small one)
CASES = {
    "ConstantOfShape": (
        helper.make_node("ConstantOfShape", ["shape"], ["y"], name="big"),
        [_vi("shape", I64, ["k"])],
        {"shape": _i64(2**20, 2**20, 2**10)},
        {"shape": _i64(2, 3, 4)},
    ),
    "Expand": (
        helper.make_node("Expand", ["x", "shape"], ["y"], name="big"),
        [_vi("x", F, [1]), _vi("shape", I64, ["k"])],
        {"x": _f32(1), "shape": _i64(100000, 100000, 100)},
        {"x": _f32(1), "shape": _i64(2, 3, 4)},
    ),
    "Range": (
        helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="big"),
        [_vi("start", I64, []), _vi("limit", I64, []), _vi("delta", I64, [])],
        {"start": np.array(0, np.int64), "limit": np.array(2**62, np.int64), "delta": np.array(1, np.int64)},
        {"start": np.array(0, np.int64), "limit": np.array(5, np.int64), "delta": np.array(1, np.int64)},
    ),
    "Tile": (
        helper.make_node("Tile", ["x", "repeats"], ["y"], name="big"),
        [_vi("x", F, [2, 2]), _vi("repeats", I64, [2])],
        {"x": _f32(2, 2), "repeats": _i64(2**20, 2**20)},
        {"x": _f32(2, 2), "repeats": _i64(2, 3)},
    ),
    "Pad": (
        helper.make_node("Pad", ["x", "pads"], ["y"], name="big"),
        [_vi("x", F, [2, 2]), _vi("pads", I64, [4])],
        {"x": _f32(2, 2), "pads": _i64(0, 0, 2**20, 2**20)},
        {"x": _f32(2, 2), "pads": _i64(1, 1, 1, 1)},
    ),
    "Resize": (
        helper.make_node("Resize", ["x", "", "scales"], ["y"], name="big"),
        [_vi("x", F, [1, 1, 2, 2]), _vi("scales", F, [4])],
        {"x": _f32(1, 1, 2, 2), "scales": np.array([1, 1, 1e5, 1e5], np.float32)},
        {"x": _f32(1, 1, 2, 2), "scales": np.array([1, 1, 2, 2], np.float32)},
    ),
    "OneHot": (
        helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], name="big"),
        [_vi("indices", I64, [2]), _vi("depth", I64, []), _vi("values", F, [2])],
        {"indices": _i64(0, 1), "depth": np.array(2**45, np.int64), "values": np.array([0, 1], np.float32)},
        {"indices": _i64(0, 1), "depth": np.array(3, np.int64), "values": np.array([0, 1], np.float32)},
    ),
    "MaxUnpool": (
        helper.make_node(
            "MaxUnpool", ["x", "indices", "output_shape"], ["y"], name="big", kernel_shape=[2, 2], strides=[2, 2]
        ),
        [_vi("x", F, [1, 1, 2, 2]), _vi("indices", I64, [1, 1, 2, 2]), _vi("output_shape", I64, [4])],
        {
            "x": _f32(1, 1, 2, 2),
            "indices": _i64(0, 1, 2, 3).reshape(1, 1, 2, 2),
            "output_shape": _i64(1, 1, 2**20, 2**20),
        },
        {"x": _f32(1, 1, 2, 2), "indices": _i64(0, 1, 2, 3).reshape(1, 1, 2, 2), "output_shape": _i64(1, 1, 4, 4)},
    ),
    "CenterCropPad": (
        helper.make_node("CenterCropPad", ["x", "shape"], ["y"], name="big"),
        [_vi("x", F, [2, 2]), _vi("shape", I64, [2])],
        {"x": _f32(2, 2), "shape": _i64(2**20, 2**20)},
        {"x": _f32(2, 2), "shape": _i64(3, 3)},
    ),
    # one 2x2 block whose stride puts it alone in any image smaller than the stride + 2
    "Col2Im": (
        helper.make_node("Col2Im", ["x", "image_shape", "block_shape"], ["y"], name="big", strides=[2**20, 2**20]),
        [_vi("x", F, [1, 4, 1]), _vi("image_shape", I64, [2]), _vi("block_shape", I64, [2])],
        {"x": _f32(1, 4, 1), "image_shape": _i64(2**20 + 1, 2**20 + 1), "block_shape": _i64(2, 2)},
        {"x": _f32(1, 4, 1), "image_shape": _i64(3, 3), "block_shape": _i64(2, 2)},
    ),
    "DFT": (
        helper.make_node("DFT", ["x", "dft_length"], ["y"], name="big"),
        [_vi("x", F, [1, 4, 1]), _vi("dft_length", I64, [])],
        {"x": _f32(1, 4, 1), "dft_length": np.array(2**40, np.int64)},
        {"x": _f32(1, 4, 1), "dft_length": np.array(8, np.int64)},
    ),
    "STFT": (
        helper.make_node("STFT", ["signal", "frame_step", "", "frame_length"], ["y"], name="big"),
        [_vi("signal", F, [1, "n", 1]), _vi("frame_step", I64, []), _vi("frame_length", I64, [])],
        {"signal": _f32(1, 2**17, 1), "frame_step": np.array(1, np.int64), "frame_length": np.array(2**16, np.int64)},
        {"signal": _f32(1, 64, 1), "frame_step": np.array(8, np.int64), "frame_length": np.array(16, np.int64)},
    ),
    "HannWindow": (
        helper.make_node("HannWindow", ["size"], ["y"], name="big"),
        [_vi("size", I64, [])],
        {"size": np.array(2**40, np.int64)},
        {"size": np.array(8, np.int64)},
    ),
    "MelWeightMatrix": (
        helper.make_node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["y"], name="big"),
        [_vi("bins", I64, []), _vi("dft", I64, []), _vi("rate", I64, []), _vi("lo", F, []), _vi("hi", F, [])],
        {
            "bins": np.array(2**20, np.int64),
            "dft": np.array(2**21, np.int64),
            "rate": np.array(16000, np.int64),
            "lo": np.array(0, np.float32),
            "hi": np.array(8000, np.float32),
        },
        {
            "bins": np.array(8, np.int64),
            "dft": np.array(64, np.int64),
            "rate": np.array(16000, np.int64),
            "lo": np.array(0, np.float32),
            "hi": np.array(8000, np.float32),
        },
    ),
}

#: output rank and type where they are not 3 and float
SHAPES = {"Range": {"rank": 1, "elem": I64}, "Tile": {"rank": 2}, "Pad": {"rank": 2}, "Resize": {"rank": 4},
          "OneHot": {"rank": 2}, "MaxUnpool": {"rank": 4}, "CenterCropPad": {"rank": 2}, "Col2Im": {"rank": 4},
          "STFT": {"rank": 4}, "HannWindow": {"rank": 1}, "MelWeightMatrix": {"rank": 2}}


def _session(model, **options):
    return epoxy.InferenceSession(model, providers=["cpu"], sess_options=SessionOptions(**options))


@pytest.mark.parametrize("op", sorted(CASES))
def test_huge_run_time_output_is_refused_before_allocation_without_a_limit(op):
    node, inputs, huge, small = CASES[op]
    session = _session(_model(node, inputs, **SHAPES.get(op, {})))
    assert session.run(None, small)[0].size > 0
    start = time.monotonic()
    with pytest.raises(ResourceLimitError, match=rf"node 'big' \({op}\): output shape \[[\d, ]+\] \(\w+\) "
                                                 r"needs [\d,]+ bytes, more than .*refused before allocation") as info:
        session.run(None, huge)
    assert time.monotonic() - start < 2
    assert info.value.value == "y" and info.value.nbytes > info.value.limit


def test_over_the_free_memory_is_refused_naming_it(monkeypatch):
    monkeypatch.setattr(core_limits, "available_memory", lambda: 8 * MB)
    node, inputs, _, _ = CASES["ConstantOfShape"]
    session = _session(_model(node, inputs))
    with pytest.raises(ResourceLimitError, match=r"node 'big' \(ConstantOfShape\): output shape \[8192, 8192\] "
                                                 r"\(float32\) needs 268,435,456 bytes, more than the 8,388,608 "
                                                 r"bytes of memory this process can still get"):
        session.run(None, {"shape": _i64(8192, 8192)})
    assert session.run(None, {"shape": _i64(64, 64)})[0].shape == (64, 64)  # small: memory not even read


def test_constant_huge_shape_neither_crashes_session_creation_nor_runs():
    """With a constant shape the plan builder would fold the node at creation: the kernel
    refuses there (the node is left to run), and the run reports it."""
    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="big")
    model = _model(node, [], [numpy_helper.from_array(_i64(100000, 100000, 100), "shape")])
    start = time.monotonic()
    session = _session(model)
    with pytest.raises(ResourceLimitError, match=r"node 'big' \(ConstantOfShape\): output shape "
                                                 r"\[100000, 100000, 100\] \(float32\) needs 4,000,000,000,000 bytes"):
        session.run(None, {})
    assert time.monotonic() - start < 5


def test_configured_limit_applies_to_run_time_sized_outputs():
    node, inputs, _, _ = CASES["Expand"]
    session = _session(_model(node, inputs), memory_limit_bytes=MB)
    with pytest.raises(ResourceLimitError, match=r"node 'big' \(Expand\): output shape \[1024, 1024\] .*"
                                                 r"above memory_limit_bytes=1,048,576"):
        session.run(None, {"x": _f32(1), "shape": _i64(1024, 1024)})
