"""Liveness-based memory planning: which values can share a buffer, and the peak it costs.

Values are planned per device. A value is live from the step that produces it to the last
step that reads it (graph outputs live to the end). Buffers are reused best-fit once their
last reader ran. Constants (weights) are not planned; they are reported separately.
Values whose size is not static are counted in ``dynamic_values`` and not in the peak.

Sizes come from declared and inferred shapes, which a hostile or sloppy model can get wrong
(a value_info on an intermediate value that inference cannot contradict): they are computed
in Python ints (an int64 product wraps around to a small or negative size), a negative dim
makes a value dynamic, and a value larger than the process could ever allocate
(:func:`credible_nbytes`) is not planned at all. Kernels given a planned buffer that does not
fit what they compute allocate instead (see ``epoxy.run.executor``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..contract import ValueType


def static_nbytes(vt: ValueType) -> int | None:
    """Bytes of a static tensor of fixed-width dtype, exact (Python ints, no int64
    wrap-around); ``None`` when the shape is not static, a dim is negative or the dtype has
    no fixed width (strings)."""
    if not vt.is_static or vt.dtype is None or vt.dtype == np.dtype(object):
        return None
    dims = [int(d) for d in vt.shape]  # type: ignore[union-attr, arg-type]  # static: int dims
    if any(d < 0 for d in dims):
        return None
    return math.prod(dims) * vt.dtype.itemsize


def credible_nbytes(vt: ValueType, cap: int) -> int | None:
    """:func:`static_nbytes`, or ``None`` (plan it as dynamic) when above ``cap``: a declared
    shape that no run could allocate is not believed, and must not size buffers."""
    nbytes = static_nbytes(vt)
    return None if nbytes is None or nbytes > cap else nbytes


@dataclass(frozen=True)
class PlannedValue:
    """One value to plan: size, device, and the step range it must stay alive."""

    slot: int
    device: str
    nbytes: int | None
    first_step: int
    last_step: int


@dataclass
class DevicePlan:
    """The buffers of one device and which values each holds."""

    buffer_sizes: list[int] = field(default_factory=list)
    assignment: dict[int, int] = field(default_factory=dict)  # slot -> buffer index
    live_peak_bytes: int = 0
    dynamic_values: int = 0

    @property
    def planned_peak_bytes(self) -> int:
        """Bytes of all buffers: what the device needs at most with this reuse plan."""
        return sum(self.buffer_sizes)


@dataclass
class MemoryPlan:
    """Plans per device plus constant bytes; what ``InferenceSession.memory_plan`` reports."""

    devices: dict[str, DevicePlan]
    constant_bytes: int

    @property
    def planned_peak_bytes(self) -> int:
        return sum(p.planned_peak_bytes for p in self.devices.values())

    def summary(self) -> dict[str, Any]:
        return {
            "planned_peak_bytes": self.planned_peak_bytes,
            "constant_bytes": self.constant_bytes,
            "devices": {
                name: {
                    "planned_peak_bytes": p.planned_peak_bytes,
                    "live_peak_bytes": p.live_peak_bytes,
                    "buffers": len(p.buffer_sizes),
                    "values": len(p.assignment),
                    "dynamic_values": p.dynamic_values,
                }
                for name, p in self.devices.items()
            },
        }


def plan_memory(values: Sequence[PlannedValue], constant_bytes: int = 0) -> MemoryPlan:
    """Assign values to reusable buffers per device (greedy best fit in step order)."""
    by_device: dict[str, list[PlannedValue]] = {}
    for v in values:
        by_device.setdefault(v.device, []).append(v)
    return MemoryPlan({d: _plan_device(vs) for d, vs in by_device.items()}, constant_bytes)


def _plan_device(values: Sequence[PlannedValue]) -> DevicePlan:
    plan = DevicePlan()
    static = [v for v in values if v.nbytes is not None]
    plan.dynamic_values = len(values) - len(static)
    births: dict[int, list[PlannedValue]] = {}
    deaths: dict[int, list[PlannedValue]] = {}
    for v in static:
        births.setdefault(v.first_step, []).append(v)
        deaths.setdefault(v.last_step, []).append(v)
    free: list[tuple[int, int]] = []  # sorted (size, buffer index)
    live = 0
    for step in sorted(set(births) | set(deaths)):
        for v in births.get(step, ()):
            need = v.nbytes or 0
            pos = bisect.bisect_left(free, (need, -1))
            if pos < len(free):
                _, buf = free.pop(pos)
            else:
                buf = len(plan.buffer_sizes)
                plan.buffer_sizes.append(need)
            plan.assignment[v.slot] = buf
            live += need
        plan.live_peak_bytes = max(plan.live_peak_bytes, live)
        for v in deaths.get(step, ()):
            buf = plan.assignment[v.slot]
            bisect.insort(free, (plan.buffer_sizes[buf], buf))
            live -= v.nbytes or 0
    return plan


def last_uses(step_inputs: Sequence[Sequence[int]], keep: Mapping[int, int]) -> dict[int, int]:
    """Slot -> index of the last step reading it (``keep`` pins slots to a given step)."""
    last: dict[int, int] = {}
    for index, slots in enumerate(step_inputs):
        for s in slots:
            last[s] = index
    last.update(keep)
    return last


def release_points(step_outputs: Sequence[Sequence[int]], last: Mapping[int, int], never: set[int],
                   discard: int) -> list[tuple[int, ...]]:
    """Slots to release after each step: at their last reader (``last``, see :func:`last_uses`),
    right after production when nobody reads them; never the ``never`` slots (constants)."""
    n_steps = len(step_outputs)
    frees: list[list[int]] = [[] for _ in range(n_steps)]
    for slot, step in last.items():
        if step < n_steps and slot not in never:
            frees[step].append(slot)
    for index, outputs in enumerate(step_outputs):
        for slot in outputs:
            if slot != discard and slot not in last:
                frees[index].append(slot)
        if discard in outputs:
            frees[index].append(discard)
    return [tuple(f) for f in frees]
