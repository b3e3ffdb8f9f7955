"""Entry point module: keep it cheap to import; heavy libraries load in ``create``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from epoxy.contract import Device, NodeSpec
from epoxy.hookspecs import hookimpl
from epoxy.kit import KernelProvider, KernelRegistry, Option, OptionTable

KERNELS = KernelRegistry()


@KERNELS.register("Relu", since=(6, 13, 14))
def relu(node):  # type: ignore[no-untyped-def]
    return lambda x: np.maximum(x, x.dtype.type(0))


@KERNELS.register("Add", since=(7, 13, 14))
def add(node):  # type: ignore[no-untyped-def]
    return np.add


#: The one table of options: ``options()`` shows ``TABLE.describe()`` to users
#: (``epoxy providers --options``) and ``create`` parses with ``TABLE.parse``, which rejects
#: every other name with an :class:`~epoxy.errors.InvalidArgumentError` listing the known
#: ones, so the two never disagree. Add a row per option (kinds: bool, int, float, enum,
#: str, path, list, dict); return a frozen dataclass by passing it as the table's third
#: argument.
TABLE = OptionTable("example", [
    Option("ops", "list", None, "op types this provider may claim, e.g. 'Relu,Add'",
           default_text="every op it has a kernel for", convert=frozenset),
])


class ExampleProvider(KernelProvider):
    """The kit's kernel provider, restricted to the ops the ``ops`` option allows."""

    def __init__(self, device: Device, options: Mapping[str, Any]) -> None:
        super().__init__(ExampleFactory.name, device, KERNELS, options)
        self.allowed_ops: frozenset[str] | None = TABLE.parse(options)["ops"]  # None: every op

    def claims(self, node: NodeSpec) -> str | None:
        if self.allowed_ops is not None and node.op_type not in self.allowed_ops:
            return f"{node.op_type} is not in the 'ops' option"
        return super().claims(node)

    # Optional (SDK API 1.2): a provider whose ``capability`` proposes FusedGroups and whose
    # ``compile`` is slow can have ``epoxy compile`` save each compiled group in the model and
    # sessions load it back, by adding these two methods (a kernel provider like this one has
    # no groups, so it leaves them out). Contract and blob layout: docs/PROVIDER_GUIDE.md,
    # "Ahead-of-time compiled groups"; ``--epoxy-scope aot`` of the conformance kit checks them.
    #
    # from epoxy.contract import CompiledArtifact
    # from epoxy.errors import ArtifactRefused
    # from epoxy.kit import BlobFrame, BlobFrameError
    # FORMAT = "example.compiled/1"            # your layout's name, with a version
    # FRAME = BlobFrame(b"EPXEXMP\0", 1, "ep-example")  # magic, sha256, lengths: checked by unpack
    #
    # def export_compiled(self, kernel, subgraph):
    #     """The blob of ``kernel`` (what ``compile(subgraph)`` returned in this session)."""
    #     program = getattr(kernel, "program", None)  # compile() set run.program = ...
    #     if program is None:
    #         return None                        # nothing worth keeping: compiled again on load
    #     header = {"library": LIB_VERSION, "inputs": list(subgraph.inputs), "outputs": list(subgraph.outputs)}
    #     return CompiledArtifact(FORMAT, FRAME.pack(header, program), target=self.device.label,
    #                             options=self.shaping_options())
    #
    # def import_compiled(self, subgraph, artifact):
    #     """A kernel from the blob, without compiling: every check before the bytes are used."""
    #     if artifact.format != FORMAT:
    #         raise ArtifactRefused(f"format {artifact.format!r}, this reads {FORMAT!r}", provider=self.name)
    #     if artifact.target != self.device.label or dict(artifact.options) != self.shaping_options():
    #         raise ArtifactRefused("compiled for another device or with other options", provider=self.name)
    #     # if the program is machine code: refuse a blob this user's epoxy did not sign
    #     # if not artifact.trusted: raise ArtifactRefused("unsigned machine code", provider=self.name)
    #     try:  # cut, padded, flipped or foreign bytes; a trusted blob's digest the core checked already
    #         header, program = FRAME.unpack_payload(artifact.blob, verify_digest=not artifact.trusted)
    #     except BlobFrameError as exc:
    #         raise ArtifactRefused(str(exc), provider=self.name) from None
    #     if header["library"] != LIB_VERSION or header["inputs"] != list(subgraph.inputs):
    #         raise ArtifactRefused("another library build or another group", provider=self.name)
    #     return load_program(program)           # must compute bit for bit what compile()'s does
    #
    # These methods are SDK API 1.2: keep the factory's ``sdk_api`` at "1.2" or later with them.


class ExampleFactory:
    name = "example"
    vendor = "Example Corp"
    version = "0.1.0"
    # the epoxy SDK API ("major.minor") this package was written and tested against, as a
    # literal (never the core's constant): a core of the same major and an equal or newer
    # minor loads it; any other refuses it with the reason (see epoxy.sdk_api). "1.2" adds
    # the optional export_compiled/import_compiled above; "1.1" is enough without them.
    sdk_api = "1.2"
    priority = 10
    # Optional: other names sessions accept for this provider, typically the name onnxruntime
    # users know it by, so ``providers=["ExampleExecutionProvider"]`` and
    # ``"ExampleExecutionProvider" in epoxy.get_available_providers()`` work unchanged.
    # Rename it with the provider, or delete the line if there is no such name.
    aliases = ("ExampleExecutionProvider",)

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, "cpu", 0, "example host device")]

    def options(self) -> Mapping[str, str]:
        """Optional: what ``create`` accepts, for ``epoxy providers`` (cheap: no device, no import)."""
        return TABLE.describe()

    def create(self, device: Device, options: Mapping[str, Any]) -> KernelProvider:
        return ExampleProvider(device, options)

    def supported_ops(self):  # type: ignore[no-untyped-def]
        return KERNELS.ops()


@hookimpl
def epoxy_register_providers(register: Any) -> None:
    register(ExampleFactory())
