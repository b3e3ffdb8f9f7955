"""``epoxy.OrtValue`` and ``IOBinding`` against onnxruntime (the oracle) on a small model:
the same calls give the same answers, share memory in the same places and fail in the
same situations (with epoxy's own error classes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

import epoxy

ort = pytest.importorskip("onnxruntime")
LIBS = [pytest.param(ort, id="onnxruntime"), pytest.param(epoxy, id="epoxy")]


def _model_bytes() -> bytes:
    """r = Relu(x); y = Add(r, b); s = SequenceConstruct(x, r); outputs y, r, s."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "b"], ["y"]),
             helper.make_node("SequenceConstruct", ["x", "r"], ["s"])]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


MODEL = _model_bytes()


def _session(lib: Any) -> Any:
    return lib.InferenceSession(MODEL, providers=["CPUExecutionProvider"] if lib is ort else ["cpu"])


def _x() -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3) - 2


B = np.ones(3, np.float32)


def _both(scenario: Callable[[Any], Any]) -> Any:
    """Run ``scenario`` with each library; their results must be equal."""
    ours, theirs = scenario(epoxy), scenario(ort)
    assert _plain(ours) == _plain(theirs), (ours, theirs)
    return ours


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.tolist())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# -- OrtValue -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8, np.int8, np.bool_,
                                   np.float16, np.uint64])
def test_host_ortvalue_answers_like_onnxruntime(dtype: Any) -> None:
    def scenario(lib: Any) -> Any:
        a = np.ones((2, 3), dtype)
        v = lib.OrtValue.ortvalue_from_numpy(a)
        return [v.shape(), v.data_type(), v.element_type(), v.device_name(), v.tensor_size_in_bytes(),
                v.is_tensor(), v.has_value(), v.is_tensor_sequence(), v.is_sparse_tensor(),
                bool(np.shares_memory(v.numpy(), a)), v.data_ptr() == a.ctypes.data, v.numpy()]

    _both(scenario)


def test_non_contiguous_arrays_are_copied_like_onnxruntime() -> None:
    def scenario(lib: Any) -> Any:
        a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
        v = lib.OrtValue.ortvalue_from_numpy(a)
        return [v.shape(), bool(np.shares_memory(v.numpy(), a)), v.numpy()]

    _both(scenario)


@pytest.mark.parametrize("element_type", [np.float32, np.int64, float, TensorProto.DOUBLE, TensorProto.FLOAT16,
                                          TensorProto.INT8])
def test_from_shape_and_type_like_onnxruntime(element_type: Any) -> None:
    def scenario(lib: Any) -> Any:
        v = lib.OrtValue.ortvalue_from_shape_and_type([2, 3], element_type)
        return [v.shape(), v.data_type(), v.element_type(), str(v.numpy().dtype), v.tensor_size_in_bytes()]

    _both(scenario)


def test_update_inplace_writes_the_source_array_like_onnxruntime() -> None:
    def scenario(lib: Any) -> Any:
        a = _x()
        v = lib.OrtValue.ortvalue_from_numpy(a)
        v.update_inplace(np.full((2, 3), 4, np.float32))
        first = a.copy()
        v.update_inplace(np.arange(6, dtype=np.float32))  # same element count, flat
        with pytest.raises(Exception):  # noqa: B017 - each library's own class
            v.update_inplace(np.ones((3, 3), np.float32))
        return [first, a, v.numpy()]

    _both(scenario)


def test_run_with_ort_values_like_onnxruntime() -> None:
    def scenario(lib: Any) -> Any:
        s = _session(lib)
        feeds = {"x": lib.OrtValue.ortvalue_from_numpy(_x()), "b": lib.OrtValue.ortvalue_from_numpy(B)}
        named = s.run_with_ort_values(["y"], feeds)
        every = s.run_with_ort_values(None, feeds)
        empty = s.run_with_ort_values([], feeds)
        assert all(isinstance(v, lib.OrtValue) for v in [*named, *every, *empty])
        with pytest.raises(Exception):  # noqa: B017 - a missing input
            s.run_with_ort_values(None, {"x": feeds["x"]})
        return [named[0].numpy(), [v.data_type() for v in every], len(empty), every[1].device_name(),
                every[2].is_tensor_sequence()]

    _both(scenario)


def test_type_strings_agree_between_node_args_and_values() -> None:
    def scenario(lib: Any) -> Any:
        s = _session(lib)
        outs = s.run_with_ort_values(None, {"x": lib.OrtValue.ortvalue_from_numpy(_x()),
                                            "b": lib.OrtValue.ortvalue_from_numpy(B)})
        return [[a.type for a in s.get_inputs()], [a.type for a in s.get_outputs()], [v.data_type() for v in outs]]

    types = _both(scenario)
    assert types[1] == types[2]


# -- IOBinding -----------------------------------------------------------------------------------------
def test_iobinding_reads_bound_arrays_at_run_and_keeps_binding_order() -> None:
    def scenario(lib: Any) -> Any:
        s = _session(lib)
        x = _x()
        io = s.io_binding()
        before = io.get_outputs()
        io.bind_cpu_input("x", x)
        io.bind_cpu_input("b", B)
        io.bind_output("r")
        io.bind_output("y")
        io.bind_output("r")  # bound again: keeps its place
        x[0, 0] = 50  # after binding: the run sees it
        s.run_with_iobinding(io)
        outputs = io.get_outputs()
        copies = io.copy_outputs_to_cpu()
        shared = [bool(np.shares_memory(c, o.numpy())) for c, o in zip(copies, outputs)]
        io.clear_binding_outputs()
        return [len(before), copies, shared, [o.device_name() for o in outputs], len(io.get_outputs())]

    _both(scenario)


def test_iobinding_preallocated_buffers_are_written_in_place() -> None:
    def scenario(lib: Any) -> Any:
        s = _session(lib)
        x = _x()
        y_buf = np.zeros((2, 3), np.float32)
        r_buf = lib.OrtValue.ortvalue_from_numpy(np.zeros((2, 3), np.float32))
        io = s.io_binding()
        io.bind_input("x", "cpu", 0, np.float32, [2, 3], x.ctypes.data)
        io.bind_cpu_input("b", B)
        io.bind_output("y", "cpu", 0, np.float32, [2, 3], y_buf.ctypes.data)
        io.bind_ortvalue_output("r", r_buf)
        s.run_with_iobinding(io)
        y, r = io.get_outputs()
        return [y_buf, r_buf.numpy(), y.data_ptr() == y_buf.ctypes.data, r.data_ptr() == r_buf.data_ptr()]

    _both(scenario)


def test_iobinding_sequence_output_like_onnxruntime() -> None:
    def scenario(lib: Any) -> Any:
        s = _session(lib)
        io = s.io_binding()
        io.bind_cpu_input("x", _x())
        io.bind_cpu_input("b", B)
        io.bind_output("s")
        s.run_with_iobinding(io)
        (seq,) = io.get_outputs()
        return [seq.data_type(), seq.is_tensor(), seq.is_tensor_sequence(), io.copy_outputs_to_cpu()]

    _both(scenario)


@pytest.mark.parametrize("lib", LIBS)
def test_iobinding_failures_happen_where_onnxruntime_fails(lib: Any) -> None:
    """The same situations fail in both (epoxy names what is wrong, in an epoxy error)."""
    errors = (epoxy.EpoxyError,) if lib is epoxy else (Exception,)
    s = _session(lib)
    with pytest.raises(errors):
        s.io_binding().bind_cpu_input("nope", _x())  # unknown input
    io = s.io_binding()
    io.bind_cpu_input("x", _x())
    io.bind_cpu_input("b", B)
    with pytest.raises(errors):
        s.run_with_iobinding(io)  # no output bound
    with pytest.raises(errors):
        io.bind_output("y", "cpu", 0, np.float32, None, 1234)  # a pointer without a shape
    io.bind_ortvalue_output("y", lib.OrtValue.ortvalue_from_numpy(np.zeros((3, 3), np.float32)))
    with pytest.raises(errors):
        s.run_with_iobinding(io)  # the bound buffer has the wrong shape
    missing = s.io_binding()
    missing.bind_cpu_input("b", B)
    missing.bind_output("y")
    with pytest.raises(errors):
        s.run_with_iobinding(missing)  # x is not bound
