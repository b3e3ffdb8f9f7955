"""Run-time building blocks for providers: kernel registry, host allocator, kernel provider,
and the graph helpers compiling providers share (``convex_groups``, ``boundary``).

They live in the core (not the SDK) so a provider package needs only ``epoxy-core`` when
it runs; ``epoxy-sdk`` re-exports them next to the development-time conformance kit.
"""

from .groups import boundary, convex_groups, dependencies
from .host import HostAllocator
from .kernel_provider import KernelProvider
from .options import Kind, Option, OptionTable
from .registry import KernelRegistry, OpSupport, Unsupported

__all__ = ["HostAllocator", "Kind", "KernelProvider", "KernelRegistry", "OpSupport", "Option", "OptionTable",
           "Unsupported", "boundary", "convex_groups", "dependencies"]
