/* Attention over a paged KV cache (one sequence), and the KV write that fills it.
 *
 * Work is split into items (query tile, kv head, group of query heads, context partition):
 *  - a query tile is up to PA_TILE_T consecutive query tokens; all heads of a GQA group read
 *    the same kv head, so an item converts each needed block of that kv head once (bf16, f16,
 *    fp8 pools; f32 is read in place) and uses it for every (token, head) of the item;
 *  - a partition is a range of whole blocks of the visible context. Decode steps (T <=
 *    PA_DECODE_MAX_T) split the visible span into partitions of about PA_PART_TOKENS tokens
 *    (flash-decoding: the partitions of a long context run in parallel); otherwise there is
 *    one partition. The partitioning depends on T, the positions, ctx_len, block_size and
 *    params only; the tiling and head grouping (chosen from the thread count) never change a
 *    value, so results do not depend on the thread count.
 * Within an item every (token, head) is computed exactly as lh_k_attention computes it: the
 * scores of its visible positions in this partition, contiguous and in position order, each
 * dot(q, k) * scale; max; exp-sum; normalize; out = sum_p w_p v_p in position order from zero.
 * With one partition that is the result; with several, each partition's (max m_i, sum s_i,
 * normalized output o_i) is kept and merged: out = sum_i (s_i e^(m_i - M) / S) o_i with
 * M = max_i m_i and S = sum_i s_i e^(m_i - M), partitions with nothing visible skipped. */
#include "paged_kernels.h"

#include <math.h>
#include <stdlib.h>

#define PA_DECODE_MAX_T 8
#define PA_PART_TOKENS 256
#define PA_TILE_T 16
/* scores per thread at most (floats), unless a single query row needs more */
#define PA_SCORE_BUDGET (256 * 1024)

static inline int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static inline int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static inline int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Rows [r0, r1) (token offsets inside the block) of kv head kvh of physical block phys, as f32:
 * returns row r0 and sets *stride (elements between rows). f32 pools are read in place, the
 * others are decoded into buf ([r1 - r0, D]). */
static const float *pa_rows(const lh_cpu_ops *ops, const lh_cpu_pages *kv,
                            const unsigned char *base, const float *scales, int64_t phys,
                            int64_t kvh, int64_t r0, int64_t r1, float *buf, int64_t *stride)
{
    const int64_t D = kv->head_dim, n = r1 - r0;
    const int64_t off = phys * kv->block_elems + kvh * kv->head_stride + r0 * kv->tok_stride;
    if (kv->dtype == LH_DTYPE_F32) {
        *stride = kv->tok_stride;
        return (const float *)(const void *)base + off;
    }
    *stride = D;
    const bool dense = kv->tok_stride == D; /* HND: the head's rows are contiguous */
    switch (kv->dtype) {
    case LH_DTYPE_BF16:
    case LH_DTYPE_F16: {
        void (*cvt)(const uint16_t *, float *, int64_t) =
            kv->dtype == LH_DTYPE_BF16 ? ops->bf16_to_f32 : ops->f16_to_f32;
        const uint16_t *src = (const uint16_t *)(const void *)base + off;
        if (dense)
            cvt(src, buf, n * D);
        else
            for (int64_t r = 0; r < n; r++)
                cvt(src + r * kv->tok_stride, buf + r * D, D);
        break;
    }
    default: { /* fp8 e4m3 */
        const unsigned char *src = base + off;
        const float s = scales[phys * kv->kv_heads + kvh];
        for (int64_t r = 0; r < n; r++) {
            const unsigned char *row = src + r * kv->tok_stride;
            float *dst = buf + r * D;
            for (int64_t d = 0; d < D; d++)
                dst[d] = lh_cpu_fp8_e4m3_table[row[d]] * s;
        }
        break;
    }
    }
    return buf;
}

typedef struct pa_job {
    const lh_cpu_ops *ops;
    const lh_cpu_pages *kv;
    const float *q;
    float *out;
    const int32_t *q_pos, *table;
    int64_t T, H, G, D, S;
    float scale;
    int64_t window, chunk;
    /* partition i covers logical blocks [blk0 + i * part_blocks, ...) below blk1 */
    int64_t blk0, blk1, part_blocks, P;
    int64_t TQ, n_tiles; /* query tiles */
    int64_t gsz, n_gs;   /* query heads per item, items per GQA group */
    int64_t sc_len;      /* scores per (token, head) row */
    float *scratch;
    size_t stride;
    float *pm, *ps, *po; /* P > 1: per-partition max, sum [P][T][H] and output [P][T][H][D] */
} pa_job;

/* first visible position for a query at pos (causal: the last is pos itself) */
static inline int64_t pa_lo(const pa_job *j, int64_t pos)
{
    int64_t lo = 0;
    if (j->window > 0 && pos - j->window + 1 > lo)
        lo = pos - j->window + 1;
    if (j->chunk > 0 && pos / j->chunk * j->chunk > lo)
        lo = pos / j->chunk * j->chunk;
    return lo;
}

static void pa_task(int64_t idx, int tid, void *user)
{
    const pa_job *j = user;
    const lh_cpu_pages *kv = j->kv;
    const lh_cpu_ops *ops = j->ops;
    const int64_t bs = kv->block_size, D = j->D, H = j->H, T = j->T;
    int64_t r = idx;
    const int64_t part = r % j->P;
    r /= j->P;
    const int64_t gs = r % j->n_gs;
    r /= j->n_gs;
    const int64_t kvh = r % kv->kv_heads, tile = r / kv->kv_heads;
    const int64_t t0 = tile * j->TQ, t1 = imin(T, t0 + j->TQ);
    const int64_t h0 = kvh * j->G + gs * j->gsz, h1 = imin(kvh * j->G + j->G, h0 + j->gsz);
    if (h0 >= h1 || t0 >= t1)
        return;
    const int64_t nh = h1 - h0;
    const int64_t b0 = j->blk0 + part * j->part_blocks, b1 = imin(j->blk1, b0 + j->part_blocks);
    const int64_t p0 = b0 * bs, p1 = imin(j->S, b1 * bs); /* this partition's positions */
    float *sc = j->scratch + (size_t)tid * j->stride;
    float *buf = sc + (size_t)((t1 - t0) * nh * j->sc_len);

    /* each query's visible positions in this partition: [a[t], b[t]] (empty when a > b) */
    int64_t a[PA_TILE_T], b[PA_TILE_T];
    for (int64_t t = t0; t < t1; t++) {
        a[t - t0] = imax(pa_lo(j, j->q_pos[t]), p0);
        b[t - t0] = imin((int64_t)j->q_pos[t], p1 - 1);
    }

    /* scores */
    for (int64_t blk = b0; blk < b1; blk++) {
        const int64_t bp0 = blk * bs, bp1 = imin(bp0 + bs, p1);
        int64_t lo = INT64_MAX, hi = -1; /* rows any query of the tile needs */
        for (int64_t t = 0; t < t1 - t0; t++) {
            lo = imin(lo, imax(a[t], bp0));
            hi = imax(hi, imin(b[t], bp1 - 1));
        }
        if (lo > hi)
            continue;
        int64_t rs;
        const float *kr = pa_rows(ops, kv, kv->k, kv->k_scale, j->table[blk], kvh, lo - bp0,
                                  hi + 1 - bp0, buf, &rs);
        for (int64_t t = t0; t < t1; t++) {
            const int64_t qa = imax(a[t - t0], bp0), qb = imin(b[t - t0], bp1 - 1);
            for (int64_t h = h0; h < h1 && qa <= qb; h++) {
                const float *qv = j->q + (t * H + h) * D;
                float *row = sc + ((t - t0) * nh + (h - h0)) * j->sc_len;
                const int64_t at = a[t - t0];
                for (int64_t p = qa; p <= qb; p++)
                    row[p - at] = ops->dot(qv, kr + (p - lo) * rs, D) * j->scale;
            }
        }
    }

    /* softmax per (token, head), and the output rows zeroed */
    float *orow[PA_TILE_T];
    for (int64_t t = t0; t < t1; t++) {
        const int64_t n = b[t - t0] - a[t - t0] + 1;
        for (int64_t h = h0; h < h1; h++) {
            float *row = sc + ((t - t0) * nh + (h - h0)) * j->sc_len;
            const size_t pi = (size_t)((part * T + t) * H + h);
            if (n <= 0) { /* only with P > 1: this partition holds nothing the query sees */
                j->pm[pi] = -INFINITY;
                j->ps[pi] = 0.0f;
                continue;
            }
            float m = ops->max(row, n);
            float s = ops->exp_sub_sum(row, m, n);
            ops->scale(row, 1.0f / s, n);
            float *o = j->P > 1 ? j->po + pi * (size_t)D : j->out + (t * H + h) * D;
            memset(o, 0, (size_t)D * sizeof(float));
            if (j->P > 1) {
                j->pm[pi] = m;
                j->ps[pi] = s;
            }
        }
        orow[t - t0] = j->P > 1 ? j->po + (size_t)((part * T + t) * H) * (size_t)D
                                : j->out + t * H * D;
    }

    /* weighted sum of v, position by position */
    for (int64_t blk = b0; blk < b1; blk++) {
        const int64_t bp0 = blk * bs, bp1 = imin(bp0 + bs, p1);
        int64_t lo = INT64_MAX, hi = -1;
        for (int64_t t = 0; t < t1 - t0; t++) {
            lo = imin(lo, imax(a[t], bp0));
            hi = imax(hi, imin(b[t], bp1 - 1));
        }
        if (lo > hi)
            continue;
        int64_t rs;
        const float *vr = pa_rows(ops, kv, kv->v, kv->v_scale, j->table[blk], kvh, lo - bp0,
                                  hi + 1 - bp0, buf, &rs);
        for (int64_t t = t0; t < t1; t++) {
            const int64_t qa = imax(a[t - t0], bp0), qb = imin(b[t - t0], bp1 - 1);
            for (int64_t h = h0; h < h1 && qa <= qb; h++) {
                const float *row = sc + ((t - t0) * nh + (h - h0)) * j->sc_len;
                const int64_t at = a[t - t0];
                float *o = orow[t - t0] + h * D;
                for (int64_t p = qa; p <= qb; p++)
                    ops->axpy(o, row[p - at], vr + (p - lo) * rs, D);
            }
        }
    }
}

/* out[t, h] = merge of the partitions' partials */
static void pa_merge(int64_t idx, int tid, void *user)
{
    (void)tid;
    const pa_job *j = user;
    const int64_t D = j->D, TH = j->T * j->H;
    float M = -INFINITY;
    for (int64_t i = 0; i < j->P; i++)
        if (j->ps[i * TH + idx] > 0.0f && j->pm[i * TH + idx] > M)
            M = j->pm[i * TH + idx];
    double w[64], sum = 0.0;
    float *o = j->out + idx * D;
    memset(o, 0, (size_t)D * sizeof(float));
    for (int64_t i0 = 0; i0 < j->P; i0 += 64) { /* sum of all weights first */
        for (int64_t i = i0; i < imin(j->P, i0 + 64); i++) {
            float s = j->ps[i * TH + idx];
            sum += s > 0.0f ? (double)s * exp((double)j->pm[i * TH + idx] - (double)M) : 0.0;
        }
    }
    for (int64_t i0 = 0; i0 < j->P; i0 += 64) {
        int64_t n = imin(j->P, i0 + 64) - i0;
        for (int64_t i = 0; i < n; i++) {
            float s = j->ps[(i0 + i) * TH + idx];
            w[i] = s > 0.0f ? (double)s * exp((double)j->pm[(i0 + i) * TH + idx] - (double)M) / sum
                            : 0.0;
        }
        for (int64_t i = 0; i < n; i++)
            if (w[i] > 0.0)
                j->ops->axpy(o, (float)w[i], j->po + ((i0 + i) * TH + idx) * D, D);
    }
}

lh_status lh_cpu_paged_attention(lh_kctx *ctx, const lh_tensor *q, const lh_cpu_pages *kv,
                                 const int32_t *table, int64_t ctx_len, const int32_t *q_pos,
                                 float scale, int64_t window, int64_t chunk, int64_t n_splits,
                                 lh_tensor *out)
{
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    if (T == 0 || H == 0)
        return LH_OK;
    const int64_t KVH = kv->kv_heads, G = H / KVH, bs = kv->block_size;
    pa_job j = {.ops = ctx->ops, .kv = kv, .q = q->data, .out = out->data, .q_pos = q_pos,
                .table = table, .T = T, .H = H, .G = G, .D = D, .S = ctx_len, .scale = scale,
                .window = window, .chunk = chunk};

    /* the visible span of all queries, in whole blocks */
    int64_t vlo = ctx_len, vhi = 0;
    for (int64_t t = 0; t < T; t++) {
        vlo = imin(vlo, pa_lo(&j, q_pos[t]));
        vhi = imax(vhi, q_pos[t]);
    }
    j.blk0 = vlo / bs;
    j.blk1 = vhi / bs + 1;
    const int64_t nblk = j.blk1 - j.blk0;
    if (n_splits > 0)
        j.part_blocks = cdiv(nblk, n_splits);
    else if (T <= PA_DECODE_MAX_T)
        j.part_blocks = cdiv(PA_PART_TOKENS, bs);
    else
        j.part_blocks = nblk;
    j.part_blocks = imin(j.part_blocks, nblk);
    j.P = cdiv(nblk, j.part_blocks);
    j.sc_len = imin(j.part_blocks * bs, ctx_len);

    /* tiles and head groups: enough items for the pool (never changes a value) */
    const int64_t threads = ctx->n_threads, target = threads > 1 ? 4 * threads : 1;
    j.TQ = imin(T, PA_TILE_T);
    j.gsz = G;
    j.n_gs = 1;
    int64_t items = cdiv(T, j.TQ) * KVH * j.P;
    if (items < target && G > 1) {
        j.n_gs = imin(G, cdiv(target, items));
        j.gsz = cdiv(G, j.n_gs);
        j.n_gs = cdiv(G, j.gsz);
        items = cdiv(T, j.TQ) * KVH * j.P * j.n_gs;
    }
    if (items < target && T > 1) {
        int64_t tiles = cdiv(target, KVH * j.P * j.n_gs);
        j.TQ = imax(1, imin(j.TQ, cdiv(T, tiles)));
    }
    while (j.TQ > 1 && j.TQ * j.gsz * j.sc_len > PA_SCORE_BUDGET)
        j.TQ /= 2;
    j.n_tiles = cdiv(T, j.TQ);

    size_t per_thread = (size_t)(j.TQ * j.gsz * j.sc_len) + (size_t)(bs * D);
    j.scratch = lh_cpu_scratch(ctx, per_thread);
    if (!j.scratch)
        return lh_kerr(ctx, LH_E_NOMEM,
                       "lh_k_paged_attention: out of memory (%zu floats of scratch per thread)",
                       per_thread);
    j.stride = lh_cpu_scratch_stride(ctx);
    float *partials = NULL;
    if (j.P > 1) {
        size_t th = (size_t)(T * H), np = (size_t)j.P * th;
        partials = malloc(np * (2 + (size_t)D) * sizeof(float));
        if (!partials)
            return lh_kerr(ctx, LH_E_NOMEM,
                           "lh_k_paged_attention: out of memory (partials of %lld partitions)",
                           (long long)j.P);
        j.pm = partials;
        j.ps = partials + np;
        j.po = partials + 2 * np;
    }
    lh_cpu_parallel(ctx, j.n_tiles * KVH * j.n_gs * j.P, pa_task, &j);
    if (j.P > 1) {
        if (T * H * j.P * D >= 65536)
            lh_cpu_parallel(ctx, T * H, pa_merge, &j);
        else
            for (int64_t i = 0; i < T * H; i++)
                pa_merge(i, 0, &j);
        free(partials);
    }
    return LH_OK;
}

/* ---- KV write ------------------------------------------------------------------------------ */

typedef struct kw_job {
    const lh_cpu_ops *ops;
    const lh_cpu_pages *kv;
    const int32_t *table;
    int64_t start, n, blk0;
    const float *k, *v;
} kw_job;

/* fp8: sets the scale of (block, head) and encodes; see lh_k_paged_kv_write */
static void kw_fp8(const kw_job *j, unsigned char *block_head, float *scale, int64_t existing,
                   const float *src, int64_t first, int64_t count)
{
    const lh_cpu_pages *kv = j->kv;
    const int64_t D = kv->head_dim, KVH = kv->kv_heads, ts = kv->tok_stride;
    float amax = 0.0f;
    for (int64_t r = 0; r < count; r++)
        for (int64_t d = 0; d < D; d++)
            amax = fmaxf(amax, fabsf(src[(r * KVH) * D + d]));
    float s;
    if (existing == 0) {
        s = amax / 448.0f;
    } else {
        s = *scale;
        if (amax > 448.0f * s && s == 0.0f) {
            s = amax / 448.0f; /* the existing tokens are all zero and stay zero */
        } else if (amax > 448.0f * s) {
            /* grow by powers of two: re-encoding divides each existing value by 2^k, exact
             * while its code stays normal (the exponent shifts) */
            float f = 1.0f;
            while (amax > 448.0f * s) {
                s *= 2.0f;
                f *= 0.5f;
            }
            for (int64_t r = 0; r < existing; r++) {
                unsigned char *row = block_head + r * ts;
                for (int64_t d = 0; d < D; d++)
                    row[d] = lh_k_f32_to_fp8_e4m3(lh_cpu_fp8_e4m3_table[row[d]] * f);
            }
        }
    }
    *scale = s;
    for (int64_t r = 0; r < count; r++) {
        unsigned char *row = block_head + (first + r) * ts;
        const float *x = src + (r * KVH) * D;
        for (int64_t d = 0; d < D; d++)
            row[d] = s > 0.0f ? lh_k_f32_to_fp8_e4m3(x[d] / s) : 0;
    }
}

/* item: (touched block, kv head, k or v) */
static void kw_task(int64_t idx, int tid, void *user)
{
    (void)tid;
    const kw_job *j = user;
    const lh_cpu_pages *kv = j->kv;
    const int64_t KVH = kv->kv_heads, D = kv->head_dim, bs = kv->block_size;
    const bool is_v = idx % 2;
    const int64_t kvh = (idx / 2) % KVH, blk = j->blk0 + idx / (2 * KVH);
    const int64_t p0 = imax(j->start, blk * bs), p1 = imin(j->start + j->n, (blk + 1) * bs);
    const int64_t phys = j->table[blk], first = p0 - blk * bs, count = p1 - p0;
    const float *src = (is_v ? j->v : j->k) + ((p0 - j->start) * KVH + kvh) * D;
    unsigned char *base = is_v ? kv->v : kv->k;
    const int64_t head0 = phys * kv->block_elems + kvh * kv->head_stride; /* row 0 of the head */
    if (kv->dtype == LH_DTYPE_FP8_E4M3) {
        float *scales = is_v ? kv->v_scale : kv->k_scale;
        kw_fp8(j, base + head0, scales + phys * KVH + kvh, first, src, first, count);
        return;
    }
    for (int64_t r = 0; r < count; r++) {
        const int64_t off = head0 + (first + r) * kv->tok_stride;
        const float *x = src + r * KVH * D;
        switch (kv->dtype) {
        case LH_DTYPE_F32:
            memcpy((float *)(void *)base + off, x, (size_t)D * sizeof(float));
            break;
        case LH_DTYPE_BF16:
            j->ops->f32_to_bf16(x, (uint16_t *)(void *)base + off, D);
            break;
        default:
            j->ops->f32_to_f16(x, (uint16_t *)(void *)base + off, D);
            break;
        }
    }
}

lh_status lh_cpu_paged_kv_write(lh_kctx *ctx, const lh_cpu_pages *kv, const int32_t *table,
                                int64_t start, int64_t n, const float *k, const float *v)
{
    if (n == 0)
        return LH_OK;
    const int64_t bs = kv->block_size;
    kw_job j = {ctx->ops, kv, table, start, n, start / bs, k, v};
    const int64_t blocks = (start + n - 1) / bs - j.blk0 + 1;
    const int64_t items = blocks * kv->kv_heads * 2;
    if (n * kv->kv_heads * kv->head_dim >= 32768)
        lh_cpu_parallel(ctx, items, kw_task, &j);
    else
        for (int64_t i = 0; i < items; i++)
            kw_task(i, 0, &j);
    return LH_OK;
}
