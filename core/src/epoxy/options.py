"""Session options (the onnxruntime-style knobs users already know)."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InvalidArgumentError

OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")
EXECUTION_MODES = ("sequential", "parallel")
#: Provider options the core takes itself, for every provider, before ``create`` sees them.
CORE_PROVIDER_OPTIONS: dict[str, str] = {
    "device_index": "which of the provider's devices to use, int (default 0, the first one "
                    "`epoxy providers` lists)",
}


@dataclass
class SessionOptions:
    """Options for :class:`epoxy.InferenceSession`.

    ``graph_optimization_level``: ``disable``, ``basic``, ``extended`` or ``all``.
    ``disable_fallback``: when True, cpu is not appended to the provider list and a node no
    listed provider claims is an error naming it.
    ``intra_op_num_threads``: threads inside one kernel (BLAS); 0 leaves the library default.
    numpy's BLAS pool is process-wide, so this sets it for the whole process (threadpoolctl).
    ``execution_mode``: ``sequential`` or ``parallel`` (independent steps on a thread pool of
    ``inter_op_num_threads`` workers, default 2).
    ``enable_profiling``: time every step; ``InferenceSession.end_profiling()`` writes a trace.
    ``check_model`` / ``infer_shapes``: run ``onnx.checker`` / shape inference on load.
    ``memory_limit_bytes``: cap on any one value (and on the planned peak); ``None`` = no cap.
    Declared or inferred sizes above it are refused at session creation, feeds above it and
    Loop/Scan/sequence growth past it at run time (:class:`~epoxy.errors.ResourceLimitError`).
    Outputs whose size comes from tensor values (ConstantOfShape, Expand, Range, Tile, Pad,
    Resize, OneHot) are checked before allocation against it and, set or not, against the
    memory the process can still get (free RAM + swap, cgroup limit): a clear error rather
    than a MemoryError or the OOM killer.
    ``max_loop_iterations``: a Loop running more iterations than this is stopped with a
    ``ResourceLimitError`` (``None`` = no cap; a Loop without a trip count can run forever).
    """

    graph_optimization_level: str = "basic"
    disable_fallback: bool = False
    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    execution_mode: str = "sequential"
    enable_profiling: bool = False
    profile_file_prefix: str = "epoxy_profile"
    check_model: bool = True
    infer_shapes: bool = True
    memory_limit_bytes: int | None = None
    max_loop_iterations: int | None = None

    def validate(self) -> None:
        if self.graph_optimization_level not in OPTIMIZATION_LEVELS:
            raise InvalidArgumentError(
                f"graph_optimization_level must be one of {OPTIMIZATION_LEVELS}, "
                f"got {self.graph_optimization_level!r}"
            )
        if self.execution_mode not in EXECUTION_MODES:
            raise InvalidArgumentError(f"execution_mode must be one of {EXECUTION_MODES}, got {self.execution_mode!r}")
        for name in ("intra_op_num_threads", "inter_op_num_threads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("memory_limit_bytes", "max_loop_iterations"):
            limit = getattr(self, name)
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
                raise InvalidArgumentError(f"{name} must be a positive int or None, got {limit!r}")
