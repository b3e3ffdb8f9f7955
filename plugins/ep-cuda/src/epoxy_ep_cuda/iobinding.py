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

How it works without changing the core: the session's execution plan has, for every graph
input the GPU reads, a copy step host->device, and for every graph output the GPU
produces, a copy step device->host. The binding derives a plan from it where bound inputs
are written straight into the device-side slots (the upload step is dropped) and bound
outputs are fetched from the device-side slots (the download step is dropped when nothing
on the host reads it), then runs that plan with the core's own executor. Inputs read on
the host as well (by a cpu node) are also downloaded once. It reads the session's private
plan (``_plan``, ``_graph``, ``_providers``); the core change that would make this a
public contract is described in this package's README.

Streams: device inputs are imported on the provider's stream (DLPack consumers pass their
stream, so the producer's pending work is ordered before ours); ``run`` synchronizes the
provider's stream before returning unless ``synchronize=False``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

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
        except Exception:
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
    def __init__(self, session: Any, provider: str = "cuda") -> None:
        found = [p for name, p in getattr(session, "_providers", []) if name == provider]
        if not found:
            raise ValueError(f"session does not use provider {provider!r} (it uses {session.get_providers()})")
        self.session = session
        self.provider = found[0]
        self.backend = self.provider.backend
        self._label = self.provider.device.label
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, Any] = {}  # name -> None (allocate) or caller buffer
        self._order: list[str] = []
        self._results: list[Any] = []
        self._cache: dict[Any, Any] = {}

    # -- binding ---------------------------------------------------------------------
    def bind_input(self, name: str, value: Any) -> None:
        types = self.session._input_types
        if name not in types:
            raise KeyError(f"unknown input {name!r}; inputs: {sorted(types)}")
        arr = as_device_array(value, self.backend)
        vt = types[name]
        if vt.dtype is not None and np.dtype(arr.dtype) != vt.dtype:
            raise TypeError(f"input {name!r}: expected dtype {vt.dtype}, got {arr.dtype}")
        if vt.shape is not None:
            if len(vt.shape) != arr.ndim or any(isinstance(d, int) and d != s for d, s in zip(vt.shape, arr.shape)):
                raise ValueError(f"input {name!r}: expected shape {list(vt.shape)}, got {list(arr.shape)}")
        self._inputs[name] = arr

    def bind_output(self, name: str, buffer: Any = None) -> None:
        if name not in self.session._plan.output_slots:
            raise KeyError(f"unknown output {name!r}; outputs: {list(self.session._plan.output_slots)}")
        self._outputs[name] = None if buffer is None else as_device_array(buffer, self.backend)
        if name not in self._order:
            self._order.append(name)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._order.clear()

    # -- plan derivation -----------------------------------------------------------------
    def _derive(self) -> tuple[Any, dict[str, tuple[int, int | None]], dict[str, tuple[int, bool]]]:
        from epoxy.executor import SequentialExecutor

        key = (tuple(sorted(self._inputs)), tuple(self._order))
        if key in self._cache:
            return self._cache[key]
        plan = self.session._plan
        names = plan.slot_names
        steps, frees = list(plan.steps), [list(f) for f in plan.frees]
        drop: set[int] = set()

        def dev_slot(name: str) -> int | None:
            label = f"{name}@{self._label}"
            return names.index(label) if label in names else None

        def readers(slot: int, skip: int | None = None) -> list[int]:
            return [k for k, s in enumerate(steps) if slot in s.inputs and k != skip and k not in drop]

        feeds: dict[str, tuple[int, int | None]] = {}
        for name in self._inputs:
            hs = plan.input_slots[name]
            ds = dev_slot(name)
            copy = next((k for k, s in enumerate(steps) if s.op_type == "MemcpyDevice" and s.inputs == (hs,)
                         and ds is not None and s.outputs == (ds,)), None)
            if copy is not None:
                drop.add(copy)
                feeds[name] = (ds, hs if readers(hs, copy) else None)  # type: ignore[assignment]
            else:
                feeds[name] = (-1, hs)  # read on the host only
        fetch: dict[str, tuple[int, bool]] = {}
        for name in self._order:
            hs = plan.output_slots[name]
            ds = dev_slot(name)
            if ds is None:
                fetch[name] = (hs, False)  # produced on the host: uploaded after the run
                continue
            copy = next((k for k, s in enumerate(steps) if s.op_type == "MemcpyDevice" and s.inputs == (ds,)
                         and s.outputs == (hs,)), None)
            if copy is not None and not readers(hs, copy):
                drop.add(copy)
            for f in frees:
                if ds in f:
                    f.remove(ds)
            fetch[name] = (ds, True)
        new_steps = [s for k, s in enumerate(steps) if k not in drop]
        new_frees = [tuple(f) for k, f in enumerate(frees) if k not in drop]
        derived = replace(plan, steps=new_steps, frees=new_frees)
        result = (SequentialExecutor(derived), feeds, fetch)
        self._cache[key] = result
        return result

    # -- running -------------------------------------------------------------------------
    def run(self, synchronize: bool = True) -> list[Any]:
        missing = [n for n in self.session._inputs if n not in self._inputs]
        if missing:
            raise ValueError(f"inputs not bound: {missing}")
        if not self._order:
            for name in self.session._plan.output_slots:
                self.bind_output(name)
        executor, feeds, fetch = self._derive()
        be = self.backend
        feed_list: list[tuple[int, Any]] = []
        for name, (ds, hs) in feeds.items():
            value = self._inputs[name]
            if ds >= 0:
                feed_list.append((ds, value))
            if hs is not None:
                feed_list.append((hs, be.to_host(value)))
        values = executor.run(feed_list, [fetch[n][0] for n in self._order])
        out = []
        for name, value in zip(self._order, values):
            if not fetch[name][1] or not be.is_device(value):
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
