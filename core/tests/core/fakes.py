"""Test-only providers: a tiny host kernel set, a simulated device, and a fusing compiler.

``SimDevice`` keeps values in its own "device memory" (``SimBuffer`` objects, not numpy
arrays) so partitioning across devices and copy insertion are exercised without hardware.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epoxy.contract import SDK_API_VERSION, Capability, Device, FusedGroup, GraphSpec, NodeSpec, SubgraphSpec
from epoxy.hookspecs import hookimpl
from epoxy.kit import KernelProvider, KernelRegistry

MINI_KERNELS = KernelRegistry()
for _op, _fn in {"Add": np.add, "Mul": np.multiply, "Sub": np.subtract, "MatMul": np.matmul}.items():
    MINI_KERNELS.register(_op, (1, 7, 13, 14))(lambda node, fn=_fn: fn)
MINI_KERNELS.register("Relu", (1, 6, 13, 14))(lambda node: lambda x: np.maximum(x, 0).astype(x.dtype))
MINI_KERNELS.register("Neg", (1, 6, 13))(lambda node: np.negative)
MINI_KERNELS.register("Identity", (1, 13, 14, 16, 19, 21))(lambda node: lambda x: x)


@MINI_KERNELS.register("Gemm", (7, 9, 11, 13))
def _gemm(node):  # the default (all) level fuses MatMul + Add into Gemm
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    trans_a, trans_b = node.attr("transA", 0), node.attr("transB", 0)

    def run(a, b, c=None):
        y = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
        return (y if c is None else y + beta * c).astype(a.dtype)

    return run


@dataclass
class Factory:
    """A configurable factory for tests."""

    name: str
    make: Any
    priority: int = 0
    vendor: str = "tests"
    version: str = "0.0.1"
    sdk_api: int = SDK_API_VERSION
    device_kind: str = "cpu"

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, self.device_kind, 0, f"{self.name} test device")]

    def create(self, device: Device, options: Mapping[str, Any]) -> Any:
        return self.make(device, options)

    def supported_ops(self) -> Any:
        return MINI_KERNELS.ops()


def mini_factory(name: str = "cpu", priority: int = 0) -> Factory:
    """A host kernel provider named like the fallback so sessions can fall back to it."""
    return Factory(name, lambda d, o: KernelProvider(name, d, MINI_KERNELS, o), priority)


class SimBuffer:
    """A value in simulated device memory: bytes + dtype + shape, deliberately not numpy."""

    def __init__(self, array: np.ndarray) -> None:
        self.data = np.ascontiguousarray(array).tobytes()
        self.dtype = array.dtype
        self.shape = array.shape

    def numpy(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=self.dtype).reshape(self.shape).copy()


@dataclass
class SimAllocator:
    device: Device
    is_host: bool = False
    copies_in: int = 0
    copies_out: int = 0

    def to_device(self, value: np.ndarray) -> SimBuffer:
        assert isinstance(value, np.ndarray), f"to_device got {type(value).__name__}"
        self.copies_in += 1
        return SimBuffer(value)

    def to_host(self, value: Any) -> np.ndarray:
        assert isinstance(value, SimBuffer), f"to_host got {type(value).__name__}"
        self.copies_out += 1
        return value.numpy()


@dataclass
class SimProvider:
    """Runs the ops in ``ops`` on simulated device memory; every input must be a SimBuffer."""

    device: Device
    ops: frozenset[str]
    name: str = "sim"
    allocator: SimAllocator = field(init=False)

    def __post_init__(self) -> None:
        self.allocator = SimAllocator(self.device)

    def capability(self, graph: GraphSpec) -> Capability:
        nodes = tuple(n.index for n in graph.nodes if n.op_type in self.ops)
        declined = {n.index: f"sim device has no {n.op_type}" for n in graph.nodes if n.op_type not in self.ops}
        return Capability(nodes=nodes, declined=declined)

    def kernel(self, node: NodeSpec) -> Any:
        fn = MINI_KERNELS.lookup(node)[0](node)  # type: ignore[misc]

        def run(*args: Any) -> SimBuffer:
            for a in args:
                assert isinstance(a, SimBuffer), f"{node.name}: host value reached the sim device"
            return SimBuffer(np.asarray(fn(*[a.numpy() for a in args])))

        return run

    def compile(self, subgraph: SubgraphSpec) -> Any:
        raise NotImplementedError


def sim_factory(ops: Sequence[str] = ("Relu", "Neg"), priority: int = 50) -> Factory:
    return Factory("sim", lambda d, o: SimProvider(d, frozenset(ops)), priority, device_kind="sim")


@dataclass
class FuserProvider:
    """A compile-based provider: proposes given node groups, runs them in node order."""

    device: Device
    groups: Sequence[Sequence[str]]  # node names per group
    name: str = "fuser"
    compiled: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from epoxy.kit import HostAllocator

        self.allocator = HostAllocator(self.device)

    def capability(self, graph: GraphSpec) -> Capability:
        index = {n.name: n.index for n in graph.nodes}
        return Capability(
            groups=tuple(FusedGroup(tuple(index[n] for n in g), f"fused{i}") for i, g in enumerate(self.groups))
        )

    def kernel(self, node: NodeSpec) -> Any:
        raise NotImplementedError

    def compile(self, subgraph: SubgraphSpec) -> Any:
        graph = subgraph.graph
        nodes = [graph.nodes[i] for i in sorted(subgraph.group.nodes)]
        self.compiled.append(tuple(n.name for n in nodes))
        return run_in_order(subgraph, nodes)


def run_in_order(subgraph: SubgraphSpec, nodes: Sequence[NodeSpec]) -> Any:
    """A group kernel running ``nodes`` one after another with the mini kernels."""
    kernels = [(n, MINI_KERNELS.lookup(n)[0](n)) for n in nodes]  # type: ignore[misc]

    def run(*inputs: Any) -> tuple[Any, ...]:
        env = dict(zip(subgraph.inputs, inputs))
        for n, fn in kernels:
            env[n.outputs[0]] = fn(*[env[i] for i in n.inputs])
        return tuple(env[o] for o in subgraph.outputs)

    return run


def fuser_factory(groups: Sequence[Sequence[str]], priority: int = 80) -> Factory:
    return Factory("fuser", lambda d, o: FuserProvider(d, groups), priority)


class FactoryPlugin:
    """A plugin object registering the given factories (what an entry point would load)."""

    def __init__(self, *factories: Any) -> None:
        self.factories = factories

    @hookimpl
    def epoxy_register_providers(self, register: Any) -> None:
        for f in self.factories:
            register(f)
