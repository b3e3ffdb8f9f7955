"""A backend-neutral elementwise program: straight-line ops over loaded inputs.

A :class:`Program` is what a fused group of elementwise nodes computes for one output
element: ``n_inputs`` loads, instructions over them (ops of :mod:`.ops`), and the temps it
stores. Backends turn it into code (ep-cuda: CUDA C; ep-cpu: a numba loop) and both test it
against :func:`evaluate_numpy`.

Broadcasting classes, decided per input at run time against the output shape (one compiled
variant per program, dtypes, classes and rank): ``c`` same shape as the output and
C-contiguous (read at the flat index), ``s`` one element (read at 0), ``b`` anything else
(read through per-dimension element strides, zero on broadcast dimensions).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .ops import OPS, VARIADIC

#: an operand: ("in", k) an input, ("t", j) an instruction's result, ("lit", x) a constant
Ref = tuple[str, Any]


@dataclass(frozen=True)
class Instr:
    """One op applied to operands; ``attrs`` sorted (name, value) pairs, hashable."""

    op: str
    args: tuple[Ref, ...]
    attrs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Program:
    """Straight-line program: ``n_inputs`` loads, instructions, the temps that are outputs."""

    n_inputs: int
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]

    @property
    def key(self) -> str:
        """A stable digest: the cache key of compiled variants, the same in every process."""
        return hashlib.sha1(repr((self.n_inputs, self.instrs, self.outputs)).encode()).hexdigest()[:12]

    def describe(self) -> str:
        return "+".join(i.op for i in self.instrs)

    @property
    def transcendentals(self) -> int:
        """How many instructions need a math-library call per element."""
        return sum(1 for i in self.instrs if OPS[i.op].transcendental)


class ProgramBuilder:
    """Appends ops and returns their refs; variadic ops fold into binary ones."""

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs = n_inputs
        self.instrs: list[Instr] = []

    def add(self, op: str, args: Sequence[Ref], attrs: Mapping[str, Any] | None = None) -> Ref:
        if op in VARIADIC and (op not in OPS or len(args) != 2):
            base = VARIADIC[op]
            acc = args[0]
            if len(args) == 1:
                acc = self.add("Identity", [acc])
            for other in args[1:]:
                acc = self.add(base, [acc, other])
            if op == "Mean":
                acc = self.add("Div", [acc, ("lit", float(len(args)))])
            return acc
        arity = OPS[op].arity
        if len(args) != arity:
            raise ValueError(f"{op} takes {arity} inputs, got {len(args)}")
        self.instrs.append(Instr(op, tuple(args), tuple(sorted((attrs or {}).items()))))
        return ("t", len(self.instrs) - 1)

    def build(self, outputs: Sequence[Ref]) -> Program:
        outs = []
        for ref in outputs:
            if ref[0] != "t":
                ref = self.add("Identity", [ref])
            outs.append(ref[1])
        return Program(self.n_inputs, tuple(self.instrs), tuple(outs))


def single_op_program(op: str, n_inputs: int, attrs: Mapping[str, Any] | None = None) -> Program:
    """The program of one op over its inputs in order."""
    b = ProgramBuilder(n_inputs)
    return b.build([b.add(op, [("in", k) for k in range(n_inputs)], attrs)])


def evaluate_numpy(program: Program, inputs: Sequence[np.ndarray], out_dtypes: Sequence[str],
                   compute: str = "float32") -> list[np.ndarray]:
    """Run the program with numpy, every value in the ``compute`` dtype (the emitters' model:
    ep-cuda computes in float32 whatever the storage, ep-cpu in the inputs' float dtype)."""
    ct = np.dtype(compute)
    vals = [np.asarray(x).astype(ct) for x in inputs]
    temps: list[np.ndarray] = []

    def ref(r: Ref) -> Any:
        kind, val = r
        return vals[val] if kind == "in" else temps[val] if kind == "t" else ct.type(val)

    with np.errstate(all="ignore"):
        for ins in program.instrs:
            fn = OPS[ins.op].numpy
            temps.append(np.asarray(fn(*[ref(a) for a in ins.args], dict(ins.attrs)), dtype=ct))
    shape = np.broadcast_shapes(*[v.shape for v in vals]) if vals else ()
    outs = []
    for t, dt in zip(program.outputs, out_dtypes):
        value = np.broadcast_to(temps[t], shape)
        outs.append((value != 0) if dt == "bool" else value.astype(dt))
    return outs


def classify(
    shape: tuple[int, ...], arrays_shapes_strides: Sequence[tuple[tuple[int, ...], tuple[int, ...], bool]]
) -> str:
    """Input classes (``c``/``s``/``b``, see the module docstring) for an output ``shape``."""
    out = []
    for in_shape, _strides, contiguous in arrays_shapes_strides:
        size = int(np.prod(in_shape, dtype=np.int64))
        if size == 1:
            out.append("s")
        elif tuple(in_shape) == tuple(shape) and contiguous:
            out.append("c")
        else:
            out.append("b")
    return "".join(out)
