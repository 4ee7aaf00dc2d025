/* The KV write of the paged cache, for a packed batch of sequences (the single-sequence entry
 * point is a batch of one).
 *
 * Work item: (sequence, touched logical block): the item stores the block's new keys and
 * values for every kv head, so a block belongs to exactly one item (the dispatch checks that
 * no physical block is touched twice in one call) and its fp8 scales and key summaries need
 * no synchronization. With fused RoPE the item first copies its keys into per-thread scratch
 * and rotates them there with lh_k_rope_apply's own helpers (position positions[row],
 * seq_len kv_len[s]), so the stored keys are bit for bit those of rotate-then-write. Small
 * writes (a decode step) run on the calling thread. v NULL (a pool whose v is its k: one
 * latent for keys and values) stores the keys alone; the values read them back from there. */
#include "paged_kernels.h"

#include <math.h>
#include <stdlib.h>

/* elements written at or above this: items spread over the pool */
#define KW_PARALLEL_ELEMS 32768

static inline int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static inline int64_t imax(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

typedef struct kw_seq {
    int64_t row0, start, n; /* rows [row0, row0 + n) go to positions [start, start + n) */
    int64_t blk_first, item0;
    const int32_t *table;
    const float *inv;       /* fused RoPE: the frequencies at seq_len kv_len */
} kw_seq;

typedef struct kw_job {
    const lh_cpu_ops *ops;
    const lh_cpu_pages *kv;
    const lh_cpu_batch *b;
    const kw_seq *seqs;
    int64_t n_seqs;
    const float *k, *v;
    const lh_rope *rope;
    float *scratch;
    size_t stride;
} kw_job;

/* fp8: sets the scale of (block, head) and encodes count tokens (src rows ss floats apart) at
 * token offsets first..; existing tokens before first. See lh_k_paged_kv_write. */
static void kw_fp8(const lh_cpu_pages *kv, unsigned char *block_head, float *scale,
                   int64_t existing, const float *src, int64_t ss, int64_t first, int64_t count)
{
    const int64_t D = kv->head_dim, ts = kv->tok_stride;
    float amax = 0.0f;
    for (int64_t r = 0; r < count; r++)
        for (int64_t d = 0; d < D; d++)
            amax = fmaxf(amax, fabsf(src[r * ss + d]));
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
        const float *x = src + r * ss;
        for (int64_t d = 0; d < D; d++)
            row[d] = s > 0.0f ? lh_k_f32_to_fp8_e4m3(x[d] / s) : 0;
    }
}

/* count tokens of one head (src rows ss floats apart) into the pool at token offset first */
static void kw_store(const kw_job *j, lh_dtype dt, unsigned char *base, float *scales,
                     int64_t phys, int64_t kvh, const float *src, int64_t ss, int64_t first,
                     int64_t count)
{
    const lh_cpu_pages *kv = j->kv;
    const int64_t D = kv->head_dim;
    const int64_t head0 = phys * kv->block_elems + kvh * kv->head_stride; /* row 0 of the head */
    if (dt == LH_DTYPE_FP8_E4M3) {
        kw_fp8(kv, base + head0, scales + phys * kv->kv_heads + kvh, first, src, ss, first,
               count);
        return;
    }
    for (int64_t r = 0; r < count; r++) {
        const int64_t off = head0 + (first + r) * kv->tok_stride;
        const float *x = src + r * ss;
        switch (dt) {
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

/* the key summaries of (phys, kvh): reset (fresh) or widened by count keys */
static void kw_summaries(const lh_cpu_pages *kv, int64_t phys, int64_t kvh, const float *src,
                         int64_t ss, int64_t count, bool fresh)
{
    const int64_t D = kv->head_dim, off = (phys * kv->kv_heads + kvh) * D;
    float *mn = kv->k_min + off, *mx = kv->k_max + off;
    int64_t r = 0;
    if (fresh) {
        memcpy(mn, src, (size_t)D * sizeof(float));
        memcpy(mx, src, (size_t)D * sizeof(float));
        r = 1;
    }
    for (; r < count; r++) {
        const float *x = src + r * ss;
        for (int64_t d = 0; d < D; d++) {
            mn[d] = x[d] < mn[d] ? x[d] : mn[d];
            mx[d] = x[d] > mx[d] ? x[d] : mx[d];
        }
    }
}

static void kw_item(int64_t idx, int tid, void *user)
{
    const kw_job *j = user;
    const lh_cpu_pages *kv = j->kv;
    int64_t lo = 0, hi = j->n_seqs - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (j->seqs[mid].item0 <= idx)
            lo = mid;
        else
            hi = mid - 1;
    }
    const kw_seq *sq = &j->seqs[lo];
    const int64_t KVH = kv->kv_heads, D = kv->head_dim, bs = kv->block_size, row = KVH * D;
    const int64_t blk = sq->blk_first + (idx - sq->item0);
    const int64_t p0 = imax(sq->start, blk * bs), p1 = imin(sq->start + sq->n, (blk + 1) * bs);
    const int64_t phys = sq->table[blk], first = p0 - blk * bs, count = p1 - p0;
    const int64_t r0 = sq->row0 + (p0 - sq->start); /* the first row of k / v */
    const float *ks = j->k + r0 * row, *vs = j->v ? j->v + r0 * row : NULL;
    if (j->rope) {
        float *rot = j->scratch + (size_t)tid * j->stride;
        float *c = rot + count * row, *s = c + j->rope->rotary_dim / 2;
        memcpy(rot, ks, (size_t)(count * row) * sizeof(float));
        for (int64_t t = 0; t < count; t++) {
            lh_cpu_rope_cos_sin(j->rope, sq->inv, j->b->positions[r0 + t], c, s);
            lh_cpu_rope_heads(j->ops, j->rope, rot + t * row, KVH, D, c, s);
        }
        ks = rot;
    }
    for (int64_t h = 0; h < KVH; h++) {
        if (kv->k_min)
            kw_summaries(kv, phys, h, ks + h * D, row, count, first == 0);
        kw_store(j, kv->k_dtype, kv->k, kv->k_scale, phys, h, ks + h * D, row, first, count);
        if (vs)
            kw_store(j, kv->v_dtype, kv->v, kv->v_scale, phys, h, vs + h * D, row, first, count);
    }
}

lh_status lh_cpu_paged_kv_write(lh_kctx *ctx, const char *fn, const lh_cpu_pages *kv,
                                const lh_cpu_batch *b, const float *k, const float *v,
                                const lh_rope *rope)
{
    const int64_t bs = kv->block_size;
    int64_t n_act = 0, total = 0;
    for (int64_t s = 0; s < b->n_seqs; s++)
        if (b->n_new[s] > 0) {
            n_act++;
            total += b->n_new[s];
        }
    if (n_act == 0)
        return LH_OK;
    const int64_t half = rope ? rope->rotary_dim / 2 : 0;
    const bool dyn = rope && !strcmp(rope->scaling.kind ? rope->scaling.kind : "default",
                                     "dynamic");
    const size_t sz_seqs = ((size_t)n_act * sizeof(kw_seq) + 63) & ~(size_t)63;
    const size_t sz_dyn = dyn ? (size_t)(n_act * half) * sizeof(float) : 0;
    unsigned char *arena = lh_cpu_arena(ctx, sz_seqs + sz_dyn);
    if (!arena)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%zu bytes of working memory)", fn,
                       sz_seqs + sz_dyn);
    kw_seq *seqs = (kw_seq *)(void *)arena;
    float *dyn_inv = (float *)(void *)(arena + sz_seqs);
    int64_t items = 0, max_count = 0;
    for (int64_t s = 0, a = 0; s < b->n_seqs; s++) {
        if (b->n_new[s] == 0)
            continue;
        kw_seq *sq = &seqs[a++];
        sq->row0 = b->token_start[s];
        sq->n = b->n_new[s];
        sq->start = b->kv_len[s] - sq->n;
        sq->blk_first = sq->start / bs;
        sq->item0 = items;
        sq->table = b->tables[s];
        sq->inv = NULL;
        if (rope)
            sq->inv = lh_cpu_rope_inv(rope, b->kv_len[s], dyn ? dyn_inv + (a - 1) * half : NULL);
        items += (sq->start + sq->n - 1) / bs - sq->blk_first + 1;
        max_count = imax(max_count, imin(bs, sq->n));
    }
    kw_job j = {ctx->ops, kv, b, seqs, n_act, k, v, rope, NULL, 0};
    if (rope) {
        const size_t per_thread =
            (size_t)(max_count * kv->kv_heads * kv->head_dim) + (size_t)(2 * half);
        j.scratch = lh_cpu_scratch(ctx, per_thread);
        if (!j.scratch)
            return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (%zu floats of scratch per thread)",
                           fn, per_thread);
        j.stride = lh_cpu_scratch_stride(ctx);
    }
    if (total * kv->kv_heads * kv->head_dim >= KW_PARALLEL_ELEMS)
        lh_cpu_parallel(ctx, items, kw_item, &j);
    else
        for (int64_t i = 0; i < items; i++)
            kw_item(i, 0, &j);
    return LH_OK;
}
