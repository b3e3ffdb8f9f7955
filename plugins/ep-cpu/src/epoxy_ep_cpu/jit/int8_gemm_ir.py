"""LLVM IR text of the int8 GEMM (``kernels_int8_gemm`` compiles it with llvmlite).

Why IR text: the kernel's one instruction, ``vpdpbusd`` (64 unsigned by 64 signed bytes, summed
in groups of four into 16 int32 lanes), is an LLVM intrinsic that numba cannot emit.

A register tile is ``TILE_ROWS`` rows x ``VECTORS`` registers of 16 columns: one accumulator per
output element, kept in registers while K is walked four bytes at a time (per step: a load of
B per register, a broadcast of four A bytes per row, one ``vpdpbusd`` per accumulator). B is
packed in column tiles of ``TILE_COLS``, each ``(Kp / 4, width, 4)``, so that four consecutive K
bytes of 16 columns are one register load. Edge tiles (fewer rows, fewer columns) are the same
code with smaller R and V. The driver walks column panels (``nc`` columns, sized by the caller
so a panel of B stays in L2), the row tiles, then the column tiles of the panel.

Each epilogue is one way of storing a tile's accumulators, a registry entry with the extra
parameters it needs: ``int32`` stores the sums; ``requantize`` stores QLinearConv's output
codes, ``clip(rint((float64(int32(sum + column)) + bias) * scale) + zero_point, lo, hi)`` per
element, the numpy path's float64 steps in its order, so the int32 sums never go to memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

#: rows of one register tile, and its registers of 16 int32 columns
TILE_ROWS, VECTORS = 6, 4
#: bytes of K per ``vpdpbusd`` lane (K is padded to this); columns per register (N is padded to it)
K_GROUP, LANES = 4, 16
TILE_COLS = LANES * VECTORS

_VEC = "<16 x i32>"
_DOUBLES = "<16 x double>"
_FLOATS = "<16 x float>"


@dataclass(frozen=True)
class Epilogue:
    """How a tile's accumulators leave the registers.

    ``out_type``: the element type of the output rows (``ldo`` elements apart);
    ``columns``: per-column arrays ``(type, name)``, which the driver offsets to the tile;
    ``scalars``: ``(type, name)`` passed through unchanged; ``store(rows, vectors)``: the IR
    storing ``%sum{r}.{v}`` at ``%out`` (rows ``%ldo`` apart)."""

    out_type: str
    columns: tuple[tuple[str, str], ...]
    scalars: tuple[tuple[str, str], ...]
    store: Callable[[int, int], list[str]]

    def tile_params(self) -> str:
        return ", ".join([f"{t}* %{n}" for t, n in self.columns] + [f"{t} %{n}" for t, n in self.scalars])


def _store_int32(rows: int, vectors: int) -> list[str]:
    out = []
    for r in range(rows):
        out.append(f"  %o.off{r} = mul i64 {r}, %ldo")
        for v in range(vectors):
            out += [f"  %o.at{r}.{v} = add i64 %o.off{r}, {LANES * v}",
                    f"  %o.p{r}.{v} = getelementptr i32, i32* %out, i64 %o.at{r}.{v}",
                    f"  %o.q{r}.{v} = bitcast i32* %o.p{r}.{v} to {_VEC}*",
                    f"  store {_VEC} %sum{r}.{v}, {_VEC}* %o.q{r}.{v}, align 4"]
    return out


def _splat(name: str, scalar: str, vector: str, element: str) -> list[str]:
    return [f"  %{name}.one = insertelement {vector} undef, {element} {scalar}, i32 0",
            f"  %{name} = shufflevector {vector} %{name}.one, {vector} undef, <16 x i32> zeroinitializer"]


def _column_loads(vectors: int, columns: tuple[tuple[str, str, str], ...]) -> list[str]:
    """The tile's per-column terms ``(name, vector type, element type)``, read once for its rows."""
    out = []
    for v in range(vectors):
        for name, vector, element in columns:
            out += [f"  %{name}.p{v} = getelementptr {element}, {element}* %{name}, i64 {LANES * v}",
                    f"  %{name}.q{v} = bitcast {element}* %{name}.p{v} to {vector}*",
                    f"  %{name}.v{v} = load {vector}, {vector}* %{name}.q{v}, align 1"]
    return out


def _requantize_f64(t: str, v: int, code: str) -> list[str]:
    """``%{code}`` (16 codes) from ``%int.{t}``: the numpy path's float64 steps in its order."""
    return [f"  %f.{t} = sitofp {_VEC} %int.{t} to {_DOUBLES}",
            f"  %biased.{t} = fadd {_DOUBLES} %f.{t}, %bias.v{v}",
            f"  %scaled.{t} = fmul {_DOUBLES} %biased.{t}, %scale.v{v}",
            f"  %rounded.{t} = call {_DOUBLES} @llvm.rint.v16f64({_DOUBLES} %scaled.{t})",
            f"  %shifted.{t} = fadd {_DOUBLES} %rounded.{t}, %zp.v",
            f"  %floor.{t} = call {_DOUBLES} @llvm.maxnum.v16f64({_DOUBLES} %shifted.{t}, {_DOUBLES} %lo.v)",
            f"  %clipped.{t} = call {_DOUBLES} @llvm.minnum.v16f64({_DOUBLES} %floor.{t}, {_DOUBLES} %hi.v)",
            f"  %code32.{t} = fptosi {_DOUBLES} %clipped.{t} to {_VEC}",
            f"  %{code} = trunc {_VEC} %code32.{t} to <16 x i8>"]  # the byte of a u8 or s8 code


def _store_code(r: int, v: int, code: str) -> list[str]:
    t = f"{r}.{v}"
    return [f"  %o.at{t} = add i64 %o.off{r}, {LANES * v}",
            f"  %o.p{t} = getelementptr i8, i8* %out, i64 %o.at{t}",
            f"  %o.q{t} = bitcast i8* %o.p{t} to <16 x i8>*",
            f"  store <16 x i8> %{code}, <16 x i8>* %o.q{t}, align 1"]


_F64_SCALARS = ("zp", "%zero_point"), ("lo", "%lo"), ("hi", "%hi")
_F64_COLUMNS = (("column", _VEC, "i32"), ("bias", _DOUBLES, "double"), ("scale", _DOUBLES, "double"))


def _store_requantized(rows: int, vectors: int) -> list[str]:
    out = [line for name, scalar in _F64_SCALARS for line in _splat(f"{name}.v", scalar, _DOUBLES, "double")]
    out += _column_loads(vectors, _F64_COLUMNS)
    for r in range(rows):
        out.append(f"  %o.off{r} = mul i64 {r}, %ldo")
        for v in range(vectors):
            t = f"{r}.{v}"
            out.append(f"  %int.{t} = add {_VEC} %sum{t}, %column.v{v}")  # int32 wraps, as the sums do
            out += _requantize_f64(t, v, f"code.{t}") + _store_code(r, v, f"code.{t}")
    return out


def _store_requantized_f32(rows: int, vectors: int) -> list[str]:
    """:func:`_store_requantized` in float32 where that gives the same codes, per vector of 16:
    the integer within 2**23 (exact in float32, plus a bias the caller checked is too), the
    product ``p`` rounded to float32 with its exact error ``e = fma(x, s, -p)``, and ``rint(p)``
    kept when ``p + e`` lies as far from a half step as ``p`` does (``|e| < 0.5 - |p - rint(p)|``,
    or ``e == 0``): then ``rint(p + e)``, the float64 path's, is ``rint(p)``. A vector with any
    other lane takes the float64 steps. The scales must be float32 values (the caller checks):
    float64 then computes ``x * s`` exactly, i.e. ``p + e``."""
    out = [line for name, scalar in _F64_SCALARS for line in _splat(f"{name}.v", scalar, _DOUBLES, "double")]
    for name, scalar in _F64_SCALARS:
        out += [f"  %{name}.s32 = fptrunc double {scalar} to float"]
        out += _splat(f"{name}.f", f"%{name}.s32", _FLOATS, "float")
    out += _column_loads(vectors, _F64_COLUMNS + (("bias32", _FLOATS, "float"), ("scale32", _FLOATS, "float")))
    for r in range(rows):
        out.append(f"  %o.off{r} = mul i64 {r}, %ldo")
        for v in range(vectors):
            t = f"{r}.{v}"
            out += [f"  %int.{t} = add {_VEC} %sum{t}, %column.v{v}",  # int32 wraps, as the sums do
                    f"  %lift.{t} = add {_VEC} %int.{t}, {_splat_const('i32', 1 << 23)}",
                    f"  %small.{t} = icmp ult {_VEC} %lift.{t}, {_splat_const('i32', 1 << 24)}",
                    f"  %fi.{t} = sitofp {_VEC} %int.{t} to {_FLOATS}",
                    f"  %x.{t} = fadd {_FLOATS} %fi.{t}, %bias32.v{v}",
                    f"  %p.{t} = fmul {_FLOATS} %x.{t}, %scale32.v{v}",
                    f"  %negp.{t} = fneg {_FLOATS} %p.{t}",
                    f"  %e.{t} = call {_FLOATS} @llvm.fma.v16f32({_FLOATS} %x.{t}, {_FLOATS} %scale32.v{v}, "
                    f"{_FLOATS} %negp.{t})",
                    f"  %r.{t} = call {_FLOATS} @llvm.rint.v16f32({_FLOATS} %p.{t})",
                    f"  %d.{t} = fsub {_FLOATS} %p.{t}, %r.{t}",
                    f"  %ad.{t} = call {_FLOATS} @llvm.fabs.v16f32({_FLOATS} %d.{t})",
                    f"  %gap.{t} = fsub {_FLOATS} {_splat_const('float', '5.000000e-01')}, %ad.{t}",
                    f"  %ae.{t} = call {_FLOATS} @llvm.fabs.v16f32({_FLOATS} %e.{t})",
                    f"  %room.{t} = fcmp olt {_FLOATS} %ae.{t}, %gap.{t}",
                    f"  %exact.{t} = fcmp oeq {_FLOATS} %e.{t}, zeroinitializer",
                    f"  %same.{t} = or <16 x i1> %room.{t}, %exact.{t}",
                    f"  %ok.{t} = and <16 x i1> %same.{t}, %small.{t}",
                    f"  %okbits.{t} = bitcast <16 x i1> %ok.{t} to i16",
                    f"  %all.{t} = icmp eq i16 %okbits.{t}, -1",
                    f"  br i1 %all.{t}, label %fast.{t}, label %slow.{t}",
                    f"fast.{t}:",
                    f"  %shifted32.{t} = fadd {_FLOATS} %r.{t}, %zp.f",
                    f"  %floor32.{t} = call {_FLOATS} @llvm.maxnum.v16f32({_FLOATS} %shifted32.{t}, {_FLOATS} %lo.f)",
                    f"  %clipped32.{t} = call {_FLOATS} @llvm.minnum.v16f32({_FLOATS} %floor32.{t}, {_FLOATS} %hi.f)",
                    f"  %codef32.{t} = fptosi {_FLOATS} %clipped32.{t} to {_VEC}",
                    f"  %codef.{t} = trunc {_VEC} %codef32.{t} to <16 x i8>",
                    f"  br label %join.{t}",
                    f"slow.{t}:"]
            out += _requantize_f64(t, v, f"coded.{t}")
            out += [f"  br label %join.{t}", f"join.{t}:",
                    f"  %code.{t} = phi <16 x i8> [%codef.{t}, %fast.{t}], [%coded.{t}, %slow.{t}]"]
            out += _store_code(r, v, f"code.{t}")
    return out


def _splat_const(element: str, value: object) -> str:
    return f"<{', '.join([f'{element} {value}'] * LANES)}>"


EPILOGUES: dict[str, Epilogue] = {
    "int32": Epilogue("i32", (), (), _store_int32),
    "requantize": Epilogue("i8", (("i32", "column"), ("double", "bias"), ("double", "scale")),
                           (("double", "zero_point"), ("double", "lo"), ("double", "hi")), _store_requantized),
    # the same codes, float32 where that gives them (the caller checks the scales and biases)
    "requantize_f32": Epilogue("i8", (("i32", "column"), ("double", "bias"), ("double", "scale"),
                                      ("float", "bias32"), ("float", "scale32")),
                               (("double", "zero_point"), ("double", "lo"), ("double", "hi")),
                               _store_requantized_f32),
}

_DECLARATIONS = [f"declare {_VEC} @llvm.x86.avx512.vpdpbusd.512({_VEC}, {_VEC}, {_VEC})",
                 f"declare {_DOUBLES} @llvm.rint.v16f64({_DOUBLES})",
                 f"declare {_DOUBLES} @llvm.maxnum.v16f64({_DOUBLES}, {_DOUBLES})",
                 f"declare {_DOUBLES} @llvm.minnum.v16f64({_DOUBLES}, {_DOUBLES})",
                 f"declare {_FLOATS} @llvm.rint.v16f32({_FLOATS})",
                 f"declare {_FLOATS} @llvm.fabs.v16f32({_FLOATS})",
                 f"declare {_FLOATS} @llvm.fma.v16f32({_FLOATS}, {_FLOATS}, {_FLOATS})",
                 f"declare {_FLOATS} @llvm.maxnum.v16f32({_FLOATS}, {_FLOATS})",
                 f"declare {_FLOATS} @llvm.minnum.v16f32({_FLOATS}, {_FLOATS})"]


def module_ir() -> str:
    """Every epilogue's entry point ``gemm_<epilogue>(A, B, out, lda, ldo, kq, np, nc, first,
    last, <columns>, <scalars>)``: rows [first, last) of ``A (., 4 kq) @ B`` (``np`` a multiple
    of 16, ``nc`` of TILE_COLS); and its grouped twin ``gemm_<epilogue>_groups`` (:func:`_groups_ir`).
    Typed-pointer syntax, which every llvmlite numba supports reads."""
    out = list(_DECLARATIONS)
    for name, epilogue in EPILOGUES.items():
        for rows in range(1, TILE_ROWS + 1):
            for vectors in range(1, VECTORS + 1):
                out += _tile_ir(name, epilogue, rows, vectors)
        out += _driver_ir(name, epilogue)
        out += _groups_ir(name, epilogue)
    return "\n".join(out)


def _groups_ir(name: str, epilogue: Epilogue) -> list[str]:
    """``gemm_<name>_groups(A, B, out, lda, ldo, kq, np, nc, first, last, groups, a_step,
    b_step, o_step, <columns>, <scalars>)``: ``gemm_<name>`` once per group of a grouped
    convolution, group g reading A at ``g * a_step`` bytes, its packed B at ``g * b_step``
    bytes, writing at ``g * o_step`` output elements, its column arrays ``g * np`` elements in
    (each group's padded to ``np``). One call for every group: a call from Python costs more
    than a small group's product."""
    out_t = epilogue.out_type
    params = "".join(f", {t}* %{n}.all" for t, n in epilogue.columns) + "".join(
        f", {t} %{n}" for t, n in epilogue.scalars)
    out = [f"define void @gemm_{name}_groups(i8* %A, i8* %B, {out_t}* %out, i64 %lda, i64 %ldo, i64 %kq, i64 %np, "
           f"i64 %nc, i64 %first, i64 %last, i64 %groups, i64 %a.step, i64 %b.step, i64 %o.step{params}) {{",
           "entry:", "  %none = icmp eq i64 %groups, 0", "  br i1 %none, label %exit, label %group",
           "group:", "  %g = phi i64 [0, %entry], [%g.next, %group]",
           "  %a.at = mul i64 %g, %a.step", "  %a.g = getelementptr i8, i8* %A, i64 %a.at",
           "  %b.at = mul i64 %g, %b.step", "  %b.g = getelementptr i8, i8* %B, i64 %b.at",
           "  %o.at = mul i64 %g, %o.step", f"  %o.g = getelementptr {out_t}, {out_t}* %out, i64 %o.at",
           "  %c.at = mul i64 %g, %np"]
    out += [f"  %{n}.g = getelementptr {t}, {t}* %{n}.all, i64 %c.at" for t, n in epilogue.columns]
    extra = "".join(f", {t}* %{n}.g" for t, n in epilogue.columns) + "".join(
        f", {t} %{n}" for t, n in epilogue.scalars)
    out += [f"  call void @gemm_{name}(i8* %a.g, i8* %b.g, {out_t}* %o.g, i64 %lda, i64 %ldo, i64 %kq, i64 %np, "
            f"i64 %nc, i64 %first, i64 %last{extra})",
            "  %g.next = add i64 %g, 1", "  %g.end = icmp uge i64 %g.next, %groups",
            "  br i1 %g.end, label %exit, label %group", "exit:", "  ret void", "}"]
    return out


def _tile_ir(name: str, epilogue: Epilogue, rows: int, vectors: int) -> list[str]:
    """``<name>_tile_R_V``: the R x 16V block at ``%out`` from R rows of A and one packed column
    tile of width 16V."""
    r_range, v_range = range(rows), range(vectors)
    extra = epilogue.tile_params()
    out = [f"define internal void @{name}_tile_{rows}_{vectors}(i8* noalias nocapture readonly %A, "
           f"i8* noalias nocapture readonly %B, {epilogue.out_type}* noalias nocapture %out, i64 %kq, i64 %lda, "
           f"i64 %ldo{', ' + extra if extra else ''}) alwaysinline {{", "entry:"]
    for r in r_range:
        out += [f"  %a.off{r} = mul i64 {r}, %lda", f"  %a.row{r} = getelementptr i8, i8* %A, i64 %a.off{r}"]
    out += ["  br label %k.loop", "k.loop:", "  %q = phi i64 [0, %entry], [%q.next, %k.loop]"]
    out += [f"  %acc{r}.{v} = phi {_VEC} [zeroinitializer, %entry], [%sum{r}.{v}, %k.loop]"
            for r in r_range for v in v_range]
    out += [f"  %b.step = mul i64 %q, {K_GROUP * LANES * vectors}", f"  %a.step = mul i64 %q, {K_GROUP}"]
    for v in v_range:  # 16 columns x 4 K bytes of the tile, contiguous
        out += [f"  %b.at{v} = add i64 %b.step, {K_GROUP * LANES * v}",
                f"  %b.p{v} = getelementptr i8, i8* %B, i64 %b.at{v}",
                f"  %b.q{v} = bitcast i8* %b.p{v} to {_VEC}*",
                f"  %b{v} = load {_VEC}, {_VEC}* %b.q{v}, align 1"]
    for r in r_range:  # four K bytes of a row, in every lane
        out += [f"  %a.p{r} = getelementptr i8, i8* %a.row{r}, i64 %a.step",
                f"  %a.q{r} = bitcast i8* %a.p{r} to i32*",
                f"  %a.s{r} = load i32, i32* %a.q{r}, align 1"]
        out += _splat(f"a{r}", f"%a.s{r}", _VEC, "i32")
    out += [f"  %sum{r}.{v} = call {_VEC} @llvm.x86.avx512.vpdpbusd.512({_VEC} %acc{r}.{v}, {_VEC} %a{r}, {_VEC} %b{v})"
            for r in r_range for v in v_range]
    out += ["  %q.next = add i64 %q, 1", "  %k.end = icmp uge i64 %q.next, %kq",
            "  br i1 %k.end, label %store, label %k.loop", "store:"]
    return out + epilogue.store(rows, vectors) + ["  ret void", "}"]


def _driver_ir(name: str, epilogue: Epilogue) -> list[str]:
    """``gemm_<name>``: the loops over column panels, row tiles and column tiles; each tile
    calls the ``<name>_tile_R_V`` its size needs (R = rows left up to TILE_ROWS, V = columns
    left / 16 up to VECTORS)."""
    out_t = epilogue.out_type
    params = "".join(f", {t}* %{n}.all" for t, n in epilogue.columns) + "".join(
        f", {t} %{n}" for t, n in epilogue.scalars)
    out = [f"define void @gemm_{name}(i8* noalias nocapture readonly %A, i8* noalias nocapture readonly %B, "
           f"{out_t}* noalias nocapture %out.all, i64 %lda, i64 %ldo, i64 %kq, i64 %np, i64 %nc, i64 %first, "
           f"i64 %last{params}) {{",
           "entry:", f"  %kp = mul i64 %kq, {K_GROUP}", "  %no.rows = icmp uge i64 %first, %last",
           "  br i1 %no.rows, label %exit, label %panels",
           "panels:", "  %p.first = phi i64 [0, %entry], [%p.last, %rows.done]",
           "  %p.next = add i64 %p.first, %nc", "  %p.past = icmp ugt i64 %p.next, %np",
           "  %p.last = select i1 %p.past, i64 %np, i64 %p.next", "  br label %rows",
           "rows:", "  %i = phi i64 [%first, %panels], [%i.next, %cols.done]",
           "  %rows.left = sub i64 %last, %i", f"  %rows.many = icmp ugt i64 %rows.left, {TILE_ROWS}",
           f"  %tile.rows = select i1 %rows.many, i64 {TILE_ROWS}, i64 %rows.left",
           "  %a.off = mul i64 %i, %lda", "  %a.tile = getelementptr i8, i8* %A, i64 %a.off",
           "  %o.row = mul i64 %i, %ldo", "  br label %cols",
           "cols:", "  %j = phi i64 [%p.first, %rows], [%j.next, %tile.done]",
           "  %cols.left = sub i64 %p.last, %j", f"  %cols.many = icmp ugt i64 %cols.left, {TILE_COLS}",
           f"  %tile.cols = select i1 %cols.many, i64 {TILE_COLS}, i64 %cols.left",
           f"  %tile.vectors = udiv i64 %tile.cols, {LANES}",
           "  %b.off = mul i64 %j, %kp", "  %b.tile = getelementptr i8, i8* %B, i64 %b.off",
           "  %o.off = add i64 %o.row, %j", f"  %out.tile = getelementptr {out_t}, {out_t}* %out.all, i64 %o.off"]
    out += [f"  %{n} = getelementptr {t}, {t}* %{n}.all, i64 %j" for t, n in epilogue.columns]
    out += ["  %rows.index = sub i64 %tile.rows, 1", f"  %rows.base = mul i64 %rows.index, {VECTORS}",
            "  %vectors.index = sub i64 %tile.vectors, 1", "  %which = add i64 %rows.base, %vectors.index",
            "  switch i64 %which, label %tile.done ["]
    sizes = [(r, v) for r in range(1, TILE_ROWS + 1) for v in range(1, VECTORS + 1)]
    out += [f"    i64 {(r - 1) * VECTORS + v - 1}, label %tile{r}.{v}" for r, v in sizes] + ["  ]"]
    extra = "".join(f", {t}* %{n}" for t, n in epilogue.columns) + "".join(f", {t} %{n}" for t, n in epilogue.scalars)
    for r, v in sizes:
        out += [f"tile{r}.{v}:",
                f"  call void @{name}_tile_{r}_{v}(i8* %a.tile, i8* %b.tile, {out_t}* %out.tile, i64 %kq, "
                f"i64 %lda, i64 %ldo{extra})",
                "  br label %tile.done"]
    return out + ["tile.done:", "  %j.next = add i64 %j, %tile.cols", "  %j.end = icmp uge i64 %j.next, %p.last",
                  "  br i1 %j.end, label %cols.done, label %cols",
                  "cols.done:", "  %i.next = add i64 %i, %tile.rows", "  %i.end = icmp uge i64 %i.next, %last",
                  "  br i1 %i.end, label %rows.done, label %rows",
                  "rows.done:", "  %p.end = icmp uge i64 %p.last, %np", "  br i1 %p.end, label %exit, label %panels",
                  "exit:", "  ret void", "}"]
