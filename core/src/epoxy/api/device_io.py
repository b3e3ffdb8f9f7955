"""Device feeds and device fetches: runs that skip the host<->device copy steps.

A feed value that a device's allocator ``accepts`` goes straight into that device's slot
and the upload step the plan builder inserted is skipped; an output requested with
``run_options={"output_device": ...}`` is returned from its device-side slot and its
download step skipped (when nothing on the host reads it). Each combination gets a plan
derived once and cached, so runs with host values only pay nothing extra and runs with
device values pay a dictionary look-up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..contract import Allocator
from ..errors import InvalidArgumentError
from ..plan.placement import HOST
from ..plan.plan_builder import derive_plan
from ..run.executor import ExecutionPlan

#: Keys ``InferenceSession.run`` understands in ``run_options``.
RUN_OPTIONS = frozenset({"output_device"})

# values that are host data whatever the allocators say (checked before asking them)
_HOST_TYPES = (list, tuple, np.generic, str, bytes, int, float)


@dataclass(frozen=True)
class _Route:
    """Where one device feed goes: its device slot (or none) and the host slot (or none)."""

    device_slot: int | None
    host_slot: int | None
    to_host: Callable[[Any], Any]


@dataclass(frozen=True)
class _Variant:
    executor: Any
    routes: Mapping[str, _Route]
    outputs: Mapping[str, int]


class DeviceIO:
    """Routes device feeds/fetches of one session plan; ``devices``: user-facing names
    (provider names, device keys, ``"host"``) -> device key."""

    def __init__(self, plan: ExecutionPlan, feed_slots: Mapping[str, int], allocators: Mapping[str, Allocator],
                 devices: Mapping[str, str], make_executor: Callable[[ExecutionPlan], Any]) -> None:
        self.plan = plan
        self.devices = dict(devices)
        self._feed_slots = feed_slots
        self._allocators = allocators
        self._make_executor = make_executor
        self._variants: dict[Any, _Variant] = {}
        #: (device key, accepts) of allocators that take device values (``Allocator.accepts``)
        self.accepting = tuple((key, fn) for key, a in allocators.items()
                               if not a.is_host and (fn := getattr(a, "accepts", None)) is not None)

    # -- per run: what is on a device ------------------------------------------------------
    def device_feeds(self, feeds: Any) -> dict[str, str]:
        """Feeds an allocator accepts, name -> device key (devices reading the input first)."""
        found: dict[str, str] = {}
        if not isinstance(feeds, Mapping):
            return found  # check_feeds says what is wrong
        for name, value in feeds.items():
            if type(value) is np.ndarray or value is None or isinstance(value, _HOST_TYPES):
                continue
            accepted = [key for key, accepts in self.accepting if accepts(value)]
            if accepted:
                placement = self.plan.io.inputs.get(name)
                readers = placement.devices if placement is not None else {}
                found[name] = next((k for k in accepted if k in readers), accepted[0])
        return found

    def output_devices(self, names: Sequence[str], run_options: Any) -> dict[str, str]:
        """Outputs to return from their device slot, name -> device key, from ``run_options``."""
        if not isinstance(run_options, Mapping):
            raise InvalidArgumentError(
                f"run_options must be a dict (e.g. {{'output_device': 'cuda'}}), got {type(run_options).__name__}")
        unknown = sorted(set(run_options) - RUN_OPTIONS)
        if unknown:
            raise InvalidArgumentError(f"unknown run option {unknown[0]!r}; known: {sorted(RUN_OPTIONS)}")
        wanted = run_options.get("output_device")
        if wanted is None:
            return {}
        if isinstance(wanted, str):
            wanted = dict.fromkeys(names, wanted)
        elif isinstance(wanted, Mapping):
            outputs = self.plan.io.outputs
            bad = [n for n in wanted if n not in outputs]
            if bad:
                raise InvalidArgumentError(f"output_device names unknown output {bad[0]!r}; outputs: {list(outputs)}")
        else:
            raise InvalidArgumentError(
                "output_device must be a device name or a dict {output name: device name}, "
                f"got {type(wanted).__name__}")
        chosen = {}
        for name in names:
            if name in wanted:
                key = self._device_key(name, wanted[name])
                if key != HOST:  # the host is where outputs go anyway
                    chosen[name] = key
        return chosen

    def _device_key(self, output: str, device: Any) -> str:
        key = self.devices.get(device) if isinstance(device, str) else None
        if key is None:
            raise InvalidArgumentError(
                f"output_device {device!r} for output {output!r} is not a device of this session; "
                f"known: {sorted(self.devices)}")
        placed = self.plan.io.outputs[output]
        if key != HOST and placed.produced_on != key:
            by = f" by provider {placed.provider!r}" if placed.provider else ""
            raise InvalidArgumentError(
                f"output {output!r} is produced on {placed.produced_on!r}{by}, not on {device!r} ({key}): "
                f"it can be returned on the host or on {placed.produced_on!r} only")
        return key

    # -- running ----------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any], on_device: Mapping[str, str], names: Sequence[str],
            fetch_on_device: Mapping[str, str], stop: Any = None) -> list[Any]:
        """Run the variant plan for these device feeds and fetches (derived on first use);
        ``stop`` as in :meth:`SequentialExecutor.run`."""
        key = (frozenset(on_device.items()), frozenset(fetch_on_device.items()))
        variant = self._variants.get(key)
        if variant is None:
            variant = self._variants[key] = self._derive(on_device, fetch_on_device)
        slots, routes = self._feed_slots, variant.routes
        placed: list[tuple[int, Any]] = []
        for name, value in feeds.items():
            route = routes.get(name)
            if route is None:
                placed.append((slots[name], value))
                continue
            if route.device_slot is not None:
                placed.append((route.device_slot, value))
            if route.host_slot is not None:
                placed.append((route.host_slot, route.to_host(value)))
        return variant.executor.run(placed, [variant.outputs[n] for n in names], stop)

    def _derive(self, on_device: Mapping[str, str], fetch_on_device: Mapping[str, str]) -> _Variant:
        io, drop = self.plan.io, set()
        fetched_host = set(self.plan.output_slots.values())
        routes = {}
        for name, device in on_device.items():
            host_slot, to_host = self._feed_slots[name], self._allocators[device].to_host
            placed = io.inputs.get(name)
            copy = placed.devices.get(device) if placed is not None else None
            if placed is None or copy is None:  # not read on that device: downloaded once
                routes[name] = _Route(None, host_slot, to_host)
                continue
            drop.add(copy.step)
            host_needed = bool(placed.host_readers) or len(placed.devices) > 1 or host_slot in fetched_host
            routes[name] = _Route(copy.slot, host_slot if host_needed else None, to_host)
        outputs = dict(self.plan.output_slots)
        for name in fetch_on_device:
            produced = io.outputs[name].device
            if produced is None:  # produced on the host (output_devices does not ask for these)
                continue
            outputs[name] = produced.slot
            if not io.outputs[name].host_readers:
                drop.add(produced.step)
        plan = derive_plan(self.plan, drop, outputs)
        return _Variant(self._make_executor(plan), routes, outputs)
