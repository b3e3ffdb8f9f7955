"""A fake non-host device whose allocator ``accepts`` its own values, counting every copy.

Values live in :class:`Wrapped` objects (not numpy arrays), so a device value that reached
the host unnoticed, or an upload/download nobody asked for, shows up in the counters.
:class:`FullAllocator` also has the optional allocator methods the bindings use
(``copy_into``, ``from_pointer``, ``synchronize``); :class:`PlainAllocator` has only the
contract's ``to_device``/``to_host``/``accepts``.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fakes import MINI_KERNELS, Factory

from epoxy.contract import Capability, Device, GraphSpec, NodeSpec

LABEL = "dev:npu:0"


class Wrapped:
    """A value in the fake device's memory: not a numpy array, but with dtype and shape."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.dtype = array.dtype
        self.shape = array.shape

    def data_ptr(self) -> int:  # as torch spells it
        return int(self.array.ctypes.data)


@dataclass
class PlainAllocator:
    device: Device
    is_host: bool = False
    copies_in: int = 0
    copies_out: int = 0

    def to_device(self, value: np.ndarray) -> Wrapped:
        assert type(value) is np.ndarray, f"to_device got {type(value).__name__}"
        self.copies_in += 1
        return Wrapped(np.array(value))

    def to_host(self, value: Any) -> np.ndarray:
        assert isinstance(value, Wrapped), f"to_host got {type(value).__name__}"
        self.copies_out += 1
        return value.array.copy()

    def accepts(self, value: Any) -> bool:
        return isinstance(value, Wrapped)


@dataclass
class FullAllocator(PlainAllocator):
    copies_on_device: int = 0
    syncs: int = 0

    def copy_into(self, destination: Wrapped, value: Wrapped) -> None:
        assert isinstance(destination, Wrapped) and isinstance(value, Wrapped)
        self.copies_on_device += 1
        np.copyto(destination.array, value.array)

    def from_pointer(self, pointer: int, shape: tuple[int, ...], dtype: np.dtype) -> Wrapped:
        count = int(np.prod(shape))
        memory = (ctypes.c_char * (count * dtype.itemsize)).from_address(pointer)
        return Wrapped(np.frombuffer(memory, dtype=dtype, count=count).reshape(shape))

    def synchronize(self) -> None:
        self.syncs += 1


@dataclass
class DevProvider:
    """Runs ``ops`` on Wrapped values only; records every argument its kernels receive."""

    device: Device
    ops: frozenset[str]
    allocator_type: type = FullAllocator
    name: str = "dev"
    allocator: Any = field(init=False)
    seen: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.allocator = self.allocator_type(self.device)

    def capability(self, graph: GraphSpec) -> Capability:
        return Capability(nodes=tuple(n.index for n in graph.nodes if n.op_type in self.ops))

    def kernel(self, node: NodeSpec) -> Any:
        fn = MINI_KERNELS.lookup(node)[0](node)  # type: ignore[misc]

        def run(*args: Any) -> Wrapped:
            for a in args:
                assert isinstance(a, Wrapped), f"{node.name}: {type(a).__name__} reached the device"
            self.seen.extend(args)
            return Wrapped(np.asarray(fn(*[a.array for a in args])))

        return run

    def compile(self, subgraph: Any) -> Any:
        raise NotImplementedError


def dev_factory(ops: tuple[str, ...] = ("Relu", "Neg"), allocator_type: type = FullAllocator,
                created: list[DevProvider] | None = None) -> Factory:
    """The fake device's factory (provider ``dev``, device kind ``npu``); ``created``
    collects every provider it makes."""

    def make(device: Device, options: Any) -> DevProvider:
        provider = DevProvider(device, frozenset(ops), allocator_type)
        if created is not None:
            created.append(provider)
        return provider

    return Factory("dev", make, 50, device_kind="npu")
