/* Attention over a paged KV cache for a packed batch of sequences (the single-sequence entry
 * point is a batch of one).
 *
 * Work items: (sequence, query tile, head range, context partition), all of the batch in one
 * thread-pool job:
 *  - a query tile is up to PA_TILE_T consecutive query tokens of one sequence;
 *  - a head range is a run of query heads; an item takes all of them unless the pool needs
 *    more items than sequences x tiles x partitions give (and the work is large enough to
 *    pay for the split, PA_ITEM_WORK). For each block and each kv head its heads read, an
 *    item converts the rows it needs once (bf16, f16, fp8; f32 is read in place) and uses
 *    them for every (token, head) of the item, so a whole block is read once, in order (with
 *    NHD a kv head's rows are strided: reading one head at a time would drag the others'
 *    cache lines along), and the next block is prefetched (a sequence's blocks are
 *    scattered, which hides them from the hardware prefetcher);
 *  - a partition is a range of whole blocks of the sequence's visible context. Decode steps
 *    (T <= PA_DECODE_MAX_T) split the visible span into partitions of about PA_PART_TOKENS
 *    tokens (flash-decoding: the partitions of a long context run in parallel); otherwise
 *    there is one partition. The partitioning of a sequence depends on its T, positions,
 *    ctx_len, the block size and params only; the tiling and head ranges (chosen from the
 *    thread count and the batch) never change a value, so results do not depend on the
 *    thread count or on the other sequences of the batch.
 * Within an item every (token, head) is computed exactly as lh_k_attention computes it: the
 * scores of its visible positions in this partition, contiguous and in position order, each
 * dot(q, k) * scale, soft-capped by lh_cpu_attn_softcap when params->softcap > 0 (the same
 * function lh_k_attention uses); max; exp-sum; normalize; out = sum_p w_p v_p in position
 * order from zero (dot_rows / axpy_rows: the arithmetic of dot / axpy, several rows per
 * call). With one partition that is the result; with several, each partition's (max m_i,
 * sum s_i, normalized output o_i) is kept and merged: out = sum_i (s_i e^(m_i - M) / S) o_i
 * with M = max_i m_i and S = sum_i s_i e^(m_i - M), partitions with nothing visible skipped. The merge of a (tile,
 * head range) is done by whichever of its partition items finishes last (an atomic count),
 * so a decode step is one dispatch; the merge's arithmetic does not depend on who runs it.
 * Working memory (plans, partials, counts, rotated q) lives in the context's arena and
 * per-thread scratch: a steady stream of calls allocates nothing.
 *
 * Fused RoPE: q is first copied and rotated (lh_k_rope_apply's own helpers, each sequence
 * with seq_len = its ctx_len) into the arena; by the caller for a few rows, in a job of its
 * own for many.
 *
 * Sparse (Quest) selection: an item is (sequence, query tile, head range) and walks the
 * sequence's partitions itself. For each of its (token, head) rows it first picks the blocks
 * (the local ones, then the top_k best by the bound sum_d max(q_d kmin_d, q_d kmax_d), ties
 * to the lower block, NaN bounds last, by a heap of top_k), then computes every partition
 * exactly as the dense path does, restricted to the chosen blocks, and merges the partials
 * as the dense path does. So when the choice covers every visible block the result is the
 * dense one, bit for bit. With soft-capping the bound stays one of the raw q.k: the cap is
 * increasing, so it ranks the blocks as a capped bound would (up to ties the cap's rounding
 * makes), and the capped scores are what the softmax of the chosen blocks sees. */
#include "paged_kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

#define PA_DECODE_MAX_T 8
#define PA_PART_TOKENS 256
#define PA_TILE_T 16
/* scores per thread at most (floats), unless a single query row needs more */
#define PA_SCORE_BUDGET (256 * 1024)
/* fused RoPE: up to this many query rows are rotated by the calling thread */
#define PA_ROPE_SERIAL_ROWS 32
/* (query row, head, position) triples an item should have at least when the work is split
 * for the pool */
#define PA_ITEM_WORK 512

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

static inline size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Rows [r0, r1) (token offsets inside the block) of kv head kvh of physical block phys of the
 * keys or values (dtype dt), as f32: returns row r0 and sets *stride (elements between rows).
 * f32 is read in place, the other dtypes are decoded into buf ([r1 - r0, D]). */
static const float *pa_rows(const lh_cpu_ops *ops, const lh_cpu_pages *kv, lh_dtype dt,
                            const unsigned char *base, const float *scales, int64_t phys,
                            int64_t kvh, int64_t r0, int64_t r1, float *buf, int64_t *stride)
{
    const int64_t D = kv->head_dim, n = r1 - r0;
    const int64_t off = phys * kv->block_elems + kvh * kv->head_stride + r0 * kv->tok_stride;
    if (dt == LH_DTYPE_F32) {
        *stride = kv->tok_stride;
        return (const float *)(const void *)base + off;
    }
    *stride = D;
    const bool dense = kv->tok_stride == D; /* HND: the head's rows are contiguous */
    switch (dt) {
    case LH_DTYPE_BF16:
    case LH_DTYPE_F16: {
        void (*cvt)(const uint16_t *, float *, int64_t) =
            dt == LH_DTYPE_BF16 ? ops->bf16_to_f32 : ops->f16_to_f32;
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

/* Asks the caches for rows [r0, r1) of kv head kvh of physical block phys (keys or values of
 * dtype dt): the blocks of a sequence are scattered over the pool, so the hardware
 * prefetcher, which follows address streams, cannot see the next one coming. */
static inline void pa_prefetch(const lh_cpu_pages *kv, lh_dtype dt, const unsigned char *base,
                               int64_t phys, int64_t kvh, int64_t r0, int64_t r1)
{
#if defined(__GNUC__) || defined(__clang__)
    const int64_t es = dt == LH_DTYPE_F32 ? 4 : dt == LH_DTYPE_FP8_E4M3 ? 1 : 2;
    const unsigned char *p =
        base + (phys * kv->block_elems + kvh * kv->head_stride + r0 * kv->tok_stride) * es;
    const int64_t row = kv->head_dim * es, stride = kv->tok_stride * es;
    if (stride == row) { /* HND: the rows are contiguous */
        for (int64_t o = 0; o < (r1 - r0) * row; o += 64)
            __builtin_prefetch(p + o, 0, 3);
        return;
    }
    for (int64_t r = r0; r < r1; r++, p += stride)
        for (int64_t o = 0; o < row; o += 64)
            __builtin_prefetch(p + o, 0, 3);
#else
    (void)kv, (void)dt, (void)base, (void)phys, (void)kvh, (void)r0, (void)r1;
#endif
}

/* One sequence of the batch, planned. */
typedef struct pa_seq {
    int64_t row0, T, S;     /* rows [row0, row0 + T) of q / out; ctx_len S */
    int64_t rrow0;          /* fused RoPE: index of row0 among the rows rotated */
    const int32_t *pos;     /* positions of its rows */
    const int32_t *table;
    const float *q;         /* its row 0 in q, or in the rotated copy */
    float *out;             /* its row 0 in out */
    const float *inv;       /* fused RoPE: the frequencies at seq_len S */
    /* partition i covers logical blocks [blk0 + i * part_blocks, ...) below blk1 */
    int64_t blk0, blk1, part_blocks, P;
    int64_t sc_len;         /* scores per (token, head) row */
    int64_t TQ, n_tiles;    /* query tiles */
    int64_t item0;          /* its first work item */
    float *pm, *ps, *po;    /* P > 1: per-partition max, sum [P][T][H], output [P][T][H][D] */
    _Atomic int64_t *left;  /* P > 1, dense: partitions to go, per (tile, head range) */
} pa_seq;

typedef struct pa_job {
    const lh_cpu_ops *ops;
    const lh_cpu_pages *kv;
    const lh_cpu_attn_params *prm;
    int64_t H, G, D, KVH;
    int64_t hsz, n_hg;      /* query heads per item, head groups */
    bool sparse;
    bool prefetch;          /* software prefetch of the blocks ahead */
    pa_seq *seqs;           /* the sequences with rows, item0 increasing */
    int64_t n_seqs;
    /* per-thread scratch: scores, conversion buffer, row counts; sparse: chosen flags
     * [rows][the sequence's blocks] and the top-k heap */
    float *scratch;
    size_t stride;          /* floats */
    size_t off_buf, off_cnt, off_sel, off_heap_s, off_heap_i; /* bytes */
    const lh_rope *rope;    /* the RoPE pre-pass */
    const float *q_in;
    float *q_rot;
} pa_job;

/* first visible position for a query at pos (causal: the last is pos itself) */
static inline int64_t pa_lo(const lh_cpu_attn_params *prm, int64_t pos)
{
    int64_t lo = 0;
    if (prm->window > 0 && pos - prm->window + 1 > lo)
        lo = pos - prm->window + 1;
    if (prm->chunk > 0 && pos / prm->chunk * prm->chunk > lo)
        lo = pos / prm->chunk * prm->chunk;
    return lo;
}

/* The partitioning of a sequence (T >= 1 rows). */
static void pa_plan(pa_seq *sq, const lh_cpu_attn_params *prm, int64_t bs)
{
    int64_t vlo = sq->S, vhi = 0;
    for (int64_t t = 0; t < sq->T; t++) {
        vlo = imin(vlo, pa_lo(prm, sq->pos[t]));
        vhi = imax(vhi, sq->pos[t]);
    }
    sq->blk0 = vlo / bs;
    sq->blk1 = vhi / bs + 1;
    const int64_t nblk = sq->blk1 - sq->blk0;
    if (prm->n_splits > 0)
        sq->part_blocks = cdiv(nblk, prm->n_splits);
    else if (sq->T <= PA_DECODE_MAX_T)
        sq->part_blocks = cdiv(PA_PART_TOKENS, bs);
    else
        sq->part_blocks = nblk;
    sq->part_blocks = imin(sq->part_blocks, nblk);
    sq->P = cdiv(nblk, sq->part_blocks);
    sq->sc_len = imin(sq->part_blocks * bs, sq->S);
}

static const pa_seq *pa_find(const pa_seq *seqs, int64_t n, int64_t item)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (seqs[mid].item0 <= item)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &seqs[lo];
}

/* ---- fused RoPE pre-pass ------------------------------------------------------------------- */

static void pa_rope_row(int64_t i, int tid, void *user)
{
    const pa_job *j = user;
    int64_t lo = 0, hi = j->n_seqs - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (j->seqs[mid].rrow0 <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    const pa_seq *sq = &j->seqs[lo];
    const int64_t t = i - sq->rrow0, HD = j->H * j->D;
    float *c = j->scratch + (size_t)tid * j->stride, *s = c + j->rope->rotary_dim / 2;
    float *row = j->q_rot + (sq->row0 + t) * HD;
    memcpy(row, j->q_in + (sq->row0 + t) * HD, (size_t)HD * sizeof(float));
    lh_cpu_rope_cos_sin(j->rope, sq->inv, sq->pos[t], c, s);
    lh_cpu_rope_heads(j->ops, j->rope, row, j->H, j->D, c, s);
}

/* ---- sparse block selection ---------------------------------------------------------------- */

/* block a ranks above block b: a higher bound, or the same and a lower logical block */
static inline bool pa_better(float sa, int64_t ia, float sb, int64_t ib)
{
    return sa > sb || (sa == sb && ia < ib);
}

/* min-heap on rank (the root is the worst block kept) */
static void pa_sift_down(float *hs, int64_t *hi, int64_t n, int64_t i)
{
    for (;;) {
        int64_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && pa_better(hs[w], hi[w], hs[l], hi[l]))
            w = l;
        if (r < n && pa_better(hs[w], hi[w], hs[r], hi[r]))
            w = r;
        if (w == i)
            return;
        float ts = hs[i];
        int64_t ti = hi[i];
        hs[i] = hs[w];
        hi[i] = hi[w];
        hs[w] = ts;
        hi[w] = ti;
        i = w;
    }
}

static void pa_sift_up(float *hs, int64_t *hi, int64_t i)
{
    while (i > 0) {
        int64_t p = (i - 1) / 2;
        if (!pa_better(hs[p], hi[p], hs[i], hi[i]))
            return;
        float ts = hs[i];
        int64_t ti = hi[i];
        hs[i] = hs[p];
        hi[i] = hi[p];
        hs[p] = ts;
        hi[p] = ti;
        i = p;
    }
}

/* The blocks one (query, head) attends to: chosen[b - blk0] = 1 for b in the sequence's span. */
static void pa_select(const pa_job *j, const pa_seq *sq, const float *qv, int64_t kvh,
                      int64_t pos, unsigned char *chosen, float *hs, int64_t *hi)
{
    const lh_cpu_pages *kv = j->kv;
    const int64_t bs = kv->block_size, D = j->D;
    const int64_t vb0 = pa_lo(j->prm, pos) / bs, vb1 = pos / bs; /* visible blocks */
    memset(chosen, 0, (size_t)(sq->blk1 - sq->blk0));
    const int64_t lb0 = imax(vb0, vb1 - j->prm->local + 1); /* the local ones */
    for (int64_t b = lb0; b <= vb1; b++)
        chosen[b - sq->blk0] = 1;
    const int64_t nc = lb0 - vb0, k = j->prm->top_k; /* candidates [vb0, lb0) */
    if (nc <= 0 || k <= 0)
        return;
    if (k >= nc) {
        memset(chosen + (vb0 - sq->blk0), 1, (size_t)nc);
        return;
    }
    int64_t n = 0;
    for (int64_t b = vb0; b < lb0; b++) {
        const int64_t si = ((int64_t)sq->table[b] * kv->kv_heads + kvh) * D;
        float s = j->ops->bound_dot(qv, kv->k_min + si, kv->k_max + si, D);
        if (s != s)
            s = -INFINITY; /* a NaN bound ranks lowest */
        if (n < k) {
            hs[n] = s;
            hi[n] = b;
            pa_sift_up(hs, hi, n++);
        } else if (pa_better(s, b, hs[0], hi[0])) {
            hs[0] = s;
            hi[0] = b;
            pa_sift_down(hs, hi, n, 0);
        }
    }
    for (int64_t i = 0; i < n; i++)
        chosen[hi[i] - sq->blk0] = 1;
}

/* ---- one partition of an item ---------------------------------------------------------------- */

/* What an item covers: tokens [t0, t1) of its sequence and query heads [h0, h1) (which may
 * start and end inside a GQA group). Its rows are (token, head): row = (t - t0) * nh + h - h0. */
typedef struct pa_span {
    int64_t t0, t1, h0, h1, nh;
} pa_span;

/* The item's rows over partition part; chosen (sparse; NULL: dense) holds [row][block - blk0]
 * flags. */
static void pa_part(const pa_job *j, const pa_seq *sq, const pa_span *sp, int64_t part,
                    const unsigned char *chosen, float *sc, float *buf, int64_t *cnt)
{
    const lh_cpu_pages *kv = j->kv;
    const lh_cpu_ops *ops = j->ops;
    const int64_t bs = kv->block_size, D = j->D, H = j->H, G = j->G, T = sq->T;
    const int64_t nblk = sq->blk1 - sq->blk0, scl = sq->sc_len;
    const int64_t t0 = sp->t0, nt = sp->t1 - sp->t0, nh = sp->nh;
    const float scale = j->prm->scale;
    const int64_t b0 = sq->blk0 + part * sq->part_blocks, b1 = imin(sq->blk1, b0 + sq->part_blocks);
    const int64_t p0 = b0 * bs, p1 = imin(sq->S, b1 * bs); /* this partition's positions */

    /* each query's visible positions in this partition: [a[t], b[t]] (empty when a > b) */
    int64_t a[PA_TILE_T], b[PA_TILE_T];
    for (int64_t t = 0; t < nt; t++) {
        a[t] = imax(pa_lo(j->prm, sq->pos[t0 + t]), p0);
        b[t] = imin((int64_t)sq->pos[t0 + t], p1 - 1);
    }
#define PA_ROW(t, h) ((t) * nh + (h) - sp->h0)
#define PA_CHOSEN(row, blk) (!chosen || chosen[(row) * nblk + (blk) - sq->blk0])

    /* scores, then (second pass) the weighted sum of v, block by block */
    for (int pass = 0; pass < 2; pass++) {
        memset(cnt, 0, (size_t)(nt * nh) * sizeof *cnt);
        for (int64_t blk = b0; blk < b1; blk++) {
            const int64_t bp0 = blk * bs, bp1 = imin(bp0 + bs, p1);
            const int64_t phys = sq->table[blk];
            for (int64_t kvh = sp->h0 / G; kvh * G < sp->h1; kvh++) {
                /* the item's heads that read kv head kvh */
                const int64_t ha = imax(sp->h0, kvh * G), hb = imin(sp->h1, kvh * G + G);
                int64_t lo = INT64_MAX, hi = -1; /* rows any (token, head) of kvh needs */
                for (int64_t t = 0; t < nt; t++) {
                    const int64_t qa = imax(a[t], bp0), qb = imin(b[t], bp1 - 1);
                    if (qa > qb)
                        continue;
                    if (chosen) {
                        bool any = false;
                        for (int64_t h = ha; h < hb && !any; h++)
                            any = PA_CHOSEN(PA_ROW(t, h), blk);
                        if (!any)
                            continue;
                    }
                    lo = imin(lo, qa);
                    hi = imax(hi, qb);
                }
                if (lo > hi)
                    continue;
                if (pass == 0 && j->prefetch) { /* the next block's keys, this block's values */
                    if (blk + 1 < b1)
                        pa_prefetch(kv, kv->k_dtype, kv->k, sq->table[blk + 1], kvh, 0,
                                    imin(bs, p1 - (blk + 1) * bs));
                    pa_prefetch(kv, kv->v_dtype, kv->v, phys, kvh, lo - bp0, hi + 1 - bp0);
                }
                int64_t rs;
                const float *rows =
                    pass == 0 ? pa_rows(ops, kv, kv->k_dtype, kv->k, kv->k_scale, phys, kvh,
                                        lo - bp0, hi + 1 - bp0, buf, &rs)
                              : pa_rows(ops, kv, kv->v_dtype, kv->v, kv->v_scale, phys, kvh,
                                        lo - bp0, hi + 1 - bp0, buf, &rs);
                for (int64_t t = 0; t < nt; t++) {
                    const int64_t qa = imax(a[t], bp0), qb = imin(b[t], bp1 - 1);
                    if (qa > qb)
                        continue;
                    const float *r0 = rows + (qa - lo) * rs;
                    for (int64_t h = ha; h < hb; h++) {
                        const int64_t row = PA_ROW(t, h);
                        if (!PA_CHOSEN(row, blk))
                            continue;
                        float *srow = sc + row * scl + cnt[row];
                        if (pass == 0) {
                            const float *qv = sq->q + ((t0 + t) * H + h) * D;
                            ops->dot_rows(qv, r0, rs, qb - qa + 1, D, scale, srow);
                        } else {
                            float *o = sq->P > 1 ? sq->po + ((part * T + t0 + t) * H + h) * D
                                                 : sq->out + ((t0 + t) * H + h) * D;
                            ops->axpy_rows(o, srow, r0, rs, qb - qa + 1, D);
                        }
                        cnt[row] += qb - qa + 1;
                    }
                }
            }
        }
        if (pass == 1)
            break;
        /* softmax per (token, head), and the output rows zeroed */
        for (int64_t t = 0; t < nt; t++)
            for (int64_t h = sp->h0; h < sp->h1; h++) {
                const int64_t row = PA_ROW(t, h), n = cnt[row];
                float *srow = sc + row * scl;
                const size_t pi = (size_t)((part * T + t0 + t) * H + h);
                float *o = sq->P > 1 ? sq->po + pi * (size_t)D : sq->out + ((t0 + t) * H + h) * D;
                if (n <= 0) { /* this partition holds nothing the query sees (P > 1) */
                    if (sq->P > 1) {
                        sq->pm[pi] = -INFINITY;
                        sq->ps[pi] = 0.0f;
                    } else {
                        memset(o, 0, (size_t)D * sizeof(float)); /* not reached */
                    }
                    continue;
                }
                if (j->prm->softcap > 0.0f)
                    lh_cpu_attn_softcap(srow, n, j->prm->softcap);
                float m = ops->max(srow, n);
                float s = ops->exp_sub_sum(srow, m, n);
                ops->scale(srow, 1.0f / s, n);
                memset(o, 0, (size_t)D * sizeof(float));
                if (sq->P > 1) {
                    sq->pm[pi] = m;
                    sq->ps[pi] = s;
                }
            }
    }
#undef PA_CHOSEN
#undef PA_ROW
}

/* out[t, h] = merge of the partitions' partials */
static void pa_merge_row(const pa_job *j, const pa_seq *sq, int64_t t, int64_t h)
{
    const int64_t D = j->D, TH = sq->T * j->H, idx = t * j->H + h, P = sq->P;
    float M = -INFINITY;
    for (int64_t i = 0; i < P; i++)
        if (sq->ps[i * TH + idx] > 0.0f && sq->pm[i * TH + idx] > M)
            M = sq->pm[i * TH + idx];
    double w[64], sum = 0.0;
    float *o = sq->out + idx * D;
    memset(o, 0, (size_t)D * sizeof(float));
    for (int64_t i = 0; i < P; i++) { /* sum of all weights first */
        float s = sq->ps[i * TH + idx];
        sum += s > 0.0f ? (double)s * exp((double)sq->pm[i * TH + idx] - (double)M) : 0.0;
    }
    for (int64_t i0 = 0; i0 < P; i0 += 64) {
        int64_t n = imin(P, i0 + 64) - i0;
        for (int64_t i = 0; i < n; i++) {
            float s = sq->ps[(i0 + i) * TH + idx];
            w[i] = s > 0.0f ? (double)s * exp((double)sq->pm[(i0 + i) * TH + idx] - (double)M) / sum
                            : 0.0;
        }
        for (int64_t i = 0; i < n; i++)
            if (w[i] > 0.0)
                j->ops->axpy(o, (float)w[i], sq->po + ((i0 + i) * TH + idx) * D, D);
    }
}

static void pa_merge_span(const pa_job *j, const pa_seq *sq, const pa_span *sp)
{
    for (int64_t t = sp->t0; t < sp->t1; t++)
        for (int64_t h = sp->h0; h < sp->h1; h++)
            pa_merge_row(j, sq, t, h);
}

static void pa_item(int64_t idx, int tid, void *user)
{
    const pa_job *j = user;
    const pa_seq *sq = pa_find(j->seqs, j->n_seqs, idx);
    int64_t r = idx - sq->item0, part = 0;
    if (!j->sparse) {
        part = r % sq->P;
        r /= sq->P;
    }
    const int64_t hg = r % j->n_hg, tile = r / j->n_hg;
    pa_span sp;
    sp.t0 = tile * sq->TQ;
    sp.t1 = imin(sq->T, sp.t0 + sq->TQ);
    sp.h0 = hg * j->hsz;
    sp.h1 = imin(j->H, sp.h0 + j->hsz);
    if (sp.t0 >= sp.t1 || sp.h0 >= sp.h1)
        return; /* the whole (tile, head group) is empty: nothing to merge either */
    sp.nh = sp.h1 - sp.h0;
    float *sc = j->scratch + (size_t)tid * j->stride;
    unsigned char *mem = (unsigned char *)sc;
    float *buf = (float *)(void *)(mem + j->off_buf);
    int64_t *cnt = (int64_t *)(void *)(mem + j->off_cnt);
    if (!j->sparse) {
        pa_part(j, sq, &sp, part, NULL, sc, buf, cnt);
        if (sq->P > 1) {
            _Atomic int64_t *left = sq->left + tile * j->n_hg + hg;
            /* the last partition done merges: acq_rel publishes every partition's partials */
            if (atomic_fetch_sub_explicit(left, 1, memory_order_acq_rel) == 1)
                pa_merge_span(j, sq, &sp);
        }
        return;
    }
    const int64_t nblk = sq->blk1 - sq->blk0;
    unsigned char *chosen = mem + j->off_sel;
    float *hs = (float *)(void *)(mem + j->off_heap_s);
    int64_t *hi = (int64_t *)(void *)(mem + j->off_heap_i);
    for (int64_t t = sp.t0; t < sp.t1; t++)
        for (int64_t h = sp.h0; h < sp.h1; h++)
            pa_select(j, sq, sq->q + (t * j->H + h) * j->D, h / j->G, sq->pos[t],
                      chosen + ((t - sp.t0) * sp.nh + h - sp.h0) * nblk, hs, hi);
    for (int64_t p = 0; p < sq->P; p++)
        pa_part(j, sq, &sp, p, chosen, sc, buf, cnt);
    if (sq->P > 1)
        pa_merge_span(j, sq, &sp);
}

/* ---- planning and dispatch ------------------------------------------------------------------- */

lh_status lh_cpu_paged_attention(lh_kctx *ctx, const char *fn, const lh_tensor *q,
                                 const lh_cpu_pages *kv, const lh_cpu_batch *b,
                                 const lh_cpu_attn_params *prm, lh_tensor *out)
{
    const int64_t Tq = q->shape[0], H = q->shape[1], D = q->shape[2];
    if (Tq == 0 || H == 0)
        return LH_OK;
    const int64_t KVH = kv->kv_heads, G = H / KVH, bs = kv->block_size;
    const bool sparse = prm->local > 0;
    pa_job j = {.ops = ctx->ops, .kv = kv, .prm = prm, .H = H, .G = G, .D = D, .KVH = KVH,
                .sparse = sparse, .rope = prm->rope, .q_in = q->data};

    /* pass 1: what the arena must hold, and the items at the default tiling */
    int64_t n_act = 0, rows = 0, items = 0, work = 0;
    size_t partial_floats = 0, counters = 0;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        if (b->n_new[s] == 0)
            continue;
        pa_seq sq = {.T = b->n_new[s], .S = b->kv_len[s], .pos = b->positions + b->token_start[s]};
        pa_plan(&sq, prm, bs);
        n_act++;
        rows += sq.T;
        work += sq.T * H * imin(sq.S, (sq.blk1 - sq.blk0) * bs);
        items += cdiv(sq.T, imin(sq.T, PA_TILE_T)) * (sparse ? 1 : sq.P);
        if (sq.P > 1) {
            partial_floats += (size_t)(sq.P * sq.T * H) * (size_t)(2 + D);
            if (!sparse)
                counters += (size_t)(sq.T * H);
        }
    }
    if (n_act == 0)
        return LH_OK;
    const bool rope_dyn = prm->rope && !strcmp(prm->rope->scaling.kind ? prm->rope->scaling.kind
                                                                       : "default", "dynamic");
    const int64_t half = prm->rope ? prm->rope->rotary_dim / 2 : 0;
    const size_t sz_seqs = align64((size_t)n_act * sizeof(pa_seq));
    const size_t sz_part = align64(partial_floats * sizeof(float));
    const size_t sz_cnt = align64(counters * sizeof(_Atomic int64_t));
    const size_t sz_rot = prm->rope ? align64((size_t)(Tq * H * D) * sizeof(float)) : 0;
    const size_t sz_dyn = rope_dyn ? align64((size_t)(n_act * half) * sizeof(float)) : 0;
    unsigned char *arena = lh_cpu_arena(ctx, sz_seqs + sz_part + sz_cnt + sz_rot + sz_dyn);
    if (!arena)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%zu bytes of working memory)", fn,
                       sz_seqs + sz_part + sz_cnt + sz_rot + sz_dyn);
    j.seqs = (pa_seq *)(void *)arena;
    float *partials = (float *)(void *)(arena + sz_seqs);
    _Atomic int64_t *left = (_Atomic int64_t *)(void *)(arena + sz_seqs + sz_part);
    j.q_rot = prm->rope ? (float *)(void *)(arena + sz_seqs + sz_part + sz_cnt) : NULL;
    float *dyn = (float *)(void *)(arena + sz_seqs + sz_part + sz_cnt + sz_rot);

    /* tiles and head groups: enough items for the pool, but not so many that an item's
     * fixed costs or the hand-over between threads outweigh its work (never changes a
     * value). An item takes all heads unless the pool needs more items: its blocks are then
     * read whole, once (with NHD a kv head's rows are strided, and reading one head at a
     * time drags the others' cache lines along). */
    const int64_t threads = ctx->n_threads;
    int64_t target = 1;
    if (threads > 1 && work >= 2 * PA_ITEM_WORK)
        target = imax(threads, imin(4 * threads, work / PA_ITEM_WORK));
    j.hsz = H;
    j.n_hg = 1;
    if (items < target && H > 1) {
        j.n_hg = imin(H, cdiv(target, items));
        j.hsz = cdiv(H, j.n_hg);
        j.n_hg = cdiv(H, j.hsz);
        items *= j.n_hg;
    }
    const int64_t heads_per_item = j.hsz;

    /* pass 2: the plans */
    int64_t n_items = 0, rrow = 0, max_sc = 0, max_rows = 0, max_nblk = 0;
    size_t po_off = 0, left_off = 0;
    for (int64_t s = 0, a = 0; s < b->n_seqs; s++) {
        if (b->n_new[s] == 0)
            continue;
        pa_seq *sq = &j.seqs[a++];
        memset(sq, 0, sizeof *sq);
        sq->row0 = b->token_start[s];
        sq->T = b->n_new[s];
        sq->S = b->kv_len[s];
        sq->pos = b->positions + sq->row0;
        sq->table = b->tables[s];
        sq->out = (float *)out->data + sq->row0 * H * D;
        sq->rrow0 = rrow;
        rrow += sq->T;
        if (prm->rope) {
            sq->q = j.q_rot + sq->row0 * H * D;
            /* the table for seq_len ctx_len (dynamic: computed into dyn; longrope: short
             * or long) */
            sq->inv = lh_cpu_rope_inv(prm->rope, sq->S, rope_dyn ? dyn + (a - 1) * half : NULL);
        } else {
            sq->q = (const float *)q->data + sq->row0 * H * D;
        }
        pa_plan(sq, prm, bs);
        const int64_t Pd = sparse ? 1 : sq->P;
        sq->TQ = imin(sq->T, PA_TILE_T);
        if (items < target && sq->T > 1) {
            int64_t tiles = cdiv(target, j.n_hg * Pd);
            sq->TQ = imax(1, imin(sq->TQ, cdiv(sq->T, tiles)));
        }
        while (sq->TQ > 1 && sq->TQ * heads_per_item * sq->sc_len > PA_SCORE_BUDGET)
            sq->TQ /= 2;
        sq->n_tiles = cdiv(sq->T, sq->TQ);
        sq->item0 = n_items;
        n_items += sq->n_tiles * j.n_hg * Pd;
        if (sq->P > 1) {
            const size_t np = (size_t)(sq->P * sq->T * H);
            sq->pm = partials + po_off;
            sq->ps = sq->pm + np;
            sq->po = sq->ps + np;
            po_off += np * (size_t)(2 + D);
            if (!sparse) {
                sq->left = left + left_off;
                const int64_t groups = sq->n_tiles * j.n_hg;
                for (int64_t g = 0; g < groups; g++)
                    atomic_init(&sq->left[g], sq->P);
                left_off += (size_t)groups;
            }
        }
        max_sc = imax(max_sc, sq->TQ * heads_per_item * sq->sc_len);
        max_rows = imax(max_rows, sq->TQ * heads_per_item);
        max_nblk = imax(max_nblk, sq->blk1 - sq->blk0);
    }
    j.n_seqs = n_act;
    /* real decode steps read each layer's cache once, from memory: always ask for the next
     * block (cheap when it is already cached) */
    j.prefetch = true;

    /* per-thread scratch */
    size_t off = align64((size_t)max_sc * sizeof(float));
    j.off_buf = off;
    off += align64((size_t)(bs * D) * sizeof(float));
    j.off_cnt = off;
    off += align64((size_t)max_rows * sizeof(int64_t));
    if (sparse) {
        const int64_t kh = imax(1, imin(prm->top_k, max_nblk));
        j.off_sel = off;
        off += align64((size_t)(max_rows * max_nblk));
        j.off_heap_s = off;
        off += align64((size_t)kh * sizeof(float));
        j.off_heap_i = off;
        off += align64((size_t)kh * sizeof(int64_t));
    }
    if (prm->rope && off < (size_t)(2 * half) * sizeof(float))
        off = (size_t)(2 * half) * sizeof(float);
    const size_t per_thread = off / sizeof(float);
    j.scratch = lh_cpu_scratch(ctx, per_thread);
    if (!j.scratch)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%zu floats of scratch per thread)", fn,
                       per_thread);
    j.stride = lh_cpu_scratch_stride(ctx);

    if (prm->rope) {
        if (rows <= PA_ROPE_SERIAL_ROWS) {
            for (int64_t i = 0; i < rows; i++)
                pa_rope_row(i, 0, &j);
        } else {
            lh_cpu_parallel(ctx, rows, pa_rope_row, &j);
        }
    }
    lh_cpu_parallel(ctx, n_items, pa_item, &j);
    return LH_OK;
}
