"""Exception classes: every failure a user can cause names what was wrong and where.

All inherit from :class:`EpoxyError`, so callers can catch one type; each carries the
node / input / provider involved as attributes as well as in the message.
"""

from __future__ import annotations


class EpoxyError(Exception):
    """Base class of every error epoxy raises on purpose."""


class ModelLoadError(EpoxyError):
    """The model could not be read, parsed, validated or shape-inferred."""


class InvalidGraphError(ModelLoadError):
    """The graph is structurally wrong (cycle, dangling input, duplicate name...)."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class UnsupportedOpError(EpoxyError):
    """No provider in the session can run a node."""

    def __init__(self, message: str, *, node: str, op_type: str, domain: str = "", opset: int | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.domain = domain
        self.opset = opset


class InvalidFeedError(EpoxyError, ValueError):
    """A feed passed to ``run`` is missing, unknown, or has the wrong dtype/shape."""

    def __init__(self, message: str, *, input_name: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name


class InvalidArgumentError(EpoxyError, ValueError):
    """An argument to a public API (options, output names, providers) is wrong."""


class ProviderError(EpoxyError):
    """A provider failed while being created, asked for capability, or compiling."""

    def __init__(self, message: str, *, provider: str | None = None) -> None:
        super().__init__(message)
        self.provider = provider


class PluginLoadError(ProviderError):
    """A plugin failed to import or register (raised only in strict mode)."""


class PartitionError(EpoxyError):
    """Nodes could not be assigned to providers (e.g. fallback disabled)."""


class KernelError(EpoxyError):
    """A kernel raised while running; names the node, op and provider."""

    def __init__(self, message: str, *, node: str, op_type: str, provider: str) -> None:
        super().__init__(message)
        self.node = node
        self.op_type = op_type
        self.provider = provider


class ResourceLimitError(EpoxyError):
    """A value would exceed a configured resource limit; names the value and the numbers."""

    def __init__(self, message: str, *, value: str | None = None, nbytes: int | None = None,
                 limit: int | None = None) -> None:
        super().__init__(message)
        self.value = value
        self.nbytes = nbytes
        self.limit = limit
