"""Graph optimizer: passes registered through the plugin manager, run by level.

``optimize`` and ``LEVEL_ORDER`` load on first use (they bring in onnx_ir), so that the
provider registry, which imports ``optimizer.builtin``, stays cheap to build.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LEVEL_ORDER", "LoadTimePasses", "constant_lifting_pass", "optimize", "with_work_done_while_loading"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'epoxy.optimize' has no attribute {name!r}")
    from . import pipeline

    return getattr(pipeline, name)
