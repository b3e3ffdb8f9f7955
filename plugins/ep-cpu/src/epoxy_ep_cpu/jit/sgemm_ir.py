"""LLVM IR text of the float32 GEMM for few rows against a constant, packed right operand
(``kernels_sgemm`` compiles it with llvmlite).

Why IR text, as for the int8 GEMM (``int8_gemm_ir``): the register tile must stay in registers.
numba's loops over a local accumulator array spill it to the stack, and LLVM kept fixed-lane
loops scalar in earlier prototypes (session 25); here every accumulator is an SSA value.

A register tile is up to ``TILE_ROWS`` rows x ``VECTORS`` registers of 16 float32 columns: per
step of K, one load of B per register, one broadcast of A per row and one fused multiply-add
per accumulator. B is packed in column tiles of ``TILE_COLS`` (the last one 16, 32 or 48
wide), each ``(K, width)``, so the 16 columns of a register are one load and a tile's rows of
one K block are contiguous. The driver walks K in blocks of ``kc`` (a block of a column tile,
``kc x 64`` floats, stays in L2 while every row tile reads it), the column tiles of its column
range, then the row tiles; a tile stores the first K block's products into ``out`` and adds
each later block's to them (the caller need not zero ``out``). Sums run in K order within a block, blocks in order:
bits differ from OpenBLAS's, as onnxruntime's MLAS bits do.

The convolution driver (``cgemm``) prefetches the next K block into L2 while it multiplies this
one, a line per K step spread over the first four row tiles: inside a model a layer's weights
come from L3 (the layers between evicted them) and a block's first row tile waited for them.
Measured in models (bench/compare.py, 1 thread, alternated with the commit before, two rounds):
resnet50 1.29-1.30 -> 1.14-1.18 x onnxruntime, inception_v2 1.29-1.34 -> 1.21-1.23, densenet121
and squeezenet unchanged; 2 threads inception_v2 1.52-1.54 -> 1.37-1.43, resnet50 1.36-1.45 ->
1.29-1.30 (bench/README.md, session 41). A prefetch into L1 instead measured the same.
``sgemm`` prefetches the next block too, whole, from its first row tile (a product of few rows
has one or two): ``(M, K) @ (K, N)`` with the weights in L3 (a 64 MB touch before each run),
1 thread, epoxy / onnxruntime, two runs: 1024 x 1000 at 4 rows 1.38-1.44 -> 1.08-1.13, 16 rows
1.25-1.45 -> 1.05; 768 x 3072 at 4 rows 1.16-1.28 -> 0.88-0.91, 16 rows 1.26-1.28 -> 0.86-0.91;
one row unchanged (1.01-1.17: L3's bandwidth, onnxruntime's too).
"""

from __future__ import annotations

from collections.abc import Callable

from .llvm_module import avx512


def tile_shape(avx512: bool) -> tuple[int, int]:
    """(rows, registers of 16 float32 columns) of one register tile: 6 x 4 on AVX-512 (24 of its
    32 vector registers hold sums); 6 x 1 elsewhere, where a 16-float register is two AVX2
    registers: 12 of the 16 hold sums, two B's halves and one A's broadcast (a wider tile spills
    its sums to the stack every K step)."""
    return (6, 4) if avx512 else (6, 1)


#: whether this CPU runs the AVX-512 tile (routes tuned for it read this too)
WIDE_TILE = avx512()
#: rows of one register tile, and its registers of 16 float32 columns, for this CPU
TILE_ROWS, VECTORS = tile_shape(WIDE_TILE)
#: columns per register (N is padded to it), and the widest column tile
LANES = 16
TILE_COLS = LANES * VECTORS

_FLOATS = "<16 x float>"


#: a read prefetch into L2 (locality 2: prefetcht1) of the ``i8*`` value formatted in, and the
#: intrinsic's declaration (every module whose tiles prefetch carries it)
PREFETCH_L2 = "  call void @llvm.prefetch.p0i8(i8* {}, i32 0, i32 2, i32 1)"
PREFETCH_DECLARATION = "declare void @llvm.prefetch.p0i8(i8* nocapture readonly, i32 immarg, i32 immarg, i32 immarg)"


def _splat(name: str, scalar: str) -> list[str]:
    return [f"  %{name}.one = insertelement {_FLOATS} undef, float {scalar}, i32 0",
            f"  %{name} = shufflevector {_FLOATS} %{name}.one, {_FLOATS} undef, <16 x i32> zeroinitializer"]


def _tile_ir(rows: int, vectors: int, indirect: bool = False, gathered: bool = False,
             fused: tuple[str, str, Callable[[int, int], list[str]]] | None = None,
             prefetch_ahead: bool = False) -> list[str]:
    """``sgemm_tile_R_V``: ``out[R, 16V] += A[R, kc] @ B[kc, 16V]`` (B rows 16V floats apart), or
    ``=`` when ``fresh`` (the first K block: ``out`` need not be zeroed beforehand).
    ``indirect``: ``igemm_tile_R_V``, whose B row ``k`` starts ``rowoff[k]`` floats past ``B``
    (an implicit im2col: rows are runs of an input grid, not a packed copy).
    ``gathered``: ``cgemm_tile_R_V``, whose A row ``r`` is read from an input grid ``X``, element
    ``k`` at ``X[gpos[r] + rowoff[k]]`` (a convolution's output position ``r`` over its input
    channels and taps: an im2col row never packed), B packed as in ``sgemm``.
    ``fused``: (name, extra parameters, store): the tile under another name with more
    parameters, its final sums ``%sum{r}.{v}`` stored by ``store(rows, vectors)``'s lines
    (``pointwise_gemm_ir``: the epilogue on the last K block).
    ``sgemm`` and ``cgemm`` tiles take a ``float* %pf`` after ``B``, the part of the driver's next
    K block they prefetch into L2: ``cgemm``'s a line per K step, ``sgemm``'s the block's row k
    whole (module docstring).
    ``prefetch_ahead`` (``indirect`` only): an ``i64 %pf.off`` parameter after ``B``; each K step
    prefetches into L2 the line ``pf.off`` floats past its B row (``pointwise_gemm_ir``: the next
    column tile of the input's planes)."""
    r_range, v_range = range(rows), range(vectors)
    width = LANES * vectors
    if gathered:
        name, a_args = "cgemm", ("float* noalias nocapture readonly %X, i64* noalias nocapture readonly %gpos, "
                                 "i64* noalias nocapture readonly %rowoff, ")
        b_args = ""
    else:
        name, b_args = ("igemm", "i64* noalias nocapture readonly %rowoff, ") if indirect else ("sgemm", "")
        a_args = "float* noalias nocapture readonly %A, "
    extra = ""
    if fused is not None:
        name, extra = fused[0], ", " + fused[1]
    plain = not (indirect or gathered or fused)
    pf_arg = ("float* nocapture readonly %pf, " if gathered or plain else
              "i64 %pf.off, " if prefetch_ahead else "")
    out = [f"define internal void @{name}_tile_{rows}_{vectors}({a_args}{b_args}"
           f"float* noalias nocapture readonly %B, {pf_arg}float* noalias nocapture %out, i64 %kc, i64 %lda, "
           f"i64 %ldo, i1 %fresh{extra}) alwaysinline {{", "entry:"]
    for r in r_range:
        if gathered:  # row r's first element: the grid at its position's offset
            out += [f"  %g.p{r} = getelementptr i64, i64* %gpos, i64 {r}", f"  %g{r} = load i64, i64* %g.p{r}, align 8",
                    f"  %a.row{r} = getelementptr float, float* %X, i64 %g{r}"]
        else:
            out += [f"  %a.off{r} = mul i64 {r}, %lda",
                    f"  %a.row{r} = getelementptr float, float* %A, i64 %a.off{r}"]
        out.append(f"  %o.off{r} = mul i64 {r}, %ldo")
        for v in v_range:
            t = f"{r}.{v}"
            out += [f"  %o.at{t} = add i64 %o.off{r}, {LANES * v}",
                    f"  %o.p{t} = getelementptr float, float* %out, i64 %o.at{t}",
                    f"  %o.q{t} = bitcast float* %o.p{t} to {_FLOATS}*"]
    # the held sums are read only after the first K block: a fresh tile never touches ``out``
    # (the fused drivers' product buffer stays cold when K is one block)
    out += ["  br i1 %fresh, label %k.start, label %held", "held:"]
    out += [f"  %held{r}.{v} = load {_FLOATS}, {_FLOATS}* %o.q{r}.{v}, align 4" for r in r_range for v in v_range]
    out += ["  br label %k.start", "k.start:"]
    out += [f"  %init{r}.{v} = phi {_FLOATS} [zeroinitializer, %entry], [%held{r}.{v}, %held]"
            for r in r_range for v in v_range]
    out += ["  br label %k.loop", "k.loop:", "  %k = phi i64 [0, %k.start], [%k.next, %k.loop]"]
    out += [f"  %acc{r}.{v} = phi {_FLOATS} [%init{r}.{v}, %k.start], [%sum{r}.{v}, %k.loop]"
            for r in r_range for v in v_range]
    if indirect:
        out += ["  %ro.p = getelementptr i64, i64* %rowoff, i64 %k", "  %b.step = load i64, i64* %ro.p, align 8"]
        if prefetch_ahead:
            out += ["  %pf.at = add i64 %b.step, %pf.off", "  %pf.p = getelementptr float, float* %B, i64 %pf.at",
                    "  %pf.i8 = bitcast float* %pf.p to i8*", PREFETCH_L2.format("%pf.i8")]
    else:
        out.append(f"  %b.step = mul i64 %k, {width}")
    if gathered:
        out += ["  %ro.p = getelementptr i64, i64* %rowoff, i64 %k", "  %a.step = load i64, i64* %ro.p, align 8",
                f"  %pf.at = mul i64 %k, {LANES}", "  %pf.p = getelementptr float, float* %pf, i64 %pf.at",
                "  %pf.i8 = bitcast float* %pf.p to i8*", PREFETCH_L2.format("%pf.i8")]
    if plain:  # the next block's row k, whole: a product of few rows is over before a quarter
        for v in v_range:
            out += [f"  %pn.at{v} = add i64 %b.step, {LANES * v}",
                    f"  %pn.p{v} = getelementptr float, float* %pf, i64 %pn.at{v}",
                    f"  %pn.i8.{v} = bitcast float* %pn.p{v} to i8*", PREFETCH_L2.format(f"%pn.i8.{v}")]
    for v in v_range:
        out += [f"  %b.at{v} = add i64 %b.step, {LANES * v}",
                f"  %b.p{v} = getelementptr float, float* %B, i64 %b.at{v}",
                f"  %b.q{v} = bitcast float* %b.p{v} to {_FLOATS}*",
                f"  %b{v} = load {_FLOATS}, {_FLOATS}* %b.q{v}, align 4"]
    for r in r_range:
        out += [f"  %a.p{r} = getelementptr float, float* %a.row{r}, i64 {'%a.step' if gathered else '%k'}",
                f"  %a.s{r} = load float, float* %a.p{r}, align 4"]
        out += _splat(f"a{r}", f"%a.s{r}")
    out += [f"  %sum{r}.{v} = call {_FLOATS} @llvm.fma.v16f32({_FLOATS} %a{r}, {_FLOATS} %b{v}, {_FLOATS} %acc{r}.{v})"
            for r in r_range for v in v_range]
    out += ["  %k.next = add i64 %k, 1", "  %k.end = icmp uge i64 %k.next, %kc",
            "  br i1 %k.end, label %store, label %k.loop", "store:"]
    if fused is not None:
        return out + fused[2](rows, vectors) + ["}"]
    out += [f"  store {_FLOATS} %sum{r}.{v}, {_FLOATS}* %o.q{r}.{v}, align 4" for r in r_range for v in v_range]
    return out + ["  ret void", "}"]


def row_tile_size() -> list[str]:
    """``%tile.rows``: the rows left from ``%i`` up to TILE_ROWS (every driver's row tile)."""
    return ["  %rows.left = sub i64 %m, %i", f"  %rows.many = icmp ugt i64 %rows.left, {TILE_ROWS}",
            f"  %tile.rows = select i1 %rows.many, i64 {TILE_ROWS}, i64 %rows.left"]


def column_tile_size(total: str = "%cols") -> list[str]:
    """``%tile.cols`` (the columns left from ``%j`` of ``total``, up to TILE_COLS) and
    ``%tile.vectors`` (every driver's column tile)."""
    return [f"  %cols.left = sub i64 {total}, %j", f"  %cols.many = icmp ugt i64 %cols.left, {TILE_COLS}",
            f"  %tile.cols = select i1 %cols.many, i64 {TILE_COLS}, i64 %cols.left",
            f"  %tile.vectors = udiv i64 %tile.cols, {LANES}"]


def tile_switch(call: Callable[[int, int], str]) -> list[str]:
    """The dispatch to the tile function of ``%tile.rows`` x ``%tile.vectors`` (``%rows.base``
    set: ``(tile.rows - 1) * VECTORS``): each case's line ``call(rows, vectors)``, then on to
    ``%tile.done``."""
    sizes = [(r, v) for r in range(1, TILE_ROWS + 1) for v in range(1, VECTORS + 1)]
    out = ["  %vectors.index = sub i64 %tile.vectors, 1", "  %which = add i64 %rows.base, %vectors.index",
           "  switch i64 %which, label %tile.done ["]
    out += [f"    i64 {(r - 1) * VECTORS + v - 1}, label %tile{r}.{v}" for r, v in sizes] + ["  ]"]
    for r, v in sizes:
        out += [f"tile{r}.{v}:", call(r, v), "  br label %tile.done"]
    return out


#: ``%rows.base`` of the row tile at ``%i`` (for :func:`tile_switch`)
ROWS_BASE = ["  %rows.index = sub i64 %tile.rows, 1", f"  %rows.base = mul i64 %rows.index, {VECTORS}"]


def _row_tiles(kind: str, entry: str, out_base: str, b_args: str, gathered: bool = False,
               extra: tuple[list[str], str] = ([], "")) -> list[str]:
    """A driver's loop over the row tiles of one column tile and K block (from block
    ``%entry``): each calls the ``{kind}_tile_R_V`` its rows and the column tile's vectors
    need, on ``A``'s rows from ``%kb`` (``gathered``: the position table from row ``%i`` and
    the K block's offsets ``%ro.blk``) and ``out_base``'s from column ``%j``; ends at
    ``%rows.done``. ``extra``: lines computed per row tile (after ``%o.off``, the tile's
    output offset) and the arguments they add to the call (``pointwise_gemm_ir``)."""
    if gathered:
        a_lines, a_arg = ["  %g.blk = getelementptr i64, i64* %gpos, i64 %i"], "float* %X, i64* %g.blk, i64* %ro.blk"
    else:
        a_lines, a_arg = ["  %a.row = mul i64 %i, %lda", "  %a.off = add i64 %a.row, %kb",
                          "  %a.blk = getelementptr float, float* %A, i64 %a.off"], "float* %a.blk"
    out = ["rows:", f"  %i = phi i64 [0, %{entry}], [%i.next, %tile.done]", *row_tile_size(), *a_lines,
           "  %o.row = mul i64 %i, %ldo", "  %o.off = add i64 %o.row, %j",
           f"  %o.blk = getelementptr float, float* {out_base}, i64 %o.off", *extra[0], *ROWS_BASE]
    out += tile_switch(lambda r, v: f"  call void @{kind}_tile_{r}_{v}({a_arg}, {b_args}, float* %o.blk, i64 %k.cur, "
                                    f"i64 %lda, i64 %ldo, i1 %fresh{extra[1]})")
    return out + ["tile.done:", "  %i.next = add i64 %i, %tile.rows", "  %i.end = icmp uge i64 %i.next, %m",
                  "  br i1 %i.end, label %rows.done, label %rows"]


def _driver_ir(gathered: bool = False) -> list[str]:
    """``sgemm(A, B, out, lda, ldo, m, k, np, kc, j0, j1)``: ``out[:m, j0:j1] += A[:m, :k] @
    B[:k, j0:j1]`` for the packed B of ``np`` columns (``j0`` a multiple of TILE_COLS, ``j1``
    one too or ``np``); each tile calls the ``sgemm_tile_R_V`` its size needs.
    ``gathered``: ``cgemm(X, gpos, rowoff, B, out, ldo, m, k, np, kc, j0, j1)``, the same with
    ``A[i, kk] = X[gpos[i] + rowoff[kk]]`` (a convolution: row ``i`` an output position, ``kk``
    an input channel and tap; ``out`` position-major), calling ``cgemm_tile_R_V``."""
    if gathered:
        head = ["define void @cgemm(float* noalias nocapture readonly %X, i64* noalias nocapture readonly %gpos, "
                "i64* noalias nocapture readonly %rowoff, float* noalias nocapture readonly %B, "
                "float* noalias nocapture %out, i64 %ldo, i64 %m, i64 %k, i64 %np, i64 %kc, i64 %j0, i64 %j1) {",
                "entry:", "  %lda = add i64 0, 0"]  # the tiles' A row step: unused when gathered
        block_rows = ["  %ro.blk = getelementptr i64, i64* %rowoff, i64 %kb"]
    else:
        head = ["define void @sgemm(float* noalias nocapture readonly %A, float* noalias nocapture readonly %B, "
                "float* noalias nocapture %out, i64 %lda, i64 %ldo, i64 %m, i64 %k, i64 %np, i64 %kc, i64 %j0, "
                "i64 %j1) {", "entry:"]
        block_rows = []
    out = head + ["  %no.rows = icmp eq i64 %m, 0", "  %no.k = icmp eq i64 %k, 0",
                  "  %no.cols = icmp uge i64 %j0, %j1", "  %none.1 = or i1 %no.rows, %no.k",
                  "  %none = or i1 %none.1, %no.cols", "  br i1 %none, label %exit, label %blocks",
                  "blocks:", "  %kb = phi i64 [0, %entry], [%kb.next, %cols.done]",
                  "  %k.left = sub i64 %k, %kb", "  %k.many = icmp ugt i64 %k.left, %kc",
                  "  %k.cur = select i1 %k.many, i64 %kc, i64 %k.left", "  %fresh = icmp eq i64 %kb, 0",
                  *block_rows, "  br label %cols",
                  "cols:", "  %j = phi i64 [%j0, %blocks], [%j.next, %rows.done]",
                  *column_tile_size("%np"),
                  # the tile's K block: tile j starts at j * k floats, its rows tile.cols wide
                  "  %b.tile = mul i64 %j, %k", "  %b.rows = mul i64 %kb, %tile.cols",
                  "  %b.off = add i64 %b.tile, %b.rows", "  %b.blk = getelementptr float, float* %B, i64 %b.off",
                  *_next_block(), "  br label %rows"]
    out += _row_tiles("cgemm" if gathered else "sgemm", "cols", "%out", "float* %b.blk, float* %pf.tile",
                      gathered=gathered, extra=(_prefetch_share() if gathered else _first_tile_prefetches(), ""))
    return out + ["rows.done:", "  %j.next = add i64 %j, %tile.cols", "  %j.end = icmp uge i64 %j.next, %j1",
                  "  br i1 %j.end, label %cols.done, label %cols",
                  "cols.done:", "  %kb.next = add i64 %kb, %k.cur", "  %kb.end = icmp uge i64 %kb.next, %k",
                  "  br i1 %kb.end, label %exit, label %blocks",
                  "exit:", "  ret void", "}"]


def _next_block() -> list[str]:
    """``%pf.blk``: the K block the driver reads after this one (the next column tile's, or the
    first column tile's of the next K block), prefetched into L2 while this one is multiplied:
    in a model the weights come from L3 (the layers between evicted them). The A/B is in the
    module docstring."""
    def tile_start(name: str, column: str, block_row: str) -> list[str]:
        # column tile ``column`` (min(TILE_COLS, np - column) wide) from K row ``block_row``
        return [f"  %{name}.left = sub i64 %np, {column}", f"  %{name}.many = icmp ugt i64 %{name}.left, {TILE_COLS}",
                f"  %{name}.cols = select i1 %{name}.many, i64 {TILE_COLS}, i64 %{name}.left",
                f"  %{name}.t = mul i64 {column}, %k", f"  %{name}.r = mul i64 {block_row}, %{name}.cols",
                f"  %{name} = add i64 %{name}.t, %{name}.r"]

    return ["  %nj = add i64 %j, %tile.cols", "  %nj.in = icmp ult i64 %nj, %j1", "  %kb.n = add i64 %kb, %k.cur",
            *tile_start("pf.same", "%nj", "%kb"), *tile_start("pf.wrap", "%j0", "%kb.n"),
            "  %pf.off = select i1 %nj.in, i64 %pf.same, i64 %pf.wrap",
            "  %pf.blk = getelementptr float, float* %B, i64 %pf.off"]


def prefetch_quarter() -> list[str]:
    """``%pf.q``: which of the next tile's four parts the row tile at ``%i`` prefetches (row tile
    t: min(t, VECTORS - 1); the first four row tiles cover it, later ones repeat the last)."""
    return [f"  %pf.t = udiv i64 %i, {TILE_ROWS}", f"  %pf.many = icmp ugt i64 %pf.t, {VECTORS - 1}",
            f"  %pf.q = select i1 %pf.many, i64 {VECTORS - 1}, i64 %pf.t"]


def _prefetch_share() -> list[str]:
    """``%pf.tile``: the part of the next block a row tile prefetches (a line per K step: the
    first four row tiles cover a 64-column block)."""
    return [*prefetch_quarter(), f"  %pf.lines = mul i64 %k.cur, {LANES}", "  %pf.rt = mul i64 %pf.q, %pf.lines",
            "  %pf.tile = getelementptr float, float* %pf.blk, i64 %pf.rt"]


def _first_tile_prefetches() -> list[str]:
    """``%pf.tile`` for ``sgemm``: the next block for the first row tile (it prefetches the
    block whole: a product of few rows has one or two row tiles), the tile's own block (in L1:
    a prefetch of it costs a load slot) for the others."""
    return ["  %pf.first = icmp eq i64 %i, 0", "  %pf.tile = select i1 %pf.first, float* %pf.blk, float* %b.blk"]


def _implicit_driver_ir() -> list[str]:
    """``igemm(A, rowoff, X, out, lda, ldo, m, k, kc, cols, images, xstep, ostep)``: for each of
    ``images`` images ``i``, ``out_i[:m, :cols] = A[:m, :k] @ B_i`` where ``B_i[kk, j] =
    X_i[rowoff[kk] + j]``, ``X_i = X + i * xstep`` and ``out_i = out + i * ostep`` (floats);
    ``cols`` a multiple of LANES. The K blocks, column tiles and row tiles as in ``sgemm``."""
    out = ["define void @igemm(float* noalias nocapture readonly %A, i64* noalias nocapture readonly %rowoff, "
           "float* noalias nocapture readonly %X, float* noalias nocapture %out, i64 %lda, i64 %ldo, i64 %m, "
           "i64 %k, i64 %kc, i64 %cols, i64 %images, i64 %xstep, i64 %ostep) {",
           "entry:", "  %no.rows = icmp eq i64 %m, 0", "  %no.k = icmp eq i64 %k, 0",
           "  %no.cols = icmp eq i64 %cols, 0", "  %no.images = icmp eq i64 %images, 0",
           "  %none.1 = or i1 %no.rows, %no.k", "  %none.2 = or i1 %none.1, %no.cols",
           "  %none = or i1 %none.2, %no.images", "  br i1 %none, label %exit, label %image",
           "image:", "  %img = phi i64 [0, %entry], [%img.next, %blocks.done]",
           "  %x.off = mul i64 %img, %xstep", "  %x.img = getelementptr float, float* %X, i64 %x.off",
           "  %out.off = mul i64 %img, %ostep", "  %out.img = getelementptr float, float* %out, i64 %out.off",
           "  br label %blocks",
           "blocks:", "  %kb = phi i64 [0, %image], [%kb.next, %cols.done]",
           "  %k.left = sub i64 %k, %kb", "  %k.many = icmp ugt i64 %k.left, %kc",
           "  %k.cur = select i1 %k.many, i64 %kc, i64 %k.left",
           "  %ro.blk = getelementptr i64, i64* %rowoff, i64 %kb", "  %fresh = icmp eq i64 %kb, 0",
           "  br label %cols.loop",
           "cols.loop:", "  %j = phi i64 [0, %blocks], [%j.next, %rows.done]",
           *column_tile_size(),
           "  %b.blk = getelementptr float, float* %x.img, i64 %j", "  br label %rows"]
    out += _row_tiles("igemm", "cols.loop", "%out.img", "i64* %ro.blk, float* %b.blk")
    return out + ["rows.done:", "  %j.next = add i64 %j, %tile.cols", "  %j.end = icmp uge i64 %j.next, %cols",
                  "  br i1 %j.end, label %cols.done, label %cols.loop",
                  "cols.done:", "  %kb.next = add i64 %kb, %k.cur", "  %kb.end = icmp uge i64 %kb.next, %k",
                  "  br i1 %kb.end, label %blocks.done, label %blocks",
                  "blocks.done:", "  %img.next = add i64 %img, 1", "  %img.end = icmp uge i64 %img.next, %images",
                  "  br i1 %img.end, label %exit, label %image",
                  "exit:", "  ret void", "}"]


def module_ir() -> str:
    """Every tile size of both GEMMs and their drivers ``sgemm`` and ``igemm``, in typed-pointer
    syntax (what every llvmlite numba supports reads)."""
    out = [f"declare {_FLOATS} @llvm.fma.v16f32({_FLOATS}, {_FLOATS}, {_FLOATS})",
           PREFETCH_DECLARATION]
    for indirect, gathered in ((False, False), (True, False), (False, True)):
        for rows in range(1, TILE_ROWS + 1):
            for vectors in range(1, VECTORS + 1):
                out += _tile_ir(rows, vectors, indirect, gathered)
    return "\n".join(out + _driver_ir() + _implicit_driver_ir() + _driver_ir(gathered=True))
