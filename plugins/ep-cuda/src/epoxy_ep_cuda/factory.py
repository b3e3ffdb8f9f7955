"""The cuda provider factory: devices found lazily, provider built on ``create``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epoxy.contract import Device
from epoxy.kit import OpSupport

from .version import __version__


class CudaProviderFactory:
    """Identity and discovery for the CuPy-based CUDA provider.

    ``devices()`` imports CuPy only when called (never at plugin import) and raises
    ``ProviderUnavailable`` with the reason when no GPU can be driven here.
    """

    name = "cuda"
    vendor = "epoxy"
    version = __version__
    sdk_api = "1.2"  # the epoxy SDK API written against (a literal: the core checks it; 1.2: compiled groups)
    priority = 100  # above cpu (0): claimed nodes run on the GPU, the rest falls back to cpu
    #: onnxruntime's name for this provider: sessions and ``in get_available_providers()`` accept it
    aliases = ("CUDAExecutionProvider",)

    def devices(self) -> Sequence[Device]:
        from ._cuda import probe_devices

        return [
            Device(
                self.name, "gpu", d["index"], d["name"], d["memory_bytes"],
                properties={**{k: d[k] for k in ("compute_capability", "multiprocessors", "cuda_runtime")},
                            "vendor": "NVIDIA",
                            **({"hardware_id": f"pci:{d['pci_bus_id']}"} if d.get("pci_bus_id") else {})},
            )
            for d in probe_devices()
        ]

    def options(self) -> Mapping[str, str]:
        """What ``create`` accepts, from the table it validates against (``epoxy providers``)."""
        from .options import TABLE

        return TABLE.describe()

    def create(self, device: Device, options: Mapping[str, Any]) -> Any:
        from .options import TABLE
        from .provider import CudaProvider

        opts = TABLE.parse(options)
        from .backend import CupyBackend

        return CudaProvider(device, opts, CupyBackend(device, opts))

    def supported_ops(self) -> list[OpSupport]:
        from .ops_table import supported_ops

        return supported_ops()
