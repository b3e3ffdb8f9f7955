"""The host allocator: device values are numpy arrays, copies are no-ops."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..contract import Device


class HostAllocator:
    """Allocator for providers computing in host memory (cpu, OpenVINO on CPU...)."""

    is_host = True

    def __init__(self, device: Device) -> None:
        self.device = device

    def to_device(self, value: np.ndarray) -> Any:
        return value

    def to_host(self, value: Any) -> np.ndarray:
        return value
