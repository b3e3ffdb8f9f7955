"""LLVM IR text of the store that turns ``cgemm``'s position-major product into a channel-major
convolution output (``kernels_conv_rows`` compiles it with llvmlite and calls it from its
compiled shares).

Why IR: the product is ``acc[p, channel]`` and the output ``y[channel, p]``; in numba the
transposition read the product with a stride per element (the 7x7 RGB stem's 800 K outputs:
~0.6 ms of a 1.9 ms layer). Here a block of 16 positions x 16 channels is 16 vector loads,
a transposition in registers (``position_gemm_ir._transpose``: four rounds of shuffles) and,
per channel, the bias, the residual, the activation and one vector store. The arithmetic is
the scalar store's, in its order (``(acc + bias) + z``, then ``activations.activate``'s
comparisons), so the bits are the same. Only whole 16 x 16 blocks are done here; the caller
stores the edges.
"""

from __future__ import annotations

from .position_gemm_ir import _transpose

LANES = 16
_VEC = "<16 x float>"
ENTRY = "rows_store"


def _activation(name: str) -> list[str]:
    """``%{name}.out``: ``%{name}`` through the activation ``%act`` (0 none, 1 Relu, 2 LeakyRelu
    with ``%alpha.v``, 3 Clip between ``%alpha.v`` and ``%beta.v``), NaN kept as
    ``activations.activate`` keeps it."""
    v = f"%{name}"
    return [f"  {v}.neg = fcmp olt {_VEC} {v}, zeroinitializer",
            f"  {v}.relu = select <16 x i1> {v}.neg, {_VEC} zeroinitializer, {_VEC} {v}",
            f"  {v}.nonneg = fcmp oge {_VEC} {v}, zeroinitializer",
            f"  {v}.scaled = fmul {_VEC} {v}, %alpha.v",
            f"  {v}.leaky = select <16 x i1> {v}.nonneg, {_VEC} {v}, {_VEC} {v}.scaled",
            f"  {v}.high = fcmp ogt {_VEC} {v}, %beta.v",
            f"  {v}.low = fcmp olt {_VEC} {v}, %alpha.v",
            f"  {v}.lowed = select <16 x i1> {v}.low, {_VEC} %alpha.v, {_VEC} {v}",
            f"  {v}.clip = select <16 x i1> {v}.high, {_VEC} %beta.v, {_VEC} {v}.lowed",
            f"  {v}.a3 = select i1 %is.clip, {_VEC} {v}.clip, {_VEC} {v}",
            f"  {v}.a2 = select i1 %is.leaky, {_VEC} {v}.leaky, {_VEC} {v}.a3",
            f"  {v}.out = select i1 %is.relu, {_VEC} {v}.relu, {_VEC} {v}.a2"]


def _splat(name: str, scalar: str) -> list[str]:
    return [f"  {name}.one = insertelement {_VEC} undef, float {scalar}, i32 0",
            f"  {name} = shufflevector {_VEC} {name}.one, {_VEC} undef, <16 x i32> zeroinitializer"]


def module_ir() -> str:
    """``rows_store(acc, ldo, bias, z, y, positions, ch0, ch1, q0, q1, act, params)``: for every
    whole block of 16 positions in [q0, q1) and 16 channels in [ch0, ch1), ``y[ch * positions +
    p] = act(acc[(p - q0) * ldo + ch] + bias[ch] (+ z[ch * positions + p]))``; ``z`` null for
    no residual, ``params`` the activation's two float32 parameters."""
    out = ["define void @rows_store(float* noalias nocapture readonly %acc, i64 %ldo, "
           "float* noalias nocapture readonly %bias, float* noalias nocapture readonly %z, "
           "float* noalias nocapture %y, i64 %positions, i64 %ch0, i64 %ch1, i64 %q0, i64 %q1, i64 %act, "
           "float* noalias nocapture readonly %params) {",
           "entry:",
           "  %alpha.p = getelementptr float, float* %params, i64 0", "  %alpha = load float, float* %alpha.p",
           "  %beta.p = getelementptr float, float* %params, i64 1", "  %beta = load float, float* %beta.p",
           *_splat("%alpha.v", "%alpha"), *_splat("%beta.v", "%beta"),
           "  %is.relu = icmp eq i64 %act, 1", "  %is.leaky = icmp eq i64 %act, 2", "  %is.clip = icmp eq i64 %act, 3",
           "  %has.z = icmp ne float* %z, null",
           "  %np = sub i64 %q1, %q0", "  %np.blocks = lshr i64 %np, 4", "  %nc = sub i64 %ch1, %ch0",
           "  %nc.blocks = lshr i64 %nc, 4", "  %none.p = icmp eq i64 %np.blocks, 0",
           "  %none.c = icmp eq i64 %nc.blocks, 0", "  %none = or i1 %none.p, %none.c",
           "  br i1 %none, label %exit, label %pblock",
           "pblock:", "  %pb = phi i64 [0, %entry], [%pb.next, %pblock.done]",
           "  %p.rel = shl i64 %pb, 4", "  %p.abs = add i64 %q0, %p.rel", "  br label %cblock",
           "cblock:", "  %cb = phi i64 [0, %pblock], [%cb.next, %cblock.done]",
           "  %c.rel = shl i64 %cb, 4", "  %c.abs = add i64 %ch0, %c.rel"]
    rows = []
    for r in range(LANES):  # position r of the block: 16 channels
        out += [f"  %a.row{r} = add i64 %p.rel, {r}", f"  %a.off{r} = mul i64 %a.row{r}, %ldo",
                f"  %a.at{r} = add i64 %a.off{r}, %c.abs",
                f"  %a.p{r} = getelementptr float, float* %acc, i64 %a.at{r}",
                f"  %a.q{r} = bitcast float* %a.p{r} to {_VEC}*", f"  %a{r} = load {_VEC}, {_VEC}* %a.q{r}, align 4"]
        rows.append(f"%a{r}")
    lines, channels = _transpose(LANES, rows, "t")
    out += lines
    for c in range(LANES):  # channel c of the block: 16 positions
        tag = f"c{c}"
        out += [f"  %{tag}.ch = add i64 %c.abs, {c}",
                f"  %{tag}.b.p = getelementptr float, float* %bias, i64 %{tag}.ch",
                f"  %{tag}.b = load float, float* %{tag}.b.p", *_splat(f"%{tag}.bv", f"%{tag}.b"),
                f"  %{tag}.sum = fadd {_VEC} {channels[c]}, %{tag}.bv",
                f"  %{tag}.row = mul i64 %{tag}.ch, %positions", f"  %{tag}.at = add i64 %{tag}.row, %p.abs",
                f"  br i1 %has.z, label %{tag}.z, label %{tag}.noz",
                f"{tag}.z:", f"  %{tag}.z.p = getelementptr float, float* %z, i64 %{tag}.at",
                f"  %{tag}.z.q = bitcast float* %{tag}.z.p to {_VEC}*",
                f"  %{tag}.zv = load {_VEC}, {_VEC}* %{tag}.z.q, align 4",
                f"  %{tag}.withz = fadd {_VEC} %{tag}.sum, %{tag}.zv", f"  br label %{tag}.noz",
                f"{tag}.noz:",
                f"  %{tag}.v = phi {_VEC} [%{tag}.sum, %{'cblock' if c == 0 else f'c{c - 1}.post'}], "
                f"[%{tag}.withz, %{tag}.z]"]
        out += _activation(f"{tag}.v")
        out += [f"  %{tag}.y.p = getelementptr float, float* %y, i64 %{tag}.at",
                f"  %{tag}.y.q = bitcast float* %{tag}.y.p to {_VEC}*",
                f"  store {_VEC} %{tag}.v.out, {_VEC}* %{tag}.y.q, align 4", f"  br label %{tag}.post", f"{tag}.post:"]
    out += ["  br label %cblock.done", "cblock.done:", "  %cb.next = add i64 %cb, 1",
            "  %cb.end = icmp uge i64 %cb.next, %nc.blocks", "  br i1 %cb.end, label %pblock.done, label %cblock",
            "pblock.done:", "  %pb.next = add i64 %pb, 1", "  %pb.end = icmp uge i64 %pb.next, %np.blocks",
            "  br i1 %pb.end, label %exit, label %pblock",
            "exit:", "  ret void", "}"]
    return "\n".join(out)
