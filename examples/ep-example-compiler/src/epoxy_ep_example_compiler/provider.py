"""The example_compiler provider: it claims elementwise ops as fused groups and compiles each group
into one callable.

``capability`` says which nodes it supports (each other node gets a one-line reason), and
``epoxy.kit.convex_groups`` cuts them into the largest groups the core can contract into one
step. ``compile`` gets one group (``SubgraphSpec``: its nodes, the values it reads and the
values it must hand out) and returns a callable; here it strings numpy functions together in
the group's order. A real compiler would export the group (``graph.to_model(nodes)``) and
hand it to its toolchain, declining in ``capability`` what the toolchain refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from epoxy.contract import Capability, Device, FusedGroup, GraphSpec, NodeSpec, SubgraphSpec
from epoxy.kit import HostAllocator, OpSupport, convex_groups

from .options import ExampleCompilerOptions

#: op -> (first opset whose definition the function follows, the function)
OPS: dict[str, tuple[int, Callable[..., np.ndarray]]] = {
    "Relu": (6, lambda x: np.maximum(x, x.dtype.type(0))),
    "Neg": (6, np.negative),
    "Abs": (6, np.abs),
    "Add": (7, np.add),  # from opset 7 on: numpy broadcasting is ONNX's multidirectional one
    "Sub": (7, np.subtract),
    "Mul": (7, np.multiply),
}
DTYPES = (np.float32,)


def supported_ops() -> list[OpSupport]:
    return [OpSupport("", op, (since,)) for op, (since, _) in sorted(OPS.items())]


def decline_reason(node: NodeSpec, allowed: frozenset[str] | None) -> str | None:
    """``None`` when the provider compiles ``node``, else why not."""
    if node.domain or node.op_type not in OPS:
        return f"example_compiler does not compile {node.qualified_op}"
    if allowed is not None and node.op_type not in allowed:
        return f"{node.op_type} is not in the example_compiler 'ops' option"
    since = OPS[node.op_type][0]
    if node.opset < since:
        return f"example_compiler compiles {node.op_type} from opset {since} on, not {node.opset}"
    types = (*node.input_types, *node.output_types)
    if not all(t.dtype in DTYPES for t in types):
        return f"example_compiler compiles float32 tensors only, not {[str(t.dtype) for t in types]}"
    return None


def _in_order(graph: GraphSpec, nodes: Sequence[int]) -> list[int]:
    """The group's nodes, each after the members producing its inputs."""
    members, done, order = set(nodes), set(), []
    pending = sorted(nodes)
    while pending:
        ready = [i for i in pending
                 if all(p is None or p not in members or p in done
                        for p in (graph.producer(name) for name in graph.node_inputs(i)))]
        if not ready:
            raise ValueError(f"group {sorted(nodes)} has a cycle")
        done.update(ready)
        order += ready
        pending = [i for i in pending if i not in done]
    return order


class ExampleCompilerProvider:
    """A compiling provider whose compiled code runs on the host (numpy arrays in and out)."""

    name = "example_compiler"

    def __init__(self, device: Device, options: ExampleCompilerOptions) -> None:
        self.device = device
        self.settings = options
        self.allocator = HostAllocator(device)

    def capability(self, graph: GraphSpec) -> Capability:
        declined: dict[int, str] = {}
        supported = set()
        for node in graph.nodes:
            reason = decline_reason(node, self.settings.ops)
            if reason is None:
                supported.add(node.index)
            else:
                declined[node.index] = reason
        groups, left_out = convex_groups(graph, supported, provider=self.name)
        declined.update(left_out)
        return Capability(groups=tuple(FusedGroup(nodes, f"example_compiler_{k}") for k, nodes in enumerate(groups)),
                          declined=declined)

    def compile(self, subgraph: SubgraphSpec) -> Callable[..., tuple[Any, ...]]:
        """One callable for the group: takes ``subgraph.inputs`` in order, returns a tuple in
        ``subgraph.outputs`` order. Called from many threads: state stays in locals."""
        graph = subgraph.graph
        steps = [(OPS[graph.nodes[i].op_type][1], graph.nodes[i].inputs, graph.nodes[i].outputs)
                 for i in _in_order(graph, subgraph.group.nodes)]
        inputs, outputs = tuple(subgraph.inputs), tuple(subgraph.outputs)

        def run(*args: Any) -> tuple[Any, ...]:
            values = dict(zip(inputs, args))
            for fn, reads, writes in steps:
                values[writes[0]] = fn(*(values[name] for name in reads))
            return tuple(values[name] for name in outputs)

        return run

    def kernel(self, node: NodeSpec) -> Any:
        raise NotImplementedError("example_compiler claims fused groups only")
