"""Export and import of compiled cuda groups (SDK API 1.2, ``epoxy compile``).

A blob (:class:`epoxy.kit.BlobFrame`, magic ``b"EPXCUDA\\0"``, layout 2: lengths and one
sha256 over the prefix's fields, header and sections, all checked before anything is parsed;
the digest is not hashed again for a trusted blob, whose bytes the core checked) holds a
header (provider version, target architecture, the options that shape groups, the group's
fingerprint, NVRTC version and options), the plan ``compile`` made (:mod:`.plan`), the CUDA
source of every kernel variant the group will launch at its static shapes and, when a GPU
backend built them, each kernel's cubin.

Importing never runs lowering or code generation for a plan-only blob: the plan is read,
checked field by field and turned into the kernel. Cubins are machine code: they are used
only when the core says the blob is signed with this user's key (``artifact.trusted``) and
every kernel's source, generated again from the group's own nodes now, has the digest the
blob recorded; anything else is refused with :class:`~epoxy.errors.ArtifactRefused` and the
session compiles the group again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from epoxy.contract import CompiledArtifact, KernelFn, SubgraphSpec
from epoxy.errors import ArtifactRefused
from epoxy.kit import BlobFrame, BlobFrameError
from epoxy.kit.elementwise import lower_group

from . import codegen, cuda_sources, nvrtc
from .kernels.nn import bias_relu_program
from .ops_table import dtype_name
from .plan import EwPlan, GroupPlan, PlanError, fingerprint, from_json, static_shape, to_json
from .version import __version__

#: layout name and version of the blob (``CompiledArtifact.format``)
FORMAT = "cuda.plan/1"
#: the blob's framing: named sections "plan", "src:<kernel>", "bin:<kernel>" (layout 1 was
#: this package's own framing, with a digest per section, before epoxy.kit's)
FRAME = BlobFrame(b"EPXCUDA\0", 2, "ep-cuda")
#: the provider options that change what ``compile`` builds (the others only affect runs)
SHAPING_OPTIONS = ("fuse", "cuda_graph", "conv_algo")
NAME = "cuda"


def blob_options(provider: Any) -> dict[str, str]:
    return {name: str(getattr(provider.options, name)) for name in SHAPING_OPTIONS}


def target_of(provider: Any) -> str:
    """The architecture the group is compiled for (``sm_90``), from the device."""
    cc = provider.device.properties.get("compute_capability")
    try:
        return nvrtc.arch_of(cc) if cc else "unknown"
    except ValueError:
        return "unknown"


# ---------------------------------------------------------------------------- kernel variants
@dataclass(frozen=True)
class KernelSource:
    """One kernel a group launches: its backend cache key, name, how to make its source again."""

    key: Any  # an ew variant tuple, or the kernel name (hand-written kernels)
    name: str
    source: str
    maker: tuple[Any, ...]  # ("ew", step), ("bias_relu", relu, has_bias, dtype), ("im2col", dtype)

    def to_json(self) -> dict[str, Any]:
        key = [list(k) if isinstance(k, tuple) else k for k in self.key] if isinstance(self.key, tuple) else self.key
        return {"key": key, "name": self.name, "maker": list(self.maker),
                "source_sha256": hashlib.sha256(self.source.encode()).hexdigest()}


def _ew_variant(program: Any, in_dts: list[str], out_dts: list[str], shapes: list[tuple[int, ...]],
                maker: tuple[Any, ...]) -> KernelSource:
    """The variant ``backend.ew`` compiles for contiguous inputs of these static shapes."""
    out_shape = tuple(int(d) for d in np.broadcast_shapes(*shapes)) if shapes else ()
    classes = codegen.classify(out_shape, [(s, (), True) for s in shapes])
    ndim = len(out_shape)
    name, src = codegen.cuda_source(program, in_dts, out_dts, classes, ndim)
    return KernelSource((program.key, tuple(in_dts), tuple(out_dts), classes, ndim), name, src, maker)


def _ew_sources(graph: Any, ew: EwPlan, ins: tuple[str, ...], maker: tuple[Any, ...]) -> Iterator[KernelSource]:
    names = [ins[k] for k in ew.used]
    shapes = [static_shape(graph, n) for n in names]
    if any(s is None for s in shapes):
        return  # dynamic shapes: variants are only known at run time
    in_dts = [dtype_name(graph.value_type(n).dtype) for n in names]
    yield _ew_variant(ew.program, in_dts, list(ew.out_dtypes), shapes, maker)  # type: ignore[arg-type]


def _conv_sources(graph: Any, nodes: tuple[int, ...], out: str, k: int) -> Iterator[KernelSource]:
    members = [graph.nodes[i] for i in sorted(nodes)]
    conv = members[0]
    shape = static_shape(graph, out)
    w = graph.constant(conv.inputs[1])
    if shape is None or w is None:
        return
    dtype = str(w.dtype)
    name, src = cuda_sources.im2col_source(dtype)
    yield KernelSource(name, name, src, ("im2col", dtype))
    relu = any(n.op_type == "Relu" for n in members)
    has_bias = (any(n.op_type == "BatchNormalization" for n in members)
                or (len(conv.inputs) > 2 and bool(conv.inputs[2])))
    program = bias_relu_program(relu, has_bias)
    if program is not None:
        shapes = [shape] + ([(1, shape[1], 1, 1)] if has_bias else [])
        yield _ew_variant(program, [dtype] * len(shapes), [dtype], shapes, ("bias_relu", relu, has_bias, dtype, k))


def kernel_sources(provider: Any, subgraph: SubgraphSpec, plan: GroupPlan) -> list[KernelSource]:
    """The kernels the group launches at its static shapes (none known: an empty list)."""
    graph = provider.static_view(subgraph).graph
    found: list[KernelSource] = []
    if plan.kind == "ew" and plan.ew is not None:
        found += _ew_sources(graph, plan.ew, tuple(subgraph.inputs), ("ew", -1))
    elif plan.kind == "conv":
        found += _conv_sources(graph, tuple(subgraph.group.nodes), subgraph.outputs[0], -1)
    for k, step in enumerate(plan.steps):
        if step.kind == "ew" and step.ew is not None:
            found += _ew_sources(graph, step.ew, step.ins, ("ew", k))
        elif step.kind == "conv":
            found += _conv_sources(graph, step.nodes, step.outs[0], k)
    unique: dict[str, KernelSource] = {}
    for ks in found:
        unique.setdefault(ks.name, ks)
    return list(unique.values())


# ---------------------------------------------------------------------------- export
def export_group(provider: Any, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
    plan = provider.plans.get(kernel)
    if plan is None:
        return None
    backend = provider.backend
    kernels = kernel_sources(provider, subgraph, plan)
    sections = {"plan": json.dumps(to_json(plan), sort_keys=True).encode()}
    for ks in kernels:
        sections[f"src:{ks.name}"] = ks.source.encode()
        if backend.arch is not None:
            backend.ensure(ks.key, ks.name, ks.source)
            cubin = backend.binary(ks.name)
            if cubin is not None:
                sections[f"bin:{ks.name}"] = cubin
    binaries = any(name.startswith("bin:") for name in sections)
    header = {
        "format": FORMAT, "provider_version": __version__, "target": target_of(provider),
        "options": blob_options(provider), "group": fingerprint(subgraph),
        "kernels": [ks.to_json() for ks in kernels],
        "nvrtc": nvrtc.version() if binaries else "", "nvrtc_options": list(nvrtc.OPTIONS) if binaries else [],
    }
    return CompiledArtifact(FORMAT, FRAME.pack(header, sections), target_of(provider), blob_options(provider))


# ---------------------------------------------------------------------------- import
def _refuse(reason: str) -> ArtifactRefused:
    return ArtifactRefused(reason, provider=NAME)


def _check_header(provider: Any, subgraph: SubgraphSpec, artifact: CompiledArtifact, header: dict[str, Any]) -> None:
    target, options = target_of(provider), blob_options(provider)
    checks = [
        (header.get("format") == FORMAT, f"blob layout {header.get('format')!r}, expected {FORMAT!r}"),
        (header.get("provider_version") == __version__,
         f"blob written by ep-cuda {header.get('provider_version')}, this is {__version__}"),
        (header.get("target") == target and artifact.target == target,
         f"blob compiled for {header.get('target')!r}, this GPU is {target!r}"),
        (header.get("options") == options and dict(artifact.options) == options,
         f"blob compiled with options {header.get('options')}, this session uses {options}"),
        (header.get("group") == fingerprint(subgraph), "blob was compiled for other nodes, attributes or shapes"),
    ]
    for ok, reason in checks:
        if not ok:
            raise _refuse(reason)


def _regenerate(provider: Any, subgraph: SubgraphSpec, plan: GroupPlan, entry: dict[str, Any]) -> str:
    """The source of a recorded kernel, generated again from the group's nodes (not the blob)."""
    maker = entry.get("maker") or []
    graph = provider.static_view(subgraph).graph
    if maker[:1] == ["im2col"]:
        return cuda_sources.im2col_source(str(maker[1]))[1]
    if maker[:1] == ["ew"]:
        k = int(maker[1])
        if k < 0:
            nodes, ins, outs = tuple(subgraph.group.nodes), tuple(subgraph.inputs), tuple(subgraph.outputs)
        else:
            step = plan.steps[k]
            nodes, ins, outs = step.nodes, step.ins, step.outs
        program, used = lower_group(graph, nodes, ins, outs)
        out_dts = [str(dtype_name(graph.value_type(o).dtype)) for o in outs]
        regenerated = EwPlan(program, tuple(used), tuple(out_dts))
        for ks in _ew_sources(graph, regenerated, ins, tuple(maker)):
            return ks.source
    if maker[:1] == ["bias_relu"]:
        _tag, relu, has_bias, dtype, step_index = maker
        nodes = tuple(subgraph.group.nodes) if step_index < 0 else plan.steps[step_index].nodes
        out = subgraph.outputs[0] if step_index < 0 else plan.steps[step_index].outs[0]
        for ks in _conv_sources(graph, nodes, out, step_index):
            if ks.maker == tuple(maker):
                return ks.source
    raise _refuse(f"kernel {entry.get('name')!r} cannot be generated again from this group's nodes")


def _load_binaries(provider: Any, subgraph: SubgraphSpec, artifact: CompiledArtifact, plan: GroupPlan,
                   header: dict[str, Any], sections: dict[str, memoryview]) -> int:
    """Put the blob's cubins in the backend's kernel cache; how many were loaded."""
    backend = provider.backend
    if not any(name.startswith("bin:") for name in sections) or backend.arch is None:
        return 0  # plan only (or the simulated device: no machine code to run)
    if not artifact.trusted:
        raise _refuse("the blob holds machine code (cubin) and is not signed by this user's key")
    if header.get("nvrtc") != nvrtc.version() or header.get("nvrtc_options") != list(nvrtc.OPTIONS):
        raise _refuse(f"cubins built by NVRTC {header.get('nvrtc')} {header.get('nvrtc_options')}, this is "
                      f"NVRTC {nvrtc.version()} {list(nvrtc.OPTIONS)}")
    loaded = 0
    for entry in header.get("kernels") or []:
        name = str(entry.get("name"))
        cubin = sections.get(f"bin:{name}")
        if cubin is None:
            continue
        source = _regenerate(provider, subgraph, plan, entry)
        if hashlib.sha256(source.encode()).hexdigest() != entry.get("source_sha256"):
            raise _refuse(f"kernel {name!r}: the source generated now differs from the one its cubin was built from")
        key = entry.get("key")
        key = (key[0], tuple(key[1]), tuple(key[2]), key[3], key[4]) if isinstance(key, list) else key
        try:
            backend.preload(key, name, bytes(cubin))
        except Exception as exc:  # noqa: BLE001 - the driver refusing an image is a refusal, not a crash
            raise _refuse(f"kernel {name!r}: the driver did not load its cubin ({type(exc).__name__}: {exc})") from None
        loaded += 1
    return loaded


def import_group(provider: Any, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
    if artifact.format != FORMAT:
        raise _refuse(f"blob format {artifact.format!r}, this ep-cuda reads {FORMAT!r}")
    try:
        header, sections = FRAME.unpack(artifact.blob, verify_digest=not artifact.trusted)
        plan = from_json(json.loads(bytes(sections["plan"])))
    except (BlobFrameError, PlanError) as exc:
        raise _refuse(str(exc)) from None
    except (KeyError, ValueError) as exc:
        raise _refuse(f"blob has no readable plan ({type(exc).__name__}: {exc})") from None
    _check_header(provider, subgraph, artifact, header)
    view = provider.static_view(subgraph)
    _check_plan(provider, view, plan)
    _load_binaries(provider, subgraph, artifact, plan, header, sections)
    if plan.kind == "ew":
        assert plan.ew is not None
        kernel = provider.ew_kernel(plan.ew)
    elif plan.kind == "conv":
        kernel = provider._compile_conv(view)
    else:
        kernel = provider.region_kernel(view, plan.steps)
    provider.plans[kernel] = plan
    return kernel


def _check_plan(provider: Any, sub: SubgraphSpec, plan: GroupPlan) -> None:
    """Plan fields that must agree with the group before kernels are built from them."""
    members, graph = set(sub.group.nodes), sub.graph
    if plan.kind == "ew" and plan.ew is not None:
        if any(k >= len(sub.inputs) for k in plan.ew.used) or len(plan.ew.out_dtypes) != len(sub.outputs):
            raise _refuse("plan's inputs or outputs do not match the group's boundary")
    for step in plan.steps:
        if not set(step.nodes) <= members:
            raise _refuse("plan names nodes outside the group")
        if step.kind == "node" and len(step.nodes) != 1:
            raise _refuse("plan's single-node step names several nodes")
        if step.kind == "node" and step.nodes[0] not in provider._kernels:
            raise _refuse(f"node {graph.nodes[step.nodes[0]].name!r} has no cuda kernel in this session")
        if step.kind == "ew" and step.ew is not None and any(k >= len(step.ins) for k in step.ew.used):
            raise _refuse("plan's elementwise step reads a missing input")
