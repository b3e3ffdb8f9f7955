"""ep-cuda's original IOBinding API, kept for existing code: use ``session.io_binding()``.

The binding now lives in epoxy-core (:class:`epoxy.api.io_binding.IOBinding`, onnxruntime's
API, for every provider with an allocator)::

    binding = session.io_binding()
    binding.bind_input("input_ids", "cuda", 0, np.int64, ids.shape, torch_ids.data_ptr())
    binding.bind_ortvalue_input("mask", epoxy.OrtValue.ortvalue_from_numpy(mask, "cuda"))
    binding.bind_input("x", cupy_array)            # epoxy's short form: a CuPy array
    binding.bind_output("last_hidden_state", "cuda")
    session.run_with_iobinding(binding)
    hidden = binding.get_outputs()[0]              # an OrtValue on "cuda"

This module's :class:`IOBinding` is that binding with ep-cuda's earlier conveniences:
``bind_input(name, value)`` also imports torch / pycuda / numba arrays (DLPack or the CUDA
array interface, zero copy) and uploads numpy arrays; every output is returned on the GPU
(``bind_output(name)``; all outputs when none is bound); ``run()`` returns the CuPy arrays
and ``get_outputs()`` too. Its errors are still ``KeyError`` (unknown name), ``TypeError``
(dtype) and ``ValueError`` (shape, unbound input), now also epoxy errors.

Streams: device inputs are imported on the provider's stream (DLPack consumers pass their
stream, so the producer's pending work is ordered before ours); ``run`` synchronizes the
provider's stream before returning unless ``synchronize=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from epoxy.api.io_binding import IOBinding as CoreIOBinding
from epoxy.api.io_binding import run_with_iobinding
from epoxy.errors import InvalidArgumentError, InvalidFeedError

_DLPACK_CPU = 1


class UnknownNameError(InvalidFeedError, KeyError):
    """An input or output name the model does not have (a ``KeyError``, as before)."""

    __str__ = InvalidFeedError.__str__  # KeyError's would quote the message


class InputDtypeError(InvalidFeedError, TypeError):
    """A bound input of the wrong dtype (a ``TypeError``, as before)."""


def as_device_array(value: Any, backend: Any) -> Any:
    """``value`` as the backend's device array without copying (host numpy arrays are uploaded)."""
    if backend.is_device(value):
        return value
    if isinstance(value, np.ndarray):
        return backend.to_device(value)
    if backend.name != "cupy":
        raise TypeError(f"{type(value).__name__} is not a device array of this (simulated) device")
    cp = backend.cp
    dev = getattr(value, "__dlpack_device__", None)
    if dev is not None:
        try:
            kind = dev()[0]
        except Exception:  # noqa: BLE001 - any exporter failure: treat the device as unknown
            kind = None
        if kind is not None and int(kind) != _DLPACK_CPU:
            with backend.device, backend.stream:
                return cp.from_dlpack(value)
        if kind == _DLPACK_CPU:
            return backend.to_device(np.from_dlpack(value))
    if hasattr(value, "__cuda_array_interface__"):
        with backend.device, backend.stream:
            return cp.asarray(value)
    raise TypeError(
        f"cannot bind {type(value).__name__}: expected a numpy array or a GPU array exposing "
        "__dlpack__ or __cuda_array_interface__ (CuPy, torch, pycuda GPUArray, numba)"
    )


class IOBinding(CoreIOBinding):
    """Inputs bound as device arrays, outputs returned as device arrays (or into buffers).

    Deprecated spelling of ``session.io_binding()`` (see the module docstring).
    """

    def __init__(self, session: Any, provider: str = "cuda") -> None:
        if provider not in session.get_providers():
            raise InvalidArgumentError(
                f"session does not use provider {provider!r} (it uses {session.get_providers()})"
            )
        super().__init__(session)
        self.provider = session.get_provider(provider)
        self.backend = self.provider.backend
        self._provider_name = provider

    def bind_input(self, name: str, value: Any = None, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """``bind_input(name, array)``: a GPU array (zero copy) or numpy (uploaded); the
        onnxruntime form with a device type and a pointer goes to the core binding."""
        if isinstance(value, str) or args or kwargs:
            super().bind_input(name, value, *args, **kwargs)
            return
        types = {arg.name: arg.value_type for arg in [*self.session.get_inputs(),
                                                      *self.session.get_overridable_initializers()]}
        if name not in types:
            raise UnknownNameError(f"unknown input {name!r}; inputs: {sorted(types)}", input_name=name)
        arr = as_device_array(value, self.backend)
        vt = types[name]
        if vt.dtype is not None and np.dtype(arr.dtype) != vt.dtype:
            raise InputDtypeError(f"input {name!r}: expected dtype {vt.dtype}, got {arr.dtype}", input_name=name)
        if vt.shape is not None and (len(vt.shape) != arr.ndim or any(
                isinstance(d, int) and d != s for d, s in zip(vt.shape, arr.shape))):
            raise InvalidFeedError(f"input {name!r}: expected shape {list(vt.shape)}, got {list(arr.shape)}",
                                   input_name=name)
        super().bind_input(name, arr)

    def bind_output(self, name: str, buffer: Any = None, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """``bind_output(name)``: returned on the GPU; ``bind_output(name, buffer)``: written
        into that device buffer. The onnxruntime form goes to the core binding."""
        if isinstance(buffer, str) or args or kwargs:
            super().bind_output(name, buffer, *args, **kwargs)
            return
        if name not in [arg.name for arg in self.session.get_outputs()]:
            raise UnknownNameError(f"unknown output {name!r}; outputs: {[a.name for a in self.session.get_outputs()]}")
        if buffer is None:
            super().bind_output(name, self._provider_name, self.provider.device.index)
        else:
            super().bind_output(name, as_device_array(buffer, self.backend))

    def run(self, synchronize: bool = True) -> list[Any]:
        """Run the session; every output bound so far (all, when none is) as a device array."""
        if not self._outputs:
            for arg in self.session.get_outputs():
                self.bind_output(arg.name)
        run_with_iobinding(self.session, self, synchronize_outputs=synchronize)
        return self.get_outputs()

    def get_outputs(self) -> list[Any]:  # type: ignore[override]
        """The last run's outputs as device arrays (the core binding returns OrtValues)."""
        return [value._value for value in super().get_outputs()]

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [self.backend.to_host(v) for v in self.get_outputs()]

    @property
    def output_names(self) -> Sequence[str]:
        return list(self._outputs)
