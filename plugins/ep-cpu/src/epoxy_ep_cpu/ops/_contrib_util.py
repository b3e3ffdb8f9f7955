"""Helpers for contrib ops that are a standard op plus a little: run the registered kernel
of the standard op (so its fast paths and checks are shared), and name bad attributes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS


def bad_attribute(node: NodeSpec, name: str, value: object, expected: str) -> Unsupported:
    """The error for an attribute value the op does not define: names the node, the
    attribute, the value and what was expected (it becomes the decline reason the session
    reports for that node)."""
    return Unsupported(f"{node.op_type} node {node.name!r}: attribute {name}={value!r} is invalid, expected {expected}")


def delegate(node: NodeSpec, op_type: str, opset: int, *, domain: str = "", n_inputs: int | None = None,
             attributes: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """The registered kernel of ``domain::op_type`` at ``opset`` for ``node``'s first
    ``n_inputs`` inputs (all by default) with ``attributes`` (the node's own by default)."""
    inputs = tuple(node.inputs if n_inputs is None else node.inputs[:n_inputs])
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    spec = dataclasses.replace(
        node, op_type=op_type, domain=domain, opset=opset, inputs=inputs,
        input_types=tuple(node.input_types[:len(inputs)]),
        attributes=dict(node.attributes if attributes is None else attributes),
        constants={k: v for k, v in node.constants.items() if k in inputs},
    )
    factory, reason = KERNELS.lookup(spec)
    if factory is None:
        raise Unsupported(reason or f"no {op_type} kernel")
    return factory(spec)


def standalone(node: NodeSpec, op_type: str, opset: int, attributes: Mapping[str, Any],
               n_inputs: int = 1) -> Callable[..., Any]:
    """The registered kernel of an ai.onnx op applied to a value ``node`` computes (an
    activation after a fused GEMM): inputs are positional, typed like ``node``'s output."""
    vt = node.output_types[0] if node.output_types else None
    names = tuple(f"in{i}" for i in range(n_inputs))
    spec = NodeSpec(index=node.index, name=f"{node.name}/{op_type}", op_type=op_type, domain="", opset=opset,
                    inputs=names, outputs=("y",), attributes=dict(attributes),
                    input_types=tuple(vt for _ in names) if vt is not None else (),
                    output_types=(vt,) if vt is not None else ())
    factory, reason = KERNELS.lookup(spec)
    if factory is None:
        raise Unsupported(reason or f"no {op_type} kernel")
    return factory(spec)
