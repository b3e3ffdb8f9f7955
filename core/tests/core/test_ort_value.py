"""``epoxy.OrtValue`` and ``run_with_ort_values``: host values share memory, device values
are made by the device's allocator and reach a session's device slot without copies."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from device_fakes import LABEL, PlainAllocator, Wrapped, dev_factory
from fakes import sim_factory
from models import chain
from onnx import TensorProto

from epoxy import InferenceSession, InvalidArgumentError, InvalidFeedError
from epoxy.api.ort_value import OrtValue
from epoxy.plugins import reset_default_registry


@pytest.fixture
def created(make_registry: Any) -> Iterator[list[Any]]:
    """The process-wide registry holds the fake device ``dev`` (kind ``npu``) and the mini
    cpu; yields the providers the dev factory creates."""
    made: list[Any] = []
    reset_default_registry(make_registry(dev_factory(created=made)))
    yield made
    reset_default_registry(None)


def _x() -> np.ndarray:
    return np.arange(6, dtype=np.float32).reshape(2, 3) - 2


# -- host values --------------------------------------------------------------------------------
def test_host_value_shares_the_array_memory() -> None:
    x = _x()
    v = OrtValue.ortvalue_from_numpy(x)
    out = v.numpy()
    assert np.shares_memory(out, x) and out is not x
    x[0, 0] = 42
    assert v.numpy()[0, 0] == 42
    assert v.shape() == [2, 3] and v.data_type() == "tensor(float)" and v.element_type() == TensorProto.FLOAT
    assert v.device_name() == "cpu" and v.is_tensor() and v.has_value() and not v.is_tensor_sequence()
    assert v.tensor_size_in_bytes() == 24 and v.data_ptr() == x.ctypes.data
    np.testing.assert_array_equal(np.asarray(v), x)


def test_non_contiguous_arrays_are_copied_and_scalars_accepted() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    v = OrtValue.ortvalue_from_numpy(x)
    assert not np.shares_memory(v.numpy(), x) and v.numpy().flags.c_contiguous
    np.testing.assert_array_equal(v.numpy(), x)
    assert OrtValue.ortvalue_from_numpy(np.float16(1.5)).shape() == []
    strings = OrtValue.ortvalue_from_numpy(np.array(["a", "bc"]))
    assert strings.data_type() == "tensor(string)" and strings.element_type() == TensorProto.STRING
    with pytest.raises(InvalidArgumentError, match="expected a numpy.ndarray, got list"):
        OrtValue.ortvalue_from_numpy([1, 2])


@pytest.mark.parametrize(("element_type", "dtype", "type_string"), [
    (np.int64, np.int64, "tensor(int64)"), (np.dtype("float64"), np.float64, "tensor(double)"),
    (TensorProto.FLOAT16, np.float16, "tensor(float16)"), (TensorProto.BOOL, np.bool_, "tensor(bool)"),
    (TensorProto.BFLOAT16, ml_dtypes.bfloat16, "tensor(bfloat16)"),
])
def test_from_shape_and_type(element_type: Any, dtype: Any, type_string: str) -> None:
    v = OrtValue.ortvalue_from_shape_and_type((2, 0, 3) if dtype is np.bool_ else [2, 3], element_type)
    assert v.numpy().dtype == np.dtype(dtype) and v.data_type() == type_string
    assert v.shape() == ([2, 0, 3] if dtype is np.bool_ else [2, 3])


def test_from_shape_and_type_errors() -> None:
    with pytest.raises(InvalidArgumentError, match=r"dim 1 must be an int >= 0, got -1"):
        OrtValue.ortvalue_from_shape_and_type([2, -1], np.float32)
    with pytest.raises(InvalidArgumentError, match="element_type"):
        OrtValue.ortvalue_from_shape_and_type([2], True)
    with pytest.raises(InvalidArgumentError, match="not an ONNX tensor type number"):
        OrtValue.ortvalue_from_shape_and_type([2], 999)


def test_with_onnx_type_reinterprets_without_copy() -> None:
    raw = np.array([0x3F80, 0x4000], np.uint16)  # 1.0 and 2.0 in bfloat16
    v = OrtValue.ortvalue_from_numpy_with_onnx_type(raw, TensorProto.BFLOAT16)
    assert v.data_type() == "tensor(bfloat16)" and np.shares_memory(v.numpy(), raw)
    np.testing.assert_array_equal(v.numpy().astype(np.float32), [1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="2 bytes.*needs 4"):
        OrtValue.ortvalue_from_numpy_with_onnx_type(raw, TensorProto.FLOAT)


def test_update_inplace_writes_into_the_source_array() -> None:
    x = _x()
    v = OrtValue.ortvalue_from_numpy(x)
    v.update_inplace(np.ones(6, np.float32))  # same element count, another shape: fine
    np.testing.assert_array_equal(x, np.ones((2, 3)))
    v.update_inplace(OrtValue.ortvalue_from_numpy(np.full((2, 3), 5, np.float32)))
    np.testing.assert_array_equal(x, 5)
    with pytest.raises(InvalidArgumentError, match=r"tensor\(float\) \[2, 3\].*tensor\(float\) \[3, 3\]"):
        v.update_inplace(np.ones((3, 3), np.float32))
    with pytest.raises(InvalidArgumentError, match=r"tensor\(double\)"):
        v.update_inplace(np.ones((2, 3)))  # onnxruntime would reinterpret the bytes
    with pytest.raises(InvalidArgumentError, match="numpy.ndarray or an OrtValue"):
        v.update_inplace([1.0] * 6)


def test_sparse_tensors_are_refused_with_what_to_use() -> None:
    v = OrtValue.ortvalue_from_numpy(_x())
    assert not v.is_sparse_tensor()
    with pytest.raises(InvalidArgumentError, match="no sparse tensors.*ortvalue_from_numpy"):
        v.as_sparse_tensor()
    with pytest.raises(InvalidArgumentError, match="no sparse tensors"):
        OrtValue.ort_value_from_sparse_tensor(object())


def test_sequences_and_absent_values() -> None:
    seq = OrtValue([np.zeros(2, np.float32), np.ones(3, np.float32)])
    assert seq.is_tensor_sequence() and not seq.is_tensor() and seq.data_type() == "seq(tensor(float))"
    with pytest.raises(InvalidArgumentError, match="numpy\\(\\) needs a tensor; this OrtValue holds a tensor sequence"):
        seq.numpy()
    none = OrtValue(None)
    assert not none.has_value() and not none.is_tensor()
    with pytest.raises(InvalidArgumentError, match="holds no value"):
        none.shape()


# -- device values ----------------------------------------------------------------------------------
def test_device_value_is_made_by_the_allocator(created: list[Any]) -> None:
    x = _x()
    v = OrtValue.ortvalue_from_numpy(x, "dev", 0)
    (provider,) = created
    assert isinstance(v._value, Wrapped) and provider.allocator.copies_in == 1
    assert v.device_name() == "dev" and v.shape() == [2, 3] and v.data_type() == "tensor(float)"
    assert v.tensor_size_in_bytes() == 24 and v.data_ptr() == v._value.data_ptr()
    assert provider.allocator.copies_out == 0  # metadata without a download
    out = v.numpy()
    np.testing.assert_array_equal(out, x)
    assert type(out) is np.ndarray and provider.allocator.copies_out == 1
    x[0, 0] = 42  # a device value is a copy
    assert v.numpy()[0, 0] == -2


def test_device_providers_are_created_once_and_found_by_alias_or_kind(created: list[Any]) -> None:
    for device_type in ("dev", "DEV", "npu", "devExecutionProvider"):
        v = OrtValue.ortvalue_from_shape_and_type([4], np.int64, device_type)
        assert v.device_name() == "dev" and isinstance(v._value, Wrapped)
    assert len(created) == 1 and created[0].allocator.copies_in == 4


def test_unknown_device_types_name_those_available(created: list[Any]) -> None:
    with pytest.raises(InvalidArgumentError, match=r"device_type 'cuda'.*available here: \['cpu', 'dev'\]"):
        OrtValue.ortvalue_from_numpy(_x(), "cuda")
    with pytest.raises(InvalidArgumentError, match=r"provider 'dev' has no device 3; its devices: \[0\]"):
        OrtValue.ortvalue_from_numpy(_x(), "dev", 3)
    with pytest.raises(InvalidArgumentError, match="device_id must be an int >= 0"):
        OrtValue.ortvalue_from_numpy(_x(), "dev", -1)
    assert not created


def test_device_update_inplace_keeps_the_buffer(created: list[Any]) -> None:
    v = OrtValue.ortvalue_from_numpy(_x(), "dev")
    buffer = v._value
    alloc = created[0].allocator
    v.update_inplace(np.ones((2, 3), np.float32))  # uploaded, then copied on the device
    assert v._value is buffer and (alloc.copies_in, alloc.copies_on_device) == (2, 1)
    other = OrtValue.ortvalue_from_numpy(np.full((2, 3), 7, np.float32), "dev")
    v.update_inplace(other)  # device to device: no host round trip
    assert (alloc.copies_in, alloc.copies_out, alloc.copies_on_device) == (3, 0, 2)
    np.testing.assert_array_equal(v.numpy(), 7)


def test_device_without_copy_into_writes_by_item_assignment(make_registry: Any) -> None:
    reset_default_registry(make_registry(dev_factory(allocator_type=PlainAllocator)))
    try:
        v = OrtValue.ortvalue_from_numpy(_x(), "dev")
        with pytest.raises(InvalidArgumentError, match="no copy_into"):
            v.update_inplace(np.ones((2, 3), np.float32))  # Wrapped has no __setitem__
    finally:
        reset_default_registry(None)


# -- run_with_ort_values -----------------------------------------------------------------------------
def _session(make_registry: Any, created: list[Any], ops: tuple[str, ...] = ("Relu", "Neg")) -> Any:
    session = InferenceSession(chain(list(ops)), providers=["dev", "cpu"],
                               registry=make_registry(dev_factory(created=created)))
    return session, created[-1]


def test_run_with_ort_values_host_in_host_out(make_registry: Any) -> None:
    session, _ = _session(make_registry, [])
    x = _x()
    (y,) = session.run_with_ort_values(None, {"x": OrtValue.ortvalue_from_numpy(x)})
    assert isinstance(y, OrtValue) and y.device_name() == "cpu"
    np.testing.assert_array_equal(y.numpy(), -np.maximum(x, 0))
    (y2,) = session.run_with_ort_values(["y"], {"x": x})  # plain arrays are feeds too
    np.testing.assert_array_equal(y2.numpy(), y.numpy())
    with pytest.raises(InvalidFeedError, match="missing input 'x'"):
        session.run_with_ort_values(None, {})
    with pytest.raises(InvalidFeedError, match=r"input 'x': expected dtype float32, got float64"):
        session.run_with_ort_values(None, {"x": OrtValue.ortvalue_from_numpy(x.astype(np.float64))})


def test_run_with_ort_values_device_values_stay_on_the_device(make_registry: Any, created: list[Any]) -> None:
    x = _x()
    fed = OrtValue.ortvalue_from_numpy(x, "dev")  # made by the process-wide dev provider
    session, provider = _session(make_registry, created)
    alloc = provider.allocator
    (y,) = session.run_with_ort_values(None, {"x": fed}, {"output_device": "dev"})
    assert provider.seen[0] is fed._value  # the very buffer, in the device slot
    assert (alloc.copies_in, alloc.copies_out) == (0, 0)  # no upload, no download
    assert y.device_name() == "dev" and isinstance(y._value, Wrapped)
    np.testing.assert_array_equal(y.numpy(), -np.maximum(x, 0))
    (host,) = session.run_with_ort_values(None, {"x": fed})  # outputs on the host by default
    assert host.device_name() == "cpu" and alloc.copies_out == 2  # y.numpy() above, then y's download


def test_run_with_ort_values_from_a_device_the_session_does_not_use(make_registry: Any,
                                                                   created: list[Any]) -> None:
    x = _x()
    fed = OrtValue.ortvalue_from_numpy(x, "dev")
    session = InferenceSession(chain(["Relu", "Neg"]), providers=["sim", "cpu"], registry=make_registry(sim_factory()))
    (y,) = session.run_with_ort_values(None, {"x": fed})
    np.testing.assert_array_equal(y.numpy(), -np.maximum(x, 0))
    assert created[0].allocator.copies_out == 1  # downloaded once for the session


def test_device_label_is_the_session_device_key(make_registry: Any, created: list[Any]) -> None:
    session, _ = _session(make_registry, created)
    assert session.get_devices()["dev"] == LABEL
    (y,) = session.run_with_ort_values(None, {"x": _x()}, {"output_device": LABEL})
    assert y.device_name() == "dev" and y._device.key == LABEL
