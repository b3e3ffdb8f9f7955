"""Hand-written CUDA kernels (row-wise softmax / layer norm, im2col, 2-D pooling).

Each is a template over the storage type (``float`` or ``unsigned short`` for float16,
converted with the same header-free PTX helpers as :mod:`codegen`); compute is float.
:func:`all_sources` lists every variant so tests can compile them with NVRTC without a GPU.
"""

from __future__ import annotations

from .codegen import PRELUDE

_T = {"float32": ("float", "{p}", "{v}"), "float16": ("unsigned short", "ep_h2f({p})", "ep_f2h({v})")}

_REDUCE = r"""
template <bool IS_MAX>
__device__ __forceinline__ float ep_block_reduce(float v, float* shared) {
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = IS_MAX ? fmaxf(v, w) : v + w;
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    int nwarps = (blockDim.x + 31) >> 5;
    v = (threadIdx.x < nwarps) ? shared[threadIdx.x] : (IS_MAX ? (-__int_as_float(0x7f800000)) : 0.f);
    if (warp == 0) {
        for (int o = 16; o > 0; o >>= 1) {
            float w = __shfl_xor_sync(0xffffffffu, v, o);
            v = IS_MAX ? fmaxf(v, w) : v + w;
        }
        if (lane == 0) shared[0] = v;
    }
    __syncthreads();
    return shared[0];
}
"""


def softmax_source(dtype: str, log: bool = False) -> tuple[str, str]:
    """One block per row of ``cols`` elements: max, sum of exp, write (log-)softmax."""
    ctype, load, store = _T[dtype]
    name = f"epoxy_{'log' if log else ''}softmax_{dtype}"
    out = "(v - m - logf(s))" if log else "(expf(v - m) / s)"
    src = PRELUDE + _REDUCE + f"""
extern "C" __global__ void {name}(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, long long cols) {{
    __shared__ float shared[32];
    const {ctype}* row = x + (long long)blockIdx.x * cols;
    {ctype}* out = y + (long long)blockIdx.x * cols;
    float m = (-__int_as_float(0x7f800000));
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, {load.format(p='row[j]')});
    m = ep_block_reduce<true>(m, shared);
    float s = 0.f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += expf({load.format(p='row[j]')} - m);
    s = ep_block_reduce<false>(s, shared);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        float v = {load.format(p='row[j]')};
        out[j] = {store.format(v=out)};
    }}
}}
"""
    return name, src


def layernorm_source(dtype: str, has_bias: bool) -> tuple[str, str]:
    """One block per row: mean and variance (two passes over the row), scale and shift."""
    ctype, load, store = _T[dtype]
    name = f"epoxy_layernorm_{dtype}{'_bias' if has_bias else ''}"
    bias = f" + {load.format(p='b[j]')}" if has_bias else ""
    bparam = f", const {ctype}* __restrict__ b" if has_bias else ""
    src = (
        PRELUDE
        + _REDUCE
        + f"""
extern "C" __global__ void {name}(const {ctype}* __restrict__ x, const {ctype}* __restrict__ g{bparam},
                                  {ctype}* __restrict__ y, long long cols, float eps) {{
    __shared__ float shared[32];
    const {ctype}* row = x + (long long)blockIdx.x * cols;
    {ctype}* out = y + (long long)blockIdx.x * cols;
    float s = 0.f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s += {load.format(p="row[j]")};
    float mean = ep_block_reduce<false>(s, shared) / (float)cols;
    float q = 0.f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{ float d = {load.format(p="row[j]")} - mean; q += d * d; }}
    float rstd = rsqrtf(ep_block_reduce<false>(q, shared) / (float)cols + eps);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        float v = ({load.format(p="row[j]")} - mean) * rstd * {load.format(p="g[j]")}{bias};
        out[j] = {store.format(v="v")};
    }}
}}
"""
    )
    return name, src


def im2col_source(dtype: str) -> tuple[str, str]:
    """cols[n, c*KH*KW + kh*KW + kw, oh*OW + ow] = x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw] (0 outside)."""
    ctype, _load, _store = _T[dtype]
    name = f"epoxy_im2col_{dtype}"
    src = f"""
extern "C" __global__ void {name}(const {ctype}* __restrict__ x, {ctype}* __restrict__ cols, long long total,
        int C, int H, int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh, int dw) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)blockDim.x * gridDim.x) {{
        int ow = (int)(i % OW); long long r = i / OW;
        int oh = (int)(r % OH); r /= OH;
        int kw = (int)(r % KW); r /= KW;
        int kh = (int)(r % KH); r /= KH;
        int c = (int)(r % C); long long n = r / C;
        int h = oh * sh - ph + kh * dh, w = ow * sw - pw + kw * dw;
        {ctype} v = ({ctype})0;
        if (h >= 0 && h < H && w >= 0 && w < W) v = x[((n * C + c) * H + h) * (long long)W + w];
        cols[i] = v;
    }}
}}
"""
    return name, src


def pool_source(dtype: str, mode: str) -> tuple[str, str]:
    """2-D max / average pooling, one thread per output element (NCHW)."""
    ctype, load, store = _T[dtype]
    name = f"epoxy_{mode}pool_{dtype}"
    init = "(-__int_as_float(0x7f800000))" if mode == "max" else "0.f"
    acc = "acc = fmaxf(acc, v);" if mode == "max" else "acc += v;"
    finish = "acc" if mode == "max" else "acc / (float)(count_pad ? full : cnt)"
    src = (
        PRELUDE
        + f"""
extern "C" __global__ void {name}(const {ctype}* __restrict__ x, {ctype}* __restrict__ y, long long total,
        int H, int W, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh, int dw,
        int count_pad, int pad_h_end, int pad_w_end) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)blockDim.x * gridDim.x) {{
        int ow = (int)(i % OW); long long r = i / OW;
        int oh = (int)(r % OH); long long nc = r / OH;
        const {ctype}* plane = x + nc * (long long)H * W;
        float acc = {init};
        int cnt = 0, full = 0;
        for (int kh = 0; kh < KH; ++kh) {{
            int h = oh * sh - ph + kh * dh;
            for (int kw = 0; kw < KW; ++kw) {{
                int w = ow * sw - pw + kw * dw;
                if (h >= -ph && h < H + pad_h_end && w >= -pw && w < W + pad_w_end) full++;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                float v = {load.format(p="plane[h * W + w]")};
                {acc}
                cnt++;
            }}
        }}
        y[i] = {store.format(v=finish)};
    }}
}}
"""
    )
    return name, src


def all_sources() -> list[tuple[str, str]]:
    """Every hand-written kernel variant (for the NVRTC compile test)."""
    out = []
    for dt in _T:
        out += [softmax_source(dt), softmax_source(dt, log=True), layernorm_source(dt, True),
                layernorm_source(dt, False), im2col_source(dt), pool_source(dt, "max"), pool_source(dt, "avg")]
    return out
