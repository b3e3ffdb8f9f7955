"""epoxy-sdk: what a vendor needs to write and prove an epoxy execution provider.

Run time pieces (the contract and base classes) live in ``epoxy-core`` so a provider needs
nothing else when it runs; they are re-exported here for one import line while authoring.
Development-time pieces live here: the conformance kit (``epoxy_sdk.conformance``, a
pytest plugin and the ``epoxy-conformance`` command) and a package template (``template/``).
"""

from epoxy.contract import (
    SDK_API_VERSION,
    Allocator,
    Capability,
    CompiledArtifact,
    CompilingProvider,
    Device,
    DeviceValueAllocator,
    FusedGroup,
    GraphSpec,
    KernelFn,
    NodeSpec,
    Provider,
    ProviderFactory,
    ProviderFactoryWithOptions,
    ProviderUnavailable,
    SubgraphSpec,
    ValueType,
)
from epoxy.errors import ArtifactRefused
from epoxy.hookspecs import hookimpl
from epoxy.kit import (
    BlobFrame,
    BlobFrameError,
    HostAllocator,
    KernelProvider,
    KernelRegistry,
    Kind,
    OpSupport,
    Option,
    OptionTable,
    Unsupported,
    boundary,
    convex_groups,
)

from .version import __version__

__all__ = [
    "SDK_API_VERSION",
    "Allocator",
    "ArtifactRefused",
    "BlobFrame",
    "BlobFrameError",
    "Capability",
    "CompiledArtifact",
    "CompilingProvider",
    "Device",
    "DeviceValueAllocator",
    "FusedGroup",
    "GraphSpec",
    "HostAllocator",
    "KernelFn",
    "KernelProvider",
    "KernelRegistry",
    "Kind",
    "NodeSpec",
    "OpSupport",
    "Option",
    "OptionTable",
    "Provider",
    "ProviderFactory",
    "ProviderFactoryWithOptions",
    "ProviderUnavailable",
    "SubgraphSpec",
    "Unsupported",
    "ValueType",
    "__version__",
    "boundary",
    "convex_groups",
    "hookimpl",
]
