"""Where a plan reads its graph inputs and produces its graph outputs (public, read-only).

Bindings that feed device values or fetch device outputs (IOBinding) need to know which
device reads an input, which slot holds it there and which step copies it; this module
says so as plain data, so no one depends on the plan builder's op-type or slot naming.

Device keys: ``"host"`` for providers computing in host memory (``Allocator.is_host``),
otherwise the provider device's ``Device.label`` (``provider:kind:index``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..contract import Allocator

HOST = "host"


def device_key(allocator: Allocator) -> str:
    """The key a plan uses for the device of ``allocator`` (``"host"`` or the device label)."""
    return HOST if allocator.is_host else allocator.device.label


@dataclass(frozen=True)
class DeviceCopy:
    """A value's slot on one device and the plan step copying it between host and there."""

    device: str
    slot: int
    step: int  # index in ``ExecutionPlan.steps``


@dataclass(frozen=True)
class InputPlacement:
    """A graph input: fed into ``host_slot``; each device reading it gets a copy step.

    ``host_readers``: steps (other than those copies) reading the host value; empty when
    only devices read it, so a value fed directly on such a device needs no host copy.
    """

    name: str
    host_slot: int
    devices: Mapping[str, DeviceCopy] = field(default_factory=dict)
    host_readers: tuple[int, ...] = ()


@dataclass(frozen=True)
class OutputPlacement:
    """A graph output: returned from ``host_slot``; ``produced_on`` is where it is computed.

    When produced off the host, ``device`` holds the device-side slot and the
    device->host copy step; ``host_readers`` are other steps reading the host copy.
    ``provider`` names the provider whose step produces it (``None`` for graph inputs and
    constants returned as outputs).
    """

    name: str
    host_slot: int
    produced_on: str = HOST
    provider: str | None = None
    device: DeviceCopy | None = None
    host_readers: tuple[int, ...] = ()


@dataclass(frozen=True)
class IOPlacement:
    """Placement of every graph input and output of one plan (``ExecutionPlan.io``)."""

    inputs: Mapping[str, InputPlacement] = field(default_factory=dict)
    outputs: Mapping[str, OutputPlacement] = field(default_factory=dict)


def describe_io(steps: Sequence[Any], slot_index: Mapping[tuple[str, str], int], slot_devices: Sequence[str],
                input_slots: Mapping[str, int], output_slots: Mapping[str, int],
                copy_steps: Mapping[int, int]) -> IOPlacement:
    """Build the placement of a finished step list.

    ``slot_index``: (value name, device key) -> slot; ``slot_devices``: device key per slot;
    ``copy_steps``: slot written by a copy step -> that step's index.
    """
    readers: dict[int, list[int]] = {}
    producers: dict[int, int] = {}
    for index, step in enumerate(steps):
        for slot in set(step.inputs):
            readers.setdefault(slot, []).append(index)
        for slot in step.outputs:
            producers[slot] = index
    on_devices: dict[str, dict[str, int]] = {}
    for (name, dev), slot in slot_index.items():
        if dev != HOST and slot in copy_steps:
            on_devices.setdefault(name, {})[dev] = slot
    inputs = {}
    for name, host in input_slots.items():
        devices = {dev: DeviceCopy(dev, slot, copy_steps[slot]) for dev, slot in on_devices.get(name, {}).items()
                   if steps[copy_steps[slot]].inputs == (host,)}
        copies = {c.step for c in devices.values()}
        inputs[name] = InputPlacement(name, host, devices, tuple(r for r in readers.get(host, ()) if r not in copies))
    outputs = {}
    for name, host in output_slots.items():
        copy = copy_steps.get(host)
        source = host if copy is None else steps[copy].inputs[0]
        dev = HOST if copy is None else slot_devices[source]
        producer = producers.get(source)
        outputs[name] = OutputPlacement(
            name, host, dev, None if producer is None else steps[producer].provider,
            None if dev == HOST or copy is None else DeviceCopy(dev, source, copy),
            tuple(readers.get(host, ())),
        )
    return IOPlacement(inputs, outputs)

