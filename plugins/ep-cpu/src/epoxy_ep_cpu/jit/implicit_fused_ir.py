"""LLVM IR text of the implicit convolution GEMM that stores straight into the output planes,
with FusedConv's epilogue: ``fgemm`` (``kernels_conv_implicit`` compiles it with llvmlite).

Why: ``igemm`` writes the product on the padded phase grid (``cols`` columns a channel, ``wq``
a row, the grid's extra columns included), and a separate compiled pass reads it back, drops
those columns, adds the bias and the residual and applies the activation. An RGB stem's
product is 3.2 MB: written, read and written again as the 3.15 MB output, through L3 or
memory, where the layer's own arithmetic is 27 multiply-adds an output (squeezenet's 3 -> 64
stride-2 stem alone: 651 -> 569 us at 1 thread, onnxruntime 559-583; inside the model its cold
output dominates both paths, bench/README.md session 38).
Here each register tile sums the whole K in one pass and its store maps each 16-column vector
of the grid onto the output: grid column ``q`` is output ``(q // wq, q % wq)`` when ``q % wq < ow``,
so a vector lies on at most two output rows (``wq >= 16``) and is stored by two masked
stores, the extra columns between them dropped. The arithmetic and its order are the
two-pass path's: ``igemm``'s sums (in K order, as its K blocks chain them), then ``(sum +
bias) + z`` and the activation. Two drivers: ``fgemm`` with column tiles outermost (for a
layer of one K block: deeper ones re-read all their weights every column tile),
``fgemm_rows`` with row tiles outermost (each output plane written as one run).
"""

from __future__ import annotations

from .pointwise_gemm_ir import ACTIVATION_SETUP
from .rows_store_ir import _activation
from .sgemm_ir import (
    _FLOATS,
    LANES,
    ROWS_BASE,
    TILE_ROWS,
    VECTORS,
    _splat,
    _tile_ir,
    column_tile_size,
    row_tile_size,
    tile_switch,
)

_MASK = "<16 x i1>"
_LANE_INDEX = "<" + ", ".join(f"i32 {i}" for i in range(LANES)) + ">"
_MASKED_STORE = "llvm.masked.store.v16f32.p0v16f32"
_MASKED_LOAD = "llvm.masked.load.v16f32.p0v16f32"

#: the geometry table's entries (i64): the grid's row width, the output's row width and rows,
#: one image's input grid and output sizes (floats), the activation's code
GEO_FIELDS = ("wq", "ow", "oh", "xstep", "ystep", "act")


#: each vector's two parts: offsets into a plane and lane masks (``_vector_geometry``)
_VECTOR_ARGS = ", ".join(f"i64 %off1.{v}, i64 %off2.{v}, {_MASK} %m1.{v}, {_MASK} %m2.{v}, i1 %whole.{v}"
                         for v in range(VECTORS))


_EPILOGUE_ARGS = ("float* noalias nocapture readonly %bias, float* noalias nocapture %y, "
                  "float* noalias nocapture readonly %z, i1 %has.z, i1 %is.relu, i1 %is.leaky, i1 %is.clip, "
                  f"{_FLOATS} %alpha.v, {_FLOATS} %beta.v, i64 %plane, {_VECTOR_ARGS}")


def _masked_pointer(name: str, base: str, offset: str) -> list[str]:
    return [f"  %{name}.p = getelementptr float, float* {base}, i64 {offset}",
            f"  %{name}.q = bitcast float* %{name}.p to {_FLOATS}*"]


def _store(rows: int, vectors: int) -> list[str]:
    """A tile's store: ``act(sum + bias[row] (+ z))`` into the output planes, row ``r``'s plane
    ``r * plane`` floats on, each vector's two parts by its masks."""
    tiles = [(r, v) for r in range(rows) for v in range(vectors)]
    out = ["  br label %ep", "ep:"]
    for r in range(rows):
        out += [f"  %bias.p{r} = getelementptr float, float* %bias, i64 {r}",
                f"  %bias.s{r} = load float, float* %bias.p{r}, align 4", *_splat(f"bias{r}", f"%bias.s{r}"),
                f"  %plane.at{r} = mul i64 %plane, {r}",
                f"  %y.row{r} = getelementptr float, float* %y, i64 %plane.at{r}",
                f"  %z.row{r} = getelementptr float, float* %z, i64 %plane.at{r}"]
    out += [f"  %e{r}.{v} = fadd {_FLOATS} %sum{r}.{v}, %bias{r}" for r, v in tiles]
    out += ["  br i1 %has.z, label %ep.z, label %ep.act", "ep.z:"]
    for r, v in tiles:
        t = f"{r}.{v}"
        out += _masked_pointer(f"za{t}", f"%z.row{r}", f"%off1.{v}")
        out += _masked_pointer(f"zb{t}", f"%z.row{r}", f"%off2.{v}")
        out += [f"  %za{t} = call {_FLOATS} @{_MASKED_LOAD}({_FLOATS}* %za{t}.q, i32 4, {_MASK} %m1.{v}, "
                f"{_FLOATS} zeroinitializer)",
                f"  %zb{t} = call {_FLOATS} @{_MASKED_LOAD}({_FLOATS}* %zb{t}.q, i32 4, {_MASK} %m2.{v}, "
                f"{_FLOATS} %za{t})",
                f"  %ez{t} = fadd {_FLOATS} %e{t}, %zb{t}"]
    out += ["  br label %ep.act", "ep.act:"]
    out += [f"  %f{r}.{v} = phi {_FLOATS} [%e{r}.{v}, %ep], [%ez{r}.{v}, %ep.z]" for r, v in tiles]
    for r, v in tiles:  # a vector wholly on one row's outputs is one plain store
        t = f"{r}.{v}"
        out += _activation(f"f{t}")
        out += _masked_pointer(f"ya{t}", f"%y.row{r}", f"%off1.{v}")
        out += _masked_pointer(f"yb{t}", f"%y.row{r}", f"%off2.{v}")
        out += [f"  br i1 %whole.{v}, label %whole{t}, label %split{t}", f"whole{t}:",
                f"  store {_FLOATS} %f{t}.out, {_FLOATS}* %ya{t}.q, align 4", f"  br label %done{t}", f"split{t}:",
                f"  call void @{_MASKED_STORE}({_FLOATS} %f{t}.out, {_FLOATS}* %ya{t}.q, i32 4, {_MASK} %m1.{v})",
                f"  call void @{_MASKED_STORE}({_FLOATS} %f{t}.out, {_FLOATS}* %yb{t}.q, i32 4, {_MASK} %m2.{v})",
                f"  br label %done{t}", f"done{t}:"]
    return out + ["  ret void"]


def _splat_i32(name: str, scalar: str) -> list[str]:
    return [f"  %{name}.one = insertelement <16 x i32> undef, i32 {scalar}, i32 0",
            f"  %{name} = shufflevector <16 x i32> %{name}.one, <16 x i32> undef, <16 x i32> zeroinitializer"]


def _vector_geometry(v: int) -> list[str]:
    """Vector ``v`` of the column tile at ``%j``: its first grid column's output row and
    column, the offsets of its two parts into a plane (the second part's lanes start ``wq -
    ox`` in, at the next row's column 0) and their lane masks."""
    return [f"  %q.{v} = add i64 %j, {LANES * v}", f"  %oy.{v} = udiv i64 %q.{v}, %wq",
            f"  %oy.wq.{v} = mul i64 %oy.{v}, %wq", f"  %ox.{v} = sub i64 %q.{v}, %oy.wq.{v}",
            f"  %row1.{v} = mul i64 %oy.{v}, %ow", f"  %off1.{v} = add i64 %row1.{v}, %ox.{v}",
            f"  %row2.{v} = add i64 %row1.{v}, %ow", f"  %off2.a{v} = add i64 %row2.{v}, %ox.{v}",
            f"  %off2.{v} = sub i64 %off2.a{v}, %wq",
            # part 1: lanes < ow - ox, on a row < oh
            f"  %ox.i{v} = trunc i64 %ox.{v} to i32", f"  %n1.{v} = sub i32 %ow.i, %ox.i{v}",
            *_splat_i32(f"n1.s{v}", f"%n1.{v}"),
            f"  %m1.lanes{v} = icmp slt <16 x i32> %lanes, %n1.s{v}",
            f"  %in1.{v} = icmp ult i64 %oy.{v}, %oh", *_splat_bool(f"in1.s{v}", f"%in1.{v}"),
            f"  %m1.{v} = and {_MASK} %m1.lanes{v}, %in1.s{v}",
            # part 2: lanes in [wq - ox, wq - ox + ow), on a row < oh
            f"  %s2.{v} = sub i32 %wq.i, %ox.i{v}", f"  %e2.{v} = add i32 %s2.{v}, %ow.i",
            *_splat_i32(f"s2.s{v}", f"%s2.{v}"), *_splat_i32(f"e2.s{v}", f"%e2.{v}"),
            f"  %m2.from{v} = icmp sge <16 x i32> %lanes, %s2.s{v}",
            f"  %m2.to{v} = icmp slt <16 x i32> %lanes, %e2.s{v}",
            f"  %m2.lanes{v} = and {_MASK} %m2.from{v}, %m2.to{v}",
            f"  %oy.next{v} = add i64 %oy.{v}, 1", f"  %in2.{v} = icmp ult i64 %oy.next{v}, %oh",
            *_splat_bool(f"in2.s{v}", f"%in2.{v}"), f"  %m2.{v} = and {_MASK} %m2.lanes{v}, %in2.s{v}",
            # whole: all 16 lanes on row oy's outputs (ox + 16 <= ow, oy < oh)
            f"  %ox.end{v} = add i64 %ox.{v}, {LANES}", f"  %fits.{v} = icmp ule i64 %ox.end{v}, %ow",
            f"  %whole.{v} = and i1 %fits.{v}, %in1.{v}"]


def _splat_bool(name: str, scalar: str) -> list[str]:
    return [f"  %{name}.one = insertelement {_MASK} undef, i1 {scalar}, i32 0",
            f"  %{name} = shufflevector {_MASK} %{name}.one, {_MASK} undef, <16 x i32> zeroinitializer"]


def _geo(field: str) -> list[str]:
    at = GEO_FIELDS.index(field)
    return [f"  %{field}.p = getelementptr i64, i64* %geo, i64 {at}", f"  %{field} = load i64, i64* %{field}.p"]


def _entry(name: str, image_done: str) -> list[str]:
    """Both drivers' signature, entry block (the geometry table read, the activation set up, an
    empty product's exit) and their image loop's head (``%x.img``, ``%y.img``, ``%z.img``; the
    loop comes back from ``%{image_done}``)."""
    setup = []
    for field in GEO_FIELDS:
        setup += _geo(field)
    return [f"define void @{name}(float* noalias nocapture readonly %A, i64* noalias nocapture readonly %rowoff, "
            "float* noalias nocapture readonly %X, float* noalias nocapture %y, "
            "i64 %m, i64 %k, i64 %images, i64 %cols, float* noalias nocapture readonly %bias, "
            "float* noalias nocapture readonly %z, float* noalias nocapture readonly %params, "
            "i64* noalias nocapture readonly %geo) {",
            "entry:", *setup, *ACTIVATION_SETUP,
            "  %lda = add i64 %k, 0", "  %plane = mul i64 %oh, %ow",
            "  %wq.i = trunc i64 %wq to i32", "  %ow.i = trunc i64 %ow to i32",
            f"  %lanes = add <16 x i32> {_LANE_INDEX}, zeroinitializer",
            "  %no.rows = icmp eq i64 %m, 0", "  %no.k = icmp eq i64 %k, 0", "  %no.cols = icmp eq i64 %cols, 0",
            "  %no.images = icmp eq i64 %images, 0", "  %none.1 = or i1 %no.rows, %no.k",
            "  %none.2 = or i1 %none.1, %no.cols", "  %none = or i1 %none.2, %no.images",
            "  br i1 %none, label %exit, label %image",
            "image:", f"  %img = phi i64 [0, %entry], [%img.next, %{image_done}]",
            "  %x.off = mul i64 %img, %xstep", "  %x.img = getelementptr float, float* %X, i64 %x.off",
            "  %y.off = mul i64 %img, %ystep", "  %y.img = getelementptr float, float* %y, i64 %y.off",
            "  %z.img = getelementptr float, float* %z, i64 %y.off"]


def _tile_call(rows: int, vectors: int) -> str:
    """A register tile's call, the whole K in one pass (``fresh``: nothing held; its product
    buffer is never touched, so none is passed)."""
    return (f"  call void @fgemm_tile_{rows}_{vectors}(float* %a.blk, i64* %rowoff, float* %b.col, float* null, "
            "i64 %k, i64 %lda, i64 %cols, i1 true, float* %bias.blk, float* %y.blk, float* %z.blk, i1 %has.z, "
            f"i1 %is.relu, i1 %is.leaky, i1 %is.clip, {_FLOATS} %alpha.v, {_FLOATS} %beta.v, i64 %plane, "
            f"{_VECTOR_ARGS})")


#: a row tile's operands from ``%i``: its weights, bias and output/residual planes
_ROW_TILE = ["  %a.off = mul i64 %i, %lda", "  %a.blk = getelementptr float, float* %A, i64 %a.off",
             "  %bias.blk = getelementptr float, float* %bias, i64 %i", "  %y.at = mul i64 %i, %plane",
             "  %y.blk = getelementptr float, float* %y.img, i64 %y.at",
             "  %z.blk = getelementptr float, float* %z.img, i64 %y.at", *ROWS_BASE]


def _column_tile() -> list[str]:
    """The column tile at ``%j``: its size, its grid columns and each vector's geometry."""
    out = [*column_tile_size(), "  %b.col = getelementptr float, float* %x.img, i64 %j"]
    for v in range(VECTORS):
        out += _vector_geometry(v)
    return out


def _step(var: str, by: str, bound: str, loop: str, done: str | None = None) -> list[str]:
    """A loop's latch: ``%var`` advanced by ``by``, back to ``%loop`` below ``bound``, else on to
    ``%done`` (``<loop>.done`` unless named)."""
    return [f"  %{var}.next = add i64 %{var}, {by}", f"  %{var}.end = icmp uge i64 %{var}.next, {bound}",
            f"  br i1 %{var}.end, label %{done or loop.split('.')[0] + '.done'}, label %{loop}"]


def _driver() -> list[str]:
    """``fgemm(A, rowoff, X, y, m, k, images, cols, bias, z, params, geo)``: for each image
    ``i``, ``y_i[r] = act(A[r, :k] @ B_i + bias[r] (+ z_i[r]))`` with ``B_i[kk, q] =
    X_i[rowoff[kk] + q]`` over the grid's ``cols`` columns (a multiple of LANES), stored onto
    the ``oh x ow`` output plane of channel ``r`` (module docstring); ``z`` null or laid out as
    ``y``; ``params`` the activation's two float32 parameters; ``geo`` the i64 table of
    :data:`GEO_FIELDS`. Column tiles outermost."""
    out = [*_entry("fgemm", "cols.done"), "  br label %cols.loop",
           "cols.loop:", "  %j = phi i64 [0, %image], [%j.next, %rows.done]", *_column_tile(), "  br label %rows",
           "rows:", "  %i = phi i64 [0, %cols.loop], [%i.next, %tile.done]", *row_tile_size(), *_ROW_TILE]
    out += tile_switch(_tile_call)
    return out + ["tile.done:", *_step("i", "%tile.rows", "%m", "rows"),
                  "rows.done:", *_step("j", "%tile.cols", "%cols", "cols.loop"),
                  "cols.done:", *_step("img", "1", "%images", "image", done="exit"),
                  "exit:", "  ret void", "}"]


def _rows_outer_driver() -> list[str]:
    """``fgemm_rows``: ``fgemm`` (the same arguments) with row tiles outermost: each output
    plane is written as one run a row tile; the grid's columns are re-read from L2 once a row
    tile."""
    out = [*_entry("fgemm_rows", "rows.done"), "  br label %rows",
           "rows:", "  %i = phi i64 [0, %image], [%i.next, %cols.done]", *row_tile_size(), *_ROW_TILE,
           "  br label %cols.loop",
           "cols.loop:", "  %j = phi i64 [0, %rows], [%j.next, %tile.done]", *_column_tile()]
    out += tile_switch(_tile_call)
    return out + ["tile.done:", *_step("j", "%tile.cols", "%cols", "cols.loop"),
                  "cols.done:", *_step("i", "%tile.rows", "%m", "rows"),
                  "rows.done:", *_step("img", "1", "%images", "image", done="exit"),
                  "exit:", "  ret void", "}"]


def module_ir() -> str:
    """Every tile size of ``fgemm`` and its drivers, in typed-pointer syntax."""
    out = [f"declare {_FLOATS} @llvm.fma.v16f32({_FLOATS}, {_FLOATS}, {_FLOATS})",
           f"declare void @{_MASKED_STORE}({_FLOATS}, {_FLOATS}*, i32, {_MASK})",
           f"declare {_FLOATS} @{_MASKED_LOAD}({_FLOATS}*, i32, {_MASK}, {_FLOATS})"]
    for rows in range(1, TILE_ROWS + 1):
        for vectors in range(1, VECTORS + 1):
            out += _tile_ir(rows, vectors, indirect=True, fused=("fgemm", _EPILOGUE_ARGS, _store))
    return "\n".join(out + _driver() + _rows_outer_driver())
