"""The cpu provider: the kit's KernelProvider, building kernels under this provider's options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epoxy.contract import Device, KernelFn, NodeSpec
from epoxy.kit import KernelProvider, KernelRegistry

from . import jit
from .settings import CpuSettings, building_with


class CpuProvider(KernelProvider):
    """Kernel factories see ``settings`` (through ``settings.current()``) while they build."""

    def __init__(
        self, name: str, device: Device, registry: KernelRegistry, options: Mapping[str, Any], settings: CpuSettings
    ) -> None:
        super().__init__(name, device, registry, options)
        self.settings = settings
        #: this provider's resolved jit thread count, filled by the first jit kernel it builds
        self._jit_memo: dict[str, int] = {}

    def claims(self, node: NodeSpec) -> str | None:
        with building_with(self.settings):
            return super().claims(node)

    def kernel(self, node: NodeSpec) -> KernelFn:
        with building_with(self.settings), jit.remembering(self._jit_memo):
            return super().kernel(node)
