"""IOBinding: feed and fetch GPU arrays without host round trips.

    from epoxy_ep_cuda.iobinding import IOBinding

    binding = IOBinding(session)                 # the session must use the cuda provider
    binding.bind_input("input_ids", torch_ids)   # torch tensor, CuPy array, pycuda GPUArray,
                                                 # numba array, anything with __dlpack__ or
                                                 # __cuda_array_interface__ (zero copy), or numpy
    binding.bind_output("last_hidden_state")     # stays on the GPU (a CuPy array)
    binding.bind_output("logits", out_buffer)    # or written into a caller's device buffer
    hidden, logits = binding.run()               # CuPy arrays; torch.from_dlpack(hidden) is zero copy
    host = binding.copy_outputs_to_cpu()

How it works: only the core's public device I/O contract. ``CudaAllocator.accepts``
recognizes this provider's device arrays, so ``session.run`` places bound inputs straight
into the GPU-side slots (the upload step is skipped; an input also read on the host is
downloaded once), and ``run_options={"output_device": {name: device}}`` returns outputs
produced on the GPU from their GPU-side slots (the download step is skipped when nothing on
the host reads them). ``session.io_placement()`` says where each output is produced;
outputs produced on the host are uploaded after the run.

Streams: device inputs are imported on the provider's stream (DLPack consumers pass their
stream, so the producer's pending work is ordered before ours); ``run`` synchronizes the
provider's stream before returning unless ``synchronize=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from epoxy.placement import device_key

_DLPACK_CPU = 1


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


class IOBinding:
    """Inputs bound as device arrays, outputs returned as device arrays (or into buffers)."""

    def __init__(self, session: Any, provider: str = "cuda") -> None:
        if provider not in session.get_providers():
            raise ValueError(f"session does not use provider {provider!r} (it uses {session.get_providers()})")
        self.session = session
        self.provider = session.get_provider(provider)
        self.backend = self.provider.backend
        self._device = device_key(self.provider.allocator)
        self._types = {arg.name: arg.value_type for arg in [*session.get_inputs(),
                                                            *session.get_overridable_initializers()]}
        self._required = [arg.name for arg in session.get_inputs()]
        self._output_names = [arg.name for arg in session.get_outputs()]
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, Any] = {}  # name -> None (allocate) or caller buffer
        self._order: list[str] = []
        self._results: list[Any] = []

    # -- binding ---------------------------------------------------------------------
    def bind_input(self, name: str, value: Any) -> None:
        if name not in self._types:
            raise KeyError(f"unknown input {name!r}; inputs: {sorted(self._types)}")
        arr = as_device_array(value, self.backend)
        vt = self._types[name]
        if vt.dtype is not None and np.dtype(arr.dtype) != vt.dtype:
            raise TypeError(f"input {name!r}: expected dtype {vt.dtype}, got {arr.dtype}")
        if vt.shape is not None and (len(vt.shape) != arr.ndim or any(
                isinstance(d, int) and d != s for d, s in zip(vt.shape, arr.shape))):
            raise ValueError(f"input {name!r}: expected shape {list(vt.shape)}, got {list(arr.shape)}")
        self._inputs[name] = arr

    def bind_output(self, name: str, buffer: Any = None) -> None:
        if name not in self._output_names:
            raise KeyError(f"unknown output {name!r}; outputs: {self._output_names}")
        self._outputs[name] = None if buffer is None else as_device_array(buffer, self.backend)
        if name not in self._order:
            self._order.append(name)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._order.clear()

    # -- running -------------------------------------------------------------------------
    def run(self, synchronize: bool = True) -> list[Any]:
        missing = [n for n in self._required if n not in self._inputs]
        if missing:
            raise ValueError(f"inputs not bound: {missing}")
        if not self._order:
            for name in self._output_names:
                self.bind_output(name)
        produced = self.session.io_placement().outputs
        on_device = {n: self._device for n in self._order if produced[n].produced_on == self._device}
        options = {"output_device": on_device} if on_device else None
        values = self.session.run(self._order, self._inputs, run_options=options)
        be = self.backend
        out = []
        for name, value in zip(self._order, values):
            if not be.is_device(value):  # produced on the host (or a host-resident value)
                value = be.to_device(np.asarray(value))
            buf = self._outputs.get(name)
            if buf is not None:
                with be.run_context():
                    buf[...] = be.dev(value).reshape(buf.shape)
                value = buf
            out.append(value)
        if synchronize:
            be.synchronize()
        self._results = out
        return out

    def get_outputs(self) -> list[Any]:
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [self.backend.to_host(v) for v in self._results]

    @property
    def output_names(self) -> Sequence[str]:
        return list(self._order)
