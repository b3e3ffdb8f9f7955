"""The example_compiler provider factory: identity, device discovery, options and creation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epoxy.contract import Device, Provider

from .options import TABLE, parse_options
from .version import __version__


class ExampleCompilerFactory:
    """What epoxy knows about the provider before creating it (``epoxy providers`` shows it)."""

    name = "example_compiler"  # = the entry point name; unique among installed providers
    vendor = "ExampleCompiler authors"
    version = __version__
    # the epoxy SDK API ("major.minor") this package was written and tested against, as a
    # literal (never the core's constant): a core of this major and this or a newer minor loads it
    sdk_api = "1.5"
    priority = 10  # sessions ask providers highest first: cpu 0, openvino 50, cuda 100
    # Optional: aliases = ("ExampleCompilerExecutionProvider",) if onnxruntime users know your
    # hardware by such a name (sessions then accept it too).

    def __init__(self) -> None:
        self._devices: list[Device] | None = None

    def devices(self) -> Sequence[Device]:
        """The devices this provider can drive here, found once. Replace with your discovery:
        raise ``epoxy.contract.ProviderUnavailable("why; what to install")`` when there is none."""
        if self._devices is None:
            self._devices = [Device(self.name, "cpu", 0, "example_compiler on the host")]
        return list(self._devices)

    def options(self) -> Mapping[str, str]:
        """What ``create`` accepts (``epoxy providers --options example_compiler``); cheap, no device."""
        return TABLE.describe()

    def create(self, device: Device, options: Mapping[str, Any]) -> Provider:
        from .provider import ExampleCompilerProvider  # the module that may import drivers or compilers

        return ExampleCompilerProvider(device, parse_options(options))

    def supported_ops(self) -> list[Any]:
        """The ops and opsets it runs (``epoxy ops --provider example_compiler``)."""
        from .provider import supported_ops

        return supported_ops()
