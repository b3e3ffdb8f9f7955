"""epoxy: an ONNX inference runtime whose hardware back ends are plugins.

``epoxy.InferenceSession("m.onnx", providers=["openvino", "cpu"])`` runs a model, each
node on the best installed provider that claims it, the rest on cpu.
"""

# ruff: noqa: E402  (sympy is deferred before the package's own imports, which may load onnx_ir)
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .deferred_imports import defer_sympy, lazy_attribute

defer_sympy()  # before anything imports onnx_ir: sympy loads only if something uses it

from .api.runtime_info import (
    get_build_info,
    get_device,
    get_version_string,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_seed,
)
from .errors import (
    EpoxyError,
    InvalidArgumentError,
    InvalidFeedError,
    InvalidGraphError,
    KernelError,
    ModelLoadError,
    OutputTypeError,
    PartitionError,
    PluginLoadError,
    ProviderError,
    ResourceLimitError,
    UnsupportedOpError,
)
from .options import ExecutionMode, ExecutionOrder, GraphOptimizationLevel, RunOptions, SessionOptions
from .plugins import default_registry
from .version import __version__

if TYPE_CHECKING:
    from .aot.compile import compile_model
    from .aot.inspect import inspect_model
    from .api.io_binding import IOBinding
    from .api.model_compiler import ModelCompiler, OrtCompileApiFlags
    from .api.ort_value import OrtValue
    from .devices import (
        EpDevice,
        HardwareDevice,
        OrtExecutionProviderDevicePolicy,
        OrtHardwareDeviceType,
        get_devices,
        get_ep_devices,
    )
    from .load.model_meta import ModelMetadata
    from .session import InferenceSession, NodeArg

#: loaded on first use: the session brings in onnx / onnx_ir, ~0.2 s
#: that ``epoxy providers`` and other registry-only uses need not pay
_LAZY = {
    "InferenceSession": "session",
    "NodeArg": "session",
    "OrtValue": "api.ort_value",
    "IOBinding": "api.io_binding",
    "ModelMetadata": "load.model_meta",
    "compile_model": "aot.compile",
    "ModelCompiler": "api.model_compiler",
    "OrtCompileApiFlags": "api.model_compiler",
    "inspect_model": "aot.inspect",
    "get_devices": "devices",
    "get_ep_devices": "devices",
    "EpDevice": "devices",
    "HardwareDevice": "devices",
    "OrtExecutionProviderDevicePolicy": "devices",
    "OrtHardwareDeviceType": "devices",
    "OrtEpDevice": "devices",
    "OrtHardwareDevice": "devices",
}
#: onnxruntime's module attribute for the version
version = __version__


def __getattr__(name: str) -> Any:
    from importlib import import_module

    if name == "capi":  # ``ort.capi.onnxruntime_pybind11_state.Fail`` without importing it first
        import_module(".capi.onnxruntime_pybind11_state", __name__)
        globals()[name] = import_module(".capi", __name__)
        return globals()[name]
    return lazy_attribute(__name__, _LAZY, globals(), name)


def get_all_providers() -> list[str]:
    """Names of every installed provider (available on this host or not), by priority.

    A list of epoxy's names whose ``in`` also knows their onnxruntime aliases
    (``"CPUExecutionProvider" in epoxy.get_all_providers()``): an
    :class:`epoxy.api.provider_names.ProviderNames`.
    """
    from .api.provider_names import ProviderNames

    registry = default_registry()
    return ProviderNames([e.name for e in registry.entries()], registry.aliases())


def get_available_providers() -> list[str]:
    """Names of installed providers that found a device here, by priority.

    A list of epoxy's names (``providers=epoxy.get_available_providers()`` works) whose
    ``in`` also knows their onnxruntime aliases: ``"CUDAExecutionProvider" in
    epoxy.get_available_providers()`` is True when cuda is available: an
    :class:`epoxy.api.provider_names.ProviderNames`.
    """
    from .api.provider_names import ProviderNames

    registry = default_registry()
    return ProviderNames([e.name for e in registry.entries() if e.available], registry.aliases())


__all__ = [
    "EpDevice",
    "EpoxyError",
    "HardwareDevice",
    "OrtEpDevice",
    "OrtExecutionProviderDevicePolicy",
    "OrtHardwareDevice",
    "OrtHardwareDeviceType",
    "ExecutionMode",
    "ExecutionOrder",
    "GraphOptimizationLevel",
    "IOBinding",
    "ModelCompiler",
    "ModelMetadata",
    "OrtCompileApiFlags",
    "OrtValue",
    "RunOptions",
    "get_build_info",
    "get_device",
    "get_version_string",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_seed",
    "InferenceSession",
    "InvalidArgumentError",
    "InvalidFeedError",
    "InvalidGraphError",
    "KernelError",
    "OutputTypeError",
    "ModelLoadError",
    "NodeArg",
    "PartitionError",
    "PluginLoadError",
    "ProviderError",
    "ResourceLimitError",
    "SessionOptions",
    "UnsupportedOpError",
    "__version__",
    "compile_model",
    "get_all_providers",
    "get_available_providers",
    "get_devices",
    "get_ep_devices",
    "inspect_model",
]
