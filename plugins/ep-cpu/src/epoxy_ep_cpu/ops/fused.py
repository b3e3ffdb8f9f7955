"""Fused ops of the cpu provider (domain ``com.epoxy.cpu``) and the passes that create them.

Only sessions using the cpu provider run these passes (``providers=("cpu",)``, level
``extended``). Each fused op runs the registered kernel of the op it replaces (Conv,
MatMul, Gemm: whatever those kernels do, prepacking included) and then applies the rest
in place on that fresh result, saving the intermediate tensors and dispatches:

- ``FusedConv(X, W, B?, Z?)``: Conv attributes plus ``activation``; ``Y = act(Conv + Z)``
  (Z: a residual added before the activation, e.g. ResNet's ``Sum`` then ``Relu``).
- ``FusedMatMul(A, B, C?)``: ``Y = act(MatMul(A, B) + C)``.
- ``FusedGemm(A, B, C?)``: Gemm attributes plus ``activation``; ``Y = act(Gemm(A, B, C))``.

``activation`` is one of Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, SiLU
(``x * sigmoid(x)``, written by exporters as ``Sigmoid`` + ``Mul``), Tanh, Gelu
(``""``: none) with ``activation_params`` (floats: LeakyRelu alpha; Clip min, max;
HardSigmoid alpha, beta) and ``activation_approximate`` (Gelu).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported
from epoxy.kit.passes import (
    BatchNormAffineFoldPass,
    ConstantFoldingPass,
    ConvAffineFoldPass,
    ConvBatchNormFoldPass,
    DropoutEliminationPass,
    GeluFusionPass,
    LegacyInitializerInputsPass,
    Namer,
    RewritePass,
    attr,
    become,
    constant,
    consumers,
    copy_attributes,
    dtype_of,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    model_changed,
    opset_of,
    replace,
    sole_consumer,
)

from .. import jit
from ..registry import KERNELS
from ._broadcast import fits_into
from ._dense_weights import DenseWeights, released_when_owned
from .activation import hard_sigmoid_into, hard_swish_into, relu_into
from .conv import JIT_ACTIVATIONS, STORE_ACTIVATIONS, Epilogue, conv_kernel
from .linalg import _matmul_2d_weight

DOMAIN = "com.epoxy.cpu"
DOMAIN_VERSION = 1

_ACT_ATTRS = ("activation", "activation_params", "activation_approximate")
_FAST = (np.dtype(np.float32), np.dtype(np.float64))


# ============================================================================ kernels
def _inner(
    node: NodeSpec, op_type: str, opset: int, n_inputs: int, drop: tuple[str, ...] = _ACT_ATTRS
) -> Callable[..., Any]:
    """The registered kernel of ``op_type`` for the first ``n_inputs`` inputs of ``node``."""
    spec = _inner_spec(node, op_type, opset, n_inputs, drop)
    factory, reason = KERNELS.lookup(spec)
    if factory is None:
        raise Unsupported(reason or f"no {op_type} kernel")
    return factory(spec)


def _inner_spec(
    node: NodeSpec, op_type: str, opset: int, n_inputs: int, drop: tuple[str, ...] = _ACT_ATTRS
) -> NodeSpec:
    """``node`` as an ``op_type`` node of its first ``n_inputs`` inputs."""
    inputs = tuple(node.inputs[:n_inputs])
    while inputs and not inputs[-1]:
        inputs = inputs[:-1]
    return dataclasses.replace(
        node,
        op_type=op_type,
        domain="",
        opset=opset,
        inputs=inputs,
        input_types=tuple(node.input_types[: len(inputs)]),
        attributes={k: v for k, v in node.attributes.items() if k not in drop},
        constants={k: v for k, v in node.constants.items() if k in inputs},
    )


def _act_spec(node: NodeSpec, op_type: str, opset: int, attributes: dict[str, Any], n_inputs: int = 1) -> NodeSpec:
    vt = node.output_types[0] if node.output_types else None
    names = ("x", "min", "max")[:n_inputs]
    return NodeSpec(
        index=node.index, name=f"{node.name}/{op_type}", op_type=op_type, domain="", opset=opset,
        inputs=names, outputs=("y",), attributes=attributes,
        input_types=tuple(vt for _ in names) if vt is not None else (), output_types=(vt,) if vt is not None else (),
    )


def _kernel(spec: NodeSpec) -> Callable[..., Any]:
    factory, reason = KERNELS.lookup(spec)
    if factory is None:
        raise Unsupported(reason or f"no {spec.op_type} kernel")
    return factory(spec)


def activation_fn(node: NodeSpec) -> Callable[[np.ndarray], np.ndarray] | None:
    """``f(y)`` applying the node's activation; it may overwrite ``y`` (a fresh array)."""
    name = node.attr("activation", "")
    if isinstance(name, bytes):
        name = name.decode()
    params = [float(p) for p in (node.attr("activation_params") or ())]
    if not name:
        return None
    if name == "Relu":
        slow = _kernel(_act_spec(node, "Relu", 14, {}))

        def relu(y: np.ndarray) -> np.ndarray:
            if y.dtype in _FAST:
                return relu_into(y, out=y)
            return slow(y)

        return relu
    if name == "LeakyRelu":
        alpha = params[0] if params else 0.01
        slow = _kernel(_act_spec(node, "LeakyRelu", 16, {"alpha": alpha}))

        def leaky(y: np.ndarray) -> np.ndarray:
            if y.dtype in _FAST and 0.0 <= alpha <= 1.0:
                return np.maximum(y, y * y.dtype.type(alpha), out=y)
            return slow(y)

        return leaky
    if name == "Clip":
        lo = params[0] if params else -math.inf
        hi = params[1] if len(params) > 1 else math.inf
        slow_clip = _kernel(_act_spec(node, "Clip", 13, {}, 3))

        def clip(y: np.ndarray) -> np.ndarray:
            if y.dtype in _FAST:
                return np.clip(y, lo, hi, out=y)
            return slow_clip(y, np.asarray(lo, dtype=y.dtype), np.asarray(hi, dtype=y.dtype))

        return clip
    if name == "Sigmoid":
        return _kernel(_act_spec(node, "Sigmoid", 13, {}))
    if name == "SiLU":
        gate = _kernel(_act_spec(node, "Sigmoid", 13, {}))
        one_pass = _special(lambda module: module.small("silu"))

        def silu(y: np.ndarray) -> np.ndarray:
            if one_pass is not None:
                done = one_pass(y)  # the compiled Sigmoid's value times y, in one pass: the same bits
                if done is not None:
                    return done
            s = gate(y)
            if y.dtype in _FAST and s.dtype == y.dtype:
                return np.multiply(y, s, out=y)
            return np.asarray(y * s).astype(y.dtype, copy=False)

        return silu
    if name == "Tanh":
        slow = _kernel(_act_spec(node, "Tanh", 13, {}))

        def tanh(y: np.ndarray) -> np.ndarray:
            if y.dtype in _FAST:
                return np.tanh(y, out=y)
            return slow(y)

        return tanh
    if name == "HardSigmoid":
        alpha = params[0] if params else 0.2
        beta = params[1] if len(params) > 1 else 0.5
        slow_hs = _kernel(_act_spec(node, "HardSigmoid", 22, {"alpha": alpha, "beta": beta}))
        one_pass_hs = _special(lambda module: module.hard("hard_sigmoid"))

        def hard_sigmoid(y: np.ndarray) -> np.ndarray:
            if one_pass_hs is not None:
                done = one_pass_hs(y, alpha, beta)
                if done is not None:
                    return done
            if y.dtype in _FAST:
                return hard_sigmoid_into(y, alpha, beta, out=y)
            return slow_hs(y)

        return hard_sigmoid
    if name == "HardSwish":
        slow_hw = _kernel(_act_spec(node, "HardSwish", 22, {}))
        one_pass_hw = _special(lambda module: module.hard("hard_swish"))

        def hard_swish(y: np.ndarray) -> np.ndarray:
            if one_pass_hw is not None:
                done = one_pass_hw(y, 6.0, 0.5)
                if done is not None:
                    return done
            if y.dtype in _FAST:
                return hard_swish_into(y, out=y)
            return slow_hw(y)

        return hard_swish
    if name == "Gelu":
        approximate = node.attr("activation_approximate", "none")
        op = _kernel(_act_spec(node, "Gelu", 20, {"approximate": approximate}))
        over = _special(lambda module: module.in_place("gelu")) if approximate in ("none", b"none") else None
        if over is None:
            return op

        def gelu(y: np.ndarray) -> np.ndarray:
            done = over(y)  # float32 written over y, the fresh product: no new output's pages
            return done if done is not None else op(y)

        gelu.with_bias = _special(lambda module: module.bias_in_place("gelu"))  # type: ignore[attr-defined]
        return gelu
    raise Unsupported(f"unknown fused activation {name!r}")


def _special(pick: Callable[[Any], Any]) -> Any:
    """``pick(jit/kernels_special)``: a one-pass compiled activation giving the numpy passes'
    bits (SiLU, HardSigmoid, HardSwish), when the provider building the kernel runs the jit
    tier; else None."""
    special = jit.kernels("special")
    return pick(special) if special is not None else None


def _owned(y: np.ndarray, *inputs: np.ndarray | None) -> np.ndarray:
    """``y`` itself when it may be overwritten (writable, shares no memory with inputs)."""
    if type(y) is np.ndarray and y.base is None and y.flags.writeable and not any(y is i for i in inputs):
        return y  # owns its buffer, made by the inner kernel after the inputs: nothing else sees it
    if not isinstance(y, np.ndarray) or not y.flags.writeable or any(
        i is not None and np.may_share_memory(y, i) for i in inputs
    ):
        return np.array(y)
    return y


def _add_into(y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``y + z`` written into ``y`` when the broadcast keeps ``y``'s shape and dtype."""
    if z.dtype == y.dtype and fits_into(z.shape, y.shape):
        return np.add(y, z, out=y)
    return np.asarray(y + z).astype(y.dtype, copy=False)


def _add_then_activate(y: np.ndarray, add: np.ndarray | None, act: Any, *inputs: np.ndarray | None) -> np.ndarray:
    """The fused tail: ``act(y + add)`` in place on ``y`` (copied first if it aliases ``inputs``)."""
    y = _owned(y, *inputs, add)
    if add is not None:
        y = _add_into(y, add)
    return act(y) if act is not None else y


@KERNELS.register("FusedConv", DOMAIN_VERSION, domain=DOMAIN)
def fused_conv(node: NodeSpec):
    n_conv = 3 if len(node.inputs) > 2 and node.inputs[2] else 2
    act = activation_fn(node)
    spec = _inner_spec(node, "Conv", 22, n_conv)
    factory, reason = KERNELS.lookup(spec)
    if factory is None:
        raise Unsupported(reason or "no Conv kernel")
    if jit.kernels("conv") is not None:  # the compiled conv applies the tail in its own pass
        return conv_kernel(spec, _conv_epilogue(node, act))
    conv = factory(spec)

    def run(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, z: np.ndarray | None = None) -> np.ndarray:
        y = conv(x, w, b) if n_conv == 3 else conv(x, w)
        if z is None and act is None:
            return y
        return _add_then_activate(y, z, act, x, w, b)

    return run


def _activation_codes(node: NodeSpec) -> tuple[tuple[int, float, float] | None, tuple[int, float, float] | None]:
    """FusedConv's activation as the compiled store passes apply it: ``(code,
    alpha, beta)`` from ``JIT_ACTIVATIONS`` (every kernel's) and from it or
    ``STORE_ACTIVATIONS`` (the small kernels' wider table), each None when it has none
    (parameters as ``activation_fn`` reads them)."""
    name = node.attr("activation", "")
    if isinstance(name, bytes):
        name = name.decode()
    params = [float(p) for p in (node.attr("activation_params") or ())]
    every = JIT_ACTIVATIONS.get(name)
    if every is not None:
        code, defaults = every
        found = (code, params[0] if params else defaults[0], params[1] if len(params) > 1 else defaults[1])
        return found, found
    wide = STORE_ACTIVATIONS.get(name)
    if wide is None:
        return None, None
    code, (alpha, beta) = wide
    if name == "HardSigmoid":  # HardSwish's are its fixed 6 and 0.5
        alpha = params[0] if params else alpha
        beta = params[1] if len(params) > 1 else beta
    return None, (code, alpha, beta)


def _conv_epilogue(node: NodeSpec, act: Any) -> Epilogue:
    """FusedConv's tail for the compiled conv: its activation by code when the kernel has it,
    else run after the kernel (``store``: the small-layer kernel's wider table)."""
    every, store = _activation_codes(node)
    code, alpha, beta = every if every is not None else (None, 0.0, 0.0)

    def tail(y: np.ndarray, z: np.ndarray | None, *inputs: np.ndarray | None) -> np.ndarray:
        if z is None and act is None:
            return y
        return _add_then_activate(y, z, act, *inputs)

    return Epilogue(code, alpha, beta, act if code is None else None, tail, store)


@KERNELS.register("FusedMatMul", DOMAIN_VERSION, domain=DOMAIN)
def fused_matmul(node: NodeSpec):
    act = activation_fn(node)
    dense = _dense_layer(node)
    if dense is not None and dense[0].owned:
        return released_when_owned(_owned_dense_matmul(node, dense[0], dense[2], act), dense[0], 1)
    mm = _inner(node, "MatMul", 13, 2)
    act_bias = _with_bias(act)

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        if dense is not None and a.dtype == dense[1].dtype and a.ndim >= 2 and a.flags.c_contiguous:
            weights, b_planned, bias = dense
            k, n = weights.shape
            if a.shape[-1] == k and b is b_planned:
                shape = a.shape[:-1] + (n,)
                # the added term: the constant bias, or a residual of exactly the output's shape
                if c is None or c is bias or (type(c) is np.ndarray and c.dtype == weights.dtype and c.shape == shape):
                    y = weights.product(a.reshape(-1, k)).reshape(shape)  # fresh: the tail may overwrite it
                    return _add_bias_then_activate(y, c, c is not None and c is bias, act, act_bias)
        return _add_then_activate(mm(a, b), c, act, a, b)

    return run


def _owned_dense_matmul(node: NodeSpec, weights: DenseWeights, bias: np.ndarray | None,
                        act: Callable[[np.ndarray], np.ndarray] | None) -> Callable[..., Any]:
    """FusedMatMul of a layer whose weights' packed copy is all it keeps (``DenseWeights.owned``):
    every product on it, B never read (the plan may pass None there); a residual or bias of
    the output's shape added in place, any other addend broadcast by the general tail."""
    label = node.name  # the closure keeps no NodeSpec: its constants would keep the released weight
    act_bias = _with_bias(act)

    def run(a: np.ndarray, b: np.ndarray | None, c: np.ndarray | None = None) -> np.ndarray:
        if a.dtype != weights.dtype:
            raise TypeError(f"FusedMatMul {label!r}: input A is {a.dtype}, its constant B {weights.dtype}")
        y = _matmul_2d_weight(a, weights)  # fresh: the tail may overwrite it
        if c is None or c is bias or (type(c) is np.ndarray and c.dtype == y.dtype and c.shape == y.shape):
            return _add_bias_then_activate(y, c, c is not None and c is bias, act, act_bias)
        return _add_then_activate(y, c, act, a)

    return run


def _with_bias(act: Callable[[np.ndarray], np.ndarray] | None) -> Callable[..., np.ndarray | None] | None:
    """The activation's one-pass form with a bias row added first (``act.with_bias``), if any."""
    return getattr(act, "with_bias", None) if act is not None else None


def _add_bias_then_activate(y: np.ndarray, c: np.ndarray | None, is_bias: bool,
                            act: Callable[[np.ndarray], np.ndarray] | None,
                            act_bias: Callable[..., np.ndarray | None] | None) -> np.ndarray:
    """``act(y + c)`` over the fresh product ``y`` (``c``: the layer's constant bias when
    ``is_bias``, else None or a residual of ``y``'s shape): the bias and the activation in one
    pass where the activation has one (the same bits as the two), else in place, in order."""
    if is_bias and act_bias is not None:
        done = act_bias(y, c)
        if done is not None:
            return done
    if c is not None:
        np.add(y, c, out=y)
    return act(y) if act is not None else y


def _dense_layer(node: NodeSpec) -> tuple[DenseWeights, np.ndarray | None, np.ndarray | None] | None:
    """(weight, the weight object the plan passes, constant 1-D bias or None) when ``node``
    is a dense layer: a constant float32/64 2-D weight. Then a run is one GEMM over the
    flattened rows plus an in-place add of the bias or of a residual of the output's shape,
    without the general path's dtype, aliasing and broadcast checks (~8 us a call on the
    exporter models' small tensors); the weight is checked by identity, so a fed override
    takes the general path."""
    names = list(node.inputs) + [""] * 3
    w = node.constants.get(names[1]) if names[1] else None
    c = node.constants.get(names[2]) if names[2] else None
    if w is None or w.ndim != 2 or 0 in w.shape or w.dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        return None
    bias = c if c is not None and c.ndim == 1 and c.shape[0] == w.shape[1] and c.dtype == w.dtype else None
    weight = w if w.flags.c_contiguous else np.ascontiguousarray(w)
    dense = DenseWeights(weight)
    return dense, None if dense.owned else w, bias  # an owned layer keeps no reference to the original


@KERNELS.register("FusedGemm", DOMAIN_VERSION, domain=DOMAIN)
def fused_gemm(node: NodeSpec):
    gemm = _inner(node, "Gemm", 13, 3)
    act = activation_fn(node)
    n_in = 3 if len(node.inputs) > 2 and node.inputs[2] else 2

    def run(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        y = gemm(a, b, c) if n_in == 3 else gemm(a, b)
        if act is None:
            return y
        return act(_owned(y, a, b, c))

    released = getattr(gemm, "released_inputs", None)  # B passes through to the Gemm untouched
    if released:
        run.released_inputs = released  # type: ignore[attr-defined]
    return run


# ============================================================================ passes
_FLOAT_TYPES = (ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16)


def _take_activation(
    model: ir.Model, nodes: list[ir.Node], nxt: ir.Node | None, out: ir.Value
) -> tuple[dict[str, Any] | None, ir.Value]:
    """When ``nxt`` is an activation of ``out``, append it to ``nodes`` (the nodes a fusion
    replaces) and return its attributes and output; else ``(None, out)``. SiLU as exporters
    write it (``Mul(out, Sigmoid(out))``, two readers of ``out``) counts as one."""
    if nxt is None:
        silu = _silu_of(out)
        if silu is None:
            return None, out
        nodes.extend(silu)
        return {"activation": "SiLU"}, silu[-1].outputs[0]
    act = _activation_of(model, nxt, out)
    if act is None:
        return None, out
    nodes.append(nxt)
    return act, nxt.outputs[0]


def _silu_of(x: ir.Value) -> list[ir.Node] | None:
    """``[Sigmoid, Mul]`` computing ``x * sigmoid(x)`` when they are ``x``'s only readers (SiLU,
    Swish: EfficientNet's and YOLO's activation, LLaMA's gate), else None."""
    if x.is_graph_output():
        return None
    readers = consumers(x)
    sigmoid = next((n for n in readers if is_op(n, "Sigmoid") and len(n.inputs) == 1), None)
    mul = next((n for n in readers if is_op(n, "Mul")), None)
    if len(readers) != 2 or sigmoid is None or mul is None or len(sigmoid.outputs) != 1 or len(mul.outputs) != 1:
        return None
    gate = sigmoid.outputs[0]
    if sole_consumer(gate) is not mul or len(mul.inputs) != 2 or {id(v) for v in mul.inputs} != {id(x), id(gate)}:
        return None
    if len(list(x.uses())) != 2:  # x read once by each
        return None
    return [sigmoid, mul]


def _activation_of(model: ir.Model, node: ir.Node | None, x: ir.Value) -> dict[str, Any] | None:
    """Attributes describing ``node`` as a fused activation of ``x``, or None."""
    if node is None or node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is not x:
        return None
    op = node.op_type
    if len(node.outputs) != 1:
        return None
    if op in ("Relu", "Sigmoid", "Tanh", "HardSwish") and len(node.inputs) == 1:
        return {"activation": op}
    if op == "LeakyRelu":
        return {"activation": op, "activation_params": [float(attr(node, "alpha", 0.01))]}
    if op == "HardSigmoid":
        return {
            "activation": op,
            "activation_params": [float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))],
        }
    if op == "Gelu":
        return {"activation": op, "activation_approximate": str(attr(node, "approximate", "none"))}
    if op == "Clip":
        if opset_of(model, node) < 11:
            lo, hi = attr(node, "min", -math.inf), attr(node, "max", math.inf)
        else:
            bounds = []
            for i in (1, 2):
                v = node.inputs[i] if len(node.inputs) > i else None
                if v is None:
                    bounds.append(None)
                    continue
                c = constant(v)
                if c is None or c.size != 1:
                    return None
                bounds.append(float(c.reshape(())))
            lo = -math.inf if bounds[0] is None else bounds[0]
            hi = math.inf if bounds[1] is None else bounds[1]
        if np.isnan(lo) or np.isnan(hi):
            return None
        return {"activation": op, "activation_params": [float(lo), float(hi)]}
    return None


def _addend(node: ir.Node | None, value: ir.Value) -> ir.Value | None:
    """For ``Add(value, z)`` / ``Sum(value, z)``: z (same dtype), else None."""
    if not is_op(node, ("Add", "Sum")) or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    other = b if a is value else a if b is value else None
    if other is None or other is value or dtype_of(other) != dtype_of(value):
        return None
    return other


def _become_fused_conv(graph: ir.Graph, conv: ir.Node, act: dict[str, Any] | None, tail: list[ir.Node],
                       out: ir.Value) -> None:
    """Turn ``conv`` into the FusedConv applying ``act`` (its ``tail`` of activation nodes,
    ending in ``out``, goes: the conv's output takes ``out``'s place)."""
    kept = len(conv.inputs)
    while kept and conv.inputs[kept - 1] is None:
        kept -= 1
    if kept != len(conv.inputs):
        conv.resize_inputs(kept)
    become(graph, conv, "FusedConv", act or {"activation": ""}, domain=DOMAIN, keep=list(conv.attributes),
           tail=tail, out=out)


class CpuConvFusionPass(RewritePass):
    """``Conv`` [+ ``Add``/``Sum`` residual] [+ activation] -> ``com.epoxy.cpu::FusedConv``."""

    needs = (frozenset({"Conv"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for conv in graph_nodes(graph):
            if conv.graph is not graph or not is_op(conv, "Conv") or len(conv.inputs) < 2 or len(conv.outputs) != 1:
                continue
            if dtype_of(conv.outputs[0]) not in _FLOAT_TYPES and dtype_of(conv.inputs[0]) not in _FLOAT_TYPES:
                continue
            nodes = [conv]
            out = conv.outputs[0]
            z = None
            nxt = sole_consumer(out)
            found = _addend(nxt, out)
            if found is not None:
                z, out = found, nxt.outputs[0]  # type: ignore[union-attr]
                nodes.append(nxt)  # type: ignore[arg-type]
                nxt = sole_consumer(out)
            act, out = _take_activation(model, nodes, nxt, out)
            if len(nodes) == 1:
                continue
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
            if z is None:
                # the conv itself becomes the FusedConv (a new node and the graph splice were
                # most of this pass's time); not with an addend, which may be computed after it
                _become_fused_conv(graph, conv, act, nodes[1:], out)
            else:
                inputs = list(conv.inputs[:3]) + [None] * (3 - len(conv.inputs[:3])) + [z]
                fused = make_node(namer, "FusedConv", inputs, act or {"activation": ""},
                                  name=conv.name or "conv", domain=DOMAIN)
                copy_attributes(conv, fused)
                replace(graph, nodes, [fused], [out], [fused.outputs[0]])
            count += 1
        return count


class CpuMatMulFusionPass(RewritePass):
    """``MatMul`` [+ ``Add`` bias] [+ activation] -> ``FusedMatMul``; ``Gemm`` + activation
    -> ``FusedGemm``."""

    needs = (frozenset({"MatMul", "Gemm"}),)

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for mm in graph_nodes(graph):
            if mm.graph is not graph or not is_op(mm, ("MatMul", "Gemm")) or len(mm.outputs) != 1:
                continue
            if dtype_of(mm.inputs[0]) not in _FLOAT_TYPES:
                continue
            nodes = [mm]
            out = mm.outputs[0]
            inputs = list(mm.inputs)
            nxt = sole_consumer(out)
            if mm.op_type == "MatMul":
                c = _addend(nxt, out) if is_op(nxt, "Add") else None
                if c is not None:
                    inputs.append(c)
                    nodes.append(nxt)  # type: ignore[arg-type]
                    out = nxt.outputs[0]  # type: ignore[union-attr]
                    nxt = sole_consumer(out)
            act, out = _take_activation(model, nodes, nxt, out)
            if len(nodes) == 1:
                continue
            op = "FusedMatMul" if mm.op_type == "MatMul" else "FusedGemm"
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
            if len(inputs) == len(mm.inputs) or inputs[-1].producer() is None:
                # the MatMul/Gemm itself becomes the fused node (see kit.passes.become): what it
                # reads is defined before it (a bias added by a node computed after the MatMul
                # would not be: that one gets a new node, placed after both)
                for index in range(len(mm.inputs), len(inputs)):
                    mm.resize_inputs(index + 1)
                    mm.replace_input_with(index, inputs[index])
                become(graph, mm, op, act or {"activation": ""}, domain=DOMAIN, keep=list(mm.attributes),
                       tail=nodes[1:], out=out)
            else:
                fused = make_node(namer, op, inputs, act or {"activation": ""}, name=mm.name or op, domain=DOMAIN)
                if mm.op_type == "Gemm":
                    copy_attributes(mm, fused)
                replace(graph, nodes, [fused], [out], [fused.outputs[0]])
            count += 1
        return count


class CpuFusionPass(ir.passes.InPlacePass):
    """The cpu fusions, after the core rewrites they build on.

    The core's passes (BatchNormalization folding, Gelu fusion...) usually run first, but
    the order of passes from different plugins is not guaranteed, so the ones the fusions
    depend on are run here too (they find nothing left to do when they already ran).
    """

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[ir.passes.PassBase] = [
            LegacyInitializerInputsPass(), DropoutEliminationPass(), ConstantFoldingPass(),
            ConvBatchNormFoldPass(), BatchNormAffineFoldPass(), ConvAffineFoldPass(),
            GeluFusionPass(), CpuConvFusionPass(), CpuMatMulFusionPass(),
        ]

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        modified = False
        for step in self.steps:
            if step(model).modified:
                modified = True
                model_changed(model)  # the optimizer's op census, for the steps after this one
        return ir.passes.PassResult(model, modified=modified)


def cpu_passes() -> list[ir.passes.PassBase]:
    return [CpuFusionPass()]
