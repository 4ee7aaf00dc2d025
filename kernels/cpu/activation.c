/* Element-wise and row-wise activations: SiLU- and GELU-gated products, GELU (exact and tanh),
 * scale, soft-capping, softmax, argmax. */
#include "cpu_kernels.h"

#include <math.h>

#define ELEM_CHUNK 16384 /* elements per task for element-wise kernels */

struct silu_job {
    const lh_cpu_ops *ops;
    const float *g, *u;
    float *out;
    int64_t n;
};

static void silu_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct silu_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    j->ops->silu_mul(j->out + s, j->g + s, j->u + s, e - s);
}

lh_status lh_cpu_silu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up, lh_tensor *out)
{
    struct silu_job j = {ctx->ops, gate->data, up->data, out->data, lh_cpu_numel(gate)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, silu_task, &j);
    return LH_OK;
}

/* GELU, tanh approximation, as torch computes it for float32 on the CPU:
 * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), then times up. Scalar (tanhf): the
 * Gemma-family MLP is not on a hot path worth a vector tanh yet. */
#define GELU_K_BETA 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_K_KAPPA 0.044715f

/* The one scalar gelu_tanh, shared by lh_k_gelu_tanh_mul and lh_k_gelu_tanh. */
static inline float gelu_tanh_f(float x)
{
    const float inner = GELU_K_BETA * (x + GELU_K_KAPPA * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

/* Exact GELU as torch computes it for float32 (approximate="none"): x 0.5 (1 + erf(x / sqrt 2)),
 * the argument formed as x * (1 / sqrt 2). */
#define GELU_K_SQRT1_2 0.70710678118654752f

static inline float gelu_erf_f(float x)
{
    return 0.5f * x * (1.0f + erff(x * GELU_K_SQRT1_2));
}

static void gelu_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct silu_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    for (int64_t i = s; i < e; i++)
        j->out[i] = gelu_tanh_f(j->g[i]) * j->u[i];
}

lh_status lh_cpu_gelu_tanh_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up,
                               lh_tensor *out)
{
    struct silu_job j = {ctx->ops, gate->data, up->data, out->data, lh_cpu_numel(gate)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, gelu_task, &j);
    return LH_OK;
}

/* gelu(gate) * up, exact gelu */
static void gelu_erf_mul_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct silu_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    for (int64_t i = s; i < e; i++)
        j->out[i] = gelu_erf_f(j->g[i]) * j->u[i];
}

lh_status lh_cpu_gelu_mul(lh_kctx *ctx, const lh_tensor *gate, const lh_tensor *up, lh_tensor *out)
{
    struct silu_job j = {ctx->ops, gate->data, up->data, out->data, lh_cpu_numel(gate)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, gelu_erf_mul_task, &j);
    return LH_OK;
}

/* The plain activations out = act(x) (out may be x); j->u unused. */
static void gelu_erf_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct silu_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    for (int64_t i = s; i < e; i++)
        j->out[i] = gelu_erf_f(j->g[i]);
}

static void gelu_tanh_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct silu_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    for (int64_t i = s; i < e; i++)
        j->out[i] = gelu_tanh_f(j->g[i]);
}

lh_status lh_cpu_gelu(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out)
{
    struct silu_job j = {ctx->ops, x->data, NULL, out->data, lh_cpu_numel(x)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, gelu_erf_task, &j);
    return LH_OK;
}

lh_status lh_cpu_gelu_tanh(lh_kctx *ctx, const lh_tensor *x, lh_tensor *out)
{
    struct silu_job j = {ctx->ops, x->data, NULL, out->data, lh_cpu_numel(x)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, gelu_tanh_task, &j);
    return LH_OK;
}

struct scale_job {
    const lh_cpu_ops *ops;
    float *x;
    float s;
    int64_t n;
};

static void scale_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct scale_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    j->ops->scale(j->x + s, j->s, e - s);
}

lh_status lh_cpu_scale(lh_kctx *ctx, lh_tensor *x, float s)
{
    struct scale_job j = {ctx->ops, x->data, s, lh_cpu_numel(x)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, scale_task, &j);
    return LH_OK;
}

/* Soft-capping: x = cap * tanhf(x / cap) (an IEEE division, then tanhf, then one product). */
static void softcap_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct scale_job *j = user;
    int64_t s = t * ELEM_CHUNK, e = j->n - s < ELEM_CHUNK ? j->n : s + ELEM_CHUNK;
    const float cap = j->s;
    for (int64_t i = s; i < e; i++)
        j->x[i] = cap * tanhf(j->x[i] / cap);
}

lh_status lh_cpu_softcap(lh_kctx *ctx, lh_tensor *x, float cap)
{
    struct scale_job j = {ctx->ops, x->data, cap, lh_cpu_numel(x)};
    lh_cpu_parallel(ctx, (j.n + ELEM_CHUNK - 1) / ELEM_CHUNK, softcap_task, &j);
    return LH_OK;
}

struct row_job {
    const lh_cpu_ops *ops;
    float *x;
    int64_t N;
    int32_t *out;
};

/* softmax(x) = exp(x - max) / sum, the sum in f32; then one multiply by 1 / sum. */
static void softmax_row(int64_t r, int tid, void *user)
{
    (void)tid;
    const struct row_job *j = user;
    float *row = j->x + r * j->N;
    float m = j->ops->max(row, j->N);
    float s = j->ops->exp_sub_sum(row, m, j->N);
    j->ops->scale(row, 1.0f / s, j->N);
}

lh_status lh_cpu_softmax(lh_kctx *ctx, lh_tensor *x)
{
    const int64_t N = x->shape[x->ndim - 1];
    if (N == 0)
        return LH_OK;
    struct row_job j = {ctx->ops, x->data, N, NULL};
    lh_cpu_parallel(ctx, lh_cpu_numel(x) / N, softmax_row, &j);
    return LH_OK;
}

static void argmax_row(int64_t r, int tid, void *user)
{
    (void)tid;
    const struct row_job *j = user;
    int64_t i = j->ops->argmax(j->x + r * j->N, j->N);
    j->out[r] = (int32_t)i; /* -1: the row holds a NaN */
}

lh_status lh_cpu_argmax(lh_kctx *ctx, const lh_tensor *x, int32_t *out)
{
    const int64_t N = x->shape[x->ndim - 1];
    const int64_t rows = lh_cpu_numel(x) / N;
    struct row_job j = {ctx->ops, x->data, N, out};
    lh_cpu_parallel(ctx, rows, argmax_row, &j);
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
