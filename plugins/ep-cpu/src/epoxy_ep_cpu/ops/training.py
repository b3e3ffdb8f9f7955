"""ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum (all version 1).

Each updates several tensors at once: the variadic inputs are grouped per role
(all X, then all G, then the optimizer states), and so are the outputs.
Gradient (automatic differentiation of a sub-graph) is not implemented.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._util import as_text as _s

TRAINING = "ai.onnx.preview.training"


def _groups(node: NodeSpec, args: tuple, roles: int) -> list[list[np.ndarray]]:
    if len(args) % roles:
        raise ValueError(f"{node.op_type}: {len(args)} tensors do not split into {roles} groups")
    n = len(args) // roles
    return [list(args[i * n : (i + 1) * n]) for i in range(roles)]


def _scalar(v: np.ndarray) -> float:
    return float(np.asarray(v).reshape(-1)[0])


def _check(node: NodeSpec, roles: int) -> None:
    n = len(node.inputs) - 2
    if n <= 0 or n % roles:
        raise Unsupported(f"{node.op_type}: {n} optimized tensors do not split into {roles} groups")
    if len(node.outputs) != n // roles * (roles - 1):
        raise Unsupported(f"{node.op_type}: expected {n // roles * (roles - 1)} outputs")


@KERNELS.register("Adagrad", 1, domain=TRAINING)
def adagrad(node: NodeSpec):
    _check(node, 3)
    norm = float(node.attr("norm_coefficient", 0.0))
    decay = float(node.attr("decay_factor", 0.0))
    eps = float(node.attr("epsilon", 1e-6))

    def run(r, t, *tensors):
        xs, gs, hs = _groups(node, tensors, 3)
        rate = _scalar(r) / (1.0 + _scalar(t) * decay)
        new_x, new_h = [], []
        for x, g, h in zip(xs, gs, hs):
            xd = x.astype(np.float64)
            g_reg = norm * xd + g.astype(np.float64)
            h_new = h.astype(np.float64) + g_reg * g_reg
            x_new = xd - rate * g_reg / (np.sqrt(h_new) + eps)
            new_x.append(x_new.astype(x.dtype))
            new_h.append(h_new.astype(h.dtype))
        return tuple(new_x + new_h)

    return run


@KERNELS.register("Adam", 1, domain=TRAINING)
def adam(node: NodeSpec):
    _check(node, 4)
    alpha = float(node.attr("alpha", 0.9))
    beta = float(node.attr("beta", 0.999))
    eps = float(node.attr("epsilon", 1e-6))
    norm = float(node.attr("norm_coefficient", 0.0))
    norm_post = float(node.attr("norm_coefficient_post", 0.0))

    def run(r, t, *tensors):
        xs, gs, vs, hs = _groups(node, tensors, 4)
        rate, step = _scalar(r), _scalar(t)
        if step > 0:
            rate = rate * np.sqrt(1.0 - beta**step) / (1.0 - alpha**step)
        new_x, new_v, new_h = [], [], []
        for x, g, v, h in zip(xs, gs, vs, hs):
            xd = x.astype(np.float64)
            g_reg = norm * xd + g.astype(np.float64)
            v_new = alpha * v.astype(np.float64) + (1.0 - alpha) * g_reg
            h_new = beta * h.astype(np.float64) + (1.0 - beta) * g_reg * g_reg
            x_new = xd - rate * v_new / (np.sqrt(h_new) + eps)
            x_new = (1.0 - norm_post) * x_new
            new_x.append(x_new.astype(x.dtype))
            new_v.append(v_new.astype(v.dtype))
            new_h.append(h_new.astype(h.dtype))
        return tuple(new_x + new_v + new_h)

    return run


@KERNELS.register("Momentum", 1, domain=TRAINING)
def momentum(node: NodeSpec):
    _check(node, 3)
    for required in ("alpha", "beta", "mode"):
        if node.attr(required) is None:
            raise Unsupported(f"Momentum needs the {required} attribute")
    alpha = float(node.attr("alpha"))
    beta = float(node.attr("beta"))
    norm = float(node.attr("norm_coefficient", 0.0))
    mode = _s(node.attr("mode"))
    if mode not in ("standard", "nesterov"):
        raise Unsupported(f"Momentum mode {mode!r} is not supported")
    nesterov = mode == "nesterov"

    def run(r, t, *tensors):
        xs, gs, vs = _groups(node, tensors, 3)
        rate = _scalar(r)
        beta_adj = beta if _scalar(t) > 0 else 1.0
        new_x, new_v = [], []
        for x, g, v in zip(xs, gs, vs):
            xd = x.astype(np.float64)
            g_reg = norm * xd + g.astype(np.float64)
            v_new = alpha * v.astype(np.float64) + beta_adj * g_reg
            if nesterov:
                x_new = xd - rate * (g_reg + alpha * v_new)
            else:
                x_new = xd - rate * v_new
            new_x.append(x_new.astype(x.dtype))
            new_v.append(v_new.astype(v.dtype))
        return tuple(new_x + new_v)

    return run
