"""LLVM IR text of the 1x1 convolution's GEMM with FusedConv's epilogue in its store: ``pgemm``
(``kernels_pointwise`` compiles it with llvmlite).

Why: the few-rows ``igemm`` walks K blocks outermost, so a layer's whole output is stored
once per K block and then read and written again by a separate bias/residual/activation pass:
on resnet50's 64 -> 256 layers at 56x56 the output (3.2 MB) went through memory three more
times than needed, and those layers ran 1.6x onnxruntime's (bench/README.md, session 37).
Here the column tiles are outermost: one tile's rows of every K block accumulate while they are
in the L1/L2 cache, and the last K block's store adds the bias and the residual and applies the
activation (``rows_store_ir._activation``: ``activations.activate``'s comparisons, NaN kept).
Each element's sums run in the same order as ``igemm``'s, and the epilogue is the numpy-side
pass's ``(sum + bias) + z`` then the activation: the same bits as before.

Every K step also prefetches into L2 a line of the next column tile from the plane it reads
(row tile t takes line min(t, 3) of the tile's four): a large map's input is past L2 inside a
model and its planes are more streams than the hardware prefetchers follow. resnet50's pointwise
layers inside the model, 1 thread, two runs each, us (bench/model_convs.py): 64 -> 256 on 56x56
1217 / 1193 -> 1149 / 1036, 256 -> 64 1337 / 1258 -> 1029 / 1042, 256 -> 128 2022 / 1845 ->
1538 / 1797, 512 -> 256 on 28x28 1912 / 1746 -> 1639 / 1601 (bench/README.md, session 41).
"""

from __future__ import annotations

from .rows_store_ir import _activation
from .sgemm_ir import (
    _FLOATS,
    LANES,
    PREFETCH_DECLARATION,
    ROWS_BASE,
    TILE_COLS,
    TILE_ROWS,
    VECTORS,
    _row_tiles,
    _splat,
    _tile_ir,
    column_tile_size,
    prefetch_quarter,
    row_tile_size,
    tile_switch,
)

#: an epilogue driver's entry lines: ``%params``' activation parameters as vectors, ``%act``'s
#: code as flags, whether ``%z`` is given (``implicit_fused_ir`` shares them)
ACTIVATION_SETUP = (
    "  %alpha.p = getelementptr float, float* %params, i64 0", "  %alpha = load float, float* %alpha.p",
    "  %beta.p = getelementptr float, float* %params, i64 1", "  %beta = load float, float* %beta.p",
    *_splat("alpha.v", "%alpha"), *_splat("beta.v", "%beta"),
    "  %is.relu = icmp eq i64 %act, 1", "  %is.leaky = icmp eq i64 %act, 2", "  %is.clip = icmp eq i64 %act, 3",
    "  %has.z = icmp ne float* %z, null")

_EPILOGUE_ARGS = ("i1 %last, float* noalias nocapture readonly %bias, float* noalias nocapture readonly %z, "
                  f"i1 %has.z, i1 %is.relu, i1 %is.leaky, i1 %is.clip, {_FLOATS} %alpha.v, {_FLOATS} %beta.v")


def _store(rows: int, vectors: int) -> list[str]:
    """A tile's store: the sums as they are before the last K block, else ``act(sum +
    bias[row] (+ z))`` (``z`` laid out as ``out``)."""
    tiles = [(r, v) for r in range(rows) for v in range(vectors)]
    out = ["  br i1 %last, label %ep, label %plain", "plain:"]
    out += [f"  store {_FLOATS} %sum{r}.{v}, {_FLOATS}* %o.q{r}.{v}, align 4" for r, v in tiles]
    out += ["  ret void", "ep:"]
    for r in range(rows):
        out += [f"  %bias.p{r} = getelementptr float, float* %bias, i64 {r}",
                f"  %bias.s{r} = load float, float* %bias.p{r}, align 4", *_splat(f"bias{r}", f"%bias.s{r}")]
    out += [f"  %e{r}.{v} = fadd {_FLOATS} %sum{r}.{v}, %bias{r}" for r, v in tiles]
    out += ["  br i1 %has.z, label %ep.z, label %ep.act", "ep.z:"]
    for r, v in tiles:
        t = f"{r}.{v}"
        out += [f"  %z.p{t} = getelementptr float, float* %z, i64 %o.at{t}",
                f"  %z.q{t} = bitcast float* %z.p{t} to {_FLOATS}*",
                f"  %z{t} = load {_FLOATS}, {_FLOATS}* %z.q{t}, align 4",
                f"  %ez{t} = fadd {_FLOATS} %e{t}, %z{t}"]
    out += ["  br label %ep.act", "ep.act:"]
    out += [f"  %f{r}.{v} = phi {_FLOATS} [%e{r}.{v}, %ep], [%ez{r}.{v}, %ep.z]" for r, v in tiles]
    for r, v in tiles:
        t = f"{r}.{v}"
        out += _activation(f"f{t}")
        out.append(f"  store {_FLOATS} %f{t}.out, {_FLOATS}* %o.q{t}, align 4")
    return out + ["  ret void"]


#: both drivers' signature line
_HEAD = ("define void @pgemm(float* noalias nocapture readonly %A, i64* noalias nocapture readonly %rowoff, "
         "float* noalias nocapture readonly %X, float* noalias nocapture %out, i64 %lda, i64 %ldo, i64 %m, "
         "i64 %k, i64 %kc, i64 %cols, float* noalias nocapture readonly %bias, "
         "float* noalias nocapture readonly %z, i64 %act, float* noalias nocapture readonly %params) {")


def _unless_empty(target: str) -> list[str]:
    """Both drivers' exit on an empty product, else on to block ``%{target}``."""
    return ["  %no.rows = icmp eq i64 %m, 0", "  %no.k = icmp eq i64 %k, 0", "  %no.cols = icmp eq i64 %cols, 0",
            "  %none.1 = or i1 %no.rows, %no.k", "  %none = or i1 %none.1, %no.cols",
            f"  br i1 %none, label %exit, label %{target}"]


def _next_column_line() -> list[str]:
    """``%pf.off``: the line of the next column tile a row tile prefetches from every input plane
    it reads (row tile t: line min(t, 3) of the tile's four): the input of a layer on a large map
    is past L2 and its planes are more streams than the hardware prefetchers follow."""
    return [*prefetch_quarter(), f"  %pf.line = mul i64 %pf.q, {LANES}", f"  %pf.off = add i64 %pf.line, {TILE_COLS}"]


def _driver() -> list[str]:
    """``pgemm(A, rowoff, X, out, lda, ldo, m, k, kc, cols, bias, z, act, params)``: ``out[:m,
    :cols] = act(A[:m, :k] @ B + bias (+ z))`` with ``B[kk, j] = X[rowoff[kk] + j]``; ``cols`` a
    multiple of LANES, ``z`` null or laid out as ``out``, ``act`` an ``activations`` code and
    ``params`` its two float32 parameters."""
    out = [_HEAD, "entry:", *ACTIVATION_SETUP, *_unless_empty("cols.loop"),
           "cols.loop:", "  %j = phi i64 [0, %entry], [%j.next, %blocks.done]",
           *column_tile_size(), "  %b.col = getelementptr float, float* %X, i64 %j", "  br label %blocks",
           "blocks:", "  %kb = phi i64 [0, %cols.loop], [%kb.next, %rows.done]",
           "  %k.left = sub i64 %k, %kb", "  %k.many = icmp ugt i64 %k.left, %kc",
           "  %k.cur = select i1 %k.many, i64 %kc, i64 %k.left", "  %fresh = icmp eq i64 %kb, 0",
           "  %kb.next = add i64 %kb, %k.cur", "  %last = icmp uge i64 %kb.next, %k",
           "  %ro.blk = getelementptr i64, i64* %rowoff, i64 %kb", "  br label %rows"]
    per_tile = (["  %z.blk = getelementptr float, float* %z, i64 %o.off",
                 "  %bias.blk = getelementptr float, float* %bias, i64 %i", *_next_column_line()],
                ", i1 %last, float* %bias.blk, float* %z.blk, i1 %has.z, i1 %is.relu, i1 %is.leaky, i1 %is.clip, "
                f"{_FLOATS} %alpha.v, {_FLOATS} %beta.v")
    out += _row_tiles("pgemm", "blocks", "%out", "i64* %ro.blk, float* %b.col, i64 %pf.off", extra=per_tile)
    return out + ["rows.done:", "  %kb.end = icmp uge i64 %kb.next, %k",
                  "  br i1 %kb.end, label %blocks.done, label %blocks",
                  "blocks.done:", "  %j.next = add i64 %j, %tile.cols", "  %j.end = icmp uge i64 %j.next, %cols",
                  "  br i1 %j.end, label %exit, label %cols.loop",
                  "exit:", "  ret void", "}"]


def _rows_outer_driver() -> list[str]:
    """``pgemm_rows``: ``pgemm`` (the same arguments) with the row tiles outermost and the
    whole K in each tile's register pass (``kc`` unused): each output channel's plane is then
    written, and its residual read, as one run a row tile, where the column-tiles-outermost
    driver touched every plane's page on every column tile (256 write and 256 residual
    streams on resnet50's 64 -> 256 layers, past what the prefetchers follow). The input's
    columns are re-read from L2 once a row tile, so it suits inputs that fit there
    (``kernels_pointwise.ROWS_OUTER_MAX_INPUT``). One K pass: the sums run in the blocked
    driver's order, so the same bits."""
    out = [_HEAD.replace("@pgemm(", "@pgemm_rows("), "entry:", *ACTIVATION_SETUP, *_unless_empty("rows"),
           "rows:", "  %i = phi i64 [0, %entry], [%i.next, %cols.done]", *row_tile_size(),
           "  %a.off = mul i64 %i, %lda", "  %a.blk = getelementptr float, float* %A, i64 %a.off",
           "  %bias.blk = getelementptr float, float* %bias, i64 %i", "  %o.row = mul i64 %i, %ldo", *ROWS_BASE,
           "  br label %cols.loop",
           "cols.loop:", "  %j = phi i64 [0, %rows], [%j.next, %tile.done]", *column_tile_size(),
           "  %b.col = getelementptr float, float* %X, i64 %j", "  %o.off = add i64 %o.row, %j",
           "  %o.blk = getelementptr float, float* %out, i64 %o.off",
           "  %z.blk = getelementptr float, float* %z, i64 %o.off"]
    out += tile_switch(lambda r, v: f"  call void @pgemm_tile_{r}_{v}(float* %a.blk, i64* %rowoff, float* %b.col, "
                                    f"i64 {TILE_COLS}, "
                                    "float* %o.blk, i64 %k, i64 %lda, i64 %ldo, i1 true, i1 true, float* %bias.blk, "
                                    "float* %z.blk, i1 %has.z, i1 %is.relu, i1 %is.leaky, i1 %is.clip, "
                                    f"{_FLOATS} %alpha.v, {_FLOATS} %beta.v)")
    return out + ["tile.done:", "  %j.next = add i64 %j, %tile.cols", "  %j.end = icmp uge i64 %j.next, %cols",
                  "  br i1 %j.end, label %cols.done, label %cols.loop",
                  "cols.done:", "  %i.next = add i64 %i, %tile.rows", "  %i.end = icmp uge i64 %i.next, %m",
                  "  br i1 %i.end, label %exit, label %rows",
                  "exit:", "  ret void", "}"]


def module_ir() -> str:
    """Every tile size of ``pgemm`` and both drivers, ``pgemm`` and ``pgemm_rows``, in
    typed-pointer syntax."""
    out = [f"declare {_FLOATS} @llvm.fma.v16f32({_FLOATS}, {_FLOATS}, {_FLOATS})", PREFETCH_DECLARATION]
    for rows in range(1, TILE_ROWS + 1):
        for vectors in range(1, VECTORS + 1):
            out += _tile_ir(rows, vectors, indirect=True, fused=("pgemm", _EPILOGUE_ARGS, _store),
                            prefetch_ahead=True)
    return "\n".join(out + _driver() + _rows_outer_driver())
