"""Turn a partition into an execution plan: kernels resolved, copies inserted, slots fixed.

A value lives on the device of the provider that produced it (graph inputs and constants
on the host). When a step reads a value that lives elsewhere, a copy step is inserted
(once per value and destination); copies of constants are made now, not per run. Graph
outputs living off-host are copied back to the host at the end.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..contract import Allocator, NodeSpec, Provider, SubgraphSpec
from ..errors import ProviderError
from ..graph.graph_spec import CoreGraph
from ..kit.float_errors import quiet_floats
from ..kit.groups import boundary
from ..partition.partitioner import Partition, Unit
from ..run.executor import ExecutionPlan, Step
from ..run.limits import allocation_cap
from .arena import ArenaLayout, alias_extended_last_use, aliases_of_outputs, layout_from_plan
from .placed_parts import place_parts
from .placement import HOST, IOPlacement, describe_io, device_key
from .planner import MemoryPlan, PlannedValue, credible_nbytes, last_uses, plan_memory, release_points
from .released_constants import ReleaseLedger


@dataclass
class BuiltPlan:
    """The plan plus its memory plan and the nodes folded into constants."""

    plan: ExecutionPlan
    memory: MemoryPlan
    folded: list[str] = field(default_factory=list)


class _Slots:
    def __init__(self) -> None:
        self.index: dict[tuple[str, str], int] = {}
        self.names: list[str] = []
        self.device: list[str] = []

    def get(self, name: str, device: str) -> int | None:
        return self.index.get((name, device))

    def add(self, name: str, device: str) -> int:
        key = (name, device)
        if key not in self.index:
            self.index[key] = len(self.names)
            self.names.append(name if device == HOST else f"{name}@{device}")
            self.device.append(device)
        return self.index[key]


def _kernel_for(provider_name: str, provider: Provider, node: NodeSpec) -> Any:
    try:
        return provider.kernel(node)
    except Exception as exc:
        raise ProviderError(
            f"provider {provider_name!r} could not create a kernel for node {node.name!r} "
            f"({node.qualified_op}): {type(exc).__name__}: {exc}",
            provider=provider_name,
        ) from exc


def _compile_group(
    provider_name: str, provider: Provider, graph: CoreGraph, unit: Unit
) -> tuple[Any, list[str], list[str]]:
    from ..contract import FusedGroup

    inputs, outputs = boundary(graph, unit.nodes)
    spec = SubgraphSpec(FusedGroup(unit.nodes, unit.label), graph, tuple(inputs), tuple(outputs))
    try:
        fn = provider.compile(spec)
    except Exception as exc:
        names = ", ".join(graph.nodes[i].name for i in unit.nodes[:8])
        raise ProviderError(
            f"provider {provider_name!r} failed to compile group {unit.label!r} "
            f"(nodes {names}{'...' if len(unit.nodes) > 8 else ''}) on {provider.device.label}: "
            f"{type(exc).__name__}: {exc}",
            provider=provider_name,
        ) from exc
    return fn, inputs, outputs


def build_plan(
    graph: CoreGraph,
    partition: Partition,
    providers: Mapping[str, Provider],
    *,
    fold_constants: bool = True,
) -> BuiltPlan:
    """Compile every unit and lay out slots, copies and frees.

    With ``fold_constants``, a deterministic node whose inputs are all constants runs once
    here and its outputs become constants (exporters emit whole weight-building chains).
    """
    slots = _Slots()
    folded: list[str] = []
    overridable = set(graph.inputs)
    initial: dict[int, Any] = {}
    constants = graph.constants()
    for name, value in constants.items():
        initial[slots.add(name, HOST)] = value
    input_slots = {name: slots.add(name, HOST) for name in graph.inputs if name not in constants}
    steps: list[Step] = []
    producer_step: dict[int, int] = {}
    copy_steps: dict[int, int] = {}  # slot written by a copy step -> that step
    ledger = ReleaseLedger()  # which constants every reader keeps its own copy of

    def locate(name: str, device: str, allocator: Allocator, reader: str) -> int:
        """Slot holding ``name`` on ``device``; inserts a copy when it lives elsewhere."""
        here = slots.get(name, device)
        if here is not None:
            return here
        source = next((s for (n, _d), s in slots.index.items() if n == name), None)
        if source is None:
            raise ProviderError(f"value {name!r} read by {reader!r} is never produced")
        target = slots.add(name, device)
        src_device = slots.device[source]
        src_alloc = allocators.get(src_device)
        if source in initial:  # constants move once, at session creation
            host_value = initial[source] if src_alloc is None else src_alloc.to_host(initial[source])
            initial[target] = host_value if device == HOST else allocator.to_device(host_value)
            return target
        copy_fn = _make_copy(src_alloc, None if device == HOST else allocator)
        steps.append(Step(copy_fn, (source,), (target,), "copy", f"copy:{name}:{src_device}->{device}", "MemcpyDevice",
                          after=_after(source)))
        producer_step[target] = copy_steps[target] = len(steps) - 1
        return target

    def _after(*sources: int) -> tuple[int, ...]:
        return tuple(sorted({producer_step[s] for s in sources if s in producer_step}))

    allocators: dict[str, Allocator] = {}
    for unit in partition.units:
        provider = providers[unit.provider]
        allocator = provider.allocator
        device = device_key(allocator)
        allocators.setdefault(device, allocator)
        if unit.fused:
            fn, in_names, out_names = _compile_group(unit.provider, provider, graph, unit)
            if len(out_names) == 1:  # compiled groups return a tuple; single-output steps store a value
                fn = _first_of(fn)
            label, op_type = unit.label, "FusedGroup"
        else:
            node = graph.nodes[unit.nodes[0]]
            fn = _kernel_for(unit.provider, provider, node)
            in_names, out_names = list(node.inputs), list(node.outputs)
            extra = graph.implicit_inputs.get(node.index, ())
            in_names = in_names + list(extra)
            label, op_type = node.name, node.op_type
        in_slots = tuple(-1 if not n else locate(n, device, allocator, label) for n in in_names)
        out_slots = tuple(-1 if not n else slots.add(n, device) for n in out_names)
        if fold_constants and not unit.fused and _fold(fn, node, in_slots, out_slots, initial, overridable):
            folded.append(label)
            continue
        ledger.note(fn, () if unit.fused else unit.nodes, in_slots, initial)
        steps.append(Step(fn, in_slots, out_slots, unit.provider, label, op_type,
                          after=_after(*[s for s in in_slots if s >= 0])))
        for s in out_slots:
            if s >= 0:
                producer_step[s] = len(steps) - 1
    output_slots = {}
    for name in graph.outputs:
        output_slots[name] = locate(name, HOST, _HOST_ALLOCATOR, "graph output")
    built = _finish(graph, slots, steps, initial, input_slots, output_slots, producer_step)
    host_constants = {name: slot for name in constants if (slot := slots.get(name, HOST)) is not None}
    built.plan.releasable = ledger.releasable(graph, host_constants,
                                              [name for name, device in slots.index if device != HOST],
                                              graph.outputs)
    built.plan.io = describe_io(built.plan.steps, slots.index, slots.device, input_slots, output_slots, copy_steps)
    built.folded = folded
    return built


#: Ops whose result may differ between runs: never folded into constants.
NONDETERMINISTIC_OPS = frozenset({
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout",
})


def _fold(fn: Any, node: NodeSpec, in_slots: tuple[int, ...], out_slots: tuple[int, ...],
          initial: dict[int, Any], overridable: set[str]) -> bool:
    """Run a node now when all its inputs are constants; store its outputs as constants."""
    if node.op_type in NONDETERMINISTIC_OPS or node.domain not in ("", "ai.onnx.ml"):
        return False
    if any(s >= 0 and s not in initial for s in in_slots):
        return False
    if any(n in overridable for n in node.inputs if n):  # a feed may override that initializer
        return False
    try:
        with quiet_floats():
            result = fn(*[None if s < 0 else initial[s] for s in in_slots])
    except Exception:  # noqa: BLE001 - leave it to run (and report) at run time
        return False
    values = (result,) if len(out_slots) == 1 else tuple(result)
    for slot, value in zip(out_slots, values):
        if slot >= 0:
            initial[slot] = value
    return True


def _finish(graph, slots, steps, initial, input_slots, output_slots, producer_step) -> BuiltPlan:
    n_slots = len(slots.names)
    # A missing optional input reads slot -1: give it a dedicated always-None slot. An
    # output nobody may read (name "") is written to a discard slot, cleared after the step.
    none_slot, discard_slot = n_slots, n_slots + 1
    steps = [
        Step(
            s.fn,
            tuple(none_slot if i < 0 else i for i in s.inputs),
            tuple(discard_slot if o < 0 else o for o in s.outputs),
            s.provider,
            s.label,
            s.op_type,
            s.after,
        )
        for s in steps
    ]
    keep_to_end = {s: len(steps) for s in output_slots.values()}
    last = last_uses([s.inputs for s in steps], keep_to_end)
    frees = release_points([s.outputs for s in steps], last, {*initial, none_slot}, discard_slot)
    table: list[Any] = [None] * (n_slots + 2)
    for slot, value in initial.items():
        table[slot] = value
    plan = ExecutionPlan(
        steps=steps,
        slot_names=slots.names + ["<none>", "<discard>"],
        initial=table,
        input_slots=input_slots,
        output_slots=output_slots,
        frees=frees,
    )
    planned = []
    cap = allocation_cap(None)  # what this process can still get, read once per plan
    for slot, name in enumerate(slots.names):
        if slot in initial:
            continue
        first = producer_step.get(slot, -1)
        base = name.split("@", 1)[0]
        planned.append(PlannedValue(slot, slots.device[slot], credible_nbytes(graph.value_type(base), cap), first,
                                    last.get(slot, first)))
    constant_bytes = sum(int(getattr(v, "nbytes", 0) or 0) for v in initial.values())
    plan.arena = _arena_layout(graph, slots, steps, last, set(output_slots.values()), cap)
    return BuiltPlan(plan, plan_memory(planned, constant_bytes))


def derive_plan(plan: ExecutionPlan, drop: set[int], output_slots: Mapping[str, int]) -> ExecutionPlan:
    """``plan`` without the ``drop`` steps (copy steps made unnecessary by device feeds or
    fetches), returning outputs from ``output_slots``: dependencies are renumbered and
    release points recomputed, so the fetched slots live to the end."""
    kept = [k for k in range(len(plan.steps)) if k not in drop]
    renumber = {old: new for new, old in enumerate(kept)}
    steps = [replace(plan.steps[k], after=tuple(renumber[a] for a in plan.steps[k].after if a in renumber))
             for k in kept]
    none_slot, discard_slot = len(plan.slot_names) - 2, len(plan.slot_names) - 1  # see _finish
    constants = {slot for slot, value in enumerate(plan.initial) if value is not None}
    last = last_uses([s.inputs for s in steps], {s: len(steps) for s in output_slots.values()})
    frees = release_points([s.outputs for s in steps], last, {*constants, none_slot}, discard_slot)
    return replace(plan, steps=steps, frees=frees, output_slots=dict(output_slots), io=IOPlacement())


def _arena_layout(graph: CoreGraph, slots: _Slots, steps: list[Step], last: dict[int, int],
                  outputs: set[int], cap: int) -> ArenaLayout | None:
    """Which host outputs of ``out=``-capable kernels share reused buffers (see arena.py);
    only values whose declared size is credible (``planner.credible_nbytes``) are planned."""
    capable = [bool(getattr(s.fn, "supports_out", False)) and len(s.outputs) == 1
               and s.outputs[0] < len(slots.names) and slots.device[s.outputs[0]] == HOST for s in steps]
    if not any(capable):
        return None
    ins = [s.inputs for s in steps]
    outs = [s.outputs for s in steps]
    may_alias = [not c for c in capable]
    protected = aliases_of_outputs(ins, outs, may_alias, outputs)
    extended = alias_extended_last_use(ins, outs, may_alias, last)
    specs: dict[int, tuple[Any, tuple[int, ...]]] = {}
    sizes: dict[int, int] = {}
    for index, step in enumerate(steps):
        slot = step.outputs[0]
        if not capable[index] or slot in protected:
            continue
        vt = graph.value_type(slots.names[slot])
        nbytes = credible_nbytes(vt, cap)
        if nbytes is not None and nbytes > 0:
            specs[slot], sizes[slot] = (vt.dtype, tuple(vt.shape)), nbytes  # type: ignore[arg-type]

    def spec_of(slot: int) -> tuple[Any, tuple[int, ...]] | None:
        if slot in specs:
            return specs[slot]
        if not 0 <= slot < len(slots.names):
            return None
        vt = graph.value_type(slots.names[slot])
        return (vt.dtype, tuple(vt.shape)) if credible_nbytes(vt, cap) is not None else None  # type: ignore[arg-type]

    parts = place_parts([s.fn for s in steps], ins, outs, capable, protected, spec_of)
    # a root's buffer lives from its first part's producer to the last use of any part
    span: dict[int, list[int]] = {}
    candidates: list[PlannedValue] = []
    for index, step in enumerate(steps):
        slot = step.outputs[0]
        if not capable[index] or slot not in specs:
            continue
        root = parts[slot][0] if slot in parts else slot
        first_last = span.setdefault(root, [index, index])
        first_last[0] = min(first_last[0], index)
        first_last[1] = max(first_last[1], extended.get(slot, index))
    for index, step in enumerate(steps):
        slot = step.outputs[0]
        if slot in specs and slot not in parts and capable[index]:
            first, last_use = span[slot]
            candidates.append(PlannedValue(slot, HOST, sizes[slot], first, last_use))
    if not candidates:
        return None
    return layout_from_plan(plan_memory(candidates).devices[HOST], specs, parts)


class _HostAllocatorStub:
    is_host = True
    device = None

    def to_device(self, value: Any) -> Any:
        return value

    def to_host(self, value: Any) -> Any:
        return value


_HOST_ALLOCATOR: Any = _HostAllocatorStub()


def _first_of(fn: Any) -> Any:
    return lambda *args: fn(*args)[0]


def _make_copy(src: Allocator | None, dst: Allocator | None) -> Any:
    """A copy step function: source device -> host -> destination device."""
    if src is not None and not src.is_host and dst is not None:
        return lambda value: dst.to_device(src.to_host(value))
    if src is not None and not src.is_host:
        return src.to_host
    if dst is not None:
        return dst.to_device
    return lambda value: value
