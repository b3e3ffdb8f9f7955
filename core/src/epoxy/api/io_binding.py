"""``IOBinding``: onnxruntime's bound inputs and outputs, for every provider with an allocator.

    binding = session.io_binding()
    binding.bind_cpu_input("x", x)                     # host array, no copy (read at run)
    binding.bind_input("ids", gpu_ids)                 # a device value an allocator accepts
    binding.bind_ortvalue_input("mask", ort_value)     # or an OrtValue, on any device
    binding.bind_output("logits", "cuda")              # returned on that device
    binding.bind_ortvalue_output("hidden", buffer)     # or written into a caller's buffer
    session.run_with_iobinding(binding)
    logits, hidden = binding.get_outputs()             # OrtValues
    host = binding.copy_outputs_to_cpu()               # numpy arrays

Built only on the session's public device-feed API (see docs/ARCHITECTURE.md, "Device feeds
and fetches"): bound device values are feeds that a provider's allocator ``accepts``, so the
session places them in its device slots without the upload step; an output bound to the
device that produces it is fetched with ``run_options={"output_device": ...}`` without the
download step. Otherwise values move through the host once: an output produced on the host
(or another device) is uploaded with the bound device's allocator after the run, a bound
value on a device the session does not use is downloaded before it.

As in onnxruntime: a bound host array is read when the run starts (changes made after
binding are seen); outputs keep the order they were first bound in; an output bound to a
preallocated buffer is written into it (after the run, by a copy: epoxy's kernels do not
write graph outputs into caller memory) and ``get_outputs`` returns that buffer; running
with no output bound is an error; outputs are synchronized at the end of a run. Unlike
onnxruntime, names, dtypes and static dims are checked when binding, and each run returns
new output arrays instead of reusing the previous run's.

The raw-pointer forms (``bind_input(name, device_type, device_id, element_type, shape,
buffer_ptr)``, ``bind_output(..., buffer_ptr=...)``) wrap host memory directly, and device
memory where the provider's allocator has ``from_pointer`` (see :mod:`epoxy.api.value_devices`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..contract import ValueType
from ..errors import InvalidArgumentError, InvalidFeedError
from ..graph.type_strings import tensor_type_string
from ..run.feeds import check_device_tensor, check_value
from .ort_value import OrtValue, checked_shape, element_dtype, is_host_value
from .value_devices import (
    HOST_DEVICE,
    ValueDevice,
    accepting_device,
    resolve_device,
    session_device,
    session_devices,
    synchronize,
    wrap_pointer,
    write_into,
)


@dataclass(frozen=True)
class _BoundInput:
    """A bound input: the value ``run`` is fed, and how to bring it to the host first when
    it lives on a device this session does not use (``None``: fed as it is)."""

    value: Any
    device: ValueDevice = HOST_DEVICE
    download: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class _BoundOutput:
    """A bound output: the device it is returned on and an optional buffer to write into."""

    device: ValueDevice = HOST_DEVICE
    buffer: Any = None


class IOBinding:
    """Inputs and outputs bound to host or device memory for ``session.run_with_iobinding``
    (onnxruntime's ``IOBinding``); get one from ``session.io_binding()``.

    Uses only the session's public API: ``get_inputs``/``get_overridable_initializers``/
    ``get_outputs``, ``get_providers``/``get_provider``, ``io_placement`` and ``run``.
    """

    def __init__(self, session: Any) -> None:
        self._session = session
        self._input_types: dict[str, ValueType] = {
            arg.name: arg.value_type for arg in [*session.get_inputs(), *session.get_overridable_initializers()]}
        self._required = [arg.name for arg in session.get_inputs()]
        self._output_types: dict[str, ValueType] = {arg.name: arg.value_type for arg in session.get_outputs()}
        self._devices = session_devices(session)
        self._inputs: dict[str, _BoundInput] = {}
        self._outputs: dict[str, _BoundOutput] = {}  # insertion order: the order outputs come back in
        self._results: list[OrtValue] = []

    @property
    def session(self) -> Any:
        """The session this binding was made for (the only one it runs with)."""
        return self._session

    # -- inputs ----------------------------------------------------------------------------
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind a host array without copying it: the run reads it as it is then."""
        vt = self._input_type(name)
        if not is_host_value(arr_on_cpu) and not isinstance(arr_on_cpu, np.ndarray):
            raise InvalidFeedError(
                f"input {name!r}: bind_cpu_input takes a numpy array, got {type(arr_on_cpu).__name__}", input_name=name
            )
        self._inputs[name] = _BoundInput(check_value(name, arr_on_cpu, vt, {}))

    def bind_input(self, name: str, device_type: Any = None, device_id: int = 0, element_type: Any = None,
                   shape: Any = None, buffer_ptr: int | None = None) -> None:
        """Bind an input: onnxruntime's form ``bind_input(name, device_type, device_id,
        element_type, shape, buffer_ptr)`` over raw memory, or epoxy's ``bind_input(name,
        value)`` with a numpy array, an OrtValue or a device value an allocator accepts."""
        vt = self._input_type(name)
        if not isinstance(device_type, str):
            if element_type is not None or shape is not None or buffer_ptr is not None:
                raise InvalidArgumentError(
                    f"input {name!r}: bind_input(name, device_type, device_id, element_type, shape, buffer_ptr) "
                    f"takes a device type such as 'cpu' or 'cuda' second, got {type(device_type).__name__}")
            self._bind_value(name, device_type, vt)
            return
        if element_type is None or shape is None or buffer_ptr is None:
            raise InvalidArgumentError(
                f"input {name!r}: bind_input with a device type needs element_type, shape and buffer_ptr; "
                f"to bind an array or an OrtValue use bind_input({name!r}, value) or bind_ortvalue_input")
        device = self._device(device_type, device_id)
        value = wrap_pointer(device, buffer_ptr, checked_shape(shape, f"input {name!r}: shape"),
                             element_dtype(element_type), f"input {name!r}")
        self._bind_placed(name, value, device, vt)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an OrtValue (its memory, no copy when the session runs on its device)."""
        vt = self._input_type(name)
        if not isinstance(ortvalue, OrtValue):
            raise InvalidFeedError(
                f"input {name!r}: bind_ortvalue_input takes an OrtValue, got {type(ortvalue).__name__}", input_name=name
            )
        self._bind_placed(name, ortvalue._value, ortvalue._device, vt)

    def _bind_value(self, name: str, value: Any, vt: ValueType) -> None:
        if isinstance(value, OrtValue):
            self._bind_placed(name, value._value, value._device, vt)
            return
        device = None if is_host_value(value) else accepting_device(self._devices, value)
        if device is None and not isinstance(value, np.ndarray) and not is_host_value(value):
            raise InvalidFeedError(
                f"input {name!r}: a value of type {type(value).__name__} is neither a numpy array nor a value of a "
                f"device this session "
                f"uses ({sorted(d.name for d in self._devices.values()) or 'none'}); bind an OrtValue "
                "(OrtValue.ortvalue_from_numpy(array, device_type)) or a numpy array",
                input_name=name,
            )
        self._bind_placed(name, value, device or HOST_DEVICE, vt)

    def _bind_placed(self, name: str, value: Any, device: ValueDevice, vt: ValueType) -> None:
        """Bind a value that lives on ``device``; checked against the input's type."""
        if device.is_host or isinstance(value, (list, tuple)):
            self._inputs[name] = _BoundInput(check_value(name, value, vt, {}))
            return
        check_device_tensor(name, value, vt, {})
        if accepting_device(self._devices, value) is not None:
            self._inputs[name] = _BoundInput(value, self._same_device(device))
        else:  # a device this session does not run on: its allocator downloads it at run
            self._inputs[name] = _BoundInput(value, device, device.allocator.to_host)

    def synchronize_inputs(self) -> None:
        """Wait until the devices of bound inputs have finished pending work on them."""
        for device in _distinct(b.device for b in self._inputs.values()):
            synchronize(device)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    # -- outputs ---------------------------------------------------------------------------
    def bind_output(self, name: str, device_type: Any = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Any = None, buffer_ptr: int | None = None) -> None:
        """Bind an output to a device (``"cpu"`` by default) where the run returns it, or
        to preallocated memory there (``element_type``, ``shape`` and ``buffer_ptr``) that
        the run writes into. Epoxy's ``bind_output(name, buffer)`` takes the buffer itself:
        a numpy array, an OrtValue or a device value an allocator accepts."""
        self._output_type(name)
        if device_type is None:
            device_type = "cpu"
        if not isinstance(device_type, str):
            if element_type is not None or shape is not None or buffer_ptr is not None:
                raise InvalidArgumentError(
                    f"output {name!r}: bind_output(name, device_type, device_id, element_type, shape, buffer_ptr) "
                    f"takes a device type such as 'cpu' or 'cuda' second, got {type(device_type).__name__}")
            self._bind_buffer(name, device_type)
            return
        device = self._device(device_type, device_id)
        if buffer_ptr is None:
            self._set_output(name, _BoundOutput(device))
            return
        if element_type is None or shape is None:
            raise InvalidArgumentError(
                f"output {name!r}: element_type and shape are needed with a preallocated buffer_ptr")
        buffer = wrap_pointer(device, buffer_ptr, checked_shape(shape, f"output {name!r}: shape"),
                              element_dtype(element_type), f"output {name!r}")
        self._set_output(name, _BoundOutput(device, buffer))

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an output to a preallocated OrtValue: the run writes into its memory."""
        self._output_type(name)
        if not isinstance(ortvalue, OrtValue):
            raise InvalidArgumentError(
                f"output {name!r}: bind_ortvalue_output takes an OrtValue, got {type(ortvalue).__name__}")
        if not ortvalue.is_tensor():
            raise InvalidArgumentError(f"output {name!r}: the OrtValue bound as its buffer must hold a tensor")
        self._set_output(name, _BoundOutput(self._same_device(ortvalue._device), ortvalue._value))

    def _bind_buffer(self, name: str, buffer: Any) -> None:
        if isinstance(buffer, OrtValue):
            self.bind_ortvalue_output(name, buffer)
            return
        device = None if type(buffer) is np.ndarray else accepting_device(self._devices, buffer)
        if device is None and not isinstance(buffer, np.ndarray):
            raise InvalidArgumentError(
                f"output {name!r}: a buffer of type {type(buffer).__name__} is neither a numpy array nor a value of a "
                f"device "
                f"this session uses ({sorted(d.name for d in self._devices.values()) or 'none'})"
            )
        self._set_output(name, _BoundOutput(device or HOST_DEVICE, buffer))

    def _set_output(self, name: str, bound: _BoundOutput) -> None:
        vt = self._output_types[name]
        if vt.kind != "tensor" and (bound.buffer is not None or not bound.device.is_host):
            raise InvalidArgumentError(
                f"output {name!r} is a {vt.kind}, not a tensor: it can only be bound to the host without a buffer")
        if bound.buffer is not None and vt.dtype is not None and np.dtype(bound.buffer.dtype) != vt.dtype:
            raise InvalidArgumentError(
                f"output {name!r} is {tensor_type_string(vt.dtype)}; the bound buffer is "
                f"{tensor_type_string(bound.buffer.dtype)}")
        self._outputs[name] = bound  # a name bound again keeps its place in the order

    def synchronize_outputs(self) -> None:
        """Wait until the devices of bound outputs have finished pending work on them."""
        for device in _distinct(b.device for b in self._outputs.values()):
            synchronize(device)

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    # -- results ---------------------------------------------------------------------------
    def get_outputs(self) -> list[OrtValue]:
        """The outputs of the last run, in binding order (``[]`` before any run)."""
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        """Same as :meth:`get_outputs` (onnxruntime returns its C++ vector here)."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        """Host copies of the last run's outputs (never sharing memory with them)."""
        return [_host_copy(value) for value in self._results]

    # -- helpers -----------------------------------------------------------------------------
    def _input_type(self, name: str) -> ValueType:
        vt = self._input_types.get(name) if isinstance(name, str) else None
        if vt is None:
            raise InvalidFeedError(f"unknown input {name!r}; the model's inputs are {sorted(self._input_types)}",
                                   input_name=name if isinstance(name, str) else None)
        return vt

    def _output_type(self, name: str) -> ValueType:
        vt = self._output_types.get(name) if isinstance(name, str) else None
        if vt is None:
            raise InvalidArgumentError(f"unknown output {name!r}; the model's outputs are {list(self._output_types)}")
        return vt

    def _device(self, device_type: str, device_id: int) -> ValueDevice:
        """The session's device of that type and id, else any installed provider's."""
        return session_device(self._session, device_type, device_id) or resolve_device(device_type, device_id)

    def _same_device(self, device: ValueDevice) -> ValueDevice:
        """The session's own provider for a device (an OrtValue made outside the session
        names another provider object for the same device; the session's runs there)."""
        return self._devices.get(device.key, device)

    def _feeds(self) -> dict[str, Any]:
        missing = [n for n in self._required if n not in self._inputs]
        if missing:
            raise InvalidFeedError(
                f"input {missing[0]!r} is not bound: bind it with bind_cpu_input, bind_input or bind_ortvalue_input "
                f"(required inputs: {self._required}; bound: {list(self._inputs)})", input_name=missing[0])
        return {name: b.value if b.download is None else b.download(b.value) for name, b in self._inputs.items()}

    def _deliver(self, name: str, value: Any) -> OrtValue:
        """An output of the run where it was bound: uploaded when it came back on the host
        for a device, written into the bound buffer when there is one."""
        bound = self._outputs[name]
        device = bound.device
        if not device.is_host and is_host_value(value) and value is not None:
            value = device.allocator.to_device(value)
        if bound.buffer is None:
            return OrtValue(value, device)
        buffer = bound.buffer
        want = (np.dtype(buffer.dtype), tuple(int(d) for d in buffer.shape))
        got = (np.dtype(value.dtype), tuple(int(d) for d in value.shape))
        if want != got:
            raise InvalidArgumentError(
                f"output {name!r}: the bound buffer is {tensor_type_string(want[0])} {list(want[1])} but this run "
                f"produced {tensor_type_string(got[0])} {list(got[1])}; bind a buffer of that shape, or "
                f"bind_output({name!r}) to have the run allocate it")
        write_into(device, buffer, value)
        return OrtValue(buffer, device)


def _distinct(devices: Any) -> list[ValueDevice]:
    """Off-host devices, one per device key."""
    found: dict[str, ValueDevice] = {}
    for device in devices:
        if not device.is_host:
            found.setdefault(device.key, device)
    return list(found.values())


def _host_copy(value: OrtValue) -> Any:
    if value.is_tensor_sequence():
        return [np.array(item, copy=True) for item in value._value]
    if not value.has_value():
        return None
    return np.array(value.numpy(), copy=True) if value.device_name() == "cpu" else value.numpy()


def _with_output_device(run_options: Any, on_device: Mapping[str, str]) -> Any:
    """The run options for a binding run: the caller's, plus where bound outputs are fetched
    (a RunOptions keeps its ``terminate`` flag: the derived options share it)."""
    if not on_device:
        return run_options
    if run_options is None:
        return {"output_device": dict(on_device)}
    if isinstance(run_options, Mapping):
        if "output_device" in run_options:
            raise InvalidArgumentError(
                "run_options 'output_device' does not apply to run_with_iobinding: bind_output(name, device_type) "
                "says where each output goes")
        return {**run_options, "output_device": dict(on_device)}
    derive = getattr(run_options, "with_output_devices", None)  # epoxy.RunOptions
    if derive is None:
        raise InvalidArgumentError(
            f"run_options must be an epoxy.RunOptions or a dict, got {type(run_options).__name__}"
        )
    return derive(on_device)


def run_with_iobinding(session: Any, binding: IOBinding, run_options: Any = None, *, synchronize_outputs: bool = True
                       ) -> None:
    """Run ``session`` with the inputs and outputs bound in ``binding``; the results are
    kept in it (``get_outputs``, ``copy_outputs_to_cpu``).

    Outputs bound to the device that produces them are fetched there without the download
    copy; the devices of bound outputs are synchronized before returning unless
    ``synchronize_outputs`` is False.
    """
    if not isinstance(binding, IOBinding):
        raise InvalidArgumentError(f"run_with_iobinding takes an IOBinding (session.io_binding()), "
                                   f"got {type(binding).__name__}")
    if binding.session is not session:
        raise InvalidArgumentError("this IOBinding belongs to another session: use the session's own io_binding()")
    feeds = binding._feeds()
    names = list(binding._outputs)
    if not names:
        raise InvalidArgumentError(
            f"no output is bound: bind_output(name) at least one of {list(binding._output_types)}"
        )
    produced = session.io_placement().outputs
    on_device = {name: bound.device.key for name, bound in binding._outputs.items()
                 if not bound.device.is_host and name in produced and produced[name].produced_on == bound.device.key}
    values = session.run(names, feeds, _with_output_device(run_options, on_device))
    results = [binding._deliver(name, value) for name, value in zip(names, values)]
    if synchronize_outputs:
        for device in _distinct(binding._outputs[name].device for name in names):
            synchronize(device)
    binding._results = results
