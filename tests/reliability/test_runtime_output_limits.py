"""Outputs whose size comes from tensor values at run time (ConstantOfShape, Expand, Range,
Tile, Pad, Resize, OneHot) are checked before numpy allocates them: a clear
ResourceLimitError naming the node, the shape and the bytes, instead of a MemoryError or
the OOM killer. Without ``memory_limit_bytes`` the cap is the memory the process can still
get; with it, the smaller of the two."""

from __future__ import annotations

import time

import epoxy
import numpy as np
import pytest
from epoxy import ResourceLimitError, SessionOptions
from epoxy import limits as core_limits
from onnx import TensorProto, helper, numpy_helper

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
    "ConstantOfShape": (helper.make_node("ConstantOfShape", ["shape"], ["y"], name="big"), [_vi("shape", I64, ["k"])],
                        {"shape": _i64(2**20, 2**20, 2**10)}, {"shape": _i64(2, 3, 4)}),
    "Expand": (helper.make_node("Expand", ["x", "shape"], ["y"], name="big"), [_vi("x", F, [1]), _vi("shape", I64, ["k"])],
               {"x": _f32(1), "shape": _i64(100000, 100000, 100)}, {"x": _f32(1), "shape": _i64(2, 3, 4)}),
    "Range": (helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="big"),
              [_vi("start", I64, []), _vi("limit", I64, []), _vi("delta", I64, [])],
              {"start": np.array(0, np.int64), "limit": np.array(2**62, np.int64), "delta": np.array(1, np.int64)},
              {"start": np.array(0, np.int64), "limit": np.array(5, np.int64), "delta": np.array(1, np.int64)}),
    "Tile": (helper.make_node("Tile", ["x", "repeats"], ["y"], name="big"), [_vi("x", F, [2, 2]), _vi("repeats", I64, [2])],
             {"x": _f32(2, 2), "repeats": _i64(2**20, 2**20)}, {"x": _f32(2, 2), "repeats": _i64(2, 3)}),
    "Pad": (helper.make_node("Pad", ["x", "pads"], ["y"], name="big"), [_vi("x", F, [2, 2]), _vi("pads", I64, [4])],
            {"x": _f32(2, 2), "pads": _i64(0, 0, 2**20, 2**20)}, {"x": _f32(2, 2), "pads": _i64(1, 1, 1, 1)}),
    "Resize": (helper.make_node("Resize", ["x", "", "scales"], ["y"], name="big"), [_vi("x", F, [1, 1, 2, 2]), _vi("scales", F, [4])],
               {"x": _f32(1, 1, 2, 2), "scales": np.array([1, 1, 1e5, 1e5], np.float32)},
               {"x": _f32(1, 1, 2, 2), "scales": np.array([1, 1, 2, 2], np.float32)}),
    "OneHot": (helper.make_node("OneHot", ["indices", "depth", "values"], ["y"], name="big"),
               [_vi("indices", I64, [2]), _vi("depth", I64, []), _vi("values", F, [2])],
               {"indices": _i64(0, 1), "depth": np.array(2**45, np.int64), "values": np.array([0, 1], np.float32)},
               {"indices": _i64(0, 1), "depth": np.array(3, np.int64), "values": np.array([0, 1], np.float32)}),
}

#: output rank and type where they are not 3 and float
SHAPES = {"Range": {"rank": 1, "elem": I64}, "Tile": {"rank": 2}, "Pad": {"rank": 2}, "Resize": {"rank": 4},
          "OneHot": {"rank": 2}}


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
