"""Inference BatchNormalization followed by its activation, as one node and one pass.

Why: pre-activation networks (densenet's BN -> Relu -> Conv after every Concat) keep their
BatchNorms (no Conv before them to fold into), and numpy spends two broadcast passes on the
BatchNorm and one more on the Relu: 21 % of densenet121's run (bench/README, session 13).
``BatchNormalization`` (constant parameters, one output) + ``Relu`` / ``LeakyRelu`` / ``Clip``
becomes ``com.epoxy.cpu::FusedBatchNormalization``, which the jit tier runs as one compiled
pass (``jit/kernels_normalization.BatchNormKernel``) and the numpy path as the BatchNorm
kernel then the activation, the values of the unfused nodes either way.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    become,
    constant,
    dtype_of,
    ensure_opset,
    graph_nodes,
    is_op,
    opset_of,
    sole_consumer,
)

from .. import jit
from ..registry import KERNELS
from .conv import JIT_ACTIVATIONS
from .fused import _FLOAT_TYPES, DOMAIN, DOMAIN_VERSION, _activation_of, _inner, activation_fn


def _fusable(model: ir.Model, bn: ir.Node) -> bool:
    """An inference BatchNormalization with one output and constant float parameters."""
    if len(bn.inputs) != 5 or len(bn.outputs) != 1 or dtype_of(bn.inputs[0]) not in _FLOAT_TYPES:
        return False
    if opset_of(model, bn) < 9:  # the legacy forms (is_test, spatial): left to the BatchNorm kernel
        return False
    if opset_of(model, bn) >= 14 and int(attr(bn, "training_mode", 0)):
        return False
    return all(v is not None and constant(v) is not None for v in bn.inputs[1:])


class CpuBatchNormActivationPass(RewritePass):
    """``BatchNormalization`` + ``Relu``/``LeakyRelu``/``Clip`` -> ``FusedBatchNormalization``."""

    needs = (frozenset({"BatchNormalization"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for bn in graph_nodes(graph):
            if bn.graph is not graph or not is_op(bn, "BatchNormalization") or not _fusable(model, bn):
                continue
            nxt = sole_consumer(bn.outputs[0])
            act = _activation_of(model, nxt, bn.outputs[0])
            if act is None or nxt is None or act["activation"] not in JIT_ACTIVATIONS:
                continue
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
            become(graph, bn, "FusedBatchNormalization", {**act, "epsilon": float(attr(bn, "epsilon", 1e-5))},
                   domain=DOMAIN, tail=[nxt], out=nxt.outputs[0])
            count += 1
        return count


@KERNELS.register("FusedBatchNormalization", DOMAIN_VERSION, domain=DOMAIN)
def fused_batch_normalization(node: NodeSpec):
    bn = _inner(node, "BatchNormalization", 15, 5)
    act = activation_fn(node)
    compiled = _compiled(node)

    def run(x: np.ndarray, scale: np.ndarray, b: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
        if compiled is not None and compiled.handles(x) and scale is compiled_scale:
            return compiled(x)  # type: ignore[no-any-return]
        y = bn(x, scale, b, mean, var)
        return act(np.array(y) if not y.flags.writeable else y) if act is not None else y

    compiled_scale = node.constants.get(node.inputs[1])
    return run


def _compiled(node: NodeSpec) -> Any:
    """The compiled pass with the node's activation, or None (jit off, parameters that are
    not 1-D float constants of one dtype)."""
    module = jit.kernels("normalization")
    params = [node.constants.get(name) for name in node.inputs[1:5]]
    if module is None or any(not isinstance(p, np.ndarray) or p.ndim != 1 or p.dtype.kind != "f" for p in params):
        return None
    if len({p.dtype for p in params}) != 1 or params[0].dtype not in (np.float32, np.float64):
        return None
    dtype = params[0].dtype
    scale, bias, mean, var = params
    a = scale / np.sqrt(var + dtype.type(float(node.attr("epsilon", 1e-5))))
    name = node.attr("activation", "")
    name = name.decode() if isinstance(name, bytes) else name
    code, defaults = JIT_ACTIVATIONS[name]
    given = [float(p) for p in (node.attr("activation_params") or ())]
    alpha = given[0] if given else defaults[0]
    beta = given[1] if len(given) > 1 else defaults[1]
    return module.BatchNormKernel(a, bias - mean * a, jit.thread_count(), code, alpha, beta)
