/* Sampling (lh_kernels.h "sampling"): repetition penalty, temperature, top-k, top-p, min-p and
 * the draw, one row per task. Every row is computed sequentially by one thread in a fixed
 * order, so results depend neither on the thread count nor on the other rows. */
#include "cpu_kernels.h"
#include "sampling.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- Philox4x32-10 ------------------------------------------------------------------------ */

static inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
    uint64_t p = (uint64_t)a * b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

static void philox4x32_10(uint32_t ctr[4], uint32_t key[2])
{
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = mulhilo(0xD2511F53u, ctr[0], &hi0);
        uint32_t lo1 = mulhilo(0xCD9E8D57u, ctr[2], &hi1);
        uint32_t c0 = hi1 ^ ctr[1] ^ k0, c1 = lo1, c2 = hi0 ^ ctr[3] ^ k1, c3 = lo0;
        ctr[0] = c0;
        ctr[1] = c1;
        ctr[2] = c2;
        ctr[3] = c3;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

LH_EXPORT double lh_k_rng_uniform(uint64_t seed, uint64_t stream, uint64_t step)
{
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)step, (uint32_t)(step >> 32), (uint32_t)stream,
                       (uint32_t)(stream >> 32)};
    philox4x32_10(ctr, key);
    uint64_t bits = ((uint64_t)ctr[0] << 32 | ctr[1]) >> 11; /* 53 bits */
    return (double)bits * 0x1.0p-53;
}

/* ---- one row ------------------------------------------------------------------------------ */

/* ids ordered by logit descending, then id ascending (qsort has no user pointer: the keys of
 * the calling thread's row) */
static _Thread_local const float *tl_keys;

static int cmp_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = tl_keys[i], y = tl_keys[j];
    if (x > y)
        return -1;
    if (x < y)
        return 1;
    return (i > j) - (i < j);
}

/* sift-down of a min-heap of values */
static void heap_down(float *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && h[l] < h[m])
            m = l;
        if (r < n && h[r] < h[m])
            m = r;
        if (m == i)
            return;
        float t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* k-th largest of the n values x (1 <= k <= n), with heap scratch of k floats */
static float kth_largest(const float *x, int64_t n, int64_t k, float *heap)
{
    for (int64_t i = 0; i < k; i++)
        heap[i] = x[i];
    for (int64_t i = k / 2 - 1; i >= 0; i--)
        heap_down(heap, k, i);
    for (int64_t i = k; i < n; i++)
        if (x[i] > heap[0]) {
            heap[0] = x[i];
            heap_down(heap, k, 0);
        }
    return heap[0];
}

static int sample_row(const lh_sample_job *j, int64_t r, float *w, int32_t *idx, float *heap,
                      int64_t *bad)
{
    const int64_t V = j->V;
    const float *x = j->logits + r * V;
    const lh_sampling_params *p = j->params;
    float *pr = j->probs ? j->probs + r * V : NULL;
    for (int64_t i = 0; i < V; i++) {
        if (isnan(x[i]) || (isinf(x[i]) && x[i] > 0)) {
            *bad = i;
            return LH_SAMPLE_BAD_LOGIT;
        }
        w[i] = x[i];
    }
    /* 1. repetition penalty: read from the original, so repeated ids apply once */
    int64_t hn = j->history_len ? j->history_len[r] : 0;
    if (p->repetition_penalty != 1.0f)
        for (int64_t h = 0; h < hn; h++) {
            int32_t id = j->history[r][h];
            float l = x[id];
            w[id] = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        }
    if (p->temperature == 0.0f) { /* greedy */
        int64_t best = 0;
        for (int64_t i = 1; i < V; i++)
            if (w[i] > w[best])
                best = i;
        if (pr) {
            memset(pr, 0, (size_t)V * sizeof *pr);
            pr[best] = 1.0f;
        }
        if (j->out)
            j->out[r] = (int32_t)best;
        return LH_OK;
    }
    /* 2. temperature */
    if (p->temperature != 1.0f)
        for (int64_t i = 0; i < V; i++)
            w[i] = w[i] / p->temperature;
    float wmax = -INFINITY;
    for (int64_t i = 0; i < V; i++)
        if (w[i] > wmax)
            wmax = w[i];
    if (!(wmax > -INFINITY)) {
        *bad = -1;
        return LH_SAMPLE_NO_FINITE;
    }
    if (isinf(wmax)) { /* a finite logit / a tiny temperature overflowed */
        *bad = -1;
        return LH_SAMPLE_OVERFLOW;
    }
    /* 3. top-k */
    if (p->top_k > 0 && p->top_k < V) {
        float thr = kth_largest(w, V, p->top_k, heap);
        for (int64_t i = 0; i < V; i++)
            if (w[i] < thr)
                w[i] = -INFINITY;
    }
    /* 4. top-p */
    if (p->top_p < 1.0f) {
        /* Tokens of weight e <= tail_cut (a fraction (1 - p) / (2 n) of the total) are removed
         * without sorting them: all of them together hold at most half of 1 - p, so each one's
         * ascending cumulative mass is below 1 - p whatever the order. The rest is sorted and
         * accumulated on top of their mass. */
        int64_t live = 0;
        double total = 0;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > -INFINITY) {
                live++;
                total += exp((double)w[i] - (double)wmax);
            }
        const double limit = 1.0 - (double)p->top_p;
        const double tail_cut = limit * total * 0.5 / (double)live;
        double cum = 0;
        int64_t n = 0;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > -INFINITY) {
                double e = exp((double)w[i] - (double)wmax);
                if (e <= tail_cut && w[i] < wmax) {
                    cum += e / total;
                    w[i] = -INFINITY;
                } else {
                    idx[n++] = (int32_t)i;
                }
            }
        tl_keys = w;
        qsort(idx, (size_t)n, sizeof *idx, cmp_desc);
        /* ascending: from the least likely up; the most likely (position 0) always stays */
        for (int64_t i = n - 1; i >= 1; i--) {
            cum += exp((double)w[idx[i]] - (double)wmax) / total;
            if (cum <= limit)
                w[idx[i]] = -INFINITY;
            else
                break;
        }
    }
    /* 5. min-p: prob_i < min_p * prob_max  <=>  exp(w_i - max) < min_p */
    if (p->min_p > 0.0f)
        for (int64_t i = 0; i < V; i++)
            if (w[i] > -INFINITY && exp((double)w[i] - (double)wmax) < (double)p->min_p)
                w[i] = -INFINITY;
    /* 6. the draw, in id order */
    double total = 0;
    for (int64_t i = 0; i < V; i++)
        if (w[i] > -INFINITY)
            total += exp((double)w[i] - (double)wmax);
    if (pr)
        for (int64_t i = 0; i < V; i++)
            pr[i] = w[i] > -INFINITY ? (float)(exp((double)w[i] - (double)wmax) / total) : 0.0f;
    if (j->out) {
        double u = lh_k_rng_uniform(j->seed, j->stream[r], j->step[r]);
        double target = u * total, cum = 0;
        int64_t pick = -1;
        for (int64_t i = 0; i < V; i++)
            if (w[i] > -INFINITY) {
                cum += exp((double)w[i] - (double)wmax);
                pick = i;
                if (cum > target)
                    break;
            }
        j->out[r] = (int32_t)pick;
    }
    return LH_OK;
}

struct par {
    const lh_sample_job *j;
    float *scratch;
    size_t stride;
    int32_t *code;
    int64_t *bad;
};

static void row_task(int64_t r, int tid, void *user)
{
    struct par *q = user;
    float *base = q->scratch + (size_t)tid * q->stride;
    const int64_t V = q->j->V;
    q->code[r] = sample_row(q->j, r, base, (int32_t *)(base + V), base + 2 * V, &q->bad[r]);
}

lh_status lh_cpu_sample(lh_kctx *ctx, const lh_sample_job *j, int64_t *bad_row, int *code,
                        int64_t *bad_id)
{
    const int64_t V = j->V, M = j->M;
    int64_t k = j->params->top_k > 0 && j->params->top_k < V ? j->params->top_k : 0;
    float *scratch = lh_cpu_scratch(ctx, (size_t)(2 * V + k + 1));
    void *arena = lh_cpu_arena(ctx, (size_t)M * (sizeof(int32_t) + sizeof(int64_t)));
    if (!scratch || !arena)
        return lh_kerr(ctx, LH_E_NOMEM, "sampling: out of memory for %lld x %lld logits",
                       (long long)M, (long long)V);
    struct par q = {j, scratch, lh_cpu_scratch_stride(ctx), (int32_t *)((int64_t *)arena + M),
                    (int64_t *)arena};
    lh_cpu_parallel(ctx, M, row_task, &q);
    *code = 0;
    for (int64_t r = 0; r < M; r++)
        if (q.code[r]) {
            *bad_row = r;
            *code = q.code[r];
            *bad_id = q.bad[r];
            return LH_E_USAGE;
        }
    return LH_OK;
}
