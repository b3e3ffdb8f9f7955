"""The provider contract: plain data the core hands to providers, and the Protocols they implement.

This module is the whole public API a provider package needs (with :mod:`epoxy.hookspecs`).
It lives in the core, not the SDK, so a provider depends only on ``epoxy-core`` at run time;
the SDK is a development-time kit (base classes, conformance tests, template).

Its version is ``major.minor`` (:mod:`epoxy.sdk_api`): a minor release adds fields, optional
hooks and helpers, never changes them; a major one may.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .sdk_api import SDK_API

#: Version of this contract (``"major.minor"``). A factory declares, as a literal, the
#: version it was written against; the core loads it when the major is the same and its
#: minor is not newer (:func:`epoxy.sdk_api.incompatibility`), else records a plugin failure.
SDK_API_VERSION = SDK_API

#: What a kernel or a compiled group is: called with input values in the node's input
#: order (``None`` for missing optional inputs); returns one value for a single output or
#: a tuple with one value per output. A single-output host kernel may set the attribute
#: ``supports_out = True``: it is then called with ``out=`` (a planned, reused array of the
#: output's inferred shape and dtype) when the planner gives it one, must write its result
#: there and return it (see ``epoxy.plan.arena``).
KernelFn = Callable[..., Any]

#: The kernel attribute by which a kernel says it keeps its own copy of constant inputs (a
#: prepacked weight) and never reads the plan's values at those input positions again: a
#: frozenset of positions. When every step reading a constant says so (and nothing else uses
#: it: no other provider's group, no graph output, no feed may override it), the session
#: drops its reference and passes ``None`` there, so the process holds one copy of the
#: weight, not two (``epoxy.plan.released_constants``). Added in SDK API 1.4 (optional).
RELEASED_INPUTS = "released_inputs"

#: The kernel attribute by which an ``out=``-capable kernel says where its inputs lie in its
#: output: ``out_parts(out_shape, input_shapes)`` returns, per input position, the element
#: offset at which that input is one C-contiguous block of the (C-contiguous) output, or None
#: there (or None for all). The planner may then hand the inputs' producers views of those
#: blocks as their ``out=``; called with ``out=``, the kernel must leave an input that is
#: already at its place as it is and copy the others (``epoxy.plan.placed_parts``). Added in
#: SDK API 1.5 (optional).
OUT_PARTS = "out_parts"


@dataclass(frozen=True)
class Device:
    """One device a provider can drive (a CPU, a GPU, a simulated device...)."""

    provider: str
    kind: str
    index: int = 0
    name: str = ""
    memory_bytes: int | None = None
    properties: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """``provider:kind:index`` — how reports and errors name the device."""
        return f"{self.provider}:{self.kind}:{self.index}"


@dataclass(frozen=True)
class ValueType:
    """Static type of a graph value, as far as shape inference knows it.

    ``kind`` is ``tensor``, ``sequence``, ``optional``, ``map`` or ``unknown``; for sequence
    and optional values ``element`` describes what is inside. ``shape`` dims are ints (known),
    strings (symbolic) or ``None`` (unknown); ``shape`` itself is ``None`` when rank is unknown.
    A ``map`` (ai.onnx.ml's maps: Python dicts at run time) has ``key_dtype`` (``object`` for
    string keys, an integer dtype otherwise) and its value type in ``element``
    (``map(string,tensor(int64))``: ``key_dtype=object``, ``element`` a ``tensor`` of int64).
    """

    kind: str = "unknown"
    elem_type: int = 0
    dtype: np.dtype | None = None
    shape: tuple[int | str | None, ...] | None = None
    element: ValueType | None = None
    #: key type of a ``map`` (added after SDK API 1 shipped; ``None`` for other kinds)
    key_dtype: np.dtype | None = None

    @property
    def is_static(self) -> bool:
        """True when this is a tensor whose every dim is a known int."""
        return self.kind == "tensor" and self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def nbytes(self) -> int | None:
        """Byte size for static tensors of fixed-width dtype, else ``None``."""
        if not self.is_static or self.dtype is None or self.dtype == np.dtype(object):
            return None
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize  # type: ignore[arg-type]


UNKNOWN = ValueType()


@dataclass(frozen=True, eq=False)
class NodeSpec:
    """One node as providers see it: identity, opset, attributes as Python values, types.

    Attribute values are ``int``, ``float``, ``str``, ``tuple`` of those, ``numpy.ndarray``
    for tensors, or an opaque core object for graph attributes (control flow is run by the
    core). ``inputs``/``outputs`` hold value names, ``""`` marking an omitted optional one.
    """

    index: int
    name: str
    op_type: str
    domain: str
    opset: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attributes: Mapping[str, Any]
    input_types: tuple[ValueType, ...]
    output_types: tuple[ValueType, ...]
    #: values of inputs that are constants (initializers no feed can override), by input
    #: name: lets a kernel factory prepack weights once. Added in SDK API 1 (may be empty).
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)

    @property
    def qualified_op(self) -> str:
        """``domain::OpType-opset`` for reports; ai.onnx omits the domain."""
        prefix = f"{self.domain}::" if self.domain else ""
        return f"{prefix}{self.op_type}-{self.opset}"

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute value or ``default`` when the attribute is absent."""
        return self.attributes.get(name, default)


class GraphSpec(Protocol):
    """Read-only view of the (optimized) graph handed to ``Provider.capability``."""

    # read-only attributes (properties to a type checker: any object with these attributes
    # is a GraphSpec, whatever their concrete types, e.g. list[NodeSpec])
    @property
    def nodes(self) -> Sequence[NodeSpec]: ...
    @property
    def inputs(self) -> Sequence[str]: ...
    @property
    def outputs(self) -> Sequence[str]: ...
    @property
    def opsets(self) -> Mapping[str, int]: ...

    def value_type(self, name: str) -> ValueType:
        """Static type of a value (``UNKNOWN`` when inference could not tell)."""
        ...

    def constant(self, name: str) -> np.ndarray | None:
        """Value of an initializer / constant, or ``None`` when it is computed at run time."""
        ...

    def producer(self, name: str) -> int | None:
        """Index of the node producing ``name``; ``None`` for graph inputs and constants."""
        ...

    def consumers(self, name: str) -> Sequence[int]:
        """Indices of nodes reading ``name``."""
        ...

    def node_inputs(self, index: int) -> tuple[str, ...]:
        """The values node ``index`` reads: its non-empty inputs, then the outer values its
        subgraphs read (implicit inputs of If/Loop/Scan bodies). Dependencies are computed
        from this, never from ``nodes[i].inputs`` alone (SDK API 1.1)."""
        ...

    def to_model(self, node_indices: Sequence[int]) -> Any:
        """A standalone ``onnx.ModelProto`` holding just these nodes (for compilers)."""
        ...


@dataclass(frozen=True)
class FusedGroup:
    """Nodes a provider wants compiled together into one call."""

    nodes: tuple[int, ...]
    label: str = ""


@dataclass(frozen=True)
class Capability:
    """A provider's answer for a graph.

    ``nodes``: single nodes it runs with kernels. ``groups``: node groups it fuses and
    compiles; each is taken whole or not at all. ``declined``: why it did not claim a node,
    shown in the partition report.
    """

    nodes: tuple[int, ...] = ()
    groups: tuple[FusedGroup, ...] = ()
    declined: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SubgraphSpec:
    """A fused group handed to ``Provider.compile``: nodes, boundary values, the graph."""

    group: FusedGroup
    graph: GraphSpec
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class CompiledArtifact:
    """A compiled group serialized by the provider that compiled it (SDK API 1.2).

    ``format``: the provider's name for the blob's layout, with a version
    (``"openvino.compiled_model/1"``). ``blob``: the bytes. ``target``: what the blob was built
    for (a device name, a GPU architecture, a deployment target). ``options``: the provider
    options that shaped the blob, as strings; ``import_compiled`` compares them with its own.
    ``trusted`` is set by the core when it reads a compiled model, never by a provider: True
    when the blob's signature verified with this user's key (this user's epoxy wrote it,
    ``epoxy.aot.signing``). A provider whose blob holds machine code must refuse an untrusted
    one; a provider whose blob is data parsed by its vendor library may accept it (say which
    in its README).
    """

    format: str
    blob: bytes
    target: str = ""
    options: Mapping[str, str] = field(default_factory=dict)
    trusted: bool = False


@runtime_checkable
class Allocator(Protocol):
    """Owns a device's memory; moves values between host (numpy) and the device.

    Optional method (not part of the ``isinstance`` check, so existing allocators need not
    define it; absent means "accepts nothing"): ``accepts(value) -> bool``, True when
    ``value`` already is a value of this device (a GPU array...). ``InferenceSession.run``
    then places such a feed straight into this device's slot, skipping the upload copy
    step, and reads its ``dtype``/``shape`` attributes (numpy-compatible) to validate it.
    Where the host (or another device) reads that input too, ``to_host`` gives the host
    value once per run. See :mod:`epoxy.plan.placement` and :mod:`epoxy.api.device_io`.

    Further optional methods, used by :class:`epoxy.OrtValue` / :class:`epoxy.IOBinding`
    (:mod:`epoxy.api.value_devices`) when present: ``copy_into(dst, value)`` writes ``value`` into
    a caller's preallocated device buffer (else ``dst[...] = value``); ``from_pointer(ptr,
    shape, dtype)`` wraps raw device memory for onnxruntime's ``bind_input(..., buffer_ptr)``
    (else raw pointers are refused with an error saying to bind the array itself);
    ``synchronize()`` waits for the device's pending work (``synchronize_inputs/outputs``).
    """

    device: Device
    #: True when device values *are* host numpy arrays (no copies needed to/from host).
    is_host: bool

    def to_device(self, value: np.ndarray) -> Any:
        """Copy a host array to the device; returns the device value."""
        ...

    def to_host(self, value: Any) -> np.ndarray:
        """Copy a device value to a host numpy array."""
        ...


@runtime_checkable
class DeviceValueAllocator(Allocator, Protocol):
    """An :class:`Allocator` that also recognizes values already on its device (optional)."""

    def accepts(self, value: Any) -> bool:
        """True when ``value`` is a value of this device that a run may use without a copy."""
        ...


@runtime_checkable
class Provider(Protocol):
    """An execution provider bound to one device, created by a factory for a session."""

    name: str
    device: Device
    allocator: Allocator

    def capability(self, graph: GraphSpec) -> Capability:
        """Which nodes this provider runs (single or fused). Called once per session graph."""
        ...

    def kernel(self, node: NodeSpec) -> KernelFn:
        """A ready-to-call kernel for a node it claimed singly (attributes resolved now)."""
        ...

    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        """A callable running a claimed fused group: inputs in ``subgraph.inputs`` order,
        returns a tuple in ``subgraph.outputs`` order."""
        ...


@runtime_checkable
class CompilingProvider(Provider, Protocol):
    """A :class:`Provider` whose compiled groups can be saved and loaded back (SDK API 1.2).

    Both methods are optional on a provider (the core looks them up with ``getattr``;
    providers without them keep working, their groups are compiled in every session).
    ``epoxy compile`` calls ``export_compiled`` once per group the provider compiled; a
    session reading the compiled model calls ``import_compiled`` instead of ``compile``
    when the provider's name and version match the ones recorded. The conformance kit's
    ``aot`` tests check the round trip (identical outputs) and the refusals.
    """

    def export_compiled(self, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
        """The blob of ``kernel`` (what ``compile(subgraph)`` returned in this session);
        ``None`` when this group has nothing worth keeping (it is compiled again on load)."""
        ...

    def import_compiled(self, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
        """A kernel for ``subgraph`` from a blob ``export_compiled`` wrote, without compiling.
        Raises :class:`epoxy.errors.ArtifactRefused` with the reason when the blob does not
        fit (format, target, options, corrupted, untrusted machine code); must never crash
        or run code the provider did not produce."""
        ...


@runtime_checkable
class ProviderFactory(Protocol):
    """Registered by plugins: identity, device discovery, provider creation.

    ``devices`` must be cheap and must not import heavy libraries at plugin import time;
    it may raise :class:`ProviderUnavailable` with the reason when none can be driven.

    Optional methods (not part of the ``isinstance`` check, so factories written before them
    keep working; the core looks them up with ``getattr``):

    - ``options() -> Mapping[str, str]``: the options ``create`` accepts, name -> one line of
      help naming the allowed values and the default. ``epoxy providers`` shows it, so users
      need not read the plugin's source. Keep it cheap (no device, no heavy import) and derive
      it from the same table ``create`` validates against, so the two never disagree
      (``epoxy.kit.OptionTable``: ``describe()`` for this, ``parse()`` in ``create``);
      ``create`` should reject any other name with :class:`~epoxy.errors.InvalidArgumentError`
      listing the known ones. Absent, raising, or returning anything but a str -> str mapping
      means "no options described" (the failure is shown, the provider still loads). Options
      the core takes itself (``epoxy.options.CORE_PROVIDER_OPTIONS``: ``device_index``) are
      removed before ``create`` and are not listed here. Typed by
      :class:`ProviderFactoryWithOptions`.
    - ``supported_ops() -> list[epoxy.kit.OpSupport]``: ops with opset ranges, for ``epoxy ops``.
    - ``compile_devices() -> Sequence[Device]`` (SDK API 1.2): targets this factory can compile
      for on this host without running there (Core ML's converter on Linux). ``epoxy compile``
      uses them when ``devices()`` has none; a provider created on one must compile and
      ``export_compiled`` but need not run.
    - ``group_ops() -> list[epoxy.kit.OpSupport | str]``: ops run only inside the fused groups
      the provider compiles (a compiling provider's list; plain names ``"Op"`` or
      ``"domain::Op"`` when it does not track opsets), shown by ``epoxy ops`` as "in groups only".

    Optional attribute (same rules: absent is fine):

    - ``aliases: tuple[str, ...]``: other names sessions accept for this provider, typically
      its onnxruntime name (``("CUDAExecutionProvider",)``), so code written for onnxruntime
      runs unchanged: ``providers=["CUDAExecutionProvider"]`` selects it and
      ``"CUDAExecutionProvider" in epoxy.get_available_providers()`` is True. The provider
      keeps its own name everywhere else (reports, options, ``epoxy providers``). Each alias
      must be a non-empty str; a value that is not a tuple or list of such names is ignored
      (the reason is shown, the provider still loads). An alias equal to a reserved name
      (``core``, ``copy``), to another provider's name, or to an alias another provider
      registered first is refused (a plugin failure at stage ``alias``); the provider still
      registers under its own name.
    """

    name: str
    vendor: str
    version: str
    #: the contract version the provider was written against, a literal such as ``"1.1"``
    sdk_api: str
    priority: int

    def devices(self) -> Sequence[Device]:
        """Devices this factory can drive on this host (empty or raise when none)."""
        ...

    def create(self, device: Device, options: Mapping[str, Any]) -> Provider:
        """A provider for ``device`` configured with user ``options``."""
        ...


@runtime_checkable
class ProviderFactoryWithOptions(ProviderFactory, Protocol):
    """A :class:`ProviderFactory` that also describes its options (optional, see there)."""

    def options(self) -> Mapping[str, str]:
        """Option name -> one-line help with the allowed values and the default."""
        ...


class ProviderUnavailable(Exception):
    """Raised by ``ProviderFactory.devices`` to say why no device can be used here."""
