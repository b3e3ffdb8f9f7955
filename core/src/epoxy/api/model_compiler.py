"""onnxruntime's ``ModelCompiler`` over ``epoxy compile`` (docs/AOT.md, docs/ORT_COMPAT.md).

Code written for onnxruntime's compile API runs unchanged: the providers come from
``sess_options.add_provider(...)`` (or the epoxy-only ``providers=`` argument), the
output is epoxy's compiled model (context nodes in ``ai.epoxy.compiled`` that keep the
groups' nodes, not ``com.microsoft::EPContext`` nodes). onnxruntime's defaults are kept:
side files unless ``embed_compiled_data_into_model``, no graph optimization unless
``graph_optimization_level`` says otherwise.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from ..options import GraphOptimizationLevel, SessionOptions


class OrtCompileApiFlags(enum.IntFlag):
    """onnxruntime's compile flags (same values)."""

    NONE = 0
    ERROR_IF_NO_NODES_COMPILED = 1
    ERROR_IF_OUTPUT_FILE_EXISTS = 2


class ModelCompiler:
    """Compile a model for the providers in ``sess_options`` (see the module docstring)."""

    def __init__(self, sess_options: SessionOptions, input_model_path_or_bytes: str | os.PathLike[str] | bytes,
                 embed_compiled_data_into_model: bool = False,
                 external_initializers_file_path: str | os.PathLike[str] | None = None,
                 external_initializers_size_threshold: int = 1024,
                 flags: int = OrtCompileApiFlags.NONE,
                 graph_optimization_level: GraphOptimizationLevel = GraphOptimizationLevel.ORT_DISABLE_ALL,
                 get_initializer_location_func: Callable[..., Any] | None = None,
                 *, providers: Sequence[Any] | None = None, registry: Any = None) -> None:
        if not isinstance(sess_options, SessionOptions):
            raise InvalidArgumentError(f"ModelCompiler: sess_options must be an epoxy.SessionOptions, "
                                       f"got {type(sess_options).__name__}")
        if external_initializers_file_path is not None or get_initializer_location_func is not None:
            raise InvalidArgumentError("ModelCompiler: external initializer files are not offered; epoxy writes "
                                       "weights inside the model (beside it only past protobuf's 2 GiB)")
        self._options = sess_options
        self._model = input_model_path_or_bytes
        self._embed = bool(embed_compiled_data_into_model)
        self._flags = OrtCompileApiFlags(int(flags))
        self._level = GraphOptimizationLevel(graph_optimization_level)
        self._providers = list(providers) if providers is not None else None
        self._registry = registry

    def compile_to_file(self, output_model_path: str | os.PathLike[str] | None = None) -> None:
        """Write the compiled model (default path: the input's with ``_ctx.onnx``, onnxruntime's)."""
        if output_model_path is None:
            if isinstance(self._model, bytes):
                raise InvalidArgumentError("ModelCompiler.compile_to_file: give output_model_path when the input "
                                           "model is bytes")
            source = Path(self._model)
            output_model_path = source.with_name(source.stem + "_ctx.onnx")
        out = Path(output_model_path)
        if self._flags & OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS and out.exists():
            raise InvalidArgumentError(f"ModelCompiler: {str(out)!r} exists (ERROR_IF_OUTPUT_FILE_EXISTS)")
        self._compile(out, self._embed)

    def compile_to_bytes(self) -> bytes:
        """The compiled model as bytes (blobs embedded: there is no folder for side files)."""
        with tempfile.TemporaryDirectory(prefix="epoxy-compile-") as folder:
            out = Path(folder) / "model.onnx"
            self._compile(out, embed=True)
            return out.read_bytes()

    def compile_to_stream(self, write_function: Callable[[bytes], None]) -> None:
        """:meth:`compile_to_bytes` handed to ``write_function`` in chunks."""
        data = self.compile_to_bytes()
        chunk = 1 << 20
        for start in range(0, len(data), chunk):
            write_function(data[start:start + chunk])

    def _compile(self, out: Path, embed: bool) -> None:
        from ..aot.compile import compile_model

        options = self._options  # its level is set for this compile, then put back
        previous = options.graph_optimization_level
        options.graph_optimization_level = self._level
        try:
            summary = compile_model(self._model, out, providers=self._providers, sess_options=options,
                                    embed=embed, registry=self._registry)
        finally:
            options.graph_optimization_level = previous
        if self._flags & OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED and not summary.groups:
            out.unlink(missing_ok=True)
            for side in summary.files:
                side.unlink(missing_ok=True)
            kept = "; ".join(f"{g['label']}: {g['reason']}" for g in summary.kept) or "no provider compiled a group"
            raise InvalidArgumentError(f"ModelCompiler: no nodes were compiled (ERROR_IF_NO_NODES_COMPILED): {kept}")
