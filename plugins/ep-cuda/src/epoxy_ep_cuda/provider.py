"""The CUDA provider: capability from the op table, kernels, fused groups, CUDA graphs."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from epoxy.contract import (
    Capability,
    CompiledArtifact,
    Device,
    FusedGroup,
    GraphSpec,
    KernelFn,
    NodeSpec,
    SubgraphSpec,
)
from epoxy.kit import Unsupported
from epoxy.kit.elementwise import lower_group

from .capability import Analysis, NodePlan, StaticView, analyze, describe, find_groups, find_regions
from .kernels.nn import bn_scale_shift, make_conv
from .ops_table import Ctx, dtype_name
from .options import CudaOptions
from .plan import EwPlan, GroupPlan, Step


class CudaAllocator:
    """Device memory is CuPy's pool (limit set by the ``memory_limit`` option); copies go
    through pinned staging buffers on the provider's stream. Host-resident values (shape
    tensors computed on the host, see :mod:`capability`) pass through ``to_host`` as they are.
    ``accepts`` lets ``session.run`` take this backend's device arrays as feeds without copies."""

    is_host = False

    def __init__(self, device: Device, backend: Any) -> None:
        self.device = device
        self.backend = backend

    def to_device(self, value: np.ndarray) -> Any:
        if self.backend.is_device(value):
            return value
        return self.backend.to_device(value)

    def to_host(self, value: Any) -> np.ndarray:
        if not self.backend.is_device(value):
            return np.asarray(value)
        return self.backend.to_host(value)

    def accepts(self, value: Any) -> bool:
        """Device arrays of this backend are fed without an upload (``epoxy.contract.Allocator``)."""
        return bool(self.backend.is_device(value))

    # optional methods epoxy's IOBinding and OrtValue use (epoxy.api.value_devices) ----------------
    def copy_into(self, destination: Any, value: Any) -> None:
        """Write a device value into an existing device buffer on this provider's stream (a
        plain ``destination[...] = value`` would run on CuPy's current stream, unordered
        with ours)."""
        with self.backend.run_context():
            destination[...] = self.backend.dev(value)

    def from_pointer(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A device array over memory someone else owns (``bind_input(..., buffer_ptr)``)."""
        return self.backend.from_pointer(pointer, shape, dtype)

    def synchronize(self) -> None:
        """Wait for the work queued on this provider's stream."""
        self.backend.synchronize()


class CudaProvider:
    """Runs the nodes its op table covers on one GPU (or on a :class:`FakeBackend`).

    ``backend`` is a :class:`~epoxy_ep_cuda.backend.CupyBackend` when created by the factory;
    tests pass a :class:`~epoxy_ep_cuda.backend.FakeBackend` to exercise capability,
    partitioning, host-value placement, fusion and copies without a GPU.
    """

    name = "cuda"

    def __init__(self, device: Device, options: CudaOptions | None = None, backend: Any = None) -> None:
        from .backend import FakeBackend

        self.device = device
        self.options = options or CudaOptions()
        self.backend = backend if backend is not None else FakeBackend()
        self.allocator = CudaAllocator(device, self.backend)
        self.analysis: Analysis | None = None
        self._kernels: dict[int, KernelFn] = {}
        self._group_kind: dict[str, str] = {}
        self._kind_of_nodes: dict[tuple[int, ...], str] = {}
        self.graph_runners: list[Any] = []
        self._view: Any = None
        #: compiled kernel -> what ``compile`` decided (:mod:`.plan`), for ``export_compiled``
        self.plans: weakref.WeakKeyDictionary[Any, GroupPlan] = weakref.WeakKeyDictionary()

    # -- capability ------------------------------------------------------------------
    def capability(self, graph: GraphSpec) -> Capability:
        graph = self._view = StaticView(graph)
        analysis = analyze(graph)
        self._kernels.clear()
        for index, plan in list(analysis.claimed.items()):
            try:
                self._kernels[index] = self._build(plan)
            except Unsupported as exc:
                del analysis.claimed[index]
                analysis.declined[index] = f"cuda: {exc}"
            except Exception as exc:  # noqa: BLE001 - a kernel factory bug must not fail the session
                del analysis.claimed[index]
                analysis.declined[index] = f"cuda: kernel factory failed: {type(exc).__name__}: {exc}"
        groups: list[FusedGroup] = []
        self._group_kind.clear()
        self._kind_of_nodes.clear()
        if self.options.cuda_graph:
            for r, nodes in enumerate(find_regions(graph, sorted(analysis.claimed))):
                label = f"cuda_graph_{r}"
                groups.append(FusedGroup(nodes, label))
                self._group_kind[label] = "region"
                analysis.groups.append(("region", nodes))
        elif self.options.fuse:
            for g, (kind, nodes) in enumerate(find_groups(graph, analysis)):
                label = f"cuda_{kind}_{g}"
                groups.append(FusedGroup(nodes, label))
                self._group_kind[label] = kind
                analysis.groups.append((kind, nodes))
        self.analysis = analysis
        self._kind_of_nodes.update((tuple(sorted(g.nodes)), self._group_kind[g.label]) for g in groups)
        in_groups = {i for g in groups for i in g.nodes}
        singles = tuple(i for i in sorted(analysis.claimed) if i not in in_groups)
        return Capability(nodes=singles, groups=tuple(groups), declined=dict(analysis.declined))

    def summary(self) -> dict[str, Any]:
        return describe(self.analysis) if self.analysis else {}

    # -- kernels -----------------------------------------------------------------------
    def _build(self, plan: NodePlan) -> KernelFn:
        be = self.backend
        xp = np if plan.host_mode else be.xp
        ctx = Ctx(be, xp, dict(plan.consts), plan.host_mode)
        fn = plan.opdef.factory(plan.node, ctx)
        consts = plan.consts
        if plan.host_mode:
            raw = set(plan.opdef.raw_inputs)

            def run_host(*args: Any) -> Any:
                vals = [a if i in raw else consts[i] if i in consts else be.host(a) for i, a in enumerate(args)]
                out = fn(*vals)
                return tuple(np.asarray(o) for o in out) if isinstance(out, tuple) else np.asarray(out)

            return run_host
        host_params = set(plan.opdef.host_params)
        raw = set(plan.opdef.raw_inputs)
        wrap = be.wrap

        def run_device(*args: Any) -> Any:
            vals = [a if i in raw else (consts[i] if i in consts else be.host(a)) if i in host_params else be.dev(a)
                    for i, a in enumerate(args)]
            with be.run_context():
                out = fn(*vals)
            return tuple(wrap(o) for o in out) if isinstance(out, tuple) else wrap(out)

        return run_device

    def kernel(self, node: NodeSpec) -> KernelFn:
        fn = self._kernels.get(node.index)
        if fn is None:
            raise Unsupported(f"cuda: node {node.name!r} was not claimed")
        return fn

    # -- fused groups --------------------------------------------------------------------
    def compile(self, subgraph: SubgraphSpec) -> KernelFn:
        subgraph = self.static_view(subgraph)
        # by nodes first: a session reading a compiled model hands back groups under the
        # labels they had when compiled, which may name other groups in this capability
        nodes = tuple(sorted(subgraph.group.nodes))
        kind = self._kind_of_nodes.get(nodes) or self._group_kind.get(subgraph.group.label)
        if kind == "ew":
            kernel = self._compile_ew(subgraph)
        elif kind == "conv":
            kernel = self._compile_conv(subgraph)
        elif kind == "region":
            kernel = self._compile_region(subgraph)
        else:
            raise ValueError(f"cuda: unknown group {subgraph.group.label!r}")
        if kind != "region":
            self.plans[kernel] = GroupPlan(kind, ew=getattr(kernel, "ew_plan", None))
        return kernel

    def static_view(self, subgraph: SubgraphSpec) -> SubgraphSpec:
        """``subgraph`` over the capability's view, where ConstantOfShape outputs are constants."""
        if self._view is not None:
            return SubgraphSpec(subgraph.group, self._view, subgraph.inputs, subgraph.outputs)
        return subgraph

    # -- compiled models (SDK API 1.2, :mod:`.aot`) ------------------------------------------
    def export_compiled(self, kernel: KernelFn, subgraph: SubgraphSpec) -> CompiledArtifact | None:
        """The group's plan and kernel sources, and on a GPU the cubin of each kernel."""
        from .aot import export_group

        return export_group(self, kernel, subgraph)

    def import_compiled(self, subgraph: SubgraphSpec, artifact: CompiledArtifact) -> KernelFn:
        """A kernel from an exported plan without lowering or generating code again; cubins
        are loaded only from a blob this user signed whose sources regenerate identically."""
        from .aot import import_group

        return import_group(self, subgraph, artifact)

    def _compile_ew(self, sub: SubgraphSpec) -> KernelFn:
        graph = sub.graph
        program, used = lower_group(graph, sub.group.nodes, sub.inputs, sub.outputs)
        out_dts = tuple(str(dtype_name(graph.value_type(o).dtype)) for o in sub.outputs)
        return self.ew_kernel(EwPlan(program, tuple(used), out_dts))

    def ew_kernel(self, ew: EwPlan) -> KernelFn:
        """The kernel of a lowered elementwise group (``compile``, or a plan read back)."""
        program, used, out_dts = ew.program, ew.used, list(ew.out_dtypes)
        be = self.backend

        def run(*args: Any) -> tuple[Any, ...]:
            ins = [be.dev(args[k]) for k in used]
            with be.run_context():
                outs = be.ew(program, ins, out_dts)
            return tuple(be.wrap(o) for o in outs)

        run.program = program  # type: ignore[attr-defined]
        run.ew_plan = ew  # type: ignore[attr-defined]
        return run

    def _compile_conv(self, sub: SubgraphSpec) -> KernelFn:
        graph = sub.graph
        nodes = [graph.nodes[i] for i in sorted(sub.group.nodes)]
        conv = nodes[0]
        bn = next((n for n in nodes if n.op_type == "BatchNormalization"), None)
        relu = any(n.op_type == "Relu" for n in nodes)
        w = graph.constant(conv.inputs[1])
        b = graph.constant(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
        if len(conv.inputs) > 2 and conv.inputs[2] and b is None:
            raise ValueError("conv group with a computed bias")
        dtype = w.dtype
        if bn is not None:
            s, t = bn_scale_shift(*(graph.constant(bn.inputs[i]) for i in (1, 2, 3, 4)),
                                  float(bn.attr("epsilon", 1e-5)))
            w = (w.astype(np.float32) * s.reshape(-1, 1, 1, 1)).astype(dtype)
            b = ((b.astype(np.float32) if b is not None else np.zeros_like(s)) * s + t).astype(dtype)
        be = self.backend
        w_dev = be.dev(be.to_device(np.ascontiguousarray(w)))
        b_dev = None if b is None else be.dev(be.to_device(np.ascontiguousarray(b)))
        fn = make_conv(conv, Ctx(be, be.xp), relu=relu)
        x_pos = sub.inputs.index(conv.inputs[0])

        def run(*args: Any) -> tuple[Any, ...]:
            x = be.dev(args[x_pos])
            with be.run_context():
                y = fn(x, w_dev, b_dev)
            return (be.wrap(y),)

        return run

    def _compile_region(self, sub: SubgraphSpec) -> KernelFn:
        """All claimed nodes of a convex region, run in order (elementwise chains and
        Conv+BN+Relu fused inside), captured as a CUDA graph once shapes settle."""
        graph = sub.graph
        region = set(sub.group.nodes)
        inner = Analysis(claimed={i: p for i, p in self.analysis.claimed.items() if i in region})  # type: ignore[union-attr]
        view = _RegionView(graph, region, set(sub.outputs))
        grouped: dict[int, tuple[str, tuple[int, ...]]] = {}
        if self.options.fuse:
            for kind, nodes in find_groups(view, inner):
                for i in nodes:
                    grouped[i] = (kind, nodes)
        steps: list[Step] = []
        done: set[int] = set()
        for i in sorted(region):
            if i in done:
                continue
            if i in grouped:
                kind, nodes = grouped[i]
                ins, outs = _boundary(graph, nodes, region, set(sub.outputs))
                ew = None
                if kind == "ew":
                    program, used = lower_group(graph, nodes, ins, outs)
                    ew = EwPlan(program, tuple(used), tuple(str(dtype_name(graph.value_type(o).dtype)) for o in outs))
                steps.append(Step(kind, tuple(nodes), tuple(ins), tuple(outs), ew))
                done.update(nodes)
            else:
                node = graph.nodes[i]
                steps.append(Step("node", (i,), tuple(node.inputs), tuple(node.outputs)))
                done.add(i)
        return self.region_kernel(sub, tuple(steps))

    def region_kernel(self, sub: SubgraphSpec, steps: Sequence[Step]) -> KernelFn:
        """The runner of a region's steps (``compile``, or a plan read back)."""
        graph = sub.graph
        fns: list[tuple[KernelFn, tuple[str, ...], tuple[str, ...]]] = []
        for k, step in enumerate(steps):
            if step.kind == "ew":
                assert step.ew is not None
                fn = self.ew_kernel(step.ew)
            elif step.kind == "conv":
                spec = SubgraphSpec(FusedGroup(step.nodes, f"inner_conv_{k}"), graph, step.ins, step.outs)
                fn = self._compile_conv(spec)
            else:
                (i,) = step.nodes
                fn = _single(self._kernels[i], len(graph.nodes[i].outputs))
            fns.append((fn, step.ins, step.outs))
        in_names, out_names = tuple(sub.inputs), tuple(sub.outputs)

        def interpret(*args: Any, keep: list[Any] | None = None) -> tuple[Any, ...]:
            env: dict[str, Any] = dict(zip(in_names, args))
            for fn, ins, outs in fns:
                res = fn(*[env.get(n) if n else None for n in ins])
                for n, v in zip(outs, res):
                    if n:
                        env[n] = v
            if keep is not None:
                keep.append(env)
            return tuple(env[n] for n in out_names)

        from .graphs import GraphRunner

        runner = GraphRunner(self.backend, interpret, sub.group.label)
        self.graph_runners.append(runner)
        self.plans[runner] = GroupPlan("region", steps=tuple(steps))
        return runner


def _single(fn: KernelFn, n_out: int) -> KernelFn:
    if n_out == 1:
        return lambda *a: (fn(*a),)
    return fn


def _boundary(
    graph: GraphSpec, nodes: Sequence[int], region: set[int], region_outputs: set[str]
) -> tuple[list[str], list[str]]:
    members = set(nodes)
    produced = {o for i in nodes for o in graph.nodes[i].outputs if o}
    ins: list[str] = []
    for i in sorted(nodes):
        for n in graph.nodes[i].inputs:
            if n and n not in produced and n not in ins:
                ins.append(n)
    outs = [o for o in sorted(produced, key=lambda n: (graph.producer(n), n))
            if o in region_outputs or any(c not in members for c in graph.consumers(o))]
    return ins, outs


class _RegionView:
    """A GraphSpec view where values leaving a region count as graph outputs."""

    def __init__(self, graph: GraphSpec, region: set[int], region_outputs: set[str]) -> None:
        self._g = graph
        self.nodes = graph.nodes
        self.inputs = graph.inputs
        self.opsets = graph.opsets
        leaving = set(region_outputs)
        for i in region:
            for o in graph.nodes[i].outputs:
                if o and any(c not in region for c in graph.consumers(o)):
                    leaving.add(o)
        self.outputs = list(graph.outputs) + sorted(leaving)

    def value_type(self, name: str) -> Any:
        return self._g.value_type(name)

    def constant(self, name: str) -> Any:
        return self._g.constant(name)

    def producer(self, name: str) -> Any:
        return self._g.producer(name)

    def consumers(self, name: str) -> Any:
        return self._g.consumers(name)

    def to_model(self, node_indices: Sequence[int]) -> Any:
        return self._g.to_model(node_indices)
