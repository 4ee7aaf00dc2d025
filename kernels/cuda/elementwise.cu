/* The element-wise and row-wise CUDA kernels, each the twin of a CPU kernel:
 *   lh_cuda_embedding    row gather + widening          kernels/cpu/convert.c (lh_cpu_embedding)
 *   lh_cuda_rmsnorm      RMSNorm, fused residual add     kernels/cpu/norm.c
 *   lh_cuda_silu_mul     silu(gate) * up                 kernels/cpu/activation.c, vec_scalar.c
 *   lh_cuda_gelu_tanh_mul gelu_tanh(gate) * up           kernels/cpu/activation.c
 *   lh_cuda_scale        x *= s in place                 kernels/cpu/activation.c (vec_scalar.c)
 *   lh_cuda_softmax      in-place row softmax            kernels/cpu/activation.c
 *   lh_cuda_argmax       first index of each row's max   kernels/cpu/activation.c
 *   lh_cuda_convert      f32/bf16/f16 conversions        kernels/cpu/convert.c
 *   lh_cuda_rope_apply   rotary embedding (both pair     kernels/cpu/rope.c (apply section)
 *                        layouts: rotate_half, interleaved)
 *   lh_cuda_gather_rows  dst[i] = src[rows[i]]           (lh_k_gather_rows)
 *
 * Mapping: element-wise kernels are grid-stride loops over the flat index (64-bit); row
 * kernels give one block per row (grid-stride over rows), and every thread owns the same
 * indices of its row in every pass, so a row may be read, reduced over the block and then
 * written in place (rmsnorm's out == x and residual == out, softmax in place) with no thread
 * reading what another one wrote. Launch shapes depend on tensor shapes only (graph replay);
 * ids, positions, rows and the RoPE frequencies arrive through lh_cu_stage.
 *
 * Numerics follow the scalar CPU code operation by operation where it matters: RMSNorm's
 * r = 1 / sqrtf(mean + eps) and (x * r) * (w + offset); silu g / (1 + expf(-g)) * u; softmax
 * expf(x - max) then one multiplication by 1 / sum; RoPE without fused multiply-adds (torch);
 * only the summation order of the row reductions differs (block trees instead of four running
 * sums). Division and sqrtf are IEEE (nvcc's defaults, -prec-div/-prec-sqrt). */
#include "cuda_rt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536u
#define ROW_MAX_BLOCKS 65536u

static unsigned ew_blocks(int64_t n)
{
    const unsigned b = lh_cu_blocks(n, EW_THREADS);
    return b < EW_MAX_BLOCKS ? b : EW_MAX_BLOCKS;
}

static unsigned row_blocks(int64_t rows)
{
    return rows < (int64_t)ROW_MAX_BLOCKS ? (unsigned)rows : ROW_MAX_BLOCKS;
}

/* Threads per row block: enough to keep a long row's passes short, few enough that short rows
 * do not leave most threads idle. */
static unsigned row_threads(int64_t n)
{
    return n <= 1024 ? 128u : n <= 4096 ? 256u : n <= 16384 ? 512u : 1024u;
}

/* Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); sh holds 32 floats. The
 * leading barrier lets a block call these back to back on the same sh. */
static __device__ float block_sum(float v, float *sh)
{
    const int lane = (int)(threadIdx.x & 31u), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    v = lh_cu_warp_sum(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lh_cu_warp_sum(lane < nw ? sh[lane] : 0.0f);
        if (lane == 0)
            sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

static __device__ float block_max(float v, float *sh)
{
    const int lane = (int)(threadIdx.x & 31u), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    v = lh_cu_warp_max(v);
    __syncthreads();
    if (lane == 0)
        sh[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lh_cu_warp_max(lane < nw ? sh[lane] : -INFINITY);
        if (lane == 0)
            sh[0] = v;
    }
    __syncthreads();
    return sh[0];
}

static __device__ __forceinline__ void store_dt(void *p, int dt, int64_t i, float v)
{
    switch (dt) {
    case LH_DTYPE_BF16: ((uint16_t *)p)[i] = lh_cu_f32_to_bf16(v); break;
    case LH_DTYPE_F16: ((uint16_t *)p)[i] = lh_cu_f32_to_f16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* ---- embedding -------------------------------------------------------------------------------- */

struct emb_args {
    const void *table;
    const int32_t *ids; /* staged, [n], checked by the dispatch */
    float *out;
    int64_t n, D;
    int dt;
    int pad_;
};

static __global__ void embedding_kernel(const emb_args a)
{
    for (int64_t row = blockIdx.x; row < a.n; row += gridDim.x) {
        const int64_t base = (int64_t)a.ids[row] * a.D;
        float *o = a.out + row * a.D;
        for (int64_t i = threadIdx.x; i < a.D; i += blockDim.x)
            o[i] = lh_cu_load(a.table, a.dt, base + i);
    }
}

lh_status lh_cuda_embedding(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids, int64_t n,
                            lh_tensor *out)
{
    const int64_t D = table->shape[1];
    if (n == 0 || D == 0)
        return LH_OK;
    lh_status st = LH_OK;
    const int32_t *dids = (const int32_t *)lh_cu_stage(ctx, ids, (size_t)n * sizeof(int32_t), &st);
    if (!dids)
        return st;
    if (lh_cu_is_block(table->dtype))
        return lh_cu_embedding_blocks(ctx, table, dids, n, out, false);
    emb_args a;
    memset(&a, 0, sizeof a);
    a.table = table->data;
    a.ids = dids;
    a.out = (float *)out->data;
    a.n = n;
    a.D = D;
    a.dt = (int)table->dtype;
    return LH_CU_LAUNCH(ctx, embedding_kernel, dim3(row_blocks(n)), dim3(row_threads(D)), 0, a);
}

/* ---- RMSNorm ------------------------------------------------------------------------------------ */

struct rms_args {
    float *res; /* NULL: plain RMSNorm */
    const float *x;
    const void *w;
    float *out; /* may be x, or res */
    int64_t rows, D;
    float eps, offset;
    int wdt;
    int pad_;
};

/* No __restrict__ and no read-only loads here: out may alias x or res. */
static __global__ void rmsnorm_kernel(const rms_args a)
{
    __shared__ float sh[32];
    const int64_t D = a.D;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const float *xr = a.x + row * D;
        float *rr = a.res ? a.res + row * D : NULL;
        float *orow = a.out + row * D;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            float v = xr[i];
            if (rr) {
                v = rr[i] + v; /* residual += x */
                rr[i] = v;
            }
            ss += v * v;
        }
        const float var = block_sum(ss, sh) / (float)D;
        const float r = 1.0f / sqrtf(var + a.eps);
        /* The same thread reads back what it wrote above (res), then writes out: aliasing of
         * out with x or res is safe index by index. */
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            const float v = rr ? rr[i] : xr[i];
            float wf = lh_cu_load(a.w, a.wdt, i);
            if (a.offset != 0.0f)
                wf = wf + a.offset;
            orow[i] = (v * r) * wf;
        }
    }
}

lh_status lh_cuda_rmsnorm(lh_kctx *ctx, lh_tensor *residual, const lh_tensor *x,
                          const lh_tensor *w, float eps, float offset, lh_tensor *out)
{
    const int64_t D = x->shape[x->ndim - 1];
    const int64_t rows = D ? lh_cpu_numel(x) / D : 0;
    if (rows == 0 || D == 0)
        return LH_OK;
    rms_args a;
    memset(&a, 0, sizeof a);
    a.res = residual ? (float *)residual->data : NULL;
    a.x = (const float *)x->data;
    a.w = w->data;
    a.out = (float *)out->data;
    a.rows = rows;
    a.D = D;
    a.eps = eps;
    a.offset = offset;
    a.wdt = (int)w->dtype;
    return LH_CU_LAUNCH(ctx, rmsnorm_kernel, dim3(row_blocks(rows)), dim3(row_threads(D)), 0, a);
}

/* ---- SiLU-gated product --------------------------------------------------------------------- */

struct silu_args {
    const float *g, *u;
    float *out; /* may be g or u (exact alias) */
    int64_t n;
};

static __global__ void silu_mul_kernel(const silu_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        const float g = a.g[i], u = a.u[i];
        a.out[i] = g / (1.0f + expf(-g)) * u;
    }
}

/* Both gated products: out = act(gate) * up elementwise. */
static lh_status launch_gated(lh_kctx *ctx, const void *kernel, const char *name,
                              const lh_tensor *gate, const lh_tensor *up, lh_tensor *out)
{
    const int64_t n = lh_cpu_numel(gate);
    if (n == 0)
        return LH_OK;
    silu_args a;
    memset(&a, 0, sizeof a);
    a.g = (const float *)gate->data;
    a.u = (const float *)up->data;
    a.out = (float *)out->data;
    a.n = n;
    return lh_cu_launch(ctx, kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, &a, sizeof a, name,
                        __FILE__, __LINE__);
}

lh_status lh_cuda_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                           lh_tensor *out)
{
    return launch_gated(ctx, (const void *)silu_mul_kernel, "silu_mul_kernel", gate, up, out);
}

/* ---- GELU (tanh approximation)-gated product, scale ------------------------------------------ */

static __global__ void gelu_tanh_mul_kernel(const silu_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        const float x = a.g[i], u = a.u[i];
        /* as the CPU: no fused multiply-adds, tanhf */
        const float x3 = __fmul_rn(__fmul_rn(x, x), x);
        const float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(x, __fmul_rn(0.044715f, x3)));
        a.out[i] = __fmul_rn(__fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner))), u);
    }
}

lh_status lh_cuda_gelu_tanh_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                                lh_tensor *out)
{
    return launch_gated(ctx, (const void *)gelu_tanh_mul_kernel, "gelu_tanh_mul_kernel", gate, up,
                        out);
}

struct scale_args {
    float *x;
    int64_t n;
    float s;
    int pad_;
};

static __global__ void scale_kernel(const scale_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.x[i] *= a.s;
}

lh_status lh_cuda_scale(lh_kctx *ctx, lh_tensor *x, float s)
{
    const int64_t n = lh_cpu_numel(x);
    if (n == 0)
        return LH_OK;
    scale_args a;
    memset(&a, 0, sizeof a); /* hashed for graph replay: no stray padding bytes */
    a.x = (float *)x->data;
    a.n = n;
    a.s = s;
    return LH_CU_LAUNCH(ctx, scale_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, a);
}

/* ---- softmax ------------------------------------------------------------------------------------ */

struct softmax_args {
    float *x;
    int64_t rows, N;
};

static __global__ void softmax_kernel(const softmax_args a)
{
    __shared__ float sh[32];
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        float *xr = a.x + row * a.N;
        float m = -INFINITY;
        for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x)
            m = lh_cu_max_gt(m, xr[i]);
        m = block_max(m, sh);
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
            const float e = expf(xr[i] - m);
            xr[i] = e;
            s += e;
        }
        const float inv = 1.0f / block_sum(s, sh);
        for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x)
            xr[i] *= inv;
    }
}

lh_status lh_cuda_softmax(lh_kctx *ctx, lh_tensor *x)
{
    const int64_t N = x->shape[x->ndim - 1];
    if (N == 0)
        return LH_OK;
    const int64_t rows = lh_cpu_numel(x) / N;
    if (rows == 0)
        return LH_OK;
    softmax_args a;
    memset(&a, 0, sizeof a);
    a.x = (float *)x->data;
    a.rows = rows;
    a.N = N;
    return LH_CU_LAUNCH(ctx, softmax_kernel, dim3(row_blocks(rows)), dim3(row_threads(N)), 0, a);
}

/* ---- argmax ------------------------------------------------------------------------------------- */

struct argmax_args {
    const float *x;
    int32_t *out; /* device scratch [rows]; -1 for a row holding a NaN */
    int64_t rows, N;
};

/* (value, index) pairs: the larger value wins, the lower index among equal values; an index of
 * INT32_MAX marks "no element" (N <= INT32_MAX, so real indices are smaller). */
static __device__ __forceinline__ void am_merge(float &v, int32_t &i, float ov, int32_t oi)
{
    if (ov > v || (ov == v && oi < i)) {
        v = ov;
        i = oi;
    }
}

static __global__ void argmax_kernel(const argmax_args a)
{
    __shared__ float shv[32];
    __shared__ int32_t shi[32];
    const int lane = (int)(threadIdx.x & 31u), w = (int)(threadIdx.x >> 5);
    const int nw = (int)(blockDim.x >> 5);
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const float *xr = a.x + row * a.N;
        float bv = -INFINITY;
        int32_t bi = INT32_MAX;
        int nan = 0;
        if ((int64_t)threadIdx.x < a.N) { /* start from the thread's first element, as the CPU
                                           * starts from index 0, so a row of -inf gives 0 */
            bv = xr[threadIdx.x];
            bi = (int32_t)threadIdx.x;
            nan = bv != bv;
        }
        for (int64_t i = threadIdx.x + blockDim.x; i < a.N; i += blockDim.x) {
            const float v = xr[i];
            nan |= v != v;
            if (v > bv) {
                bv = v;
                bi = (int32_t)i;
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
            am_merge(bv, bi, ov, oi);
        }
        nan = __syncthreads_or(nan); /* also orders this row's shared use after the last one */
        if (lane == 0) {
            shv[w] = bv;
            shi[w] = bi;
        }
        __syncthreads();
        if (w == 0) {
            bv = lane < nw ? shv[lane] : -INFINITY;
            bi = lane < nw ? shi[lane] : INT32_MAX;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
                am_merge(bv, bi, ov, oi);
            }
            if (lane == 0)
                a.out[row] = nan ? -1 : bi;
        }
    }
}

lh_status lh_cuda_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out)
{
    const int64_t N = x->shape[x->ndim - 1];
    if (N == 0)
        return LH_OK;
    const int64_t rows = lh_cpu_numel(x) / N;
    if (rows == 0)
        return LH_OK;
    lh_status st = LH_OK;
    int32_t *d = (int32_t *)lh_cu_scratch(ctx, (size_t)rows * sizeof(int32_t), &st);
    if (!d)
        return st;
    argmax_args a;
    memset(&a, 0, sizeof a);
    a.x = (const float *)x->data;
    a.out = d;
    a.rows = rows;
    a.N = N;
    st = LH_CU_LAUNCH(ctx, argmax_kernel, dim3(row_blocks(rows)), dim3(row_threads(N)), 0, a);
    if (st != LH_OK)
        return st;
    st = lh_cu_download(ctx, "lh_k_argmax", out, d, (size_t)rows * sizeof(int32_t));
    if (st != LH_OK)
        return st;
    int64_t bad = 0, first = -1;
    for (int64_t r = 0; r < rows; r++)
        if (out[r] < 0) {
            if (first < 0)
                first = r;
            bad++;
        }
    if (bad)
        return lh_kerr(ctx, LH_E_USAGE,
                       "lh_k_argmax: row %lld of x [%lld, %lld] contains NaN (%lld row(s) with NaN; "
                       "their out[] is -1)",
                       (long long)first, (long long)rows, (long long)N, (long long)bad);
    return LH_OK;
}

/* ---- dtype conversion ------------------------------------------------------------------------- */

struct convert_args {
    const void *src;
    void *dst;
    int64_t n;
    int sdt, ddt;
};

static __global__ void convert_kernel(const convert_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        if (a.sdt == a.ddt) { /* a copy, bits as they are (as the CPU's memcpy) */
            if (a.sdt == LH_DTYPE_F32)
                ((uint32_t *)a.dst)[i] = ((const uint32_t *)a.src)[i];
            else
                ((uint16_t *)a.dst)[i] = ((const uint16_t *)a.src)[i];
        } else { /* widening is exact, so bf16 <-> f16 rounds once, as on the CPU */
            store_dt(a.dst, a.ddt, i, lh_cu_load(a.src, a.sdt, i));
        }
    }
}

lh_status lh_cuda_convert(lh_kctx *ctx, const lh_tensor *src, lh_tensor *dst)
{
    const int64_t n = lh_cpu_numel(src);
    if (n == 0 || (src->dtype == dst->dtype && src->data == dst->data))
        return LH_OK;
    convert_args a;
    memset(&a, 0, sizeof a);
    a.src = src->data;
    a.dst = dst->data;
    a.n = n;
    a.sdt = (int)src->dtype;
    a.ddt = (int)dst->dtype;
    return LH_CU_LAUNCH(ctx, convert_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, a);
}

/* ---- RoPE --------------------------------------------------------------------------------------- */

struct rope_args {
    float *x;            /* [T, H, D] */
    const int32_t *pos;  /* staged [T] */
    const float *inv;    /* staged [half], right after pos */
    int64_t T, H, D, half;
    float att;
    int inter; /* interleaved pairs (2i, 2i + 1) instead of (i, half + i) */
};

/* One thread per (token, head, pair i): lo = x[i], hi = x[half + i] (interleaved: lo = x[2i],
 * hi = x[2i + 1]). cos and sin are taken in double and rounded, times attention_scaling,
 * exactly as lh_cpu_rope_cos_sin; the products and sums are rounded one by one (no fused
 * multiply-add), as lh_cpu_rope_heads and torch: lo' = lo c - hi s, hi' = hi c + lo s. */
static __global__ void rope_kernel(const rope_args a)
{
    const int64_t total = a.T * a.H * a.half, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step) {
        const int64_t i = idx % a.half, th = idx / a.half;
        const int64_t t = th / a.H;
        const float f = __fmul_rn((float)a.pos[t], a.inv[i]);
        double sd, cd;
        sincos((double)f, &sd, &cd);
        const float c = __fmul_rn((float)cd, a.att), s = __fmul_rn((float)sd, a.att);
        float *lo = a.x + th * a.D + (a.inter ? 2 * i : i), *hi = lo + (a.inter ? 1 : a.half);
        const float l = *lo, h = *hi;
        *lo = __fsub_rn(__fmul_rn(l, c), __fmul_rn(h, s));
        *hi = __fadd_rn(__fmul_rn(h, c), __fmul_rn(l, s));
    }
}

lh_status lh_cuda_rope_apply(lh_kctx *ctx, const lh_rope *rope, lh_tensor *x,
                             const int32_t *positions, int64_t seq_len)
{
    const int64_t T = x->shape[0], H = x->shape[1], D = x->shape[2];
    const int64_t half = rope->rotary_dim / 2;
    if (T == 0 || H == 0 || half == 0)
        return LH_OK;
    /* Positions and frequencies travel in one staged block (one host buffer): the frequencies
     * for seq_len (dynamic: computed; longrope: the short or the long table) are chosen here
     * on the host, by the CPU's code. */
    const size_t pos_bytes = (size_t)T * sizeof(int32_t), inv_bytes = (size_t)half * sizeof(float);
    unsigned char *host = (unsigned char *)malloc(pos_bytes + inv_bytes);
    if (!host)
        return lh_kerr(ctx, LH_E_NOMEM, "lh_k_rope_apply: out of host memory (%zu bytes)",
                       pos_bytes + inv_bytes);
    memcpy(host, positions, pos_bytes);
    float *inv_buf = (float *)(host + pos_bytes); /* 4-byte aligned: pos_bytes is 4 * T */
    const float *inv = lh_cpu_rope_inv(rope, seq_len, inv_buf);
    if (inv != inv_buf)
        memcpy(inv_buf, inv, inv_bytes);
    lh_status st = LH_OK;
    unsigned char *dev = (unsigned char *)lh_cu_stage(ctx, host, pos_bytes + inv_bytes, &st);
    free(host);
    if (!dev)
        return st;
    rope_args a;
    memset(&a, 0, sizeof a);
    a.x = (float *)x->data;
    a.pos = (const int32_t *)dev;
    a.inv = (const float *)(dev + pos_bytes);
    a.T = T;
    a.H = H;
    a.D = D;
    a.half = half;
    a.att = rope->attention_scaling;
    a.inter = rope->interleaved ? 1 : 0;
    return LH_CU_LAUNCH(ctx, rope_kernel, dim3(ew_blocks(T * H * half)), dim3(EW_THREADS), 0, a);
}

/* ---- row gather --------------------------------------------------------------------------------- */

struct gather_args {
    const float *src;
    const int64_t *rows; /* staged [n] */
    float *dst;
    int64_t n, D;
};

static __global__ void gather_rows_kernel(const gather_args a)
{
    for (int64_t row = blockIdx.x; row < a.n; row += gridDim.x) {
        const float *s = a.src + a.rows[row] * a.D;
        float *d = a.dst + row * a.D;
        for (int64_t i = threadIdx.x; i < a.D; i += blockDim.x)
            d[i] = s[i];
    }
}

lh_status lh_cuda_gather_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                              int64_t n, lh_tensor *dst)
{
    const int64_t D = src->shape[src->ndim - 1];
    if (n == 0 || D == 0)
        return LH_OK;
    lh_status st = LH_OK;
    const int64_t *drows = (const int64_t *)lh_cu_stage(ctx, rows, (size_t)n * sizeof(int64_t), &st);
    if (!drows)
        return st;
    gather_args a;
    memset(&a, 0, sizeof a);
    a.src = (const float *)src->data;
    a.rows = drows;
    a.dst = (float *)dst->data;
    a.n = n;
    a.D = D;
    return LH_CU_LAUNCH(ctx, gather_rows_kernel, dim3(row_blocks(n)), dim3(row_threads(D)), 0, a);
}
