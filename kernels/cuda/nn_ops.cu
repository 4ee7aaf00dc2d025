/* CUDA twins of the "nn" kernels that encoder / GPT-2-style / Gemma 2 models need:
 *   lh_cuda_layernorm      LayerNorm (population variance, optional bias)  kernels/cpu/norm.c
 *   lh_cuda_gelu           exact GELU (erff)                               kernels/cpu/activation.c
 *   lh_cuda_gelu_tanh      GELU, tanh approximation                        kernels/cpu/activation.c
 *   lh_cuda_gelu_mul       gelu(gate) * up, exact GELU                     kernels/cpu/activation.c
 *   lh_cuda_softcap        x = cap * tanhf(x / cap) in place               kernels/cpu/activation.c
 *   lh_cuda_add            y += x                                          kernels/cpu/nn_ops.c
 *   lh_cuda_embedding_add  out[i] += table[ids[i]] (ids staged)            kernels/cpu/nn_ops.c
 *
 * Mapping as in elementwise.cu: element-wise kernels are grid-stride loops over the flat
 * (64-bit) index; LayerNorm gives one block per row (grid-stride over rows), every thread
 * owning the same indices of its row in every pass, so out may alias x. Launch shapes depend
 * on tensor shapes only (graph replay); the ids of embedding_add arrive through lh_cu_stage,
 * exactly as lh_cuda_embedding's, so a dry run stages fresh ids for the recorded copy.
 *
 * Numerics mirror the CPU code operation by operation, without fused multiply-adds (the
 * __f*_rn intrinsics keep nvcc from contracting): LayerNorm's mean = sum / D, then the centred
 * sum of squares, r = 1 / sqrtf(var + eps), out = ((x - mean) * r) * w + b; GELU
 * (0.5 x) (1 + erff(x * (1 / sqrt 2))) and (0.5 x) (1 + tanhf(sqrt(2/pi) (x + ((0.044715 x) x) x)));
 * soft-capping cap * tanhf(x / cap) with an IEEE division. Only erff / tanhf (CUDA's versus
 * libm's, each within 2 ulp) and LayerNorm's summation order (block trees instead of four
 * running sums) differ. */
#include "cuda_rt.h"

#include <math.h>
#include <string.h>

#define NN_EW_THREADS 256
#define NN_EW_MAX_BLOCKS 65536u
#define NN_ROW_MAX_BLOCKS 65536u

static unsigned nn_ew_blocks(int64_t n)
{
    const unsigned b = lh_cu_blocks(n, NN_EW_THREADS);
    return b < NN_EW_MAX_BLOCKS ? b : NN_EW_MAX_BLOCKS;
}

static unsigned nn_row_blocks(int64_t rows)
{
    return rows < (int64_t)NN_ROW_MAX_BLOCKS ? (unsigned)rows : NN_ROW_MAX_BLOCKS;
}

/* Threads per row block (as elementwise.cu's row kernels). */
static unsigned nn_row_threads(int64_t n)
{
    return n <= 1024 ? 128u : n <= 4096 ? 256u : n <= 16384 ? 512u : 1024u;
}

/* Block-wide sum (blockDim.x a multiple of 32, at most 1024); sh holds 32 floats. The leading
 * barrier lets a block call it back to back on the same sh. */
static __device__ float nn_block_sum(float v, float *sh)
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

/* ---- scalar activations (the CPU's formulas, no FMA) ------------------------------------------ */

static __device__ __forceinline__ float nn_gelu_erf(float x)
{
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, erff(__fmul_rn(x, 0.70710678118654752f))));
}

static __device__ __forceinline__ float nn_gelu_tanh(float x)
{
    const float k3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    const float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(x, k3));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
}

/* ---- LayerNorm ------------------------------------------------------------------------------- */

struct ln_args {
    const float *x;
    const void *w;
    const void *b; /* NULL: no bias */
    float *out;    /* may be x */
    int64_t rows, D;
    float eps;
    int wdt, bdt;
    int pad_;
};

/* No __restrict__ and no read-only loads: out may alias x. */
static __global__ void layernorm_kernel(const ln_args a)
{
    __shared__ float sh[32];
    const int64_t D = a.D;
    for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const float *xr = a.x + row * D;
        float *orow = a.out + row * D;
        float s = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
            s = __fadd_rn(s, xr[i]);
        const float mean = nn_block_sum(s, sh) / (float)D;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            const float c = __fsub_rn(xr[i], mean);
            ss = __fadd_rn(ss, __fmul_rn(c, c));
        }
        const float var = nn_block_sum(ss, sh) / (float)D;
        const float r = 1.0f / sqrtf(var + a.eps);
        /* every thread has read its part of the row twice (the barriers of nn_block_sum sit in
         * between); now each reads x[i] and writes out[i] for its own i only */
        for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
            const float c = __fsub_rn(xr[i], mean);
            float v = __fmul_rn(__fmul_rn(c, r), lh_cu_load(a.w, a.wdt, i));
            if (a.b)
                v = __fadd_rn(v, lh_cu_load(a.b, a.bdt, i));
            orow[i] = v;
        }
    }
}

lh_status lh_cuda_layernorm(lh_kctx *ctx, const lh_tensor *x, const lh_tensor *w,
                            const lh_tensor *b, float eps, lh_tensor *out)
{
    const int64_t D = x->shape[x->ndim - 1];
    const int64_t rows = D ? lh_cpu_numel(x) / D : 0;
    if (rows == 0 || D == 0)
        return LH_OK;
    ln_args a;
    memset(&a, 0, sizeof a); /* hashed for graph replay: no stray padding bytes */
    a.x = (const float *)x->data;
    a.w = w->data;
    a.b = b ? b->data : NULL;
    a.out = (float *)out->data;
    a.rows = rows;
    a.D = D;
    a.eps = eps;
    a.wdt = (int)w->dtype;
    a.bdt = b ? (int)b->dtype : (int)LH_DTYPE_F32;
    return LH_CU_LAUNCH(ctx, layernorm_kernel, dim3(nn_row_blocks(rows)), dim3(nn_row_threads(D)),
                        0, a);
}

/* ---- GELU, exact and tanh; exact-GELU-gated product ------------------------------------------ */

struct unary_args {
    const float *x;
    float *out; /* may be x (exact alias) */
    int64_t n;
};

static __global__ void gelu_kernel(const unary_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.out[i] = nn_gelu_erf(a.x[i]);
}

static __global__ void gelu_tanh_kernel(const unary_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.out[i] = nn_gelu_tanh(a.x[i]);
}

static lh_status launch_unary(lh_kctx *ctx, const void *kernel, const char *name,
                              const lh_tensor *x, lh_tensor *out)
{
    const int64_t n = lh_cpu_numel(x);
    if (n == 0)
        return LH_OK;
    unary_args a;
    memset(&a, 0, sizeof a);
    a.x = (const float *)x->data;
    a.out = (float *)out->data;
    a.n = n;
    return lh_cu_launch(ctx, kernel, dim3(nn_ew_blocks(n)), dim3(NN_EW_THREADS), 0, &a, sizeof a,
                        name, __FILE__, __LINE__);
}

lh_status lh_cuda_gelu(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out)
{
    return launch_unary(ctx, (const void *)gelu_kernel, "gelu_kernel", x, out);
}

lh_status lh_cuda_gelu_tanh(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out)
{
    return launch_unary(ctx, (const void *)gelu_tanh_kernel, "gelu_tanh_kernel", x, out);
}

struct gated_args {
    const float *g, *u;
    float *out; /* may be g or u (exact alias) */
    int64_t n;
};

static __global__ void gelu_mul_kernel(const gated_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step) {
        const float g = a.g[i], u = a.u[i];
        a.out[i] = __fmul_rn(nn_gelu_erf(g), u);
    }
}

lh_status lh_cuda_gelu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                           lh_tensor *out)
{
    const int64_t n = lh_cpu_numel(gate);
    if (n == 0)
        return LH_OK;
    gated_args a;
    memset(&a, 0, sizeof a);
    a.g = (const float *)gate->data;
    a.u = (const float *)up->data;
    a.out = (float *)out->data;
    a.n = n;
    return LH_CU_LAUNCH(ctx, gelu_mul_kernel, dim3(nn_ew_blocks(n)), dim3(NN_EW_THREADS), 0, a);
}

/* ---- soft-capping, residual add ------------------------------------------------------------- */

struct softcap_args {
    float *x;
    int64_t n;
    float cap;
    int pad_;
};

static __global__ void softcap_kernel(const softcap_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.x[i] = __fmul_rn(a.cap, tanhf(__fdiv_rn(a.x[i], a.cap)));
}

lh_status lh_cuda_softcap(lh_kctx *ctx, lh_tensor *x, float cap)
{
    const int64_t n = lh_cpu_numel(x);
    if (n == 0)
        return LH_OK;
    softcap_args a;
    memset(&a, 0, sizeof a);
    a.x = (float *)x->data;
    a.n = n;
    a.cap = cap;
    return LH_CU_LAUNCH(ctx, softcap_kernel, dim3(nn_ew_blocks(n)), dim3(NN_EW_THREADS), 0, a);
}

struct add_args {
    float *y;
    const float *x; /* may be y (exact alias) */
    int64_t n;
};

static __global__ void add_kernel(const add_args a)
{
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += step)
        a.y[i] = __fadd_rn(a.y[i], a.x[i]);
}

lh_status lh_cuda_add(lh_kctx *ctx, lh_tensor *y, const lh_tensor *x)
{
    const int64_t n = lh_cpu_numel(y);
    if (n == 0)
        return LH_OK;
    add_args a;
    memset(&a, 0, sizeof a);
    a.y = (float *)y->data;
    a.x = (const float *)x->data;
    a.n = n;
    return LH_CU_LAUNCH(ctx, add_kernel, dim3(nn_ew_blocks(n)), dim3(NN_EW_THREADS), 0, a);
}

/* ---- additive embedding lookup ---------------------------------------------------------------- */

struct emb_add_args {
    const void *table;
    const int32_t *ids; /* staged, [n], checked by the dispatch */
    float *out;
    int64_t n, D;
    int dt;
    int pad_;
};

static __global__ void embedding_add_kernel(const emb_add_args a)
{
    for (int64_t row = blockIdx.x; row < a.n; row += gridDim.x) {
        const int64_t base = (int64_t)a.ids[row] * a.D;
        float *o = a.out + row * a.D;
        for (int64_t i = threadIdx.x; i < a.D; i += blockDim.x)
            o[i] = __fadd_rn(o[i], lh_cu_load(a.table, a.dt, base + i));
    }
}

lh_status lh_cuda_embedding_add(lh_kctx *ctx, const lh_tensor *table, const int32_t *ids,
                                int64_t n, lh_tensor *out)
{
    const int64_t D = table->shape[1];
    if (n == 0 || D == 0)
        return LH_OK;
    lh_status st = LH_OK;
    const int32_t *dids = (const int32_t *)lh_cu_stage(ctx, ids, (size_t)n * sizeof(int32_t), &st);
    if (!dids)
        return st;
    if (lh_cu_is_block(table->dtype))
        return lh_cu_embedding_blocks(ctx, table, dids, n, out, true);
    emb_add_args a;
    memset(&a, 0, sizeof a);
    a.table = table->data;
    a.ids = dids;
    a.out = (float *)out->data;
    a.n = n;
    a.D = D;
    a.dt = (int)table->dtype;
    return LH_CU_LAUNCH(ctx, embedding_add_kernel, dim3(nn_row_blocks(n)), dim3(nn_row_threads(D)),
                        0, a);
}
