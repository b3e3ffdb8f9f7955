"""Resource limits: ``SessionOptions.memory_limit_bytes`` and ``max_loop_iterations``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import seeds
from onnx import TensorProto, helper, numpy_helper

import epoxy
from epoxy import InvalidArgumentError, ResourceLimitError, SessionOptions

MB = 1 << 20


def _session(model, **options):
    return epoxy.InferenceSession(model, providers=["cpu"], sess_options=SessionOptions(**options))


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "limits", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1GB"])
def test_limit_option_is_validated(bad):
    with pytest.raises(InvalidArgumentError, match="memory_limit_bytes"):
        _session(seeds.mlp(), memory_limit_bytes=bad)
    with pytest.raises(InvalidArgumentError, match="max_loop_iterations"):
        _session(seeds.mlp(), max_loop_iterations=bad)


def test_declared_input_above_limit_is_refused_at_creation():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [1024, 1024])], [_vi("y", [1024, 1024])])
    with pytest.raises(ResourceLimitError, match=r"value 'x' \(graph input, shape \[1024, 1024\], float32\) "
                                                 r"needs 4,194,304 bytes, above memory_limit_bytes=1,048,576") as info:
        _session(model, memory_limit_bytes=MB)
    assert (info.value.value, info.value.nbytes, info.value.limit) == ("x", 4 * MB, MB)
    _session(model, memory_limit_bytes=8 * MB)  # under the limit: fine


def _filled(dims: list[int]) -> onnx.ModelProto:
    """ConstantOfShape of the constant shape ``dims`` (float32 zeros), summed."""
    return _model(
        [helper.make_node("ConstantOfShape", ["shape"], ["big"], name="cos"),
         helper.make_node("ReduceSum", ["big"], ["y"], name="sum", keepdims=0)],
        [], [_vi("y", [])], [numpy_helper.from_array(np.array(dims, np.int64), "shape")],
    )


@pytest.mark.parametrize("dims, limit", [
    # inference knows the output is 4 TiB: refused before the optimizer or a kernel could allocate it
    ([2**20, 2**20], 64 * MB),
    # a fill loading could fold (under the fold's element cap) but above the memory limit stays
    # a node, refused the same way
    ([2**11, 2**11], MB),
])
def test_inferred_size_above_limit_is_refused_before_allocation(dims, limit):
    shown = ", ".join(map(str, dims))
    with pytest.raises(ResourceLimitError, match=rf"value 'big' \(output of node 'cos' \(ConstantOfShape\), "
                                                 rf"shape \[{shown}\], float32\)"):
        _session(_filled(dims), memory_limit_bytes=limit)


def test_a_constant_fill_under_the_limit_is_folded_and_runs():
    session = _session(_filled([2**11, 2**11]), memory_limit_bytes=64 * MB)
    assert "ConstantFoldingPass" in session.applied_passes
    assert session.run(None, {})[0] == 0


def test_initializer_above_limit_is_refused_before_its_data_is_read(tmp_path):
    model = seeds.mlp()
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    with pytest.raises(ResourceLimitError, match=r"initializer 'w1' \(dims \[8, 16\]\) needs 512 bytes"):
        _session(str(tmp_path / "m.onnx"), memory_limit_bytes=256)
    # absurd dims on a tiny external file: refused by size, not by reading 2**40 floats
    proto = onnx.load(tmp_path / "m.onnx", load_external_data=False)
    proto.graph.initializer[0].dims[:] = [2**40]
    onnx.save(proto, tmp_path / "m.onnx")
    with pytest.raises(ResourceLimitError, match=r"initializer 'w1' \(dims \[1099511627776\]\)"):
        _session(str(tmp_path / "m.onnx"), memory_limit_bytes=64 * MB)


def test_sparse_initializer_is_checked_before_densifying():
    model = seeds.sparse()
    model.graph.sparse_initializer[0].dims[:] = [2**20, 2**20]
    with pytest.raises(ResourceLimitError, match="sparse initializer 'w'"):
        _session(model, memory_limit_bytes=64 * MB, check_model=False)


def test_planned_peak_above_limit_is_refused():
    # every value is 256 KiB, under a 600 KiB cap, but three are live at once
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Add", ["c", "x"], ["y"])]
    model = _model(nodes, [_vi("x", [256, 256])], [_vi("y", [256, 256])])
    with pytest.raises(ResourceLimitError, match="memory plan"):
        _session(model, memory_limit_bytes=600 * 1024, graph_optimization_level="disable")
    _session(model, memory_limit_bytes=4 * MB)


def test_feeds_above_limit_are_refused_at_run_time():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n", "m"])], [_vi("y", ["n", "m"])])
    session = _session(model, memory_limit_bytes=MB)
    assert session.run(None, {"x": np.ones((16, 16), np.float32)})[0].shape == (16, 16)
    with pytest.raises(ResourceLimitError, match=r"input 'x' \(\[1024, 512\]\) needs 2,097,152 bytes") as info:
        session.run(None, {"x": np.ones((1024, 512), np.float32)})
    assert info.value.value == "x"


def test_sequence_feed_counts_all_items():
    model = _model(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 1024])],
        [_vi("y", ["m", 1024])],
    )
    session = _session(model, memory_limit_bytes=MB)
    with pytest.raises(ResourceLimitError, match="input 's'"):
        session.run(None, {"s": [np.ones((64, 1024), np.float32)] * 8})


def _loop(trip: int | None, scan_shape: list[int]):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("ConstantOfShape", ["shape"], ["scan_out"])],
        "body", [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL)],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("scan_out", scan_shape)],
    )
    inits = [numpy_helper.from_array(np.array(scan_shape, np.int64), "shape"),
             numpy_helper.from_array(np.array(True), "cond")]
    inputs = ["", "cond"]
    if trip is not None:
        inits.append(numpy_helper.from_array(np.array(trip, np.int64), "trip"))
        inputs[0] = "trip"
    return _model([helper.make_node("Loop", inputs, ["scans"], name="loop", body=body)], [],
                  [_vi("scans", ["n", *scan_shape])], inits)


def test_loop_trip_count_that_would_exhaust_memory_is_refused_early():
    session = _session(_loop(2**40, [1024]), memory_limit_bytes=64 * MB)
    with pytest.raises(ResourceLimitError, match=r"Loop 'loop': trip count 1,099,511,627,776 x 4,224 bytes per "
                                                 r"iteration needs .* above memory_limit_bytes=67,108,864") as info:
        session.run(None, {})
    assert info.value.value == "loop"


def test_loop_without_trip_count_stops_at_the_memory_limit():
    session = _session(_loop(None, [64 * 1024]), memory_limit_bytes=16 * MB)
    with pytest.raises(ResourceLimitError, match=r"Loop 'loop': after \d+ iterations its scan outputs"):
        session.run(None, {})


def test_loop_iteration_cap():
    session = _session(_loop(None, [1]), max_loop_iterations=1000)
    with pytest.raises(ResourceLimitError, match="ran 1,001 iterations, above max_loop_iterations=1,000"):
        session.run(None, {})
    assert _session(_loop(10, [2]), max_loop_iterations=1000).run(None, {})[0].shape == (10, 2)


def test_loop_growing_a_carried_sequence_is_stopped():
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("SequenceInsert", ["seq_in", "chunk"], ["seq_out"]),
        ],
        "body",
        [
            _vi("i", [], TensorProto.INT64),
            _vi("cond_in", [], TensorProto.BOOL),
            helper.make_tensor_sequence_value_info("seq_in", TensorProto.FLOAT, [16 * 1024]),
        ],
        [
            _vi("cond_out", [], TensorProto.BOOL),
            helper.make_tensor_sequence_value_info("seq_out", TensorProto.FLOAT, [16 * 1024]),
        ],
    )
    model = _model(
        [
            helper.make_node("SequenceEmpty", [], ["seq0"], dtype=TensorProto.FLOAT),
            helper.make_node("Loop", ["", "cond", "seq0"], ["seq"], name="grow", body=body),
            helper.make_node("SequenceLength", ["seq"], ["n"]),
        ],
        [],
        [_vi("n", [], TensorProto.INT64)],
        [
            numpy_helper.from_array(np.array(True), "cond"),
            numpy_helper.from_array(np.ones(16 * 1024, np.float32), "chunk"),
        ],
    )
    with pytest.raises(ResourceLimitError, match=r"Loop 'grow': after \d+ iterations"):
        _session(model, memory_limit_bytes=8 * MB).run(None, {})


def test_no_limit_means_no_checks():
    session = _session(_loop(50, [4]))
    assert session.run(None, {})[0].shape == (50, 4)
