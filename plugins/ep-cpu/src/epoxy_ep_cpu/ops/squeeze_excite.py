"""Squeeze-and-excitation blocks (MobileNetV3, EfficientNet, SE-ResNet) as one node.

Why: the block is ``x * act2(W2 act1(W1 mean_hw(x) + b1) + b2)``, written by exporters as a
global pool, two 1x1 convolutions on a 1x1 map, their activations and a broadcast Mul: four or
six steps of a few microseconds each on tensors of a few dozen elements (a mobile network's
three blocks were a quarter of its run, bench/README session 25). After the cpu fusions
(``fused.py``: the convolutions already carry their activations) the block becomes
``com.epoxy.cpu::SqueezeExcite(x, W1, B1, W2, B2)``; the jit tier runs it as one compiled
pass (``jit/kernels_squeeze_excite.py``), the numpy path as the same arithmetic in numpy.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    constant,
    dtype_of,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    replace,
    sole_consumer,
)

from .. import jit
from ..registry import KERNELS
from .fused import DOMAIN, DOMAIN_VERSION, activation_fn

#: the element types the fused block runs (float16 blocks keep their ops: each widens on its own)
_FUSED_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE)
#: activations the fused block takes on each 1x1 convolution -> the compiled kernel's code
ACTIVATION_CODES = {"": 0, "Relu": 1, "Sigmoid": 2, "HardSigmoid": 3, "SiLU": 4, "HardSwish": 5}
#: (alpha, beta) when the node gives none: HardSigmoid's ONNX defaults (the others take none)
_DEFAULT_PARAMS = {"HardSigmoid": (0.2, 0.5)}


def _pooled(model: ir.Model, node: ir.Node | None) -> ir.Value | None:
    """The input of a global average pool over H and W keeping its axes: GlobalAveragePool, or
    ReduceMean over axes {2, 3} / {-2, -1} with keepdims (attribute, or constant input from
    opset 18), else None."""
    if is_op(node, "GlobalAveragePool") and len(node.inputs) == 1:
        return node.inputs[0]
    if not is_op(node, "ReduceMean") or not node.inputs or not int(attr(node, "keepdims", 1)):
        return None
    axes = attr(node, "axes") if opset_of(model, node) < 18 else (
        constant(node.inputs[1]) if len(node.inputs) > 1 else None)
    if axes is None:
        return None
    x = node.inputs[0]
    rank = len(x.shape) if x is not None and x.shape is not None else 4
    found = {int(a) % rank for a in np.asarray(axes).reshape(-1)} if rank == 4 else set()
    return x if found == {2, 3} else None


def _pointwise(node: ir.Node | None, source: ir.Value) -> tuple[str, list[float]] | None:
    """(activation, params) of a plain 1x1 Conv / FusedConv reading ``source`` with constant
    weight and bias and no residual, else None."""
    if not (is_op(node, "Conv") or is_op(node, "FusedConv", DOMAIN)) or node.inputs[0] is not source:
        return None
    if len(node.inputs) > 3 or len(node.outputs) != 1:
        return None
    w = constant(node.inputs[1])
    b = constant(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if w is None or w.ndim != 4 or w.shape[2:] != (1, 1) or (len(node.inputs) > 2 and node.inputs[2] is not None
                                                             and (b is None or b.shape != (w.shape[0],))):
        return None
    if int(attr(node, "group", 1)) != 1 or any(int(p) for p in attr(node, "pads", []) or []):
        return None
    if any(int(s) != 1 for s in attr(node, "strides", []) or []) or any(
            int(d) != 1 for d in attr(node, "dilations", []) or []):
        return None
    if str(attr(node, "auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
        return None
    name = str(attr(node, "activation", "") or "")
    if name not in ACTIVATION_CODES:
        return None
    return name, [float(p) for p in (attr(node, "activation_params", []) or [])]


class CpuSqueezeExcitePass(RewritePass):
    """pool -> 1x1 conv (+act) -> 1x1 conv (+act) -> Mul with the pooled tensor's input ->
    ``SqueezeExcite``; every intermediate read once."""

    needs = (frozenset({"GlobalAveragePool", "ReduceMean"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for pool in graph_nodes(graph):
            if pool.graph is not graph:
                continue
            x = _pooled(model, pool)
            if x is None or dtype_of(x) not in _FUSED_TYPES or len(pool.outputs) != 1:
                continue
            reduce = sole_consumer(pool.outputs[0])
            first = _pointwise(reduce, pool.outputs[0])
            if first is None or reduce is None:
                continue
            expand = sole_consumer(reduce.outputs[0])
            second = _pointwise(expand, reduce.outputs[0])
            if second is None or expand is None:
                continue
            mul = sole_consumer(expand.outputs[0])
            gate = expand.outputs[0]
            if not is_op(mul, "Mul") or len(mul.inputs) != 2 or {id(v) for v in mul.inputs} != {id(x), id(gate)}:
                continue
            w1, w2 = constant(reduce.inputs[1]), constant(expand.inputs[1])
            if w1 is None or w2 is None or w2.shape[1] != w1.shape[0] or w2.shape[0] != w1.shape[1]:
                continue
            inputs = [x, reduce.inputs[1], reduce.inputs[2] if len(reduce.inputs) > 2 else None,
                      expand.inputs[1], expand.inputs[2] if len(expand.inputs) > 2 else None]
            fused = make_node(namer, "SqueezeExcite", inputs,
                              {"reduce_activation": first[0], "reduce_activation_params": first[1] or None,
                               "expand_activation": second[0], "expand_activation_params": second[1] or None},
                              name=mul.name or "squeeze_excite", domain=DOMAIN)
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
            replace(graph, [pool, reduce, expand, mul], [fused], [mul.outputs[0]], [fused.outputs[0]])
            count += 1
        return count


def _activation(node: NodeSpec, which: str) -> tuple[Any, int, float, float]:
    """(numpy activation or None, code, alpha, beta) of the ``which`` ("reduce"/"expand") conv."""
    name = node.attr(f"{which}_activation", "") or ""
    name = name.decode() if isinstance(name, bytes) else name
    params = [float(p) for p in (node.attr(f"{which}_activation_params") or ())]
    spec = dataclasses.replace(node, attributes={"activation": name, "activation_params": params})
    alpha, beta = _DEFAULT_PARAMS.get(name, (0.0, 0.0))
    if params:
        alpha = params[0]
    if len(params) > 1:
        beta = params[1]
    return activation_fn(spec), ACTIVATION_CODES[name], alpha, beta


@KERNELS.register("SqueezeExcite", DOMAIN_VERSION, domain=DOMAIN)
def squeeze_excite(node: NodeSpec):
    act1, code1, a1, c1 = _activation(node, "reduce")
    act2, code2, a2, c2 = _activation(node, "expand")
    names = list(node.inputs) + [""] * 5
    consts = [node.constants.get(n) if n else None for n in names[1:5]]
    module = jit.kernels("squeeze_excite")
    call = None
    if module is not None and consts[0] is not None and consts[2] is not None:
        call = module.SqueezeExciteCall(consts[0], consts[1], consts[2], consts[3], code1, a1, c1, code2, a2, c2)

    def run(x: np.ndarray, w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray,
            b2: np.ndarray | None = None) -> np.ndarray:
        r, c = int(w1.shape[0]), int(w1.shape[1])
        if x.ndim != 4 or x.shape[1] != c:
            raise ValueError(f"SqueezeExcite: input {x.shape} has not the {c} channels of its weights")
        if (call is not None and w1 is consts[0] and b1 is consts[1] and w2 is consts[2] and b2 is consts[3]
                and call.accepts(x)):
            return call(x if x.flags.c_contiguous else np.ascontiguousarray(x))  # type: ignore[no-any-return]
        pooled = x.mean(axis=(2, 3))
        hidden = pooled @ w1.reshape(r, c).T + (0 if b1 is None else b1)
        hidden = act1(hidden) if act1 is not None else hidden
        gate = hidden @ w2.reshape(c, r).T + (0 if b2 is None else b2)
        gate = act2(gate) if act2 is not None else gate
        return np.asarray(x * gate.astype(x.dtype, copy=False)[:, :, None, None])

    return run
