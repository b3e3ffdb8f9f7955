"""The op + dtype table behind ``capability``: what runs on the GPU, what stays on cpu.

Every op the provider runs is registered here by a kernel module (``kernels/``) with the
dtypes it accepts. A node whose op is missing, whose dtype is not listed, or whose
``check`` fails is declined with the reason (the partition report shows it) and runs on
cpu with copies inserted by the core.

Host parameters: inputs such as Reshape's shape, Slice's starts/ends or Unsqueeze's axes
are read on the host (``host_params``). When they are constants the value captured at
capability time is used (no transfer); values produced by host-mode nodes (see
:mod:`capability`) are already numpy arrays; anything else is fetched with a
synchronizing device-to-host copy (counted in ``backend.host_syncs``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import OpSupport

F = frozenset({"float32", "float16"})
I = frozenset({"int64", "int32"})  # noqa: E741 - F, I, B: the table's one-letter type-set names
B = frozenset({"bool"})
FIB = F | I | B


@dataclass
class Ctx:
    """What a kernel factory gets besides the node: backend, array module, constants."""

    be: Any
    xp: Any
    consts: dict[int, np.ndarray] = field(default_factory=dict)
    host_mode: bool = False

    def const(self, i: int) -> np.ndarray | None:
        return self.consts.get(i)


KernelFactory = Callable[[NodeSpec, Ctx], Callable[..., Any]]


@dataclass(frozen=True)
class OpDef:
    op: str
    factory: KernelFactory
    dtypes: frozenset[str] | None = F  # dtypes of the typing value; None: any
    type_input: int = 0  # which input carries the type (-1: output 0)
    host_params: tuple[int, ...] = ()  # inputs read on the host
    raw_inputs: tuple[int, ...] = ()  # inputs passed as they are (only .shape is read)
    host_capable: bool = False  # may run on the host for integer shape arithmetic
    ew: bool = False  # float elementwise: a program for the fused kernels
    check: Callable[[NodeSpec], str | None] | None = None


OPS: dict[str, OpDef] = {}
_FAMILIES = ("elementwise", "nn", "shape")
_loaded = False


def register(names: str | tuple[str, ...], **kw: Any) -> Callable[[KernelFactory], KernelFactory]:
    def deco(factory: KernelFactory) -> KernelFactory:
        for name in (names,) if isinstance(names, str) else names:
            OPS[name] = OpDef(name, factory, **kw)
        return factory

    return deco


def load() -> dict[str, OpDef]:
    global _loaded
    if not _loaded:
        for fam in _FAMILIES:
            importlib.import_module(f"epoxy_ep_cuda.kernels.{fam}")
        _loaded = True
    return OPS


def dtype_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    return np.dtype(dtype).name


def node_dtype(node: NodeSpec, opdef: OpDef) -> str | None:
    types = node.output_types if opdef.type_input < 0 else node.input_types
    index = max(opdef.type_input, 0)
    if index >= len(types):
        return None
    return dtype_name(types[index].dtype)


def decline_reason(node: NodeSpec) -> str | None:
    """None when the table covers ``node``; else why it stays off the GPU."""
    ops = load()
    if node.domain not in ("", "ai.onnx"):
        return f"cuda: no kernel for domain {node.domain!r}"
    opdef = ops.get(node.op_type)
    if opdef is None:
        return f"cuda: no kernel for {node.op_type}"
    if opdef.dtypes is not None:
        dt = node_dtype(node, opdef)
        if dt is None:
            return f"cuda: {node.op_type} input dtype unknown (shape inference could not tell)"
        if dt not in opdef.dtypes:
            return f"cuda: {node.op_type} does not support {dt} (supports {', '.join(sorted(opdef.dtypes))})"
    if opdef.check is not None:
        reason = opdef.check(node)
        if reason:
            return f"cuda: {reason}"
    return None


def supported_ops() -> list[OpSupport]:
    return [OpSupport("", name, (1,)) for name in sorted(load())]
