"""The hardware devices installed providers can drive, each shown once.

Providers list their own devices (``ProviderFactory.devices()``: ``Device(provider, kind,
index, ...)``). Users ask a different question: *what hardware does this machine have, and
which providers can drive each piece?* This module answers it, as onnxruntime's
``get_ep_devices()`` does: one :class:`EpDevice` per (provider, device) pair, and one
:class:`HardwareDevice` per piece of hardware, with every provider that drives it.

When are two providers' devices the same hardware? A provider may say exactly with the device
property ``hardware_id`` (a PCI bus id, a UUID). Otherwise: every ``cpu`` device is the host
CPU (OpenVINO's ``CPU`` and ep-cpu's device are one device with two providers), and other
devices are the same when kind, name and per-provider index agree.
"""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..contract import Device
from ..plugins import ProviderRegistry, default_registry

#: what a provider's device kind means; other kinds are ``other`` (the provider's kind is kept)
KIND_NAMES: Mapping[str, str] = {"cpu": "cpu", "gpu": "gpu", "npu": "npu", "vpu": "npu", "gna": "npu", "tpu": "npu"}
#: the kinds a device can have, in the order listings show them
KINDS = ("cpu", "gpu", "npu", "other")
#: PCI vendor ids (what onnxruntime's ``OrtHardwareDevice.vendor_id`` holds) by vendor name
VENDOR_IDS: Mapping[str, int] = {"Intel": 0x8086, "AMD": 0x1022, "NVIDIA": 0x10DE, "Apple": 0x106B,
                                 "Qualcomm": 0x5143, "ARM": 0x13B5}
#: /proc/cpuinfo ``vendor_id`` / ``CPU implementer`` values -> vendor name
_CPU_VENDORS: Mapping[str, str] = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "0x41": "ARM",
                                   "0x61": "Apple", "0x51": "Qualcomm"}


class OrtHardwareDeviceType(Enum):
    """onnxruntime's ``OrtHardwareDeviceType`` (``CPU``, ``GPU``, ``NPU``), plus ``OTHER``
    for devices of a kind onnxruntime has no name for."""

    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"
    OTHER = "other"


@dataclass(eq=False)
class HardwareDevice:
    """One piece of hardware and the providers that drive it (onnxruntime's ``OrtHardwareDevice``
    fields ``type``, ``vendor``, ``vendor_id``, ``device_id``, ``metadata`` included)."""

    kind: str
    vendor: str
    name: str
    #: the n-th device of this kind on this machine (``cpu:0``, ``gpu:1``)
    index: int
    memory_bytes: int | None = None
    ep_devices: list[EpDevice] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.index}"

    @property
    def providers(self) -> list[str]:
        """Names of the providers that drive this device, by priority."""
        return [ep.ep_name for ep in self.ep_devices]

    @property
    def type(self) -> OrtHardwareDeviceType:
        return OrtHardwareDeviceType(self.kind)

    @property
    def vendor_id(self) -> int:
        return VENDOR_IDS.get(self.vendor, 0)

    @property
    def device_id(self) -> int:
        return self.index

    @property
    def metadata(self) -> dict[str, str]:
        """Every provider's device properties as strings, ``provider.key`` -> value."""
        return {f"{ep.ep_name}.{k}": str(v) for ep in self.ep_devices for k, v in ep.provider_device.properties.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.label, "kind": self.kind, "vendor": self.vendor, "name": self.name,
                "memory_bytes": self.memory_bytes,
                "providers": [{"provider": ep.ep_name, "device": ep.provider_device.label,
                               "device_index": ep.device_index, "name": ep.provider_device.name,
                               "properties": {k: _plain(v) for k, v in ep.provider_device.properties.items()}}
                              for ep in self.ep_devices]}


@dataclass(eq=False)
class EpDevice:
    """A provider paired with a device it drives (onnxruntime's ``OrtEpDevice``): what
    selection policies choose between and ``SessionOptions.add_provider_for_devices`` takes."""

    ep_name: str
    ep_vendor: str
    ep_version: str
    #: the provider's own description of the device
    provider_device: Device
    #: its position in the provider's device list (the ``device_index`` option that selects it)
    device_index: int
    #: the provider's priority (higher first when nothing else decides)
    priority: int
    device: HardwareDevice = field(init=False, repr=False)

    @property
    def ep_metadata(self) -> dict[str, str]:
        return {"version": self.ep_version}

    @property
    def ep_options(self) -> dict[str, str]:
        """The provider options that put a session's provider on this device."""
        return {"device_index": str(self.device_index)}

    @property
    def kind(self) -> str:
        return self.device.kind

    @property
    def label(self) -> str:
        """``provider on kind:n`` — how selections and tuning tables name it."""
        return f"{self.ep_name} on {self.device.label}"


def get_ep_devices(registry: ProviderRegistry | None = None) -> list[EpDevice]:
    """Every (provider, device) pair the installed providers offer, providers by priority."""
    return _by_priority(_inventory(registry or default_registry()))


def get_devices(registry: ProviderRegistry | None = None) -> list[HardwareDevice]:
    """Every device some installed provider can drive, each once, cpu first, then gpu, npu, other."""
    return _inventory(registry or default_registry())


def unavailable_providers(registry: ProviderRegistry | None = None) -> dict[str, str]:
    """Installed providers that drive no device here -> why (what ``epoxy devices`` adds)."""
    registry = registry or default_registry()
    return {e.name: e.unavailable_reason or "no devices" for e in registry.entries() if not e.available}


def _by_priority(devices: Sequence[HardwareDevice]) -> list[EpDevice]:
    pairs = [ep for device in devices for ep in device.ep_devices]
    return sorted(pairs, key=lambda ep: (-ep.priority, ep.ep_name, ep.device_index))


def _inventory(registry: ProviderRegistry) -> list[HardwareDevice]:
    found: dict[tuple[Any, ...], HardwareDevice] = {}
    per_kind: dict[str, int] = {}
    for entry in registry.entries():  # priority order: a device lists its providers that way
        factory = entry.factory
        for position, device in enumerate(entry.devices()):
            kind = device_kind(device)
            key = _identity(device, kind)
            hardware = found.get(key)
            if hardware is None:
                index = per_kind.get(kind, 0)
                per_kind[kind] = index + 1
                hardware = HardwareDevice(kind, _vendor(device, kind), _hardware_name(device, kind), index,
                                          device.memory_bytes)
                found[key] = hardware
            elif hardware.memory_bytes is None:
                hardware.memory_bytes = device.memory_bytes
            ep = EpDevice(entry.name, str(getattr(factory, "vendor", "")), str(getattr(factory, "version", "")),
                          device, position, int(getattr(factory, "priority", 0)))
            ep.device = hardware
            hardware.ep_devices.append(ep)
    return sorted(found.values(), key=lambda d: (KINDS.index(d.kind), d.index))


def device_kind(device: Device) -> str:
    """``cpu``, ``gpu``, ``npu`` or ``other`` for a provider's device (its ``device_type``
    property, else its kind through :data:`KIND_NAMES`)."""
    declared = str(device.properties.get("device_type", device.kind)).lower()
    return KIND_NAMES.get(declared, "other")


def _identity(device: Device, kind: str) -> tuple[Any, ...]:
    hardware_id = device.properties.get("hardware_id")
    if hardware_id:
        return ("id", str(hardware_id))
    if kind == "cpu":
        return ("cpu",)
    return (kind, device.name.strip().lower(), device.index)


def _vendor(device: Device, kind: str) -> str:
    declared = device.properties.get("vendor")
    if declared:
        return str(declared)
    if kind == "cpu":
        return host_cpu()[0]
    return "unknown"


def _hardware_name(device: Device, kind: str) -> str:
    if kind == "cpu":
        return host_cpu()[1] or device.name
    return device.name


@lru_cache(maxsize=1)
def host_cpu() -> tuple[str, str]:
    """(vendor, model name) of this machine's CPU, as far as the OS says."""
    vendor, model = "", ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        try:
            for line in cpuinfo.read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key in ("vendor_id", "CPU implementer") and not vendor:
                    vendor = _CPU_VENDORS.get(value, value)
                elif key in ("model name", "Model") and not model:
                    model = value
        except OSError:
            pass
    if not vendor and platform.system() == "Darwin" and platform.machine() == "arm64":
        vendor = "Apple"
    return vendor or "unknown", model or platform.processor() or platform.machine()


def _plain(value: Any) -> Any:
    """A JSON-friendly form of a device property."""
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
