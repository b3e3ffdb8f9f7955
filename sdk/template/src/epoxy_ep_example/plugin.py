"""Entry point module: keep it cheap to import; heavy libraries load in ``create``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from epoxy.contract import SDK_API_VERSION, Device
from epoxy.hookspecs import hookimpl
from epoxy.kit import KernelProvider, KernelRegistry

KERNELS = KernelRegistry()


@KERNELS.register("Relu", since=(6, 13, 14))
def relu(node):  # type: ignore[no-untyped-def]
    return lambda x: np.maximum(x, x.dtype.type(0))


@KERNELS.register("Add", since=(7, 13, 14))
def add(node):  # type: ignore[no-untyped-def]
    return np.add


class ExampleFactory:
    name = "example"
    vendor = "Example Corp"
    version = "0.1.0"
    sdk_api = SDK_API_VERSION
    priority = 10

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, "cpu", 0, "example host device")]

    def create(self, device: Device, options: Mapping[str, Any]) -> KernelProvider:
        return KernelProvider(self.name, device, KERNELS, options)

    def supported_ops(self):  # type: ignore[no-untyped-def]
        return KERNELS.ops()


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(ExampleFactory())
