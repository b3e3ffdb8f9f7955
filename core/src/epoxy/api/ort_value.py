"""``OrtValue``: onnxruntime's value type, over host arrays or any provider's device values.

Code written for onnxruntime creates values on a device (``OrtValue.ortvalue_from_numpy(a,
"cuda", 0)``), feeds them to ``run_with_ort_values`` or an ``IOBinding`` and reads them
back with ``numpy()``. Here an ``OrtValue`` holds what epoxy's sessions take as feeds: a
numpy array for the host, or the device value a provider's allocator made
(:mod:`epoxy.api.value_devices` says how a device type finds that provider). It belongs to no
session: a device value goes through the session's device-feed path (no upload when the
session runs on that device, one download when it does not).

As in onnxruntime, a host value made from a C-contiguous numpy array shares its memory
(``numpy()`` is a view of it; ``update_inplace`` writes into it); other arrays are copied.
Unlike onnxruntime, string tensors are allowed (epoxy runs string ops), and
``update_inplace`` refuses data of another dtype instead of reinterpreting its bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..contract import ValueType
from ..errors import InvalidArgumentError
from ..graph.dtypes import onnx_to_numpy
from ..graph.type_strings import tensor_type_string, type_string
from .value_devices import (
    HOST_DEVICE,
    ValueDevice,
    accepting_device,
    data_pointer,
    resolve_device,
    session_devices,
    write_into,
)

_SPARSE_HINT = ("epoxy has no sparse tensors: pass the dense array instead "
                "(scipy.sparse: .toarray()) with OrtValue.ortvalue_from_numpy")


def element_dtype(element_type: Any) -> np.dtype:
    """A numpy dtype from onnxruntime's ``element_type``: a numpy type or dtype
    (``np.float32``), or an ONNX ``TensorProto`` type number (``TensorProto.BFLOAT16``)."""
    if isinstance(element_type, bool):
        raise InvalidArgumentError(f"element_type must be a numpy type or an ONNX type number, got {element_type!r}")
    if isinstance(element_type, (int, np.integer)):
        try:
            return onnx_to_numpy(int(element_type))
        except Exception as exc:  # onnx raises KeyError/ValueError for unknown numbers
            raise InvalidArgumentError(f"element_type {element_type}: not an ONNX tensor type number ({exc})") from exc
    try:
        return np.dtype(element_type)
    except TypeError as exc:
        raise InvalidArgumentError(f"element_type {element_type!r} is not a numpy type ({exc})") from exc


def checked_shape(shape: Any, what: str = "shape") -> tuple[int, ...]:
    """``shape`` as a tuple of ints >= 0, or an error saying which dim is wrong."""
    if isinstance(shape, (str, bytes)) or not isinstance(shape, (Sequence, np.ndarray)):
        raise InvalidArgumentError(f"{what} must be a list of ints, got {shape!r}")
    dims = []
    for axis, dim in enumerate(shape):
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 0:
            raise InvalidArgumentError(f"{what}: dim {axis} must be an int >= 0, got {dim!r} (shape {list(shape)})")
        dims.append(int(dim))
    return tuple(dims)


def _onnx_type(dtype: np.dtype) -> int:
    from onnx import helper

    return int(helper.np_dtype_to_tensor_dtype(dtype))


def _host_array(value: Any, what: str) -> np.ndarray:
    """A numpy array onnxruntime would wrap: C-contiguous arrays as they are, others copied."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise InvalidArgumentError(f"{what}: expected a numpy.ndarray, got {type(value).__name__}")
    if value.dtype.kind in "US":  # strings are object arrays in epoxy, as in onnxruntime's outputs
        return value.astype(object)
    return value if value.flags.c_contiguous else np.ascontiguousarray(value)


class OrtValue:
    """A tensor on the host or on a provider's device (onnxruntime's ``OrtValue``).

    Make one with :meth:`ortvalue_from_numpy` or :meth:`ortvalue_from_shape_and_type`;
    sessions return them from ``run_with_ort_values`` and ``IOBinding.get_outputs``.
    Outputs of sequence type are tensor sequences (``is_tensor_sequence()``), absent
    optional outputs hold no value (``has_value()`` is False).
    """

    __slots__ = ("_device", "_value")

    def __init__(self, value: Any, device: ValueDevice | None = None) -> None:
        """Wrap a value already where ``device`` says (epoxy internals; use the factories)."""
        self._value = value
        self._device = HOST_DEVICE if device is None else device

    # -- making values ---------------------------------------------------------------------
    @classmethod
    def ortvalue_from_numpy(cls, numpy_obj: Any, device_type: str = "cpu", device_id: int = 0,
                            vendor_id: int = -1) -> OrtValue:
        """A value holding ``numpy_obj``: on the host it shares the array's memory (a copy
        only when the array is not C-contiguous); on a device it is a copy made by the
        device's allocator. ``vendor_id`` is accepted for onnxruntime's signature and unused:
        ``device_type`` names the device (``"cuda"``, a provider name, a device kind)."""
        array = _host_array(numpy_obj, "ortvalue_from_numpy")
        device = resolve_device(device_type, device_id)
        if device.is_host:
            return cls(array)
        return cls(device.allocator.to_device(array), device)

    @classmethod
    def ortvalue_from_numpy_with_onnx_type(cls, data: Any, onnx_element_type: int) -> OrtValue:
        """A host value over ``data``'s memory read as ONNX type ``onnx_element_type`` (for
        types numpy lacks, e.g. bfloat16 stored as uint16); item sizes must agree."""
        array = _host_array(data, "ortvalue_from_numpy_with_onnx_type")
        dtype = element_dtype(int(onnx_element_type))
        if array.dtype.itemsize != dtype.itemsize or dtype == np.dtype(object) or array.dtype == np.dtype(object):
            raise InvalidArgumentError(
                f"ortvalue_from_numpy_with_onnx_type: items of {array.dtype} are {array.dtype.itemsize} bytes, "
                f"ONNX type {onnx_element_type} ({dtype}) needs {dtype.itemsize}")
        return cls(array.view(dtype))

    @classmethod
    def ortvalue_from_shape_and_type(cls, shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0, vendor_id: int = -1) -> OrtValue:
        """A zero-filled value of this shape and element type (a numpy type or an ONNX type
        number) on the device; typically an output buffer for ``bind_ortvalue_output``."""
        dims = checked_shape(shape)
        array = np.zeros(dims, element_dtype(element_type))
        device = resolve_device(device_type, device_id)
        if device.is_host:
            return cls(array)
        return cls(device.allocator.to_device(array), device)

    @classmethod
    def ort_value_from_sparse_tensor(cls, sparse_tensor: Any) -> OrtValue:
        """Not offered: epoxy has no sparse tensors (an error saying what to use)."""
        raise InvalidArgumentError(f"ort_value_from_sparse_tensor: {_SPARSE_HINT}")

    # -- what it holds ---------------------------------------------------------------------
    def _tensor(self, method: str) -> Any:
        if not self.is_tensor():
            held = "a tensor sequence" if self.is_tensor_sequence() else "no value"
            raise InvalidArgumentError(f"OrtValue.{method}() needs a tensor; this OrtValue holds {held}")
        return self._value

    def is_tensor(self) -> bool:
        return self._value is not None and not isinstance(self._value, (list, tuple))

    def is_tensor_sequence(self) -> bool:
        return isinstance(self._value, (list, tuple))

    def is_sparse_tensor(self) -> bool:
        """Always False: epoxy has no sparse tensors."""
        return False

    def as_sparse_tensor(self) -> Any:
        """Not offered: epoxy has no sparse tensors (an error saying what to use)."""
        raise InvalidArgumentError(f"OrtValue.as_sparse_tensor(): {_SPARSE_HINT}")

    def has_value(self) -> bool:
        """False only for an optional value that is absent."""
        return self._value is not None

    def device_name(self) -> str:
        """``"cpu"`` for host memory, else the name of the provider whose device holds it."""
        return self._device.name

    def shape(self) -> list[int]:
        return [int(d) for d in self._tensor("shape").shape]

    def data_type(self) -> str:
        """onnxruntime's type string (``tensor(float)``), as the session's ``NodeArg.type``."""
        if self.is_tensor():
            return tensor_type_string(self._value.dtype)
        if self.is_tensor_sequence():
            element = ValueType("tensor", dtype=np.dtype(self._value[0].dtype)) if self._value else ValueType()
            return type_string(ValueType("sequence", element=element))
        return type_string(ValueType())

    def element_type(self) -> int:
        """The ONNX ``TensorProto`` type number of the elements (1 for float), as
        onnxruntime returns it."""
        return _onnx_type(np.dtype(self._tensor("element_type").dtype))

    def tensor_size_in_bytes(self) -> int:
        value = self._tensor("tensor_size_in_bytes")
        dtype = np.dtype(value.dtype)
        if dtype == np.dtype(object):
            raise InvalidArgumentError("OrtValue.tensor_size_in_bytes(): string tensors have no fixed byte size")
        return int(np.prod(value.shape, dtype=np.int64)) * dtype.itemsize

    def data_ptr(self) -> int:
        """Address of the first element (host memory, or device memory for device values)."""
        value = self._tensor("data_ptr")
        if np.dtype(value.dtype) == np.dtype(object):
            raise InvalidArgumentError("OrtValue.data_ptr(): string tensors hold Python objects, not a data buffer")
        return data_pointer(value)

    # -- reading and writing ---------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The tensor as a numpy array: a view sharing the value's memory on the host (as
        onnxruntime's cpu values), a host copy for device values."""
        value = self._tensor("numpy")
        if self._device.is_host:
            return value.view() if isinstance(value, np.ndarray) else np.asarray(value)
        return self._device.allocator.to_host(value)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        array = self.numpy()
        if copy:
            return np.array(array, dtype=dtype, copy=True)
        return array if dtype is None else np.asarray(array, dtype=dtype)

    def update_inplace(self, data: Any) -> None:
        """Copy ``data`` (a numpy array or an OrtValue of the same dtype and element count)
        into this value's memory, which keeps its address (bound buffers see the change)."""
        target = self._tensor("update_inplace")
        if isinstance(data, OrtValue):
            source, where = data._tensor("update_inplace"), data._device
        elif isinstance(data, (np.ndarray, np.generic)):
            source, where = np.asarray(data), HOST_DEVICE
        else:
            raise InvalidArgumentError(
                f"update_inplace takes a numpy.ndarray or an OrtValue, got {type(data).__name__}"
            )
        shape = tuple(int(d) for d in target.shape)
        got = tuple(int(d) for d in source.shape)
        if np.dtype(source.dtype) != np.dtype(target.dtype) or int(np.prod(got)) != int(np.prod(shape)):
            raise InvalidArgumentError(
                f"update_inplace: this OrtValue is {tensor_type_string(target.dtype)} {list(shape)}, the data "
                f"{tensor_type_string(source.dtype)} {list(got)}: dtype and element count must match")
        if where.key != self._device.key or got != shape:  # through the host (reshaped there)
            host = data.numpy() if isinstance(data, OrtValue) else source
            source = np.ascontiguousarray(host).reshape(shape)
            if not self._device.is_host:
                source = self._device.allocator.to_device(source)
        try:
            write_into(self._device, target, source)
        except ValueError as exc:  # a read-only host array
            raise InvalidArgumentError(f"update_inplace: the value's memory cannot be written ({exc})") from exc

    def __repr__(self) -> str:
        held = f"{self.data_type()} {self.shape()}" if self.is_tensor() else self.data_type()
        return f"<epoxy.OrtValue {held} on {self._device.name}>"


def is_host_value(value: Any) -> bool:
    """Plain host data (a numpy array, a sequence of them, nothing): never a device value,
    whatever allocators say (numpy subclasses may stand for device memory)."""
    return value is None or type(value) is np.ndarray or isinstance(value, (list, tuple, np.generic))


def wrap_output(value: Any, devices: Mapping[str, ValueDevice], produced_on: str | None = None) -> OrtValue:
    """An output as an OrtValue: host data on the host, a device value on the session
    device that accepts it (else the one it was produced on)."""
    if is_host_value(value):
        return OrtValue(value)
    device = accepting_device(devices, value) or devices.get(produced_on or "")
    return OrtValue(value) if device is None else OrtValue(value, device)


def feed_value(value: Any, devices: Mapping[str, ValueDevice]) -> Any:
    """What ``session.run`` takes for an OrtValue: its array or device value, downloaded
    first only when it lives on a device none of the session's allocators accept."""
    if not isinstance(value, OrtValue):
        return value
    if value._device.is_host or value.is_tensor_sequence() or accepting_device(devices, value._value) is not None:
        return value._value
    return value.numpy()


def run_with_ort_values(session: Any, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
                        run_options: Any = None) -> list[OrtValue]:
    """``session.run`` with OrtValue feeds, returning OrtValues.

    Device values feed the session's device slots directly (no upload) when the session
    runs on their device, and are downloaded once when it does not. Outputs come back on
    the host, as with ``run``, unless ``run_options`` asks for ``output_device``: those stay
    on their device (``device_name()`` says which). Plain numpy arrays are taken as feeds too.
    """
    if not isinstance(input_dict_ort_values, Mapping):
        raise InvalidArgumentError(
            f"run_with_ort_values takes a dict of input name -> OrtValue, got {type(input_dict_ort_values).__name__}")
    devices = session_devices(session)
    feeds = {name: feed_value(value, devices) for name, value in input_dict_ort_values.items()}
    results = session.run(output_names, feeds, run_options)
    names = list(output_names) if output_names else [arg.name for arg in session.get_outputs()]
    produced = session.io_placement().outputs
    return [wrap_output(value, devices, produced[name].produced_on if name in produced else None)
            for name, value in zip(names, results)]
