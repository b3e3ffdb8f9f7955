"""Fused elementwise groups on cpu: which nodes may join, and the kernel a group runs.

Why groups and not single nodes: a chain of k elementwise nodes costs k numpy calls, k
temporaries and k passes over memory; the group's generated numba loop
(:mod:`.jit.kernels_elementwise`) reads each input once and writes the output once. The
group's program is the backend-neutral one of :mod:`epoxy.kit.elementwise` (ep-cuda fuses
the same groups into CUDA kernels).

When the fused loop does not pay, a group runs its nodes' own numpy kernels in order (the
reference path, so the results are those of an unfused session): past :func:`limit_of`
output elements when the program calls exp/tanh... (numba's scalar libm calls are 3-20x
slower per element than numpy's SIMD ones; a group whose static shape is past it is not
claimed at all, see :func:`pays`), and for input dtypes the graph did not declare. What a
run derives from the input shapes (broadcasting classes, collapsed dimensions, strides,
which compiled variant) is worked out once per distinct input shapes and kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from epoxy.contract import GraphSpec, NodeSpec
from epoxy.kit import boundary
from epoxy.kit.elementwise import (
    LOWERED,
    OPS,
    PARAM_INPUTS,
    VARIADIC,
    Program,
    constants_of,
    lower_group,
    param_inputs_constant,
)

from .jit import threads

FLOATS = frozenset({"float32", "float64"})
#: per transcendental op, the output elements above which a program using it runs the
#: per-node numpy kernels instead (None: no limit). numba has no SIMD exp/tanh here (no SVML)
#: and numpy has; ep-cpu's numpy erf is a multi-pass polynomial, slower than libm's. Timed
#: with timeit on one-group sessions at 1 thread, fused vs per-node, us (bench/README, Session 7):
#: Sigmoid*x 9.7/15.9 at 64 elements, 21.8/26.3 at 4 K, 56/53 at 16 K; Tanh*x 10.1/10.8 at
#: 64, 17.7/11.9 at 1 K; the erf GELU chain 10.1/35.1 at 64, 898/1264 at 256 K
LIMITS: dict[str, int | None] = {"Sigmoid": 4096, "Exp": 4096, "Elu": 4096, "Selu": 4096, "Tanh": 256, "Erf": None}
#: the limit of the transcendental ops not measured (Log, Sin, Cos, Pow, Softplus...)
DEFAULT_LIMIT = 1024
_ONNX = ("", "ai.onnx")
#: input shapes a group keeps plans for (a plan is a few small arrays and a dispatcher)
MAX_PLANS = 256


def _dtype(node: NodeSpec, k: int, outputs: bool = False) -> str | None:
    types = node.output_types if outputs else node.input_types
    if k >= len(types) or types[k].dtype is None:
        return None
    return np.dtype(types[k].dtype).name


def fusable(graph: GraphSpec, node: NodeSpec) -> bool:
    """True when ``node`` may join a fused group: an ONNX elementwise op of the kit's table
    over float32 or float64 (one dtype for operands and result; a Where condition may be
    bool), one output, its attribute-like inputs (Clip's bounds) constant."""
    op = node.op_type
    if node.domain not in _ONNX or (op not in OPS and op not in VARIADIC and op not in LOWERED):
        return False
    if len(node.outputs) != 1 or not node.outputs[0]:
        return False
    out = _dtype(node, 0, outputs=True)
    if out not in FLOATS or (op in OPS and OPS[op].predicate):
        return False
    skip = PARAM_INPUTS.get(op, ())
    for k, name in enumerate(node.inputs):
        if not name or k in skip:
            continue
        dt = _dtype(node, k)
        if dt != out and not (op == "Where" and k == 0 and dt == "bool"):
            return False
    return param_inputs_constant(node, constants_of(graph, node))


def limit_of(program: Program) -> int | None:
    """The most output elements the fused loop takes for ``program`` (None: any size)."""
    limits = []
    for ins in program.instrs:
        if not OPS[ins.op].transcendental:
            continue
        op = ins.op
        if op == "Gelu":
            op = "Tanh" if dict(ins.attrs).get("approximate", "none") == "tanh" else "Erf"
        limits.append(LIMITS.get(op, DEFAULT_LIMIT))
    bounded = [n for n in limits if n is not None]
    return min(bounded) if bounded else None


def pays(graph: GraphSpec, group: Sequence[int]) -> bool:
    """False when the group's output shape is static and past its program's limit: the
    group would always run its per-node kernels, plus the group's own dispatch."""
    inputs, outputs = boundary(graph, group)
    limit = limit_of(lower_group(graph, group, inputs, outputs)[0])
    shape = graph.value_type(outputs[0]).shape if outputs else None
    dims = [d for d in shape or () if isinstance(d, int)]
    if limit is None or shape is None or len(dims) != len(shape):
        return True
    return int(np.prod(dims, dtype=np.int64)) <= limit


@dataclass(frozen=True)
class _Plan:
    """How one set of input shapes runs: the compiled variant (serial, and parallel when the
    work is past the threads' grain) and its ``shape``/``meta`` arguments."""

    fn: Any
    shape: tuple[int, ...]
    meta: np.ndarray
    size: int
    parallel_fn: Any = None
    #: a 0-d output: computed as shape (1,) (numba's np.empty takes no empty tuple), reshaped
    scalar: bool = False


#: the plan of input shapes that run the per-node kernels
_PER_NODE = _Plan(None, (), np.zeros(0, np.int64), 0)


def _collapse(out: tuple[int, ...], shapes: Sequence[tuple[int, ...]]) -> tuple[list[int], list[list[bool]]]:
    """The output's dimensions with size-1 ones dropped and neighbours merged where every
    input is either full in both or broadcast in both; per input, full (True) per dimension."""
    ndim = len(out)
    padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
    dims: list[int] = []
    full: list[list[bool]] = [[] for _ in shapes]
    for d, extent in enumerate(out):
        if extent == 1:
            continue
        flags = [p[d] != 1 for p in padded]
        if dims and all(f[-1] == flag for f, flag in zip(full, flags)):
            dims[-1] *= extent
        else:
            dims.append(extent)
            for f, flag in zip(full, flags):
                f.append(flag)
    return dims, full


class FusedElementwise:
    """The kernel of one fused group: ``run(*inputs) -> tuple of outputs`` (boundary order).

    Per call: one tuple of the input shapes, one dict lookup, one numba dispatch (outputs
    are allocated inside the compiled function)."""

    def __init__(self, program: Program, used: Sequence[int], dtype: str, in_dtypes: Sequence[str],
                 fallback: Callable[..., tuple[Any, ...]], nthreads: int) -> None:
        self.program = program
        self.used = tuple(used)
        self.dtype = np.dtype(dtype)
        self.in_dtypes = tuple(np.dtype(d) for d in in_dtypes)
        self.fallback = fallback
        self.nthreads = nthreads
        self.limit = limit_of(program)
        self.single = len(program.outputs) == 1
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        xs = [args[k] for k in self.used]
        key = tuple([x.shape for x in xs])
        plan = self._plans.get(key)
        if plan is None:
            with self._lock:
                if len(self._plans) >= MAX_PLANS:  # a model fed ever new shapes: start over
                    self._plans.clear()
                plan = self._plans[key] = self._plan(xs)
        if plan.fn is None:
            return self.fallback(*args)
        fn = plan.fn
        if plan.parallel_fn is not None:
            threads.use(self.nthreads, plan.size)
            fn = plan.parallel_fn
        out = fn(*xs, plan.shape, plan.meta)
        if plan.scalar:
            return tuple(o.reshape(()) for o in ((out,) if self.single else out))
        return (out,) if self.single else out

    def _plan(self, xs: Sequence[Any]) -> _Plan:
        from .jit import kernels_elementwise as emit

        if any(not isinstance(x, np.ndarray) or x.dtype != d for x, d in zip(xs, self.in_dtypes)):
            return _PER_NODE
        shapes = [tuple(x.shape) for x in xs]
        out = tuple(int(d) for d in np.broadcast_shapes(*shapes)) if shapes else ()
        size = int(np.prod(out, dtype=np.int64))
        if self.limit is not None and size > self.limit:
            return _PER_NODE
        dims, full = _collapse(out, shapes)
        classes = tuple(
            "s" if int(np.prod(s, dtype=np.int64)) == 1 else "c" if all(f) else "b" + "".join("01"[v] for v in f)
            for s, f in zip(shapes, full))
        args = (self.program, self.dtype.name, emit.in_kinds([d.name for d in self.in_dtypes]), classes, len(dims))
        wide = size >= 2 * threads.GRAIN and self.nthreads > 1
        return _Plan(emit.kernel(*args, parallel=False), out or (1,), np.asarray(dims or [0], np.int64), size,
                     emit.kernel(*args, parallel=True) if wide else None, scalar=not out)


def per_node(steps: Sequence[tuple[Callable[..., Any], tuple[str, ...], tuple[str, ...]]],
             inputs: Sequence[str], outputs: Sequence[str]) -> Callable[..., tuple[Any, ...]]:
    """The group's nodes run one by one with their own kernels (the reference path)."""
    in_names, out_names = tuple(inputs), tuple(outputs)

    def run(*args: Any) -> tuple[Any, ...]:
        env: dict[str, Any] = dict(zip(in_names, args))
        for fn, ins, outs in steps:
            res = fn(*[env[n] if n else None for n in ins])
            if len(outs) == 1:
                env[outs[0]] = res[0] if isinstance(res, tuple) else res
            else:
                env.update(zip(outs, res))
        return tuple(env[n] for n in out_names)

    return run
