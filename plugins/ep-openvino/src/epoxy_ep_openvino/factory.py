"""The openvino provider factory: identity, device enumeration (lazy import), creation.

Nothing here imports OpenVINO at module import time: ``devices()`` and ``create()`` do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epoxy.contract import Device, ProviderUnavailable

from .runtime import PROVIDER_NAME, import_openvino, shared_core
from .version import __version__


class OpenVINOProviderFactory:
    """Identity and discovery for the OpenVINO provider."""

    name = PROVIDER_NAME
    vendor = "epoxy (OpenVINO by Intel)"
    version = __version__
    sdk_api = "1.2"  # the epoxy SDK API written against (a literal: the core checks it)
    priority = 50  # above cpu: compiled groups are faster than per-node numpy kernels
    #: onnxruntime's name for this provider: sessions and ``in get_available_providers()`` accept it
    aliases = ("OpenVINOExecutionProvider",)

    def __init__(self) -> None:
        self._devices: list[Device] | None = None

    def devices(self) -> Sequence[Device]:
        if self._devices is None:
            self._devices = self._enumerate()
        return list(self._devices)

    def _enumerate(self) -> list[Device]:
        ov = import_openvino()
        try:
            core = shared_core()
            names = list(core.available_devices)
        except ProviderUnavailable:
            raise
        except Exception as exc:
            raise ProviderUnavailable(f"openvino could not list devices: {type(exc).__name__}: {exc}") from exc
        if not names:
            raise ProviderUnavailable("openvino found no devices")
        devices = []
        per_kind: dict[str, int] = {}
        for ov_name in names:
            kind = ov_name.split(".", 1)[0].lower()
            index = per_kind.get(kind, 0)
            per_kind[kind] = index + 1
            try:
                full = str(core.get_property(ov_name, "FULL_DEVICE_NAME"))
            except Exception:  # noqa: BLE001 - a name is nice to have
                full = ov_name
            properties = {"ov_device": ov_name, "openvino": ov.__version__}
            if kind != "cpu":  # OpenVINO's GPU and NPU plugins drive Intel devices; a CPU is the host's
                properties["vendor"] = "Intel"
            devices.append(Device(self.name, kind, index, full, properties=properties))
        return devices

    def options(self) -> Mapping[str, str]:
        """What ``create`` accepts, from the table it validates against (``epoxy providers``)."""
        from .options import TABLE

        return TABLE.describe()

    def group_ops(self) -> list[Any]:
        """The ops our gates offer to OpenVINO, per domain (``epoxy ops --provider openvino``):
        openvino runs them only inside the fused groups it compiles."""
        from .support import supported_ops

        return supported_ops()

    def create(self, device: Device, options: Mapping[str, Any]) -> Any:
        from .options import TABLE
        from .provider import OpenVINOProvider

        parsed = TABLE.parse(options)
        return OpenVINOProvider(device, parsed)
