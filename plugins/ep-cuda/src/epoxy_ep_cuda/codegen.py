"""Fused elementwise kernels: a :class:`~epoxy.kit.elementwise.Program` -> CUDA C source.

The program itself (ops, builder, broadcasting classes, numpy twin) is the backend-neutral
description in :mod:`epoxy.kit.elementwise`, shared with ep-cpu's numba emitter; this module
keeps what is CUDA's: the spelling of each op, storage types, the PTX prelude, the kernel.
Every value is computed in ``float`` registers whatever the storage dtype: float16 is
loaded/stored with ``cvt`` PTX instructions, so the generated source needs no headers
(``cuda_fp16.h`` is not available to NVRTC everywhere) and compiles with NVRTC on a
machine without a GPU (the tests do exactly that). A compiled variant is cached per
(program, dtypes, classes, rank).
"""

from __future__ import annotations

import hashlib
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from epoxy.kit.elementwise import (
    OPS,
    VARIADIC,
    Instr,
    Program,
    ProgramBuilder,
    classify,
    evaluate_numpy,
    single_op_program,
)

__all__ = ["CUDA", "EW_OPS", "LOADABLE", "PRELUDE", "STORABLE", "VARIADIC", "Instr", "Program", "ProgramBuilder",
           "classify", "cuda_source", "evaluate_numpy", "kernel_name", "single_op_program"]

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


def _gelu_cuda(a: str, attrs: Mapping[str, Any]) -> str:
    if attrs.get("approximate", "none") == "tanh":
        return f"(0.5f*({a})*(1.f+tanhf(0.7978845608028654f*(({a})+0.044715f*({a})*({a})*({a})))))"
    return f"(0.5f*({a})*(1.f+erff(({a})*0.7071067811865476f)))"


#: op -> CUDA expression template over argument expressions (a, b, c) and the attributes;
#: what each op is (arity, attributes, numpy reference) lives in :mod:`epoxy.kit.elementwise`
CUDA: dict[str, Any] = {
    "Identity": lambda a, t: a,
    "Neg": lambda a, t: f"(-{a})",
    "Abs": lambda a, t: f"fabsf({a})",
    "Relu": lambda a, t: f"(({a}) < 0.f ? 0.f : ({a}))",
    "Sigmoid": lambda a, t: f"(1.f/(1.f+expf(-({a}))))",
    "Tanh": lambda a, t: f"tanhf({a})",
    "Exp": lambda a, t: f"expf({a})",
    "Log": lambda a, t: f"logf({a})",
    "Sqrt": lambda a, t: f"sqrtf({a})",
    "Reciprocal": lambda a, t: f"(1.f/({a}))",
    "Erf": lambda a, t: f"erff({a})",
    "Floor": lambda a, t: f"floorf({a})",
    "Ceil": lambda a, t: f"ceilf({a})",
    "Round": lambda a, t: f"rintf({a})",
    "Sign": lambda a, t: f"(float)((({a}) > 0.f) - (({a}) < 0.f))",
    "Sin": lambda a, t: f"sinf({a})",
    "Cos": lambda a, t: f"cosf({a})",
    "Softplus": lambda a, t: f"log1pf(expf({a}))",
    "Softsign": lambda a, t: f"(({a})/(1.f+fabsf({a})))",
    "LeakyRelu": lambda a, t: f"(({a}) < 0.f ? ({a})*{_f(t, 'alpha')} : ({a}))",
    "Elu": lambda a, t: f"(({a}) < 0.f ? {_f(t, 'alpha')}*(expf({a})-1.f) : ({a}))",
    "Selu": lambda a, t: f"(({a}) <= 0.f ? {_f(t, 'gamma')}*{_f(t, 'alpha')}*(expf({a})-1.f) : {_f(t, 'gamma')}*({a}))",
    "HardSigmoid": lambda a, t: f"fminf(fmaxf(({a})*{_f(t, 'alpha')}+{_f(t, 'beta')}, 0.f), 1.f)",
    "HardSwish": lambda a, t: f"(({a})*fminf(fmaxf(({a})*{_lit(1 / 6)}+0.5f, 0.f), 1.f))",
    "Gelu": _gelu_cuda,
    "Clip": lambda a, t: f"fminf(fmaxf({a}, {_f(t, 'min')}), {_f(t, 'max')})",
    "Not": lambda a, t: f"(({a}) == 0.f ? 1.f : 0.f)",
    "Add": lambda a, b, t: f"(({a}) + ({b}))",
    "Sub": lambda a, b, t: f"(({a}) - ({b}))",
    "Mul": lambda a, b, t: f"(({a}) * ({b}))",
    "Div": lambda a, b, t: f"(({a}) / ({b}))",
    "Pow": lambda a, b, t: f"powf({a}, {b})",
    "Max": lambda a, b, t: f"fmaxf({a}, {b})",
    "Min": lambda a, b, t: f"fminf({a}, {b})",
    "PRelu": lambda a, b, t: f"(({a}) < 0.f ? ({a})*({b}) : ({a}))",
    "Equal": lambda a, b, t: f"(({a}) == ({b}) ? 1.f : 0.f)",
    "Less": lambda a, b, t: f"(({a}) < ({b}) ? 1.f : 0.f)",
    "Greater": lambda a, b, t: f"(({a}) > ({b}) ? 1.f : 0.f)",
    "LessOrEqual": lambda a, b, t: f"(({a}) <= ({b}) ? 1.f : 0.f)",
    "GreaterOrEqual": lambda a, b, t: f"(({a}) >= ({b}) ? 1.f : 0.f)",
    "And": lambda a, b, t: f"((({a}) != 0.f && ({b}) != 0.f) ? 1.f : 0.f)",
    "Or": lambda a, b, t: f"((({a}) != 0.f || ({b}) != 0.f) ? 1.f : 0.f)",
    "Xor": lambda a, b, t: f"((({a}) != 0.f) != (({b}) != 0.f) ? 1.f : 0.f)",
    "Where": lambda c, a, b, t: f"(({c}) != 0.f ? ({a}) : ({b}))",
    "MulAdd": lambda a, b, c, t: f"fmaf({a}, {b}, {c})",
}
#: op -> (arity, CUDA template, numpy reference): the ops this backend generates code for
EW_OPS: dict[str, tuple[int, Any, Any]] = {name: (OPS[name].arity, CUDA[name], OPS[name].numpy) for name in CUDA}
if set(EW_OPS) != set(OPS):  # a kit op without a CUDA spelling would be fused and fail to compile
    raise ImportError(f"ep-cuda codegen: no CUDA template for {sorted(set(OPS) - set(EW_OPS))}")


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
