"""Exception classes: every failure a user can cause names what was wrong and where.

All inherit from :class:`EpoxyError`, so callers can catch one type; each carries the
node / input / provider involved as attributes as well as in the message.

Each is also one of onnxruntime's exception classes (``Fail``, ``InvalidArgument``,
``NoSuchFile``, ...; defined here and exported by :mod:`epoxy.capi`), so code written for
onnxruntime that catches those keeps catching the same failures under ``import epoxy as ort``.
"""

from __future__ import annotations


class EpoxyError(Exception):
    """Base class of every error epoxy raises on purpose."""


# -- onnxruntime's exception names (its status codes); epoxy's classes below inherit them ----
class Fail(EpoxyError):
    """onnxruntime ``FAIL``: a general failure (epoxy: partitioning, a stopped run)."""


class InvalidArgument(EpoxyError):
    """onnxruntime ``INVALID_ARGUMENT``: a wrong argument, option or feed."""


class NoSuchFile(EpoxyError):
    """onnxruntime ``NO_SUCHFILE``: the model file does not exist."""


class NoModel(EpoxyError):
    """onnxruntime ``NO_MODEL``: no model was given (epoxy never raises it; kept for ``except``)."""


class EngineError(EpoxyError):
    """onnxruntime ``ENGINE_ERROR`` (epoxy never raises it; kept for ``except`` clauses)."""


class RuntimeException(EpoxyError):
    """onnxruntime ``RUNTIME_EXCEPTION``: a kernel or a resource limit failed during a run."""


class InvalidProtobuf(EpoxyError):
    """onnxruntime ``INVALID_PROTOBUF``: the bytes are not an ONNX model."""


class ModelLoaded(EpoxyError):
    """onnxruntime ``MODEL_LOADED`` (epoxy never raises it; kept for ``except`` clauses)."""


class OrtNotImplemented(EpoxyError):
    """onnxruntime ``NOT_IMPLEMENTED`` (exported as ``epoxy.capi.NotImplemented``): no
    provider implements an op."""


class InvalidGraph(EpoxyError):
    """onnxruntime ``INVALID_GRAPH``: the graph is structurally wrong."""


class EPFail(EpoxyError):
    """onnxruntime ``EP_FAIL``: an execution provider failed."""


class NotFound(EpoxyError):
    """onnxruntime ``NOT_FOUND`` (epoxy never raises it; kept for ``except`` clauses)."""


class ModelLoadCanceled(EpoxyError):
    """onnxruntime ``MODEL_LOAD_CANCELED`` (epoxy never raises it; kept for ``except``)."""


class ModelRequiresCompilation(EpoxyError):
    """onnxruntime ``MODEL_REQUIRES_COMPILATION`` (epoxy never raises it; kept for ``except``)."""


class DeviceReset(EpoxyError):
    """onnxruntime's device-reset error (epoxy never raises it; kept for ``except``)."""


class ModelLoadError(Fail):
    """The model could not be read, parsed, validated or shape-inferred."""


class ModelFileNotFoundError(ModelLoadError, NoSuchFile, FileNotFoundError):
    """The model path does not name a file."""


class InvalidProtobufError(ModelLoadError, InvalidProtobuf):
    """The bytes or file are not a parsable ONNX protobuf."""


class InvalidGraphError(ModelLoadError, InvalidGraph):
    """The graph is structurally wrong (cycle, dangling input, duplicate name...)."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class UnsupportedOpError(OrtNotImplemented):
    """No provider in the session can run a node."""

    def __init__(self, message: str, *, node: str, op_type: str, domain: str = "", opset: int | None = None,
                 unclaimed: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.domain = domain
        self.opset = opset
        #: every node index no provider claimed (the partitioner's answer, so whoever expands
        #: those nodes into function bodies need not ask the providers again)
        self.unclaimed = unclaimed


class InvalidFeedError(InvalidArgument, ValueError):
    """A feed passed to ``run`` is missing, unknown, or has the wrong dtype/shape."""

    def __init__(self, message: str, *, input_name: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name


class InvalidArgumentError(InvalidArgument, ValueError, RuntimeError):
    """An argument to a public API (options, output names, providers) is wrong. Also a
    ``RuntimeError``: onnxruntime raises that for many of the same mistakes."""


class ProviderError(EPFail):
    """A provider failed while being created, asked for capability, or compiling."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider


class PluginLoadError(ProviderError):
    """A plugin failed to import or register (raised only in strict mode)."""


class ArtifactRefused(ProviderError):
    """A provider's ``import_compiled`` refuses a compiled blob (SDK API 1.2): another format,
    target, provider version or options, a truncated or corrupted blob, or (for blobs that
    are machine code) one this user's epoxy did not sign. The session then compiles the
    group again from its kept nodes and says why; the message is that reason."""


class PartitionError(Fail):
    """Nodes could not be assigned to providers (e.g. fallback disabled)."""


class KernelError(RuntimeException):
    """A kernel raised while running; names the node, op and provider."""

    def __init__(self, message: str, *, node: str, op_type: str, provider: str) -> None:
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.provider = provider


class OutputTypeError(KernelError):
    """A kernel or compiled group returned a value whose dtype, rank or a known dim differs
    from what the graph's types say (raised when output checks are on: ``check_outputs``).
    ``expected`` and ``got`` describe the value as ``float32[2,3]``."""

    def __init__(self, message: str, *, node: str, op_type: str, provider: str, output: str,
                 expected: str, got: str) -> None:
        super().__init__(message, node=node, op_type=op_type, provider=provider)
        self.output = output
        self.expected = expected
        self.got = got


class ResourceLimitError(RuntimeException):
    """A value would exceed a configured resource limit; names the value and the numbers."""

    def __init__(self, message: str, *, value: str | None = None, nbytes: int | None = None,
                 limit: int | None = None) -> None:
        super().__init__(message)
        self.value = value
        self.nbytes = nbytes
        self.limit = limit


class RunTerminatedError(Fail):
    """A run was stopped by ``RunOptions.terminate`` (set from another thread); the session
    stays usable."""
