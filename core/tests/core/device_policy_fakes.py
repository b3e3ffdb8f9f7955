"""Test providers with made-up devices for selection policies and tuning.

``DeviceFactory`` drives the devices it is given (any kind: cpu, gpu, npu...) and runs the
mini host kernels; ``delay_s`` makes every node that much slower and ``wrong`` makes Relu
return wrong values, so tuning tests can tell a fast provider from a slow or a wrong one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fakes import MINI_KERNELS

from epoxy.contract import Device, NodeSpec
from epoxy.hookspecs import hookimpl
from epoxy.kit import KernelProvider


class TimedProvider(KernelProvider):
    """Mini kernels, each ``delay_s`` slower; ``wrong``: Relu adds 1."""

    def __init__(self, name: str, device: Device, delay_s: float, wrong: bool) -> None:
        super().__init__(name, device, MINI_KERNELS, {})
        self.delay_s, self.wrong = delay_s, wrong

    def kernel(self, node: NodeSpec) -> Any:
        inner = super().kernel(node)
        delay, shift = self.delay_s, 1.0 if self.wrong and node.op_type == "Relu" else 0.0

        def run(*args: Any) -> Any:
            if delay:
                time.sleep(delay)
            out = inner(*args)
            return out + np.asarray(shift, out.dtype) if shift else out

        return run


@dataclass
class DeviceFactory:
    """A provider named ``name`` driving ``devices`` [(kind, name, properties)]."""

    name: str
    devices_spec: Sequence[tuple[str, str, Mapping[str, Any]]]
    priority: int = 0
    delay_s: float = 0.0
    wrong: bool = False
    vendor: str = "tests"
    version: str = "0.0.1"
    sdk_api: str = "1.3"
    created: list[Device] = field(default_factory=list)

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, kind, i, label, None if kind == "cpu" else 8 << 30, dict(props))
                for i, (kind, label, props) in enumerate(self.devices_spec)]

    def create(self, device: Device, options: Mapping[str, Any]) -> TimedProvider:
        self.created.append(device)
        return TimedProvider(self.name, device, self.delay_s, self.wrong)


def cpu_factory(delay_s: float = 0.0) -> DeviceFactory:
    """The fallback: a provider named cpu on the host CPU."""
    return DeviceFactory("cpu", [("cpu", "host", {})], priority=0, delay_s=delay_s)


def gpu_factory(name: str = "fakegpu", delay_s: float = 0.0, wrong: bool = False, priority: int = 100,
                gpu_name: str = "Fake GPU 9000") -> DeviceFactory:
    return DeviceFactory(name, [("gpu", gpu_name, {"vendor": "NVIDIA"})], priority, delay_s, wrong)


def multi_factory(priority: int = 90) -> DeviceFactory:
    """Like OpenVINO: one provider driving the CPU, a GPU and an NPU."""
    return DeviceFactory("multi", [("cpu", "CPU", {}), ("gpu", "Fake iGPU", {"vendor": "Intel"}),
                                   ("npu", "Fake NPU", {"vendor": "Intel"})], priority)


class PolicyPlugin:
    """A plugin registering policies: ``gpu_only`` (a sound one) and ``broken`` (raises)."""

    @hookimpl
    def epoxy_register_policies(self, register: Any) -> None:
        def gpu_only(ep_devices, model_metadata, runtime_metadata, max_selections):
            return [ep for ep in ep_devices if ep.kind == "gpu"][:1]

        def broken(ep_devices, model_metadata, runtime_metadata, max_selections):
            raise RuntimeError("policy bug")

        register("gpu_only", gpu_only, description="the first gpu, nothing else")
        register("broken", broken)
        register("Bad Name", gpu_only)
        register("prefer_gpu", gpu_only)
