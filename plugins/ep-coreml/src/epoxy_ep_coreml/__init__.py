"""epoxy-ep-coreml: run ONNX subgraphs as Core ML ML Programs.

Conversion (ONNX nodes -> MIL -> ``.mlpackage``) works on any OS; running needs macOS.
Importing this package does not import coremltools (that costs seconds); it is imported
on first conversion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .compile_tool import CompileResult

__all__ = ["__version__", "compile_model"]


def compile_model(model_path: Any, out_dir: Any, options: Any = None) -> CompileResult:
    """Convert the parts of ``model_path`` Core ML supports into ``.mlpackage`` files.

    Returns a :class:`~epoxy_ep_coreml.compile_tool.CompileResult`: ``packages`` (paths of
    the saved ``.mlpackage`` folders, one per fused group), ``report`` (the partition report:
    which node went where and why Core ML declined the rest) and ``groups`` (per package:
    ONNX boundary names and their Core ML feature names). Works on Linux too.
    """
    from .compile_tool import compile_model as _compile

    return _compile(model_path, out_dir, options)
