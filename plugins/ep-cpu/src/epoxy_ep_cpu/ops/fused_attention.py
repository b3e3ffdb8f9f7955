"""Scaled dot-product attention written out in standard ops -> ``com.epoxy.cpu::FusedAttention``.

The pattern (BERT-style encoders exported op by op)::

    q4 = Transpose(Reshape(Q, q_shape), perm=[0, 2, 1, 3])      # [B, h, S, d]
    k4 = Transpose(Reshape(K, k_shape), perm=[0, 2, 3, 1])      # [B, h, d, Sk]
    v4 = Transpose(Reshape(V, v_shape), perm=[0, 2, 1, 3])      # [B, h, Sk, d]
    s  = MatMul(q4, k4) [Div c | Mul c] [Add mask]
    p  = Softmax(s, axis=-1)
    Y  = Reshape(Transpose(MatMul(p, v4), perm=[0, 2, 1, 3]), out_shape)

becomes ``FusedAttention(Q, K, V, mask?)`` with the three reshape shapes, ``out_shape``
and ``scale`` (``1/c`` for Div, ``c`` for Mul) as attributes. The kernel follows the same
numpy semantics (Reshape with ``0`` copying a dim, broadcasting MatMul/Add) but never
materializes the transposes: the GEMMs read the strided head views, the scale is applied
to Q (fewer elements than the scores), the softmax runs in place on the scores (its row
maximum, exponentials and row sums in one compiled kernel when the jit tier runs,
``jit/kernels_softmax.ExpRows``, its rows split over the session's threads) and its
normalization is applied to the context (``d`` columns instead of ``Sk``), which the
second GEMM writes straight into the ``[B, S, h, d]`` layout of the output. Results equal
the op-by-op graph up to float rounding. Dtypes other than float32/float64 run the
original ops' registered kernels one after another.

The pass is scoped to the cpu provider (it only runs when cpu is the first choice).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

from epoxy.contract import NodeSpec
from epoxy.kit.passes import (
    Namer,
    RewritePass,
    attr,
    constant,
    ensure_opset,
    graph_nodes,
    is_op,
    make_node,
    opset_of,
    producer_of,
    replace,
    sole_consumer,
)

from .. import jit
from ..registry import KERNELS
from ._broadcast import fits_into
from ._out import accepts_out
from .fused import DOMAIN, DOMAIN_VERSION, _kernel

_FAST = (np.dtype(np.float32), np.dtype(np.float64))


# ============================================================================ kernel
def _reshape(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """ONNX Reshape (allowzero=0): a ``0`` copies the input's dim."""
    dims = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(dims)


def _spec(node: NodeSpec, op_type: str, opset: int, n_inputs: int, attributes: dict[str, Any]) -> NodeSpec:
    vt = node.input_types[0] if node.input_types else None
    names = tuple(f"x{i}" for i in range(n_inputs))
    return NodeSpec(
        index=node.index, name=f"{node.name}/{op_type}", op_type=op_type, domain="", opset=opset,
        inputs=names, outputs=("y",), attributes=attributes,
        input_types=tuple(vt for _ in names) if vt is not None else (), output_types=(vt,) if vt is not None else (),
    )


def _op_by_op(node: NodeSpec, shapes: list[np.ndarray], scale: float, has_mask: bool) -> Callable[..., np.ndarray]:
    """The original graph through the registered kernels (for dtypes the fast path skips)."""
    reshape = _kernel(_spec(node, "Reshape", 14, 2, {}))
    transpose = {p: _kernel(_spec(node, "Transpose", 13, 1, {"perm": list(p)})) for p in ((0, 2, 1, 3), (0, 2, 3, 1))}
    matmul = _kernel(_spec(node, "MatMul", 13, 2, {}))
    mul = _kernel(_spec(node, "Mul", 14, 2, {}))
    add = _kernel(_spec(node, "Add", 14, 2, {}))
    softmax = _kernel(_spec(node, "Softmax", 13, 1, {"axis": -1}))
    q_shape, k_shape, v_shape, o_shape = shapes

    def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        q4 = transpose[(0, 2, 1, 3)](reshape(q, q_shape))
        k4 = transpose[(0, 2, 3, 1)](reshape(k, k_shape))
        v4 = transpose[(0, 2, 1, 3)](reshape(v, v_shape))
        s = matmul(q4, k4)
        if scale != 1.0:
            s = mul(s, np.asarray(scale, dtype=s.dtype))
        if has_mask and mask is not None:
            s = add(s, mask)
        c = matmul(softmax(s), v4)
        return reshape(transpose[(0, 2, 1, 3)](c), o_shape)

    return run


@KERNELS.register("FusedAttention", DOMAIN_VERSION, domain=DOMAIN)
def fused_attention(node: NodeSpec):
    q_shape = tuple(int(d) for d in node.attr("q_shape"))
    k_shape = tuple(int(d) for d in node.attr("k_shape"))
    v_shape = tuple(int(d) for d in node.attr("v_shape"))
    o_shape = tuple(int(d) for d in node.attr("out_shape"))
    scale = float(node.attr("scale", 1.0))
    has_mask = len(node.inputs) > 3 and bool(node.inputs[3])
    slow = _op_by_op(node, [np.array(s, dtype=np.int64) for s in (q_shape, k_shape, v_shape, o_shape)], scale, has_mask)
    compiled = jit.kernels("softmax")
    nthreads = jit.thread_count() if compiled is not None else 0
    numerators: dict[tuple[int, ...], Any] = {}  # scores shape -> prepared ``ExpRows``

    def compute(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                out: np.ndarray | None) -> np.ndarray | None:
        dt = q.dtype
        if dt not in _FAST or k.dtype != dt or v.dtype != dt or (mask is not None and mask.dtype != dt):
            return None
        if scale != 1.0:
            q = q * dt.type(scale)
        q4 = _reshape(q, q_shape).transpose(0, 2, 1, 3)
        k4 = _reshape(k, k_shape).transpose(0, 2, 3, 1)
        v4 = _reshape(v, v_shape).transpose(0, 2, 1, 3)
        s = np.matmul(q4, k4)
        if mask is not None:
            if fits_into(mask.shape, s.shape):
                np.add(s, mask, out=s)
            else:
                s = s + mask
        # softmax over the last axis, in place; the 1/sum goes onto the context
        if compiled is not None and dt == np.float32 and s.flags.c_contiguous:
            exp_rows = numerators.get(s.shape)
            if exp_rows is None:
                if len(numerators) >= 8:  # a model with dynamic axes sees a few shapes
                    numerators.clear()
                exp_rows = numerators[s.shape] = compiled.ExpRows(s.shape, nthreads)
            z = exp_rows(s)
        else:
            m = np.max(s, axis=-1, keepdims=True)
            if not np.isfinite(m).all():
                m = np.where(np.isfinite(m), m, 0).astype(dt)
            np.subtract(s, m, out=s)
            np.exp(s, out=s)
            z = np.sum(s, axis=-1, keepdims=True)
        ctx_shape = np.broadcast_shapes(s.shape[:-2], v4.shape[:-2]) + (s.shape[-2], v4.shape[-1])
        if len(ctx_shape) == 4 and s.shape[-1] == v4.shape[-2]:
            b, h, sq, d = ctx_shape
            final = _final_shape((b, sq, h, d), o_shape)
            if final is not None:
                if out is not None and out.shape == final and out.dtype == dt and out.flags.c_contiguous:
                    buf = out.reshape(b, sq, h, d)
                else:
                    buf = np.empty((b, sq, h, d), dtype=dt)
                view = buf.transpose(0, 2, 1, 3)
                np.matmul(s, v4, out=view)
                np.divide(view, z, out=view)
                return buf.reshape(final)
        c = np.matmul(s, v4)
        c /= z
        return _reshape(c.transpose(0, 2, 1, 3), o_shape)

    def run(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        y = compute(q, k, v, mask if has_mask else None, None)
        return slow(q, k, v, mask) if y is None else y

    def into(out: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray,
             mask: np.ndarray | None = None) -> np.ndarray | None:
        y = compute(q, k, v, mask if has_mask else None, out)
        if y is None:
            return None
        return out if np.shares_memory(y, out) else y

    return accepts_out(run, into)


def _final_shape(shape: tuple[int, ...], spec: tuple[int, ...]) -> tuple[int, ...] | None:
    """The result shape of ONNX Reshape(``shape`` -> ``spec``), or None when it is invalid."""
    dims = [shape[i] if s == 0 and i < len(shape) else s for i, s in enumerate(spec)]
    if any(d == 0 for d in spec[len(shape):]) or sum(d == -1 for d in dims) > 1 or any(d < -1 for d in dims):
        return None
    total = math.prod(shape)
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or total % known:
            return None
        dims = [total // known if d == -1 else d for d in dims]
    return tuple(dims) if math.prod(dims) == total else None


# ============================================================================ pass
def _only_reader(value: ir.Value, node: ir.Node) -> bool:
    return sole_consumer(value) is node


def _head_view(
    value: ir.Value, reader: ir.Node, perm: tuple[int, ...]
) -> tuple[ir.Value, list[int], list[ir.Node]] | None:
    """``value = Transpose(Reshape(x, shape), perm)`` read only by ``reader``: (x, shape, nodes)."""
    t = producer_of(value)
    if not is_op(t, "Transpose") or not _only_reader(value, reader) or len(t.outputs) != 1:
        return None
    if tuple(int(p) for p in (attr(t, "perm") or ())) != perm:
        return None
    r = producer_of(t.inputs[0])
    if not is_op(r, "Reshape") or len(r.inputs) != 2 or not _only_reader(t.inputs[0], t) or attr(r, "allowzero", 0):
        return None
    shape = constant(r.inputs[1])
    if shape is None or shape.ndim != 1 or shape.size != 4 or shape.dtype.kind not in "iu":
        return None
    return r.inputs[0], [int(d) for d in shape], [r, t]


def _scale_of(node: ir.Node, x: ir.Value) -> float | None:
    """For ``Div(x, c)`` / ``Mul(x, c)`` / ``Mul(c, x)`` with a one-element float constant c
    that cannot raise ``x``'s rank by broadcasting (a scalar, or no more dims than ``x``
    is known to have): the fused kernels apply it as a number."""
    if len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if is_op(node, "Div") and a is x:
        c = _scalar_for(constant(b), x)
        if c is not None and c != 0.0:
            return 1.0 / c
    if is_op(node, "Mul") and (a is x) != (b is x):
        return _scalar_for(constant(b if a is x else a), x)
    return None


def _scalar_for(c: np.ndarray | None, x: ir.Value) -> float | None:
    if c is None or c.size != 1 or c.dtype.kind != "f":
        return None
    if c.ndim and (x.shape is None or c.ndim > len(x.shape)):
        return None
    return float(c.reshape(()))


def _softmax_last_axis(model: ir.Model, node: ir.Node) -> bool:
    legacy = opset_of(model, node) < 13
    axis = int(attr(node, "axis", 1 if legacy else -1))
    return axis in (-1, 3)


def scores_of(sm: ir.Node) -> tuple[ir.Node, ir.Value | None, float, list[ir.Node]] | None:
    """A Softmax's input as ``MatMul [Div c | Mul c] [Add mask]``, each step read only by the
    next: (the MatMul, the mask or None, the scale, [the Add, the scale op] as present)."""
    nodes: list[ir.Node] = []
    x = sm.inputs[0]
    mask = None
    scale = 1.0
    p = producer_of(x)
    if p is None or not _only_reader(x, sm) or len(p.outputs) != 1:
        return None
    if is_op(p, "Add") and len(p.inputs) == 2:
        for i in (0, 1):
            cand, other = p.inputs[i], p.inputs[1 - i]
            q = producer_of(cand)
            if cand is not other and q is not None and _only_reader(cand, p) and (
                is_op(q, "MatMul") or _scale_of(q, q.inputs[0]) is not None
                or (len(q.inputs) == 2 and _scale_of(q, q.inputs[1]) is not None)
            ):
                mask = other
                nodes.append(p)
                x, p = cand, q
                break
        else:
            return None
    if is_op(p, ("Div", "Mul")) and len(p.outputs) == 1:
        for cand in p.inputs:
            sc = _scale_of(p, cand)
            if sc is not None and is_op(producer_of(cand), "MatMul") and _only_reader(cand, p):
                scale = sc
                nodes.append(p)
                x, p = cand, producer_of(cand)
                break
        else:
            return None
    if not is_op(p, "MatMul") or len(p.inputs) != 2 or len(p.outputs) != 1:
        return None
    return p, mask, scale, nodes


def context_matmul(probs: ir.Value) -> ir.Node | None:
    """The ``MatMul(probs, v)`` that alone reads the attention probabilities, or None."""
    mm2 = sole_consumer(probs)
    if not is_op(mm2, "MatMul") or len(mm2.inputs) != 2 or mm2.inputs[0] is not probs or len(mm2.outputs) != 1:
        return None
    return mm2


class SoftmaxAnchoredPass(RewritePass):
    """Finds each Softmax the pass ``accepts`` and replaces what ``match`` returns around it
    by one ``com.epoxy.cpu`` node of type :attr:`fused_op`."""

    needs = (frozenset({"Softmax"}),)

    fused_op = ""

    def accepts(self, model: ir.Model, sm: ir.Node) -> bool:  # pragma: no cover - every pass overrides
        raise NotImplementedError

    def match(self, sm: ir.Node) -> Any:  # pragma: no cover - every pass overrides
        """(inputs, attributes, nodes replaced, the value the fused node stands for) or None."""
        raise NotImplementedError

    def rewrite(self, model: ir.Model, graph: ir.Graph, namer: Namer) -> int:
        count = 0
        for sm in graph_nodes(graph):
            if sm.graph is not graph or not is_op(sm, "Softmax") or len(sm.outputs) != 1 or len(sm.inputs) != 1:
                continue
            if not self.accepts(model, sm):
                continue
            found = self.match(sm)
            if found is None:
                continue
            inputs, attrs, nodes, out = found
            fused = make_node(namer, self.fused_op, inputs, attrs, name=sm.name or "attention", domain=DOMAIN)
            ensure_opset(model, DOMAIN, DOMAIN_VERSION)
            replace(graph, nodes, [fused], [out], [fused.outputs[0]])
            count += 1
        return count


class CpuAttentionFusionPass(SoftmaxAnchoredPass):
    """The attention pattern above -> ``com.epoxy.cpu::FusedAttention``."""

    fused_op = "FusedAttention"

    def accepts(self, model: ir.Model, sm: ir.Node) -> bool:
        return _softmax_last_axis(model, sm)

    def match(self, sm: ir.Node):  # type: ignore[no-untyped-def]
        scores = scores_of(sm)
        if scores is None:
            return None
        p, mask, scale, steps = scores
        nodes = [sm, *steps, p]
        qv = _head_view(p.inputs[0], p, (0, 2, 1, 3))
        kv = _head_view(p.inputs[1], p, (0, 2, 3, 1))
        if qv is None or kv is None or p.inputs[0] is p.inputs[1]:
            return None
        probs = sm.outputs[0]
        mm2 = context_matmul(probs)
        if mm2 is None:
            return None
        vv = _head_view(mm2.inputs[1], mm2, (0, 2, 1, 3))
        if vv is None:
            return None
        t = sole_consumer(mm2.outputs[0])
        if not is_op(t, "Transpose") or tuple(int(i) for i in (attr(t, "perm") or ())) != (0, 2, 1, 3):
            return None
        r = sole_consumer(t.outputs[0])
        if not is_op(r, "Reshape") or len(r.inputs) != 2 or r.inputs[0] is not t.outputs[0] or attr(r, "allowzero", 0):
            return None
        o_shape = constant(r.inputs[1])
        if o_shape is None or o_shape.ndim != 1 or o_shape.dtype.kind not in "iu":
            return None
        nodes += qv[2] + kv[2] + [mm2] + vv[2] + [t, r]
        if len({id(n) for n in nodes}) != len(nodes):
            return None
        inputs = [qv[0], kv[0], vv[0]] + ([mask] if mask is not None else [])
        attrs = {"q_shape": qv[1], "k_shape": kv[1], "v_shape": vv[1],
                 "out_shape": [int(d) for d in o_shape], "scale": float(scale)}
        return inputs, attrs, nodes, r.outputs[0]
