"""LLVM IR text of the position-tiled implicit GEMM for small convolutions
(``kernels_conv_small`` compiles it with llvmlite and calls it from its compiled layer).

Why another tiling than ``sgemm_ir``'s: there the output channels are the register tile's
rows and 64 grid positions its columns, so a small layer's few output channels (8-16) fill
few rows and a map's positions are walked 64 at a time. Here a register holds ``lanes`` (8
or 16) *output channels* of one grid position and a tile is 16 consecutive positions: per
step of K (one input channel and kernel position), one load of the packed weights' row and
one broadcast of the input per position, which AVX-512 folds into the multiply-add. The
weights' rows are a few KB in L1, and the input is read straight from the padded phase grid
through the row-offset table of ``kernels_conv_implicit``. At the end a tile is transposed
in registers (shuffles of pairs of registers: 4 rounds for 16 x 16, 3 for 8 x 8) and
stored channel-major, ``out[channel * cols + position]``: each channel's 16 positions one
vector, so the layer's store pass reads unit-stride rows.

A tile's sums run over the whole of K in order (one rounding per step, as the direct kernel).
"""

from __future__ import annotations

from .sgemm_ir import WIDE_TILE


def shapes(avx512: bool) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(tile sizes in positions, register widths in channels) for a CPU with or without
    AVX-512. With it: tiles of 16 positions (16 accumulators of the 32 vector registers), or 8
    where a map's positions rounded up to 16 would add more (a 4x4 map's 22 grid positions: 24,
    not 32); registers of 8 channels for layers of up to 8 outputs, else 16. AVX2 has 16
    registers of 8 floats: registers of 8 channels only, tiles of 8 positions (8 accumulators, the
    weights' row and a broadcast) or 4."""
    return ((8, 16), (8, 16)) if avx512 else ((4, 8), (8,))


#: this CPU's tile sizes and register widths (:func:`shapes`)
TILE_SIZES, LANE_WIDTHS = shapes(WIDE_TILE)


def lanes_for(channels: int, widths: tuple[int, ...] = LANE_WIDTHS) -> int:
    """The register width, in float32 channels, for a layer of ``channels`` outputs: the
    narrowest of ``widths`` that holds them, else the widest."""
    return next((w for w in widths if channels <= w), widths[-1])


def tile_for(positions: int, sizes: tuple[int, ...] = TILE_SIZES) -> int:
    """The tile size for a map of ``positions`` grid positions: the one of ``sizes`` rounding
    them up the least (the larger on a tie)."""
    return min(sizes, key=lambda t: (-(-positions // t) * t, -t))


def entry_name(lanes: int, tile: int) -> str:
    return f"pgemm_{lanes}_{tile}"


def _vec(lanes: int) -> str:
    return f"<{lanes} x float>"


def _mask(values: list[int]) -> str:
    return "<" + ", ".join(f"i32 {v}" for v in values) + ">"


def _transpose(lanes: int, names: list[str], tag: str) -> tuple[list[str], list[str]]:
    """IR transposing the ``lanes`` x ``lanes`` block held in registers ``names`` (row r =
    position r, lane = channel): per round of block size b (lanes/2 down to 1), each pair of
    rows (i, i + b) swaps its off-diagonal b x b blocks with two two-register shuffles.
    Returns the lines and the transposed registers' names (row c = channel c)."""
    vec, out, rows = _vec(lanes), [], list(names)
    b = lanes // 2
    while b >= 1:
        low = _mask([lane if lane & b == 0 else lanes + lane - b for lane in range(lanes)])
        high = _mask([lane + b if lane & b == 0 else lanes + lane for lane in range(lanes)])
        nxt = list(rows)
        for i in range(lanes):
            if i & b:
                continue
            lo, hi = f"%{tag}.b{b}.r{i}", f"%{tag}.b{b}.r{i + b}"
            out += [f"  {lo} = shufflevector {vec} {rows[i]}, {vec} {rows[i + b]}, <{lanes} x i32> {low}",
                    f"  {hi} = shufflevector {vec} {rows[i]}, {vec} {rows[i + b]}, <{lanes} x i32> {high}"]
            nxt[i], nxt[i + b] = lo, hi
        rows = nxt
        b //= 2
    return out, rows


def _tile_ir(lanes: int, tile: int) -> list[str]:
    """``ptile_L_T``: for the tile's ``tile`` positions ``r`` and ``lanes`` channels ``c``,
    ``out[c * cols + r] = sum_k X[rowoff[k] + r] * W[k * lanes + c]`` (``X`` and ``out``
    already at the tile's first position, ``W`` at the channel block)."""
    vec, r_range = _vec(lanes), range(tile)
    out = [f"define internal void @ptile_{lanes}_{tile}(float* noalias nocapture readonly %X, "
           "i64* noalias nocapture readonly %rowoff, float* noalias nocapture readonly %W, "
           "float* noalias nocapture %out, i64 %k, i64 %cols) alwaysinline {", "entry:", "  br label %k.loop",
           "k.loop:", "  %kk = phi i64 [0, %entry], [%kk.next, %k.loop]"]
    out += [f"  %acc{r} = phi {vec} [zeroinitializer, %entry], [%sum{r}, %k.loop]" for r in r_range]
    out += ["  %ro.p = getelementptr i64, i64* %rowoff, i64 %kk", "  %ro = load i64, i64* %ro.p, align 8",
            "  %x.row = getelementptr float, float* %X, i64 %ro", f"  %w.at = mul i64 %kk, {lanes}",
            "  %w.p = getelementptr float, float* %W, i64 %w.at", f"  %w.q = bitcast float* %w.p to {vec}*",
            f"  %w = load {vec}, {vec}* %w.q, align 4"]
    for r in r_range:
        out += [f"  %x.p{r} = getelementptr float, float* %x.row, i64 {r}",
                f"  %x.s{r} = load float, float* %x.p{r}, align 4",
                f"  %x.one{r} = insertelement {vec} undef, float %x.s{r}, i32 0",
                f"  %x{r} = shufflevector {vec} %x.one{r}, {vec} undef, <{lanes} x i32> zeroinitializer",
                f"  %sum{r} = call {vec} @llvm.fma.v{lanes}f32({vec} %x{r}, {vec} %w, {vec} %acc{r})"]
    out += ["  %kk.next = add i64 %kk, 1", "  %k.end = icmp uge i64 %kk.next, %k",
            "  br i1 %k.end, label %store, label %k.loop", "store:"]
    # transpose each block of up to ``lanes`` positions (missing rows zero), then store every
    # channel's run of the block's positions
    width = min(tile, lanes)
    part = f"<{width} x float>"
    for block in range(max(1, tile // lanes)):
        names = [f"%sum{block * lanes + r}" if r < width else "zeroinitializer" for r in range(lanes)]
        lines, rows = _transpose(lanes, names, f"t{block}")
        out += lines
        for c in range(lanes):
            tag = f"{block}.{c}"
            out += [f"  %o.row{tag} = mul i64 %cols, {c}", f"  %o.at{tag} = add i64 %o.row{tag}, {block * lanes}",
                    f"  %o.p{tag} = getelementptr float, float* %out, i64 %o.at{tag}",
                    f"  %o.q{tag} = bitcast float* %o.p{tag} to {part}*"]
            value = rows[c]
            if width < lanes:
                value = f"%o.v{tag}"
                out.append(f"  {value} = shufflevector {vec} {rows[c]}, {vec} undef, "
                           f"<{width} x i32> {_mask(list(range(width)))}")
            out.append(f"  store {part} {value}, {part}* %o.q{tag}, align 4")
    return out + ["  ret void", "}"]


def _driver_ir(lanes: int, tile: int) -> list[str]:
    """``pgemm_L_T(W, rowoff, X, out, k, positions, images, xstep, ostep, cols, blocks)``: for
    each image ``i`` and channel block ``b``, ``out_i[(b * lanes + c) * cols + p] = sum_k
    X_i[rowoff[k] + p] * W[(b * k + kk) * lanes + c]`` for ``p`` in ``[0, positions)`` rounded
    up to ``tile`` (the grid must be readable that far; ``cols`` >= that), with ``X_i = X + i *
    xstep`` and ``out_i = out + i * ostep`` (floats); ``k`` >= 1."""
    out = [f"define void @{entry_name(lanes, tile)}(float* noalias nocapture readonly %W, "
           "i64* noalias nocapture readonly %rowoff, float* noalias nocapture readonly %X, "
           "float* noalias nocapture %out, i64 %k, i64 %positions, i64 %images, i64 %xstep, i64 %ostep, "
           "i64 %cols, i64 %blocks) {",
           "entry:", "  %no.k = icmp eq i64 %k, 0", "  %no.p = icmp eq i64 %positions, 0",
           "  %no.i = icmp eq i64 %images, 0", "  %no.b = icmp eq i64 %blocks, 0",
           "  %none.1 = or i1 %no.k, %no.p", "  %none.2 = or i1 %none.1, %no.i", "  %none = or i1 %none.2, %no.b",
           f"  %w.block = mul i64 %k, {lanes}", f"  %o.block = mul i64 %cols, {lanes}",
           "  br i1 %none, label %exit, label %image",
           "image:", "  %img = phi i64 [0, %entry], [%img.next, %image.done]",
           "  %x.off = mul i64 %img, %xstep", "  %x.img = getelementptr float, float* %X, i64 %x.off",
           "  %o.off = mul i64 %img, %ostep", "  %o.img = getelementptr float, float* %out, i64 %o.off",
           "  br label %block",
           "block:", "  %b = phi i64 [0, %image], [%b.next, %block.done]",
           "  %w.off = mul i64 %b, %w.block", "  %w.b = getelementptr float, float* %W, i64 %w.off",
           "  %ob.off = mul i64 %b, %o.block", "  %o.b = getelementptr float, float* %o.img, i64 %ob.off",
           "  br label %tiles",
           "tiles:", "  %p = phi i64 [0, %block], [%p.next, %tiles]",
           "  %x.tile = getelementptr float, float* %x.img, i64 %p",
           "  %o.tile = getelementptr float, float* %o.b, i64 %p",
           f"  call void @ptile_{lanes}_{tile}(float* %x.tile, i64* %rowoff, float* %w.b, float* %o.tile, i64 %k, "
           "i64 %cols)",
           f"  %p.next = add i64 %p, {tile}", "  %p.end = icmp uge i64 %p.next, %positions",
           "  br i1 %p.end, label %block.done, label %tiles",
           "block.done:", "  %b.next = add i64 %b, 1", "  %b.end = icmp uge i64 %b.next, %blocks",
           "  br i1 %b.end, label %image.done, label %block",
           "image.done:", "  %img.next = add i64 %img, 1", "  %img.end = icmp uge i64 %img.next, %images",
           "  br i1 %img.end, label %exit, label %image",
           "exit:", "  ret void", "}"]
    return out


def module_ir() -> str:
    """Every register width and tile size of this CPU's tile and driver, in typed-pointer syntax."""
    out: list[str] = []
    for lanes in LANE_WIDTHS:
        out.append(f"declare {_vec(lanes)} @llvm.fma.v{lanes}f32({_vec(lanes)}, {_vec(lanes)}, {_vec(lanes)})")
    for lanes in LANE_WIDTHS:
        for tile in TILE_SIZES:
            out += _tile_ir(lanes, tile) + _driver_ir(lanes, tile)
    return "\n".join(out)
