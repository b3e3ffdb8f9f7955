"""Devices and provider selection policies.

- :func:`get_devices` / :func:`get_ep_devices`: the hardware installed providers can drive
  (``epoxy devices``), as onnxruntime's ``get_ep_devices()`` lists it.
- Policies (``SessionOptions.provider_selection_policy``, ``providers="auto:<policy>"``): rules
  over those devices (:mod:`.policies`), plugins' policies (the ``epoxy_register_policies`` hook),
  and ``max_performance``, measured on the model and cached (:mod:`.tuning`, ``epoxy tune``).
"""

from .inventory import EpDevice, HardwareDevice, OrtHardwareDeviceType, get_devices, get_ep_devices
from .policies import OrtExecutionProviderDevicePolicy
from .selection import ProviderSelection

#: onnxruntime's names for the same objects
OrtEpDevice = EpDevice
OrtHardwareDevice = HardwareDevice

__all__ = ["EpDevice", "HardwareDevice", "OrtEpDevice", "OrtExecutionProviderDevicePolicy", "OrtHardwareDevice",
           "OrtHardwareDeviceType",
           "ProviderSelection", "get_devices", "get_ep_devices"]
