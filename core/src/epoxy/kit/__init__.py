"""Run-time building blocks for providers: kernel registry, host allocator, kernel provider,
the graph helpers compiling providers share (``convex_groups``, ``boundary``), and the
checked framing of their compiled blobs (``BlobFrame``).

They live in the core (not the SDK) so a provider package needs only ``epoxy-core`` when
it runs; ``epoxy-sdk`` re-exports them next to the development-time conformance kit.
"""

from .aligned import CACHE_LINE, aligned_empty, aligned_zeros, is_aligned
from .blob_frame import BlobFrame, BlobFrameError
from .fingerprint import group_fingerprint
from .groups import boundary, convex_groups, dependencies
from .host import HostAllocator
from .kernel_provider import KernelProvider
from .options import Kind, Option, OptionTable
from .registry import KernelRegistry, OpSupport, Unsupported
from .user_dirs import user_cache_dir

__all__ = ["CACHE_LINE", "BlobFrame", "BlobFrameError", "HostAllocator", "Kind", "KernelProvider", "KernelRegistry",
           "OpSupport", "Option", "OptionTable", "Unsupported", "aligned_empty", "aligned_zeros", "boundary",
           "convex_groups", "dependencies", "group_fingerprint", "is_aligned", "user_cache_dir"]
