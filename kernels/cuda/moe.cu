/* The mixture-of-experts kernels on the device (lh_k_moe_route, lh_k_scatter_add_rows): the
 * twins of kernels/cpu/moe.c.
 *
 * Routing: one thread per row, the CPU's algorithm step by step (the selection is exact: the
 * same ids wherever the scores are the same); scores use the device's expf and a sequential
 * sum, so weights agree with the CPU's within f32 rounding, and an expert choice can differ
 * only where two scores are that close. ids, weights and the rows that hold inf or NaN are
 * written to scratch and brought back to host memory in one download (so a MoE step waits for
 * the device once per block and cannot be captured in a CUDA graph).
 *
 * Scatter: one thread per column, the rows in their order, one product and one sum each
 * (__fmul_rn / __fadd_rn): the CPU's bits. */
#include "cuda_rt.h"

#include <string.h>

#define MOE_THREADS 128

struct route_args {
    const float *logits, *bias;
    int32_t *ids;
    float *weights;
    int32_t *bad;
    int64_t T, E;
    lh_k_moe_route_params p;
};

/* the largest v[i] over allowed i, lowest i on ties; -1 when none */
__device__ static int pick(const float *v, const unsigned char *allowed, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (allowed[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

static __global__ void route_kernel(const route_args a)
{
    float score[LH_K_MOE_MAX_EXPERTS], choice[LH_K_MOE_MAX_EXPERTS];
    unsigned char allowed[LH_K_MOE_MAX_EXPERTS];
    const int E = (int)a.E, K = (int)a.p.top_k;
    for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < a.T;
         r += (int64_t)gridDim.x * blockDim.x) {
        const float *lg = a.logits + r * a.E;
        int bad = 0;
        for (int e = 0; e < E; e++)
            bad |= !isfinite(lg[e]);
        a.bad[r] = bad;
        if (bad)
            continue;
        if (a.p.scoring == LH_K_MOE_SOFTMAX) {
            float m = lg[0], s = 0.0f;
            for (int e = 1; e < E; e++)
                m = lg[e] > m ? lg[e] : m;
            for (int e = 0; e < E; e++) {
                score[e] = expf(__fsub_rn(lg[e], m));
                s = __fadd_rn(s, score[e]);
            }
            const float inv = __fdiv_rn(1.0f, s);
            for (int e = 0; e < E; e++)
                score[e] = __fmul_rn(score[e], inv);
        } else {
            for (int e = 0; e < E; e++)
                score[e] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-lg[e])));
        }
        for (int e = 0; e < E; e++) {
            choice[e] = a.bias ? __fadd_rn(score[e], a.bias[e]) : score[e];
            allowed[e] = 1;
        }
        if (a.p.n_group > 1) {
            const int G = (int)a.p.n_group, per = E / G;
            float gscore[LH_K_MOE_MAX_EXPERTS];
            unsigned char gsel[LH_K_MOE_MAX_EXPERTS], gallowed[LH_K_MOE_MAX_EXPERTS];
            for (int g = 0; g < G; g++) {
                const float *c = choice + g * per;
                float x = c[0], y = -INFINITY;
                for (int i = 1; i < per; i++) {
                    if (c[i] > x) {
                        y = x;
                        x = c[i];
                    } else if (c[i] > y) {
                        y = c[i];
                    }
                }
                gscore[g] = a.p.group_score == LH_K_MOE_GROUP_TOP2_SUM ? __fadd_rn(x, y) : x;
                gsel[g] = 0;
                gallowed[g] = 1;
            }
            for (int t = 0; t < (int)a.p.topk_group; t++) {
                const int g = pick(gscore, gallowed, G);
                gallowed[g] = 0;
                gsel[g] = 1;
            }
            for (int e = 0; e < E; e++)
                allowed[e] = gsel[e / per];
        }
        int32_t *ids = a.ids + r * K;
        float *w = a.weights + r * K;
        float sum = 0.0f;
        for (int t = 0; t < K; t++) {
            const int e = pick(choice, allowed, E);
            allowed[e] = 0;
            ids[t] = e;
            w[t] = score[e];
            sum = __fadd_rn(sum, w[t]);
        }
        if (a.p.renormalize) {
            const float d = __fadd_rn(sum, a.p.renorm_eps);
            for (int t = 0; t < K; t++)
                w[t] = __fdiv_rn(w[t], d);
        }
        if (a.p.scale != 1.0f)
            for (int t = 0; t < K; t++)
                w[t] = __fmul_rn(w[t], a.p.scale);
    }
}

lh_status lh_cuda_moe_route(lh_kctx *ctx, const lh_tensor *logits, const lh_tensor *bias,
                            const lh_k_moe_route_params *p, int32_t *ids, float *weights,
                            int64_t *bad_first, int64_t *bad_n)
{
    static const char fn[] = "lh_k_moe_route";
    *bad_first = -1;
    *bad_n = 0;
    const int64_t T = logits->shape[0], E = logits->shape[1], K = p->top_k;
    if (T == 0)
        return LH_OK;
    /* the results come back to the host: refuse in a capture before queuing anything */
    if (lh_cu_mode_of(ctx) != LH_CU_EAGER)
        return lh_cu_download(ctx, fn, nullptr, nullptr, 0);
    const size_t n = (size_t)(T * K), bytes = 2 * n * 4 + (size_t)T * 4;
    lh_status st = LH_OK;
    unsigned char *mem = (unsigned char *)lh_cu_scratch(ctx, bytes, &st);
    if (!mem)
        return st;
    route_args a;
    memset(&a, 0, sizeof a);
    a.logits = (const float *)logits->data;
    a.bias = bias ? (const float *)bias->data : NULL;
    a.ids = (int32_t *)mem;
    a.weights = (float *)(mem + n * 4);
    a.bad = (int32_t *)(mem + 2 * n * 4);
    a.T = T;
    a.E = E;
    a.p = *p;
    const int64_t blocks = (T + MOE_THREADS - 1) / MOE_THREADS;
    if ((st = LH_CU_LAUNCH(ctx, route_kernel, dim3(blocks < 65535 ? (unsigned)blocks : 65535u),
                           dim3(MOE_THREADS), 0, a)) != LH_OK)
        return st;
    unsigned char *host = (unsigned char *)malloc(bytes);
    if (!host)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of host memory (%zu bytes)", fn, bytes);
    if ((st = lh_cu_download(ctx, fn, host, mem, bytes)) == LH_OK) {
        memcpy(ids, host, n * 4);
        memcpy(weights, host + n * 4, n * 4);
        const int32_t *bad = (const int32_t *)(host + 2 * n * 4);
        for (int64_t r = 0; r < T; r++)
            if (bad[r] && (*bad_n)++ == 0)
                *bad_first = r;
    }
    free(host);
    return st;
}

struct scatter_args {
    const float *src;
    float *dst;
    const int64_t *rows;
    const float *scales; /* NULL: plain sums */
    int64_t n, D;
};

static __global__ void scatter_kernel(const scatter_args a)
{
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < a.D;
         c += (int64_t)gridDim.x * blockDim.x)
        for (int64_t i = 0; i < a.n; i++) {
            float *d = a.dst + a.rows[i] * a.D + c;
            const float s = a.src[i * a.D + c];
            *d = __fadd_rn(*d, a.scales ? __fmul_rn(a.scales[i], s) : s);
        }
}

lh_status lh_cuda_scatter_add_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                   const float *scales, lh_tensor *dst)
{
    const int64_t n = src->shape[0], D = src->shape[1];
    if (n == 0 || D == 0)
        return LH_OK;
    lh_status st = LH_OK;
    const int64_t *drows = (const int64_t *)lh_cu_stage(ctx, rows, (size_t)n * sizeof *rows, &st);
    if (!drows)
        return st;
    const float *dscales = NULL;
    if (scales && !(dscales = (const float *)lh_cu_stage(ctx, scales, (size_t)n * sizeof *scales,
                                                          &st)))
        return st;
    scatter_args a;
    memset(&a, 0, sizeof a);
    a.src = (const float *)src->data;
    a.dst = (float *)dst->data;
    a.rows = drows;
    a.scales = dscales;
    a.n = n;
    a.D = D;
    const int64_t blocks = (D + MOE_THREADS - 1) / MOE_THREADS;
    return LH_CU_LAUNCH(ctx, scatter_kernel, dim3(blocks < 65535 ? (unsigned)blocks : 65535u),
                        dim3(MOE_THREADS), 0, a);
}
