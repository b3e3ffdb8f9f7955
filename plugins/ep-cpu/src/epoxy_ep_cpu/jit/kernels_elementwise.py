"""Fused elementwise programs (:mod:`epoxy.kit.elementwise`) as generated numba loops.

One function per (program, dtype, input kinds, broadcasting classes, rank, serial or
parallel): Python source with one loop over the flat output, every value computed in the
inputs' float dtype (float32 stays float32: literals are ``T(x)``), IEEE semantics (no
fastmath; ``error_model="numpy"``: x/0 is inf, not an exception), NaN propagated the way
numpy's ``maximum``/``minimum``/``clip`` do.

Compile cost: numba's ``cache=True`` needs a function defined in a real source file, which
an ``exec``-generated one is not. So the source is written to
``<numba cache dir>/epoxy_elementwise/ew_<digest of the source>.py`` (written to a temporary
name and renamed, so two processes writing it at once both leave a whole file) and imported
from there: numba then caches the machine code next to its other kernels and a warm process
loads it in milliseconds instead of compiling (~0.3-1 s). The digest covers the whole source,
so an emitter change can never load a stale kernel. When that directory is not writable the
function is compiled without a cache. Nothing is compiled before a group first runs, and the
parallel twin only when a group first runs past the threads' grain.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from epoxy.kit.elementwise import OPS, Program, Ref

from .config import default_cache_dir

Template = Callable[..., str]


def _nan_max(a: str, b: str) -> str:
    """numpy's maximum: NaN if either operand is NaN."""
    return f"({a} if ({a} >= {b} or {a} != {a}) else {b})"


def _nan_min(a: str, b: str) -> str:
    return f"({a} if ({a} <= {b} or {a} != {a}) else {b})"


def _clip01(x: str) -> str:
    return _nan_min(_nan_max(x, "T(0.0)"), "T(1.0)")


def _lit(x: float) -> str:
    """A literal of the compute dtype (``T`` is bound in the generated module)."""
    x = float(x)
    if math.isnan(x):
        return "T(math.nan)"
    if math.isinf(x):
        return "T(math.inf)" if x > 0 else "T(-math.inf)"
    return f"T({x!r})"


def _gelu(a: str, t: Mapping[str, Any]) -> str:
    if t.get("approximate", "none") == "tanh":
        inner = f"({_lit(0.7978845608028654)} * ({a} + {_lit(0.044715)} * {a} * {a} * {a}))"
        return f"(T(0.5) * {a} * (T(1.0) + math.tanh{inner}))"
    return f"(T(0.5) * {a} * (T(1.0) + math.erf({a} * {_lit(0.7071067811865476)})))"


def _cmp(op: str) -> Template:
    return lambda a, b, t: f"(T(1.0) if {a} {op} {b} else T(0.0))"


#: op -> Python/numba expression over operand expressions and the attributes; the kit's
#: :data:`~epoxy.kit.elementwise.OPS` says what each op is, this says how numba spells it
NUMBA: dict[str, Template] = {
    "Identity": lambda a, t: a,
    "Neg": lambda a, t: f"(-{a})",
    "Abs": lambda a, t: f"abs({a})",
    "Relu": lambda a, t: f"(T(0.0) if {a} < T(0.0) else {a})",
    "Sigmoid": lambda a, t: f"(T(1.0) / (T(1.0) + math.exp(-{a})))",
    "Tanh": lambda a, t: f"math.tanh({a})",
    "Exp": lambda a, t: f"math.exp({a})",
    "Log": lambda a, t: f"np.log({a})",
    "Sqrt": lambda a, t: f"np.sqrt({a})",
    "Reciprocal": lambda a, t: f"(T(1.0) / {a})",
    "Erf": lambda a, t: f"math.erf({a})",
    "Floor": lambda a, t: f"np.floor({a})",
    "Ceil": lambda a, t: f"np.ceil({a})",
    "Round": lambda a, t: f"np.rint({a})",
    "Sign": lambda a, t: f"np.sign({a})",
    "Sin": lambda a, t: f"np.sin({a})",
    "Cos": lambda a, t: f"np.cos({a})",
    "Softplus": lambda a, t: f"np.log1p(math.exp({a}))",
    "Softsign": lambda a, t: f"({a} / (T(1.0) + abs({a})))",
    "LeakyRelu": lambda a, t: f"({a} * {_lit(t['alpha'])} if {a} < T(0.0) else {a})",
    "Elu": lambda a, t: f"({_lit(t['alpha'])} * (math.exp({a}) - T(1.0)) if {a} < T(0.0) else {a})",
    "Selu": lambda a, t: (f"({_lit(t['gamma'])} * {_lit(t['alpha'])} * (math.exp({a}) - T(1.0)) if {a} <= T(0.0) "
                          f"else {_lit(t['gamma'])} * {a})"),
    "HardSigmoid": lambda a, t: _clip01(f"({a} * {_lit(t['alpha'])} + {_lit(t['beta'])})"),
    "HardSwish": lambda a, t: f"({a} * {_clip01(f'({a} * {_lit(1 / 6)} + T(0.5))')})",
    "Gelu": _gelu,
    "Clip": lambda a, t: _nan_min(_nan_max(a, _lit(t["min"])), _lit(t["max"])),
    "Not": lambda a, t: f"(T(1.0) if {a} == T(0.0) else T(0.0))",
    "Add": lambda a, b, t: f"({a} + {b})",
    "Sub": lambda a, b, t: f"({a} - {b})",
    "Mul": lambda a, b, t: f"({a} * {b})",
    "Div": lambda a, b, t: f"({a} / {b})",
    "Pow": lambda a, b, t: f"({a} ** {b})",
    "Max": lambda a, b, t: _nan_max(a, b),
    "Min": lambda a, b, t: _nan_min(a, b),
    "PRelu": lambda a, b, t: f"({a} * {b} if {a} < T(0.0) else {a})",
    "Equal": _cmp("=="),
    "Less": _cmp("<"),
    "Greater": _cmp(">"),
    "LessOrEqual": _cmp("<="),
    "GreaterOrEqual": _cmp(">="),
    "And": lambda a, b, t: f"(T(1.0) if ({a} != T(0.0) and {b} != T(0.0)) else T(0.0))",
    "Or": lambda a, b, t: f"(T(1.0) if ({a} != T(0.0) or {b} != T(0.0)) else T(0.0))",
    "Xor": lambda a, b, t: f"(T(1.0) if (({a} != T(0.0)) != ({b} != T(0.0))) else T(0.0))",
    "Where": lambda c, a, b, t: f"({a} if {c} != T(0.0) else {b})",
    "MulAdd": lambda a, b, c, t: f"({a} * {b} + {c})",
}
if set(NUMBA) != set(OPS):  # a kit op without a numba spelling would be fused and fail to compile
    raise ImportError(f"ep-cpu elementwise emitter: no numba template for {sorted(set(OPS) - set(NUMBA))}")

def source(program: Program, dtype: str, kinds: str, classes: Sequence[str], ndim: int, parallel: bool) -> str:
    """Python source of a module defining ``kernel(in0.., shape, meta) -> out0 (or a tuple)``.

    ``kinds`` per input: ``f`` a ``dtype`` array, ``?`` a bool array (a Where condition).
    ``classes`` per input: ``c`` (the output's shape), ``s`` (one element) or ``b`` followed
    by one ``1`` (full) or ``0`` (broadcast) per collapsed output dimension, e.g. ``b01``: a
    bias over the last of two dimensions. The pattern is part of the variant, so a broadcast
    dimension's stride is a literal 0 and the innermost full one a literal 1: the inner loop
    reads contiguously or not at all, and vectorizes. Inputs come in any shape and layout
    (flattened inside: a view when C-contiguous); ``shape`` is the output shape (a tuple);
    ``meta`` (int64) holds the ``ndim`` collapsed output extents. Outputs are allocated
    inside: no Python-side allocation or reshaping per call."""
    if len(kinds) != program.n_inputs or len(classes) != program.n_inputs:
        raise ValueError("one kind and one class per program input")
    for cls in classes:
        if not (cls in ("c", "s") or (cls[:1] == "b" and len(cls) == ndim + 1 and set(cls[1:]) <= {"0", "1"})):
            raise ValueError(f"bad broadcasting class {cls!r} for rank {ndim}")
    strided = [k for k, c in enumerate(classes) if c[0] == "b"]
    params = [f"in{k}" for k in range(program.n_inputs)] + ["shape", "meta"]
    head = [f"x{k} = in{k}.ravel()" for k in range(program.n_inputs)]
    head += [f"out{k} = np.empty(shape, T)" for k in range(len(program.outputs))]
    head += [f"o{k} = out{k}.ravel()" for k in range(len(program.outputs))]
    head.append("n = o0.size")
    offsets: dict[int, str] = {}
    if strided:
        head += [f"D{d} = meta[{d}]" for d in range(ndim)]
        for k in strided:
            full = [flag == "1" for flag in classes[k][1:]]
            terms = []
            for d in range(ndim):
                if full[d]:
                    later = [f"D{e}" for e in range(d + 1, ndim) if full[e]]
                    terms.append(f"c{d} * " + " * ".join(later) if later else f"c{d}")
            offsets[k] = " + ".join(terms) or "0"
    body: list[str] = []
    loop = "prange" if parallel else "range"
    if strided:
        # nested loops over the (collapsed) output dimensions: flat and strided offsets are
        # multiply-adds the compiler hoists, where a flat index split per element would cost
        # one integer division per dimension and element
        loops = [f"for c{d} in {loop if d == 0 else 'range'}(D{d}):" for d in range(ndim)]
        flat = "c0"
        for d in range(1, ndim):
            flat = f"({flat}) * D{d} + c{d}"
        body.append(f"i = {flat}")
    else:
        loops = [f"for i in {loop}(n):"]
    for k, (kind, cls) in enumerate(zip(kinds, classes)):
        index = "i" if cls == "c" else "0" if cls == "s" else offsets[k]
        load = f"x{k}[{index}]"
        body.append(f"v{k} = (T(1.0) if {load} else T(0.0))" if kind == "?" else f"v{k} = {load}")

    def ref(r: Ref) -> str:
        kind, val = r
        return f"v{val}" if kind == "in" else f"t{val}" if kind == "t" else _lit(val)

    for j, ins in enumerate(program.instrs):
        expr = NUMBA[ins.op](*[ref(a) for a in ins.args], dict(ins.attrs))
        # T(...) keeps the declared dtype whatever a libm call returns
        body.append(f"t{j} = T({expr})" if OPS[ins.op].transcendental else f"t{j} = {expr}")
    body += [f"o{k}[i] = t{t}" for k, t in enumerate(program.outputs)]
    outs = ", ".join(f"out{k}" for k in range(len(program.outputs)))
    lines = [
        f'"""epoxy fused elementwise kernel: {program.describe()} ({dtype}, {kinds}, {" ".join(classes)}, '
        f'rank {ndim})."""',
        "import math",
        "import numpy as np",
        "from numba import njit, prange",
        f"T = np.{dtype}",
        "",
        "",
        f"@njit(parallel={parallel}, cache=True, nogil=True, error_model='numpy')",
        f"def kernel({', '.join(params)}):",
        *[f"    {h}" for h in head],
        *[f"    {'    ' * d}{line}" for d, line in enumerate(loops)],
        *[f"    {'    ' * len(loops)}{b}" for b in body],
        f"    return {outs}" + ("," if len(program.outputs) > 1 else ""),
        "",
    ]
    return "\n".join(lines)


_lock = threading.Lock()
_compiled: dict[str, Any] = {}


def _directory() -> Path:
    base = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    return (Path(base) if base else default_cache_dir()) / "epoxy_elementwise"


def _load(src: str, digest: str) -> Any:
    """Import the generated module from its file (cached machine code), or exec it when
    the cache directory cannot be written."""
    name = f"ew_{digest}"
    try:
        folder = _directory()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}.py"
        if not path.exists() or path.read_text() != src:
            tmp = folder / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(src)
            os.replace(tmp, path)
        spec = importlib.util.spec_from_file_location(f"epoxy_ep_cpu_jit_{name}", path)
        if spec is None or spec.loader is None:
            raise OSError(f"cannot import {path}")
        module = importlib.util.module_from_spec(spec)
        # numba's cached code re-imports its module by name when it loads: keep it findable
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module.kernel
    except OSError:
        namespace: dict[str, Any] = {}
        exec(compile(src.replace("cache=True", "cache=False"), f"<epoxy {name}>", "exec"), namespace)  # noqa: S102
        return namespace["kernel"]


def kernel(program: Program, dtype: str, kinds: str, classes: Sequence[str], ndim: int, parallel: bool) -> Any:
    """The numba dispatcher of one variant (compiled on its first call, or loaded from the
    cache); one per process per variant."""
    src = source(program, dtype, kinds, classes, ndim, parallel)
    digest = hashlib.sha1(src.encode()).hexdigest()[:20]
    fn = _compiled.get(digest)
    if fn is None:
        with _lock:
            fn = _compiled.get(digest)
            if fn is None:
                fn = _compiled[digest] = _load(src, digest)
    return fn


def variants_compiled() -> int:
    """How many variants this process has loaded (tests, reports)."""
    return len(_compiled)


def in_kinds(dtypes: Sequence[str]) -> str:
    """``kinds`` for :func:`source` from input dtype names."""
    return "".join("?" if d == "bool" else "f" for d in dtypes)
