"""Session options (the onnxruntime-style knobs users already know)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgumentError

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


@dataclass
class SessionOptions:
    """Options for :class:`epoxy.InferenceSession`.

    ``graph_optimization_level``: ``disable``, ``basic``, ``extended`` or ``all``.
    ``disable_fallback``: when True, cpu is not appended to the provider list and a node no
    listed provider claims is an error naming it.
    ``intra_op_num_threads`` / ``inter_op_num_threads``: 0 means the library default.
    ``check_model`` / ``infer_shapes``: run ``onnx.checker`` / shape inference on load.
    ``memory_limit_bytes``: cap on any one value (and on the planned peak); ``None`` = no cap.
    Declared or inferred sizes above it are refused at session creation, feeds above it and
    Loop/Scan/sequence growth past it at run time (:class:`~epoxy.errors.ResourceLimitError`).
    """

    graph_optimization_level: str = "basic"
    disable_fallback: bool = False
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    check_model: bool = True
    infer_shapes: bool = True
    memory_limit_bytes: int | None = None

    def validate(self) -> None:
        if self.graph_optimization_level not in OPTIMIZATION_LEVELS:
            raise InvalidArgumentError(
                f"graph_optimization_level must be one of {OPTIMIZATION_LEVELS}, "
                f"got {self.graph_optimization_level!r}"
            )
        for name in ("intra_op_num_threads", "inter_op_num_threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
        limit = self.memory_limit_bytes
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
            raise InvalidArgumentError(f"memory_limit_bytes must be a positive int or None, got {limit!r}")
