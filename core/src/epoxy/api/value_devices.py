"""Where OrtValues and IOBinding values live: onnxruntime's ``(device_type, device_id)``
resolved to a provider's allocator.

onnxruntime names memory by device type and id (``"cuda", 0``); in epoxy, memory belongs to
providers. A device type therefore resolves to a provider whose allocator keeps values off
the host: by the provider's name or alias (``cuda``, ``CUDAExecutionProvider``; ``cuda``
also finds a provider aliased ``CUDAExecutionProvider``), else by its devices' kind
(``gpu``). ``"cpu"`` is always the host, as is any provider whose allocator computes in host
memory. A session's bindings look among the session's own providers first (so the session
takes the values without copies); an ``OrtValue`` made outside any session uses a provider
created once per (provider, device) per process, only for its allocator.

Allocator methods used here beyond the contract's ``to_device``/``to_host``/``accepts`` are
optional and looked up with ``getattr``, so every allocator works and a provider adds them
only where they help:

- ``copy_into(destination, value)``: write a device value into an existing buffer of the
  same device, dtype and shape (on the provider's stream). Absent: ``destination[...] = value``.
- ``from_pointer(pointer, shape, dtype)``: a device value over a raw device address, without
  copying (onnxruntime's ``bind_input(..., buffer_ptr)``). Absent: raw device pointers are
  refused with an error saying to bind the device array itself.
- ``synchronize()``: wait for the device's pending work (``IOBinding.synchronize_*``, the
  end of ``run_with_iobinding``). Absent: nothing to wait for.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, ProviderError
from ..plan.placement import HOST, device_key

#: onnxruntime's device type for host memory
CPU = "cpu"
_EP_SUFFIX = "executionprovider"


@dataclass(frozen=True, eq=False)
class ValueDevice:
    """Where a value's data lives: the host, or one provider's device (and its allocator).

    ``name`` is what ``OrtValue.device_name()`` says: ``"cpu"`` for the host, else the
    provider's name (``"cuda"``); ``key`` is the device key sessions use (``"host"`` or the
    device label, see :mod:`epoxy.plan.placement`).
    """

    name: str = CPU
    index: int = 0
    allocator: Any = None
    key: str = HOST

    @property
    def is_host(self) -> bool:
        return self.allocator is None


HOST_DEVICE = ValueDevice()


def provider_device(provider: Any) -> ValueDevice:
    """The device a provider's values live on (the host for host-memory allocators)."""
    allocator = provider.allocator
    if allocator.is_host:
        return HOST_DEVICE
    return ValueDevice(str(provider.name).lower(), int(provider.device.index), allocator, device_key(allocator))


def _checked_type(device_type: Any, device_id: Any) -> str:
    if not isinstance(device_type, str) or not device_type.strip():
        raise InvalidArgumentError(f"device_type must be a device name such as 'cpu' or 'cuda', got {device_type!r}")
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise InvalidArgumentError(f"device_id must be an int >= 0, got {device_id!r}")
    return device_type.strip().lower()


def _match_rank(wanted: str, names: Iterable[str], kinds: Iterable[str]) -> int | None:
    """0: a name or alias matches, with or without onnxruntime's ``ExecutionProvider``
    suffix (``cuda`` ~ ``CUDAExecutionProvider``); 1: only a device kind matches (``gpu``);
    None: no match."""
    lowered = {n.lower() for n in names}
    lowered |= {n.removesuffix(_EP_SUFFIX) for n in lowered if n.endswith(_EP_SUFFIX)}
    if wanted.removesuffix(_EP_SUFFIX) in lowered:
        return 0
    if wanted in {k.lower() for k in kinds}:
        return 1
    return None


# -- devices of a session ----------------------------------------------------------------------
def session_devices(session: Any) -> dict[str, ValueDevice]:
    """The session's off-host devices by device key (the first provider per device, as the
    session routes device feeds), from its public API only."""
    found: dict[str, ValueDevice] = {}
    for name in session.get_providers():
        device = provider_device(session.get_provider(name))
        if not device.is_host:
            found.setdefault(device.key, device)
    return found


def session_device(session: Any, device_type: str, device_id: int = 0) -> ValueDevice | None:
    """The session's device for ``(device_type, device_id)``; ``None`` when it uses none."""
    wanted = _checked_type(device_type, device_id)
    if wanted == CPU:
        return HOST_DEVICE
    best: tuple[int, ValueDevice] | None = None
    for spelled in session.get_providers():
        provider = session.get_provider(spelled)
        rank = _match_rank(wanted, (spelled, provider.name), (provider.device.kind,))
        if rank is None or provider.device.index != device_id:
            continue
        if best is None or rank < best[0]:
            best = (rank, provider_device(provider))
    return None if best is None else best[1]


def accepting_device(devices: Mapping[str, ValueDevice], value: Any) -> ValueDevice | None:
    """The device whose allocator ``accepts`` this value (a device array), if any."""
    for device in devices.values():
        accepts = getattr(device.allocator, "accepts", None)
        if accepts is not None and accepts(value):
            return device
    return None


# -- devices outside any session ---------------------------------------------------------------
_providers: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], Any]] = weakref.WeakKeyDictionary()
_providers_lock = threading.Lock()


def resolve_device(device_type: str, device_id: int = 0, registry: Any = None) -> ValueDevice:
    """The device ``(device_type, device_id)`` names among the installed providers.

    The provider is created on first use and kept for the process (one per provider and
    device); an unknown or unavailable device type is an :class:`InvalidArgumentError`
    naming the device types available here.
    """
    wanted = _checked_type(device_type, device_id)
    if wanted == CPU:
        return HOST_DEVICE
    if registry is None:
        from ..plugins import default_registry

        registry = default_registry()
    entry = _find_entry(registry, wanted)
    if entry is None:
        raise InvalidArgumentError(
            f"device_type {device_type!r}: no installed provider keeps values on such a device; "
            f"device types available here: {available_device_types(registry)}")
    if not entry.available:
        raise InvalidArgumentError(
            f"device_type {device_type!r}: provider {entry.name!r} is installed but unavailable here "
            f"({entry.unavailable_reason}); device types available here: {available_device_types(registry)}")
    devices = {d.index: d for d in entry.devices()}
    if device_id not in devices:
        raise InvalidArgumentError(
            f"device_type {device_type!r}: provider {entry.name!r} has no device {device_id}; "
            f"its devices: {sorted(devices)}")
    return provider_device(_provider(registry, entry, devices[device_id]))


def _find_entry(registry: Any, wanted: str) -> Any:
    for entry in registry.entries():  # by name or alias (``aliases``: onnxruntime's names)
        if _match_rank(wanted, (entry.name, *getattr(entry, "aliases", ())), ()) is not None:
            return entry
    for entry in registry.entries():  # by device kind ("gpu"); only providers found here
        if entry.available and _match_rank(wanted, (), (d.kind for d in entry.devices())) is not None:
            return entry
    return None


def available_device_types(registry: Any) -> list[str]:
    """``"cpu"`` and the names of the available providers (what ``device_type`` may be)."""
    return [CPU, *(e.name for e in registry.entries() if e.available and e.name.lower() != CPU)]


def _provider(registry: Any, entry: Any, device: Any) -> Any:
    with _providers_lock:
        cache = _providers.setdefault(registry, {})
        key = (entry.name, device.index)
        if key not in cache:
            try:
                cache[key] = entry.factory.create(device, {})
            except InvalidArgumentError:
                raise
            except Exception as exc:
                raise ProviderError(
                    f"provider {entry.name!r} failed to start on {device.label} to hold values: "
                    f"{type(exc).__name__}: {exc}", provider=entry.name) from exc
        return cache[key]


# -- optional allocator methods ----------------------------------------------------------------
def write_into(device: ValueDevice, destination: Any, value: Any) -> None:
    """Write ``value`` (on ``device``) into the existing buffer ``destination`` there."""
    if device.is_host:
        np.copyto(destination, value)
        return
    copy_into = getattr(device.allocator, "copy_into", None)
    if copy_into is not None:
        copy_into(destination, value)
        return
    try:
        destination[...] = value
    except (TypeError, AttributeError, ValueError) as exc:
        raise InvalidArgumentError(
            f"cannot write into a {type(destination).__name__} on {device.key}: the value does not support "
            f"item assignment and provider {device.name!r}'s allocator has no copy_into ({exc})") from exc


def synchronize(device: ValueDevice) -> None:
    """Wait for the device's pending work, where its allocator can say (``synchronize()``)."""
    sync = getattr(device.allocator, "synchronize", None)
    if sync is not None:
        sync()


def wrap_pointer(device: ValueDevice, pointer: int, shape: Sequence[int], dtype: np.dtype, what: str) -> Any:
    """A value over the memory at ``pointer`` (no copy): host memory on the host, else
    through the allocator's ``from_pointer``; ``what`` names the binding in errors."""
    if isinstance(pointer, bool) or not isinstance(pointer, int) or pointer < 0:
        raise InvalidArgumentError(f"{what}: buffer_ptr must be a memory address (an int), got {pointer!r}")
    if dtype == np.dtype(object):
        raise InvalidArgumentError(f"{what}: string tensors cannot be bound through a raw pointer; bind the array")
    if not device.is_host:
        from_pointer = getattr(device.allocator, "from_pointer", None)
        if from_pointer is None:
            raise InvalidArgumentError(
                f"{what}: provider {device.name!r} cannot wrap a raw device pointer (its allocator has no "
                "from_pointer); bind the device array itself (bind_input(name, array) / bind_output(name, buffer)) "
                "or an OrtValue (bind_ortvalue_input / bind_ortvalue_output)")
        return from_pointer(pointer, tuple(shape), dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        return np.empty(tuple(shape), dtype)
    if pointer == 0:
        raise InvalidArgumentError(f"{what}: buffer_ptr is 0 (a null pointer)")
    memory = (ctypes.c_char * (count * dtype.itemsize)).from_address(pointer)
    # a ctypes array is a buffer; numpy's stubs do not list ctypes arrays among buffers
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(tuple(shape))  # type: ignore[call-overload]


def data_pointer(value: Any) -> int:
    """The address of a value's first element (numpy, CUDA array interface, ``data_ptr()``)."""
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        interface = getattr(value, attr, None)
        if isinstance(interface, dict) and interface.get("data"):
            return int(interface["data"][0])
    data_ptr = getattr(value, "data_ptr", None)
    if callable(data_ptr):
        return int(data_ptr())
    raise InvalidArgumentError(f"a {type(value).__name__} exposes no data pointer (no __cuda_array_interface__, "
                               "__array_interface__ or data_ptr())")
