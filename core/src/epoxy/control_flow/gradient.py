"""``Gradient`` (ai.onnx.preview.training): reverse-mode differentiation of the graph slice
from ``xs`` to ``y``, run by the core because only the core sees the whole graph.

At session creation the slice is found and every op in it checked against the rule table
(an op without a rule makes the core decline the node, naming the op). Each run evaluates
the slice forward in numpy, then propagates ``dy = 1`` backwards, summing contributions and
reducing broadcast axes back to each input's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..contract import KernelFn, NodeSpec
from ..kit.registry import Unsupported

Array = np.ndarray
# op -> (forward(*inputs), backward(grad_out, inputs, output) -> grads per input)
Rule = tuple[Callable[..., Array], Callable[[Array, list[Array], Array], list[Array | None]]]


def _swap(a: Array) -> Array:
    return np.swapaxes(a, -1, -2) if a.ndim >= 2 else a


def _matmul_grads(g: Array, ins: list[Array], out: Array) -> list[Array | None]:
    a, b = ins
    a2 = a if a.ndim >= 2 else a[None, :]
    b2 = b if b.ndim >= 2 else b[:, None]
    g2 = g.reshape(np.matmul(a2, b2).shape)
    da = np.matmul(g2, _swap(b2)).reshape(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + a2.shape[-2:])
    db = np.matmul(_swap(a2), g2).reshape(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + b2.shape[-2:])
    return [_unbroadcast(da, a2.shape).reshape(a.shape), _unbroadcast(db, b2.shape).reshape(b.shape)]


RULES: dict[str, Rule] = {
    "Add": (np.add, lambda g, i, o: [g, g]),
    "Sub": (np.subtract, lambda g, i, o: [g, -g]),
    "Mul": (np.multiply, lambda g, i, o: [g * i[1], g * i[0]]),
    "Div": (np.divide, lambda g, i, o: [g / i[1], -g * i[0] / (i[1] * i[1])]),
    "Neg": (np.negative, lambda g, i, o: [-g]),
    "Identity": (lambda x: x, lambda g, i, o: [g]),
    "Relu": (lambda x: np.maximum(x, 0), lambda g, i, o: [g * (i[0] > 0)]),
    "Exp": (np.exp, lambda g, i, o: [g * o]),
    "Log": (np.log, lambda g, i, o: [g / i[0]]),
    "Sqrt": (np.sqrt, lambda g, i, o: [g / (2 * o)]),
    "Tanh": (np.tanh, lambda g, i, o: [g * (1 - o * o)]),
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda g, i, o: [g * o * (1 - o)]),
    "MatMul": (np.matmul, _matmul_grads),
}


def _unbroadcast(grad: Array, shape: tuple[int, ...]) -> Array:
    """Sum ``grad`` over the axes broadcasting added, back to ``shape``."""
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    return grad.reshape(shape)


def gradient_factory(node: NodeSpec, ctx: Any) -> KernelFn:
    graph = ctx.graph
    xs = [str(x) for x in node.attr("xs", ())]
    zs = [str(z) for z in node.attr("zs", ())]
    y = str(node.attr("y", ""))
    if not xs or not y:
        raise Unsupported("Gradient needs the xs and y attributes")
    leaves = set(xs) | set(zs)
    constants: dict[str, Array] = {}
    slice_nodes: set[int] = set()
    stack = [y]
    while stack:
        name = stack.pop()
        if name in leaves or name in constants:
            continue
        const = graph.constant(name)
        if const is not None:
            constants[name] = const
            continue
        producer = graph.producer(name)
        if producer is None:
            raise Unsupported(f"Gradient: {name!r} is neither computed from xs/zs nor a constant")
        if producer in slice_nodes:
            continue
        spec = graph.nodes[producer]
        if spec.op_type not in RULES or spec.domain:
            raise Unsupported(f"Gradient: no differentiation rule for {spec.op_type} (node {spec.name!r}); "
                              f"rules exist for {sorted(RULES)}")
        slice_nodes.add(producer)
        stack.extend(i for i in spec.inputs if i)
    order = [graph.nodes[i] for i in sorted(slice_nodes)]
    names = xs + zs

    def run(*inputs: Array) -> tuple[Array, ...]:
        env: dict[str, Array] = {**constants, **dict(zip(names, inputs))}
        for spec in order:
            env[spec.outputs[0]] = np.asarray(RULES[spec.op_type][0](*[env[i] for i in spec.inputs]))
        grads: dict[str, Array] = {y: np.ones_like(env[y])}
        for spec in reversed(order):
            g = grads.get(spec.outputs[0])
            if g is None:
                continue
            ins = [env[i] for i in spec.inputs]
            for name, contribution in zip(spec.inputs, RULES[spec.op_type][1](g, ins, env[spec.outputs[0]])):
                if contribution is None:
                    continue
                contribution = _unbroadcast(np.asarray(contribution), env[name].shape).astype(env[name].dtype)
                grads[name] = grads[name] + contribution if name in grads else contribution
        return tuple(grads.get(x, np.zeros_like(env[x])) for x in xs)

    return run
