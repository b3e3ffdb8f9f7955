"""Fused elementwise kernels: a small program of ops -> CUDA C source (and a numpy twin).

A :class:`Program` is built from one elementwise node or a chain of them (a fused group).
Every value is computed in ``float`` registers whatever the storage dtype: float16 is
loaded/stored with ``cvt`` PTX instructions, so the generated source needs no headers
(``cuda_fp16.h`` is not available to NVRTC everywhere) and compiles with NVRTC on a
machine without a GPU (the tests do exactly that).

Broadcasting: at run time every input is classified as ``c`` (same shape as the output and
C-contiguous: read at the flat index), ``s`` (one element: read at 0) or ``b`` (anything
else: read through per-dimension element strides, zero on broadcast dims). A compiled
variant is cached per (program, dtypes, classes, rank).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# storage dtype name -> (C type, load expression format, store expression format)
_STORAGE = {
    "float32": ("float", "{p}", "{v}"),
    "float16": ("unsigned short", "ep_h2f({p})", "ep_f2h({v})"),
    "bool": ("unsigned char", "((float){p})", "((unsigned char)(({v}) != 0.f))"),
    "int64": ("long long", "((float){p})", None),
    "int32": ("int", "((float){p})", None),
}
LOADABLE = frozenset(_STORAGE)
STORABLE = frozenset(k for k, v in _STORAGE.items() if v[2] is not None)

PRELUDE = r"""
__device__ __forceinline__ float ep_h2f(unsigned short h) { float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short ep_f2h(float f) { unsigned short h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(f)); return h; }
"""


def _lit(x: float) -> str:
    """An exact float32 literal."""
    x = float(np.float32(x))
    if math.isnan(x):
        return "__int_as_float(0x7fc00000)"
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return f"__int_as_float(0x{bits:08x})"


def _f(attrs: Mapping[str, Any], name: str) -> str:
    return _lit(attrs[name])


# op -> (arity or None for variadic-folded binary, CUDA template, numpy function)
# templates receive argument expressions a, b, c and the attribute mapping
def _gelu_cuda(a: str, attrs: Mapping[str, Any]) -> str:
    if attrs.get("approximate", "none") == "tanh":
        return f"(0.5f*({a})*(1.f+tanhf(0.7978845608028654f*(({a})+0.044715f*({a})*({a})*({a})))))"
    return f"(0.5f*({a})*(1.f+erff(({a})*0.7071067811865476f)))"


def _np_erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x.astype(np.float64)).astype(np.float32)


def _np_gelu(a: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    if attrs.get("approximate", "none") == "tanh":
        return (
            0.5 * a * (1 + np.tanh(np.float32(0.7978845608028654) * (a + np.float32(0.044715) * a * a * a)))
        ).astype(np.float32)
    return (0.5 * a * (1 + _np_erf(a * np.float32(0.7071067811865476)))).astype(np.float32)


def _hsig(a, alpha, beta, xp=np):
    return xp.clip(a * np.float32(alpha) + np.float32(beta), 0, 1).astype(np.float32)


_ONE = np.float32(1)
EW_OPS: dict[str, tuple[int, Any, Any]] = {
    "Identity": (1, lambda a, t: a, lambda a, t: a),
    "Neg": (1, lambda a, t: f"(-{a})", lambda a, t: -a),
    "Abs": (1, lambda a, t: f"fabsf({a})", lambda a, t: np.abs(a)),
    "Relu": (1, lambda a, t: f"(({a}) < 0.f ? 0.f : ({a}))", lambda a, t: np.where(a < 0, np.float32(0), a)),
    "Sigmoid": (1, lambda a, t: f"(1.f/(1.f+expf(-({a}))))", lambda a, t: _ONE / (_ONE + np.exp(-a))),
    "Tanh": (1, lambda a, t: f"tanhf({a})", lambda a, t: np.tanh(a)),
    "Exp": (1, lambda a, t: f"expf({a})", lambda a, t: np.exp(a)),
    "Log": (1, lambda a, t: f"logf({a})", lambda a, t: np.log(a)),
    "Sqrt": (1, lambda a, t: f"sqrtf({a})", lambda a, t: np.sqrt(a)),
    "Reciprocal": (1, lambda a, t: f"(1.f/({a}))", lambda a, t: _ONE / a),
    "Erf": (1, lambda a, t: f"erff({a})", lambda a, t: _np_erf(a)),
    "Floor": (1, lambda a, t: f"floorf({a})", lambda a, t: np.floor(a)),
    "Ceil": (1, lambda a, t: f"ceilf({a})", lambda a, t: np.ceil(a)),
    "Round": (1, lambda a, t: f"rintf({a})", lambda a, t: np.rint(a)),
    "Sign": (1, lambda a, t: f"(float)((({a}) > 0.f) - (({a}) < 0.f))", lambda a, t: np.sign(a)),
    "Sin": (1, lambda a, t: f"sinf({a})", lambda a, t: np.sin(a)),
    "Cos": (1, lambda a, t: f"cosf({a})", lambda a, t: np.cos(a)),
    "Softplus": (1, lambda a, t: f"log1pf(expf({a}))", lambda a, t: np.log1p(np.exp(a))),
    "Softsign": (1, lambda a, t: f"(({a})/(1.f+fabsf({a})))", lambda a, t: a / (_ONE + np.abs(a))),
    "LeakyRelu": (
        1,
        lambda a, t: f"(({a}) < 0.f ? ({a})*{_f(t, 'alpha')} : ({a}))",
        lambda a, t: np.where(a < 0, a * np.float32(t["alpha"]), a),
    ),
    "Elu": (
        1,
        lambda a, t: f"(({a}) < 0.f ? {_f(t, 'alpha')}*(expf({a})-1.f) : ({a}))",
        lambda a, t: np.where(a < 0, np.float32(t["alpha"]) * (np.exp(a) - _ONE), a),
    ),
    "Selu": (
        1,
        lambda a, t: f"(({a}) <= 0.f ? {_f(t, 'gamma')}*{_f(t, 'alpha')}*(expf({a})-1.f) : {_f(t, 'gamma')}*({a}))",
        lambda a, t: np.where(
            a <= 0, np.float32(t["gamma"]) * np.float32(t["alpha"]) * (np.exp(a) - _ONE), np.float32(t["gamma"]) * a
        ),
    ),
    "HardSigmoid": (
        1,
        lambda a, t: f"fminf(fmaxf(({a})*{_f(t, 'alpha')}+{_f(t, 'beta')}, 0.f), 1.f)",
        lambda a, t: _hsig(a, t["alpha"], t["beta"]),
    ),
    "HardSwish": (
        1,
        lambda a, t: f"(({a})*fminf(fmaxf(({a})*{_lit(1 / 6)}+0.5f, 0.f), 1.f))",
        lambda a, t: a * _hsig(a, 1 / 6, 0.5),
    ),
    "Gelu": (1, _gelu_cuda, _np_gelu),
    "Clip": (
        1,
        lambda a, t: f"fminf(fmaxf({a}, {_f(t, 'min')}), {_f(t, 'max')})",
        lambda a, t: np.minimum(np.maximum(a, np.float32(t["min"])), np.float32(t["max"])),
    ),
    "Not": (1, lambda a, t: f"(({a}) == 0.f ? 1.f : 0.f)", lambda a, t: (a == 0).astype(np.float32)),
    "Add": (2, lambda a, b, t: f"(({a}) + ({b}))", lambda a, b, t: a + b),
    "Sub": (2, lambda a, b, t: f"(({a}) - ({b}))", lambda a, b, t: a - b),
    "Mul": (2, lambda a, b, t: f"(({a}) * ({b}))", lambda a, b, t: a * b),
    "Div": (2, lambda a, b, t: f"(({a}) / ({b}))", lambda a, b, t: a / b),
    "Pow": (2, lambda a, b, t: f"powf({a}, {b})", lambda a, b, t: np.power(a, b)),
    "Max": (2, lambda a, b, t: f"fmaxf({a}, {b})", lambda a, b, t: np.maximum(a, b)),
    "Min": (2, lambda a, b, t: f"fminf({a}, {b})", lambda a, b, t: np.minimum(a, b)),
    "PRelu": (2, lambda a, b, t: f"(({a}) < 0.f ? ({a})*({b}) : ({a}))", lambda a, b, t: np.where(a < 0, a * b, a)),
    "Equal": (2, lambda a, b, t: f"(({a}) == ({b}) ? 1.f : 0.f)", lambda a, b, t: (a == b).astype(np.float32)),
    "Less": (2, lambda a, b, t: f"(({a}) < ({b}) ? 1.f : 0.f)", lambda a, b, t: (a < b).astype(np.float32)),
    "Greater": (2, lambda a, b, t: f"(({a}) > ({b}) ? 1.f : 0.f)", lambda a, b, t: (a > b).astype(np.float32)),
    "LessOrEqual": (2, lambda a, b, t: f"(({a}) <= ({b}) ? 1.f : 0.f)", lambda a, b, t: (a <= b).astype(np.float32)),
    "GreaterOrEqual": (2, lambda a, b, t: f"(({a}) >= ({b}) ? 1.f : 0.f)", lambda a, b, t: (a >= b).astype(np.float32)),
    "And": (
        2,
        lambda a, b, t: f"((({a}) != 0.f && ({b}) != 0.f) ? 1.f : 0.f)",
        lambda a, b, t: ((a != 0) & (b != 0)).astype(np.float32),
    ),
    "Or": (
        2,
        lambda a, b, t: f"((({a}) != 0.f || ({b}) != 0.f) ? 1.f : 0.f)",
        lambda a, b, t: ((a != 0) | (b != 0)).astype(np.float32),
    ),
    "Xor": (
        2,
        lambda a, b, t: f"((({a}) != 0.f) != (({b}) != 0.f) ? 1.f : 0.f)",
        lambda a, b, t: ((a != 0) ^ (b != 0)).astype(np.float32),
    ),
    "Where": (3, lambda c, a, b, t: f"(({c}) != 0.f ? ({a}) : ({b}))", lambda c, a, b, t: np.where(c != 0, a, b)),
    "MulAdd": (3, lambda a, b, c, t: f"fmaf({a}, {b}, {c})", lambda a, b, c, t: a * b + c),
}
#: ops with any number of inputs, folded left into binary instructions
VARIADIC = {"Sum": "Add", "Max": "Max", "Min": "Min", "Mean": "Add"}


@dataclass(frozen=True)
class Instr:
    op: str
    args: tuple[tuple[str, Any], ...]  # ("in", k) | ("t", j) | ("lit", float)
    attrs: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Program:
    """Straight-line float program: ``n_inputs`` loads, instructions, output temps."""

    n_inputs: int
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]

    @property
    def key(self) -> str:
        return hashlib.sha1(repr((self.n_inputs, self.instrs, self.outputs)).encode()).hexdigest()[:12]

    def describe(self) -> str:
        return "+".join(i.op for i in self.instrs)


class ProgramBuilder:
    """Appends ops; refs are ("in", k), ("t", j) or ("lit", value)."""

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs = n_inputs
        self.instrs: list[Instr] = []

    def add(self, op: str, args: Sequence[tuple[str, Any]], attrs: Mapping[str, Any] | None = None) -> tuple[str, int]:
        if op in VARIADIC and op not in EW_OPS or (op in VARIADIC and len(args) != 2):
            base = VARIADIC[op]
            acc = args[0]
            if len(args) == 1:
                acc = self.add("Identity", [acc])
            for other in args[1:]:
                acc = self.add(base, [acc, other])
            if op == "Mean":
                acc = self.add("Div", [acc, ("lit", float(len(args)))])
            return acc
        arity = EW_OPS[op][0]
        if len(args) != arity:
            raise ValueError(f"{op} takes {arity} inputs, got {len(args)}")
        self.instrs.append(Instr(op, tuple(args), tuple(sorted((attrs or {}).items()))))
        return ("t", len(self.instrs) - 1)

    def build(self, outputs: Sequence[tuple[str, Any]]) -> Program:
        outs = []
        for ref in outputs:
            if ref[0] != "t":
                ref = self.add("Identity", [ref])
            outs.append(ref[1])
        return Program(self.n_inputs, tuple(self.instrs), tuple(outs))


def single_op_program(op: str, n_inputs: int, attrs: Mapping[str, Any] | None = None) -> Program:
    b = ProgramBuilder(n_inputs)
    return b.build([b.add(op, [("in", k) for k in range(n_inputs)], attrs)])


# ------------------------------------------------------------------------------- CUDA source
def kernel_name(program: Program, in_dtypes: Sequence[str], out_dtypes: Sequence[str], classes: str, ndim: int) -> str:
    sig = hashlib.sha1(repr((program.key, tuple(in_dtypes), tuple(out_dtypes), classes, ndim)).encode()).hexdigest()[
        :10
    ]
    return f"epoxy_ew_{sig}"


def cuda_source(
    program: Program, in_dtypes: Sequence[str], out_dtypes: Sequence[str], classes: str, ndim: int
) -> tuple[str, str]:
    """(kernel name, CUDA C source) for one variant.

    Parameters, in order: input pointers, output pointers, ``long long n``; then, when any
    input is class ``b``: the output dims ``D0..D{ndim-1}`` and, per ``b`` input k, its
    element strides ``S{k}_0..``. All extra parameters are ``long long``.
    """
    if len(in_dtypes) != program.n_inputs or len(classes) != program.n_inputs:
        raise ValueError("one dtype and one class per program input")
    name = kernel_name(program, in_dtypes, out_dtypes, classes, ndim)
    params = []
    for k, dt in enumerate(in_dtypes):
        params.append(f"const {_STORAGE[dt][0]}* __restrict__ in{k}")
    for k, dt in enumerate(out_dtypes):
        if dt not in STORABLE:
            raise ValueError(f"cannot store {dt} from a float program")
        params.append(f"{_STORAGE[dt][0]}* __restrict__ out{k}")
    params.append("long long n")
    strided = [k for k, c in enumerate(classes) if c == "b"]
    if strided:
        params += [f"long long D{d}" for d in range(ndim)]
        for k in strided:
            params += [f"long long S{k}_{d}" for d in range(ndim)]
    body = []
    if strided:
        body.append("long long r = i;")
        for d in reversed(range(ndim)):
            body.append(f"long long c{d} = r % D{d}; r /= D{d};")
    for k, (dt, cls) in enumerate(zip(in_dtypes, classes)):
        if cls == "c":
            ptr = f"in{k}[i]"
        elif cls == "s":
            ptr = f"in{k}[0]"
        else:
            offset = " + ".join(f"c{d}*S{k}_{d}" for d in range(ndim)) or "0"
            ptr = f"in{k}[{offset}]"
        body.append(f"float v{k} = {_STORAGE[dt][1].format(p=ptr)};")

    def ref(r: tuple[str, Any]) -> str:
        kind, val = r
        return f"v{val}" if kind == "in" else f"t{val}" if kind == "t" else _lit(val)

    for j, ins in enumerate(program.instrs):
        _, cuda, _np = EW_OPS[ins.op]
        expr = cuda(*[ref(a) for a in ins.args], dict(ins.attrs))
        body.append(f"float t{j} = {expr};")
    for k, (t, dt) in enumerate(zip(program.outputs, out_dtypes)):
        body.append(f"out{k}[i] = {_STORAGE[dt][2].format(v=f't{t}')};")
    inner = "\n        ".join(body)
    src = (
        PRELUDE
        + f'\nextern "C" __global__ void {name}({", ".join(params)}) {{\n'
        + "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;"
        + " i += (long long)blockDim.x * gridDim.x) {\n"
        + f"        {inner}\n    }}\n}}\n"
    )
    return name, src


# ------------------------------------------------------------------------------- numpy twin
def evaluate_numpy(program: Program, inputs: Sequence[np.ndarray], out_dtypes: Sequence[str]) -> list[np.ndarray]:
    """Run the program with numpy in float32, exactly as the kernel would (for CPU tests)."""
    vals = [np.asarray(x).astype(np.float32) for x in inputs]
    temps: list[np.ndarray] = []

    def ref(r: tuple[str, Any]) -> Any:
        kind, val = r
        return vals[val] if kind == "in" else temps[val] if kind == "t" else np.float32(val)

    with np.errstate(all="ignore"):
        for ins in program.instrs:
            fn = EW_OPS[ins.op][2]
            temps.append(np.asarray(fn(*[ref(a) for a in ins.args], dict(ins.attrs)), dtype=np.float32))
    shape = np.broadcast_shapes(*[v.shape for v in vals]) if vals else ()
    outs = []
    for t, dt in zip(program.outputs, out_dtypes):
        value = np.broadcast_to(temps[t], shape)
        outs.append((value != 0) if dt == "bool" else value.astype(dt))
    return outs


def classify(
    shape: tuple[int, ...], arrays_shapes_strides: Sequence[tuple[tuple[int, ...], tuple[int, ...], bool]]
) -> str:
    """Input classes for an output ``shape``: see the module docstring."""
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
