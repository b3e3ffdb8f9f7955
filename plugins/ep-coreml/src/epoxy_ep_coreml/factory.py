"""The coreml provider factory: identity, discovery (macOS only), creation."""

from __future__ import annotations

import importlib.util
import platform
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from epoxy.contract import Device, ProviderUnavailable

from .options import TABLE
from .version import __version__

UNAVAILABLE_OFF_MACOS = "Core ML runs on macOS only"
#: the device that converts without running (``compile_devices``; compile_tool's provider)
CONVERTER = Device("coreml", "converter", 0, "Core ML converter (no execution)")


class CoreMLProviderFactory:
    """Core ML through coremltools. Above cpu, below hand-written device providers."""

    name = "coreml"
    vendor = "Apple Core ML (via coremltools)"
    version = __version__
    sdk_api = "1.2"  # the epoxy SDK API written against (a literal: the core checks it; 1.2: compiled groups)
    priority = 50
    #: onnxruntime's name for this provider: sessions and ``in get_available_providers()`` accept it
    aliases = ("CoreMLExecutionProvider",)

    def devices(self) -> Sequence[Device]:
        if sys.platform != "darwin":
            raise ProviderUnavailable(UNAVAILABLE_OFF_MACOS)
        if importlib.util.find_spec("coremltools") is None:
            raise ProviderUnavailable("coremltools is not installed (pip install coremltools)")
        machine = platform.machine()
        return [Device(self.name, "apple", 0, f"Core ML on {machine} ({platform.mac_ver()[0] or 'macOS'})",
                       # the Neural Engine makes an Apple silicon Mac's Core ML the npu that prefer_npu picks
                       properties={"machine": machine, "neural_engine": machine == "arm64", "vendor": "Apple",
                                   "device_type": "npu" if machine == "arm64" else "gpu"})]

    def compile_devices(self) -> Sequence[Device]:
        """The converter, on any OS with coremltools: ``epoxy compile --providers coreml``
        writes Core ML packages into a compiled model on Linux too (they run on macOS)."""
        if importlib.util.find_spec("coremltools") is None:
            return []
        return [CONVERTER]

    def options(self) -> Mapping[str, str]:
        """What ``create`` accepts, from the table it validates against (``epoxy providers``)."""
        return TABLE.describe()

    def group_ops(self) -> list[str]:
        """The ops this provider converts to Core ML (``epoxy ops --provider coreml``): run
        only inside the fused groups it compiles."""
        from .ops import supported_ops

        return supported_ops()

    def create(self, device: Device, options: Mapping[str, Any]) -> Any:
        parsed = TABLE.parse(options)
        from .provider import CoreMLProvider

        # on the converter device (compile_devices): convert and export, never predict
        return CoreMLProvider(device, parsed, convert_only=device.kind == CONVERTER.kind)
