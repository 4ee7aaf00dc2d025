/* Mixture-of-experts routing and the weighted scatter of expert outputs on the CPU
 * (lh_k_moe_route, lh_k_scatter_add_rows; contracts in lh_kernels.h, arguments checked by
 * kernels/moe_dispatch.c).
 *
 * Routing is a few hundred operations per token: one pass per row, rows in parallel. The
 * softmax is lh_k_softmax's (the ISA's max / exp-sum / scale vector ops, so both give the same
 * bits); the selection is k passes of "largest allowed score, lowest index on ties", which is
 * exact and independent of the ISA. */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>

struct route_job {
    const lh_cpu_ops *ops;
    const float *logits, *bias;
    const lh_k_moe_route_params *p;
    int64_t E;
    int32_t *ids;
    float *weights;
    float *scratch; /* per thread: 2 E floats (scores, choice) + n_group floats */
    size_t stride;
    int32_t *bad; /* per row: 1 when its logits hold inf or NaN */
};

/* the largest of v[i] over allowed i not yet taken, lowest i on ties; -1 when none */
static int64_t pick(const float *v, const unsigned char *allowed, int64_t n)
{
    int64_t best = -1;
    for (int64_t i = 0; i < n; i++)
        if (allowed[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

static void route_row(int64_t r, int tid, void *user)
{
    const struct route_job *j = user;
    const lh_k_moe_route_params *p = j->p;
    const int64_t E = j->E, K = p->top_k;
    const float *lg = j->logits + r * E;
    float *score = j->scratch + (size_t)tid * j->stride, *choice = score + E;
    float *gscore = choice + E;
    unsigned char allowed[LH_K_MOE_MAX_EXPERTS];
    for (int64_t e = 0; e < E; e++)
        if (!isfinite(lg[e])) {
            j->bad[r] = 1;
            return;
        }
    if (p->scoring == LH_K_MOE_SOFTMAX) {
        memcpy(score, lg, (size_t)E * sizeof *score);
        const float m = j->ops->max(score, E);
        const float s = j->ops->exp_sub_sum(score, m, E);
        j->ops->scale(score, 1.0f / s, E);
    } else {
        for (int64_t e = 0; e < E; e++)
            score[e] = 1.0f / (1.0f + expf(-lg[e]));
    }
    for (int64_t e = 0; e < E; e++) {
        choice[e] = j->bias ? score[e] + j->bias[e] : score[e];
        allowed[e] = 1;
    }
    if (p->n_group > 1) {
        const int64_t G = p->n_group, per = E / G;
        for (int64_t g = 0; g < G; g++) {
            const float *c = choice + g * per;
            float a = c[0], b = -INFINITY; /* the group's largest and second largest */
            for (int64_t i = 1; i < per; i++) {
                if (c[i] > a) {
                    b = a;
                    a = c[i];
                } else if (c[i] > b) {
                    b = c[i];
                }
            }
            gscore[g] = p->group_score == LH_K_MOE_GROUP_TOP2_SUM ? a + b : a;
        }
        unsigned char gsel[LH_K_MOE_MAX_EXPERTS] = {0}, gallowed[LH_K_MOE_MAX_EXPERTS];
        memset(gallowed, 1, (size_t)G);
        for (int64_t t = 0; t < p->topk_group; t++) {
            const int64_t g = pick(gscore, gallowed, G);
            gallowed[g] = 0;
            gsel[g] = 1;
        }
        for (int64_t e = 0; e < E; e++)
            allowed[e] = gsel[e / per];
    }
    int32_t *ids = j->ids + r * K;
    float *w = j->weights + r * K;
    float sum = 0.0f;
    for (int64_t t = 0; t < K; t++) {
        const int64_t e = pick(choice, allowed, E); /* top_k <= allowed experts (dispatch) */
        allowed[e] = 0;
        ids[t] = (int32_t)e;
        w[t] = score[e];
        sum += w[t];
    }
    if (p->renormalize) {
        const float d = sum + p->renorm_eps;
        for (int64_t t = 0; t < K; t++)
            w[t] = w[t] / d;
    }
    if (p->scale != 1.0f)
        for (int64_t t = 0; t < K; t++)
            w[t] = w[t] * p->scale;
}

lh_status lh_cpu_moe_route(lh_kctx *ctx, const lh_tensor *logits, const lh_tensor *bias,
                           const lh_k_moe_route_params *p, int32_t *ids, float *weights,
                           int64_t *bad_first, int64_t *bad_n)
{
    const int64_t T = logits->shape[0], E = logits->shape[1];
    *bad_first = -1;
    *bad_n = 0;
    if (T == 0)
        return LH_OK;
    struct route_job j = {ctx->ops, logits->data, bias ? bias->data : NULL, p, E, ids, weights,
                          NULL, 0, NULL};
    j.scratch = lh_cpu_scratch(ctx, (size_t)(2 * E + p->n_group));
    j.bad = calloc((size_t)T, sizeof *j.bad);
    if (!j.scratch || !j.bad) {
        free(j.bad);
        return lh_kerr(ctx, LH_E_NOMEM, "lh_k_moe_route: out of memory (%lld rows of %lld experts)",
                       (long long)T, (long long)E);
    }
    j.stride = lh_cpu_scratch_stride(ctx);
    lh_cpu_parallel(ctx, T, route_row, &j);
    for (int64_t r = 0; r < T; r++)
        if (j.bad[r] && (*bad_n)++ == 0)
            *bad_first = r;
    free(j.bad);
    return LH_OK;
}

struct scatter_job {
    const float *src;
    float *dst;
    const int64_t *rows;
    const float *scales;
    int64_t n, D, cols_per_task;
};

/* columns [c0, c1) of every row, in i order: repeated destination rows accumulate in order */
static void scatter_task(int64_t t, int tid, void *user)
{
    (void)tid;
    const struct scatter_job *j = user;
    const int64_t c0 = t * j->cols_per_task;
    const int64_t c1 = j->D - c0 < j->cols_per_task ? j->D : c0 + j->cols_per_task;
    for (int64_t i = 0; i < j->n; i++) {
        const float *s = j->src + i * j->D;
        float *d = j->dst + j->rows[i] * j->D;
        if (j->scales) {
            const float a = j->scales[i];
            for (int64_t c = c0; c < c1; c++)
                d[c] = d[c] + a * s[c]; /* a product, then a sum (no fma: torch's two ops) */
        } else {
            for (int64_t c = c0; c < c1; c++)
                d[c] = d[c] + s[c];
        }
    }
}

#define SCATTER_COLS 256 /* columns per task: a task touches n rows of them */

lh_status lh_cpu_scatter_add_rows(lh_kctx *ctx, const lh_tensor *src, const int64_t *rows,
                                  const float *scales, lh_tensor *dst)
{
    struct scatter_job j = {src->data, dst->data, rows, scales, src->shape[0], src->shape[1],
                            SCATTER_COLS};
    if (j.n == 0 || j.D == 0)
        return LH_OK;
    lh_cpu_parallel(ctx, (j.D + SCATTER_COLS - 1) / SCATTER_COLS, scatter_task, &j);
    return LH_OK;
}
