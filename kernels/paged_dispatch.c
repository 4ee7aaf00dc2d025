/* The public paged KV cache kernels: argument checks (same rules as kernel_dispatch.c: every
 * tensor on the context's device, contiguous row-major, dtypes and shapes consistent; the
 * messages name the argument, the sequence and the numbers), then the implementation for the
 * device: cpu/paged_attention.c and cpu/paged_kv_write.c, or cuda/paged_attention.cu and
 * cuda/paged_kv_write.cu. The single-sequence entry points are
 * batches of one: their own checks (and messages) first, then the same path. */
#include "cpu/paged_kernels.h"
#include "dispatch_checks.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

/* Checks the summaries pair and returns whether the pool keeps them. */
static lh_status summaries_view(lh_kctx *ctx, const char *fn, const lh_kv_pages *kv,
                                lh_cpu_pages *pv)
{
    const bool has_min = kv->k_min.data != NULL, has_max = kv->k_max.data != NULL;
    if (has_min != has_max)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: kv.k_min and kv.k_max must both be set or both be absent (data NULL); "
                       "kv.%s is missing",
                       fn, has_min ? "k_max" : "k_min");
    if (!has_min)
        return LH_OK;
    const lh_tensor *s[2] = {&kv->k_min, &kv->k_max};
    for (int i = 0; i < 2; i++) {
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, i ? "kv.k_max" : "kv.k_min", s[i], 3, 3, LH_KD_F32));
        if (s[i]->shape[0] != pv->num_blocks || s[i]->shape[1] != pv->kv_heads ||
            s[i]->shape[2] != pv->head_dim)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: kv.%s %s must be [%" PRId64 ", %" PRId64 ", %" PRId64
                           "] (num_blocks, kv_heads, head_dim)",
                           fn, i ? "k_max" : "k_min", LH_KD_SH(s[i]), pv->num_blocks,
                           pv->kv_heads, pv->head_dim);
        if (lh_kd_overlaps(s[i], &kv->k) || lh_kd_overlaps(s[i], &kv->v) ||
            (pv->k_scale && lh_kd_overlaps(s[i], &kv->k_scale)) ||
            (pv->v_scale && lh_kd_overlaps(s[i], &kv->v_scale)))
            return lh_kerr(ctx, LH_E_USAGE, "%s: kv.%s overlaps the pool or its fp8 scales", fn,
                           i ? "k_max" : "k_min");
    }
    if (lh_kd_overlaps(&kv->k_min, &kv->k_max))
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv.k_min and kv.k_max overlap", fn);
    pv->k_min = kv->k_min.data;
    pv->k_max = kv->k_max.data;
    return LH_OK;
}

/* Whether the pool's v is its k (multi-head latent attention caches one latent for keys and
 * values): the same data. pages_view accepts that only with the same dtype (and, fp8, the same
 * scales); any other overlap of k and v is an error there. */
static bool pool_shared(const lh_kv_pages *kv)
{
    return kv->k.data != NULL && kv->k.data == kv->v.data;
}

/* Checks the pool and reads its geometry. */
static lh_status pages_view(lh_kctx *ctx, const char *fn, const lh_kv_pages *kv, lh_cpu_pages *pv)
{
    if (!kv)
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv is NULL", fn);
    if (kv->layout != LH_KV_NHD && kv->layout != LH_KV_HND)
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv layout %d is neither LH_KV_NHD nor LH_KV_HND", fn,
                       (int)kv->layout);
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "kv.k", &kv->k, 4, 4, LH_KD_KV));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "kv.v", &kv->v, 4, 4, LH_KD_KV));
    const char *lay = kv->layout == LH_KV_NHD ? "NHD [num_blocks, block_size, kv_heads, head_dim]"
                                              : "HND [num_blocks, kv_heads, block_size, head_dim]";
    if (!lh_kd_same_shape(&kv->k, &kv->v))
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv.k %s and kv.v %s must have the same shape", fn,
                       LH_KD_SH(&kv->k), LH_KD_SH(&kv->v));
    memset(pv, 0, sizeof *pv);
    pv->layout = kv->layout;
    pv->k_dtype = kv->k.dtype;
    pv->v_dtype = kv->v.dtype;
    pv->num_blocks = kv->k.shape[0];
    pv->block_size = kv->layout == LH_KV_NHD ? kv->k.shape[1] : kv->k.shape[2];
    pv->kv_heads = kv->layout == LH_KV_NHD ? kv->k.shape[2] : kv->k.shape[1];
    pv->head_dim = kv->k.shape[3];
    if (pv->num_blocks < 1 || pv->block_size < 1 || pv->kv_heads < 1 || pv->head_dim < 1)
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv.k %s (layout %s) has an empty dimension", fn,
                       LH_KD_SH(&kv->k), lay);
    if (pv->num_blocks > INT32_MAX)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: kv.k %s has more blocks than an int32 block table can name", fn,
                       LH_KD_SH(&kv->k));
    const bool shared = pool_shared(kv);
    if (shared && kv->k.dtype != kv->v.dtype)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: kv.v shares kv.k's data but has dtype %s, not kv.k's %s (a pool "
                       "whose v is its k has one dtype)",
                       fn, lh_kd_dt_name(kv->v.dtype), lh_kd_dt_name(kv->k.dtype));
    if (!shared && lh_kd_overlaps(&kv->k, &kv->v))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: kv.k and kv.v overlap (a pool whose v is its k gives the same tensor "
                       "for both)",
                       fn);
    pv->block_elems = pv->block_size * pv->kv_heads * pv->head_dim;
    pv->tok_stride = kv->layout == LH_KV_NHD ? pv->kv_heads * pv->head_dim : pv->head_dim;
    pv->head_stride = kv->layout == LH_KV_NHD ? pv->head_dim : pv->block_size * pv->head_dim;
    pv->k = kv->k.data;
    pv->v = kv->v.data;
    /* fp8 scales, per tensor: keys and values may differ in dtype */
    const lh_tensor *sc[2] = {&kv->k_scale, &kv->v_scale};
    const lh_tensor *tn[2] = {&kv->k, &kv->v};
    for (int i = 0; i < 2; i++) {
        if (tn[i]->dtype != LH_DTYPE_FP8_E4M3)
            continue;
        const char *name = i ? "kv.v_scale" : "kv.k_scale";
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, name, sc[i], 2, 2, LH_KD_F32));
        if (sc[i]->shape[0] != pv->num_blocks || sc[i]->shape[1] != pv->kv_heads)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: fp8 %s: %s %s must be [%" PRId64 ", %" PRId64
                           "] (num_blocks, kv_heads)",
                           fn, i ? "values" : "keys", name, LH_KD_SH(sc[i]), pv->num_blocks,
                           pv->kv_heads);
        if (lh_kd_overlaps(sc[i], &kv->k) || lh_kd_overlaps(sc[i], &kv->v))
            return lh_kerr(ctx, LH_E_USAGE, "%s: %s overlaps the pool", fn, name);
        if (i == 0)
            pv->k_scale = kv->k_scale.data;
        else
            pv->v_scale = kv->v_scale.data;
    }
    /* one latent has one set of scales: the write rescales it once, for the keys */
    if (shared && pv->k_scale && pv->k_scale != pv->v_scale)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: kv.v is kv.k (fp8), but kv.v_scale is not kv.k_scale (a pool whose v "
                       "is its k has one set of scales)",
                       fn);
    if (!shared && pv->k_scale && pv->v_scale && lh_kd_overlaps(&kv->k_scale, &kv->v_scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: the fp8 scales kv.k_scale and kv.v_scale overlap", fn);
    return summaries_view(ctx, fn, kv, pv);
}

/* Whether t shares bytes with anything of the pool (elements, scales, summaries). */
static bool overlaps_pool(const lh_tensor *t, const lh_kv_pages *kv, const lh_cpu_pages *pv)
{
    if (lh_kd_overlaps(t, &kv->k) || lh_kd_overlaps(t, &kv->v))
        return true;
    if ((pv->k_scale && lh_kd_overlaps(t, &kv->k_scale)) ||
        (pv->v_scale && lh_kd_overlaps(t, &kv->v_scale)))
        return true;
    return pv->k_min && (lh_kd_overlaps(t, &kv->k_min) || lh_kd_overlaps(t, &kv->k_max));
}

/* How messages name a sequence's things: the single-sequence entry points keep their own
 * argument names ("block_table", "q_pos"), the batched ones name the sequence. */
typedef struct seq_names {
    char pre[48];   /* "" or "sequence 3: " */
    char table[48]; /* "block_table" or "block_tables[3]" */
    const char *pos;
} seq_names;

static void names_for(seq_names *nm, bool single, int64_t s)
{
    if (single) {
        nm->pre[0] = '\0';
        snprintf(nm->table, sizeof nm->table, "block_table");
        nm->pos = "q_pos";
    } else {
        snprintf(nm->pre, sizeof nm->pre, "sequence %" PRId64 ": ", s);
        snprintf(nm->table, sizeof nm->table, "block_tables[%" PRId64 "]", s);
        nm->pos = "positions";
    }
}

/* The table entries of logical blocks [b0, b1) are physical blocks of the pool. */
static lh_status check_table(lh_kctx *ctx, const char *fn, const seq_names *nm,
                             const int32_t *table, int64_t n_table, int64_t b0, int64_t b1,
                             const lh_cpu_pages *pv)
{
    if (b1 <= b0)
        return LH_OK;
    if (!table)
        return lh_kerr(ctx, LH_E_USAGE, "%s: %s%s is NULL", fn, nm->pre, nm->table);
    if (b1 > n_table)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: %sthe tokens need %" PRId64 " logical blocks of %" PRId64
                       ", but %s has %" PRId64 " entries",
                       fn, nm->pre, b1, pv->block_size, nm->table, n_table);
    for (int64_t i = b0; i < b1; i++)
        if (table[i] < 0 || table[i] >= pv->num_blocks)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: %s%s[%" PRId64 "] = %" PRId32
                           " is not a block of the pool [0, %" PRId64 ")",
                           fn, nm->pre, nm->table, i, table[i], pv->num_blocks);
    return LH_OK;
}

#define PARAM_HAS(p, field)                                                                       \
    ((p)->struct_size >= offsetof(lh_paged_attn_params, field) + sizeof((p)->field))

/* q, out, the pool and params of an attention call; fills pv and prm. */
static lh_status attn_common(lh_kctx *ctx, const char *fn, const lh_tensor *q,
                             const lh_kv_pages *kv, const lh_paged_attn_params *params,
                             lh_tensor *out, lh_cpu_pages *pv, lh_cpu_attn_params *prm)
{
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "q", q, 3, 3, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 3, 3, LH_KD_F32));
    LH_KD_CHECK(pages_view(ctx, fn, kv, pv));
    if (!params)
        return lh_kerr(ctx, LH_E_USAGE, "%s: params is NULL", fn);
    if (!PARAM_HAS(params, scale))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: params->struct_size %u is too small (set it to "
                       "sizeof(lh_paged_attn_params))",
                       fn, params->struct_size);
    memset(prm, 0, sizeof *prm);
    prm->scale = params->scale;
    prm->window = PARAM_HAS(params, sliding_window) ? params->sliding_window : 0;
    prm->chunk = PARAM_HAS(params, chunk_size) ? params->chunk_size : 0;
    prm->n_splits = PARAM_HAS(params, n_splits) ? params->n_splits : 0;
    prm->rope = PARAM_HAS(params, rope) ? params->rope : NULL;
    prm->top_k = PARAM_HAS(params, sparse_top_k) ? params->sparse_top_k : 0;
    prm->local = PARAM_HAS(params, sparse_local_blocks) ? params->sparse_local_blocks : 0;
    prm->softcap = PARAM_HAS(params, softcap) ? params->softcap : 0.0f;
    const int64_t H = q->shape[1], D = q->shape[2];
    if (D != pv->head_dim)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q %s and the pool kv.k %s disagree on head_dim", fn,
                       LH_KD_SH(q), LH_KD_SH(&kv->k));
    if (H % pv->kv_heads != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the %" PRId64 " query heads of q %s are not a multiple of the %" PRId64
                       " kv heads of the pool",
                       fn, H, LH_KD_SH(q), pv->kv_heads);
    if (!lh_kd_same_shape(out, q))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must have the shape of q %s", fn, LH_KD_SH(out),
                       LH_KD_SH(q));
    if (!isfinite(prm->scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: scale %g is not finite", fn, (double)prm->scale);
    if (!isfinite(prm->softcap) || prm->softcap < 0.0f)
        return lh_kerr(ctx, LH_E_USAGE, "%s: softcap %g must be finite and >= 0 (0: none)", fn,
                       (double)prm->softcap);
    if (prm->n_splits < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n_splits %" PRId64 " is negative", fn, prm->n_splits);
    if (prm->rope) {
        const lh_rope *r = prm->rope;
        if (!r->inv_freq || r->rotary_dim < 2 || r->rotary_dim % 2)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: params->rope is not a table initialized by lh_k_rope_init", fn);
        if (r->rotary_dim > D)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: params->rope has rotary_dim %" PRId64 " > head_dim %" PRId64, fn,
                           r->rotary_dim, D);
    }
    if (prm->top_k < 0 || prm->local < 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: sparse_top_k %" PRId64 " and sparse_local_blocks %" PRId64
                       " must not be negative",
                       fn, prm->top_k, prm->local);
    if (prm->local == 0 && prm->top_k > 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: sparse_top_k %" PRId64
                       " needs sparse_local_blocks >= 1 (both 0: dense attention)",
                       fn, prm->top_k);
    if (prm->local > 0 && !pv->k_min)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: sparse attention (sparse_local_blocks %" PRId64
                       ") needs the key summaries kv.k_min and kv.k_max, which the pool does "
                       "not keep (data NULL)",
                       fn, prm->local);
    return LH_OK;
}

/* The promise of lh_k_ctx_set_bounds: no sequence longer than the bound, no more table
 * entries in use than the bound (the CUDA code sizes its launches and table staging by them). */
static lh_status check_bounds(lh_kctx *ctx, const char *fn, const lh_cpu_batch *b,
                              int64_t block_size)
{
    if (ctx->bound_seq_len <= 0)
        return LH_OK;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        if (b->n_new[s] == 0)
            continue;
        const int64_t len = b->kv_len[s], blocks = (len + block_size - 1) / block_size;
        if (len > ctx->bound_seq_len || blocks > ctx->bound_blocks_per_seq)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": %" PRId64 " tokens in %" PRId64
                           " blocks exceed the context's bounds (lh_k_ctx_set_bounds: %" PRId64
                           " tokens, %" PRId64 " blocks per sequence)",
                           fn, s, len, blocks, ctx->bound_seq_len, ctx->bound_blocks_per_seq);
    }
    return LH_OK;
}

/* The batch struct and its arrays (not the per-sequence values). */
static lh_status batch_view(lh_kctx *ctx, const char *fn, const lh_paged_batch *b,
                            lh_cpu_batch *cb)
{
    if (!b)
        return lh_kerr(ctx, LH_E_USAGE, "%s: batch is NULL", fn);
    if (b->struct_size < offsetof(lh_paged_batch, n_blocks) + sizeof b->n_blocks)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: batch->struct_size %u is too small (set it to sizeof(lh_paged_batch))",
                       fn, b->struct_size);
    if (b->n_seqs < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: batch->n_seqs %" PRId64 " is negative", fn,
                       b->n_seqs);
    if (b->n_seqs > 0) {
        const struct {
            const void *p;
            const char *name;
        } arr[] = {{b->token_start, "token_start"}, {b->n_new, "n_new"},
                   {b->kv_len, "kv_len"},           {b->block_tables, "block_tables"},
                   {b->n_blocks, "n_blocks"}};
        for (size_t i = 0; i < sizeof arr / sizeof *arr; i++)
            if (!arr[i].p)
                return lh_kerr(ctx, LH_E_USAGE, "%s: batch->%s is NULL (n_seqs %" PRId64 ")", fn,
                               arr[i].name, b->n_seqs);
    }
    cb->n_seqs = b->n_seqs;
    cb->token_start = b->token_start;
    cb->n_new = b->n_new;
    cb->kv_len = b->kv_len;
    cb->positions = b->positions;
    cb->tables = b->block_tables;
    return LH_OK;
}

/* Per-sequence values shared by both batched kernels: n_new, the rows inside [0, T), kv_len,
 * n_blocks non-negative; positions present where rows are. */
static lh_status batch_seq_basics(lh_kctx *ctx, const char *fn, const lh_paged_batch *b,
                                  int64_t T, const char *rows_of)
{
    for (int64_t s = 0; s < b->n_seqs; s++) {
        const int64_t n = b->n_new[s], ts = b->token_start[s];
        if (n < 0)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": n_new[%" PRId64 "] = %" PRId64 " is negative",
                           fn, s, s, n);
        if (n == 0)
            continue;
        if (ts < 0 || ts > T - n)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": rows [%" PRId64 ", %" PRId64
                           ") (token_start, n_new) are outside the %" PRId64 " rows of %s",
                           fn, s, ts, ts + n, T, rows_of);
        if (b->kv_len[s] < 0)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": kv_len[%" PRId64 "] = %" PRId64
                           " is negative",
                           fn, s, s, b->kv_len[s]);
        if (b->n_blocks[s] < 0)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": n_blocks[%" PRId64 "] = %" PRId64
                           " is negative",
                           fn, s, s, b->n_blocks[s]);
    }
    return LH_OK;
}

/* Sequences' row ranges are disjoint (sorted starts: linear; otherwise pairwise). */
static lh_status check_rows_disjoint(lh_kctx *ctx, const char *fn, const lh_paged_batch *b)
{
    const int64_t *ts = b->token_start, *nn = b->n_new;
    int64_t prev = -1;
    bool sorted = true;
    for (int64_t s = 0; s < b->n_seqs && sorted; s++) {
        if (nn[s] == 0)
            continue;
        if (prev >= 0 && ts[s] < ts[prev])
            sorted = false;
        else
            prev = s;
    }
    prev = -1;
    for (int64_t s = 0; s < b->n_seqs; s++) {
        if (nn[s] == 0)
            continue;
        if (sorted) {
            if (prev >= 0 && ts[s] < ts[prev] + nn[prev])
                goto overlap;
            prev = s;
            continue;
        }
        for (prev = 0; prev < s; prev++)
            if (nn[prev] > 0 && ts[s] < ts[prev] + nn[prev] && ts[prev] < ts[s] + nn[s])
                goto overlap;
        continue;
    overlap:
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the rows of sequences %" PRId64 " [%" PRId64 ", %" PRId64
                       ") and %" PRId64 " [%" PRId64 ", %" PRId64 ") overlap",
                       fn, prev, ts[prev], ts[prev] + nn[prev], s, ts[s], ts[s] + nn[s]);
    }
    return LH_OK;
}

/* Attention checks of one sequence: positions inside its context, table entries. */
static lh_status attn_seq_checks(lh_kctx *ctx, const char *fn, bool single, int64_t s,
                                 const int32_t *pos_all, int64_t row0, int64_t T,
                                 int64_t ctx_len, const int32_t *table, int64_t n_table,
                                 const lh_cpu_pages *pv)
{
    seq_names nm;
    names_for(&nm, single, s);
    for (int64_t t = row0; t < row0 + T; t++)
        if (pos_all[t] < 0 || pos_all[t] >= ctx_len)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: %s%s[%" PRId64 "] = %" PRId32
                           " is outside the cached context [0, %" PRId64 ")",
                           fn, nm.pre, nm.pos, t, pos_all[t], ctx_len);
    const int64_t need = ctx_len / pv->block_size + (ctx_len % pv->block_size != 0);
    return check_table(ctx, fn, &nm, table, n_table, 0, need, pv);
}

LH_EXPORT lh_status lh_k_paged_attention(lh_kctx *ctx, const lh_tensor *q, const lh_kv_pages *kv,
                                         const int32_t *block_table, int64_t n_table,
                                         int64_t ctx_len, const int32_t *q_pos,
                                         const lh_paged_attn_params *params, lh_tensor *out)
{
    static const char fn[] = "lh_k_paged_attention";
    lh_cpu_pages pv;
    lh_cpu_attn_params prm;
    LH_KD_CHECK(attn_common(ctx, fn, q, kv, params, out, &pv, &prm));
    const int64_t T = q->shape[0];
    if (ctx_len < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: ctx_len %" PRId64 " is negative", fn, ctx_len);
    if (n_table < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n_table %" PRId64 " is negative", fn, n_table);
    if (T > 0 && !q_pos)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q_pos is NULL (q %s)", fn, LH_KD_SH(q));
    if (T > 0)
        LH_KD_CHECK(attn_seq_checks(ctx, fn, true, 0, q_pos, 0, T, ctx_len, block_table, n_table,
                                    &pv));
    if (lh_kd_overlaps(out, q) || overlaps_pool(out, kv, &pv))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps q or the pool", fn);
    const int64_t zero = 0;
    const int32_t *const tables[1] = {block_table};
    const lh_cpu_batch cb = {1, &zero, &T, &ctx_len, q_pos, tables};
    LH_KD_CHECK(check_bounds(ctx, fn, &cb, pv.block_size));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(paged_attention)(ctx, fn, q, &pv, &cb, &prm, out),
                           lh_cpu_paged_attention(ctx, fn, q, &pv, &cb, &prm, out));
}

LH_EXPORT lh_status lh_k_paged_attention_batch(lh_kctx *ctx, const lh_tensor *q,
                                               const lh_kv_pages *kv, const lh_paged_batch *b,
                                               const lh_paged_attn_params *params,
                                               lh_tensor *out)
{
    static const char fn[] = "lh_k_paged_attention_batch";
    lh_cpu_pages pv;
    lh_cpu_attn_params prm;
    lh_cpu_batch cb;
    LH_KD_CHECK(attn_common(ctx, fn, q, kv, params, out, &pv, &prm));
    LH_KD_CHECK(batch_view(ctx, fn, b, &cb));
    const int64_t T = q->shape[0];
    LH_KD_CHECK(batch_seq_basics(ctx, fn, b, T, "q"));
    LH_KD_CHECK(check_rows_disjoint(ctx, fn, b));
    for (int64_t s = 0; s < b->n_seqs; s++) {
        if (b->n_new[s] == 0)
            continue;
        if (!b->positions)
            return lh_kerr(ctx, LH_E_USAGE, "%s: batch->positions is NULL (q %s)", fn,
                           LH_KD_SH(q));
        LH_KD_CHECK(attn_seq_checks(ctx, fn, false, s, b->positions, b->token_start[s],
                                    b->n_new[s], b->kv_len[s], b->block_tables[s],
                                    b->n_blocks[s], &pv));
    }
    if (lh_kd_overlaps(out, q) || overlaps_pool(out, kv, &pv))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps q or the pool", fn);
    LH_KD_CHECK(check_bounds(ctx, fn, &cb, pv.block_size));
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(paged_attention)(ctx, fn, q, &pv, &cb, &prm, out),
                           lh_cpu_paged_attention(ctx, fn, q, &pv, &cb, &prm, out));
}

/* ---- KV write ---------------------------------------------------------------------------- */

/* k and v [T, kv_heads, head_dim] f32; v NULL (keys only) exactly when the pool's v is its k.
 * Values given for such a pool would overwrite the keys they share memory with. */
static lh_status write_tensors(lh_kctx *ctx, const char *fn, const lh_kv_pages *kv,
                               const lh_cpu_pages *pv, const lh_tensor *k, const lh_tensor *v)
{
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "k", k, 3, 3, LH_KD_F32));
    const bool shared = pool_shared(kv);
    if (!v) {
        if (!shared)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: v is NULL, but the pool's kv.v is not its kv.k (keys only is for "
                           "a pool whose v is its k: the same data, dtype, shape and scales)",
                           fn);
        if (k->shape[1] != pv->kv_heads || k->shape[2] != pv->head_dim)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: k %s must be [n, %" PRId64 ", %" PRId64
                           "] (kv heads and head_dim of the pool)",
                           fn, LH_KD_SH(k), pv->kv_heads, pv->head_dim);
        return LH_OK;
    }
    if (shared)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the pool's kv.v is its kv.k (one latent for keys and values): pass v "
                       "NULL, only the keys are written",
                       fn);
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "v", v, 3, 3, LH_KD_F32));
    if (!lh_kd_same_shape(k, v) || k->shape[1] != pv->kv_heads || k->shape[2] != pv->head_dim)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: k %s and v %s must both be [n, %" PRId64 ", %" PRId64
                       "] (kv heads and head_dim of the pool)",
                       fn, LH_KD_SH(k), LH_KD_SH(v), pv->kv_heads, pv->head_dim);
    return LH_OK;
}

/* No physical block is touched twice by one write (two items would race on it). */
static lh_status check_blocks_distinct(lh_kctx *ctx, const char *fn, bool single,
                                       const lh_cpu_batch *b, const lh_cpu_pages *pv)
{
    const int64_t bs = pv->block_size;
    int64_t touched = 0;
    for (int64_t s = 0; s < b->n_seqs; s++)
        if (b->n_new[s] > 0)
            touched += (b->kv_len[s] - 1) / bs - (b->kv_len[s] - b->n_new[s]) / bs + 1;
    if (touched <= 1)
        return LH_OK;
    uint32_t gen;
    lh_cpu_mark *marks = lh_cpu_marks(ctx, pv->num_blocks, &gen);
    if (!marks)
        return lh_kerr(ctx, LH_E_NOMEM, "%s: out of memory (marks for %" PRId64 " blocks)", fn,
                       pv->num_blocks);
    for (int64_t s = 0; s < b->n_seqs; s++) {
        if (b->n_new[s] == 0)
            continue;
        const int64_t start = b->kv_len[s] - b->n_new[s];
        for (int64_t lb = start / bs; lb <= (b->kv_len[s] - 1) / bs; lb++) {
            const int32_t phys = b->tables[s][lb];
            lh_cpu_mark *m = &marks[phys];
            if (m->gen == gen) {
                if (single)
                    return lh_kerr(ctx, LH_E_USAGE,
                                   "%s: block_table[%" PRId64 "] and block_table[%" PRId64
                                   "] are the same physical block %" PRId32
                                   " (a sequence's blocks are distinct)",
                                   fn, m->logical, lb, phys);
                return lh_kerr(ctx, LH_E_USAGE,
                               "%s: block_tables[%" PRId32 "][%" PRId64 "] (sequence %" PRId32
                               ") and block_tables[%" PRId64 "][%" PRId64 "] (sequence %" PRId64
                               ") are the same physical block %" PRId32
                               " (sequences use disjoint blocks)",
                               fn, m->seq, m->logical, m->seq, s, lb, s, phys);
            }
            m->gen = gen;
            m->seq = (int32_t)(s > INT32_MAX ? INT32_MAX : s);
            m->logical = lb;
        }
    }
    return LH_OK;
}

static lh_status check_rope(lh_kctx *ctx, const char *fn, const lh_rope *rope, int64_t D)
{
    if (!rope)
        return LH_OK;
    if (!rope->inv_freq || rope->rotary_dim < 2 || rope->rotary_dim % 2)
        return lh_kerr(ctx, LH_E_USAGE, "%s: rope is not a table initialized by lh_k_rope_init",
                       fn);
    if (rope->rotary_dim > D)
        return lh_kerr(ctx, LH_E_USAGE, "%s: rope has rotary_dim %" PRId64 " > head_dim %" PRId64,
                       fn, rope->rotary_dim, D);
    return LH_OK;
}

LH_EXPORT lh_status lh_k_paged_kv_write(lh_kctx *ctx, const lh_kv_pages *kv,
                                        const int32_t *block_table, int64_t n_table,
                                        int64_t start, const lh_tensor *k, const lh_tensor *v)
{
    static const char fn[] = "lh_k_paged_kv_write";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    lh_cpu_pages pv;
    LH_KD_CHECK(pages_view(ctx, fn, kv, &pv));
    LH_KD_CHECK(write_tensors(ctx, fn, kv, &pv, k, v));
    int64_t n = k->shape[0];
    if (start < 0 || n_table < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: start %" PRId64 " or n_table %" PRId64 " is negative",
                       fn, start, n_table);
    if (n == 0)
        return LH_OK;
    if (start > INT64_MAX / 2 || n_table > INT64_MAX / 2 / pv.block_size ||
        start + n > n_table * pv.block_size)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: positions [%" PRId64 ", %" PRId64 ") do not fit the %" PRId64
                       " blocks of %" PRId64 " tokens in block_table",
                       fn, start, start + n, n_table, pv.block_size);
    seq_names nm;
    names_for(&nm, true, 0);
    LH_KD_CHECK(check_table(ctx, fn, &nm, block_table, n_table, start / pv.block_size,
                            (start + n - 1) / pv.block_size + 1, &pv));
    if (overlaps_pool(k, kv, &pv) || overlaps_pool(v, kv, &pv))
        return lh_kerr(ctx, LH_E_USAGE, "%s: k or v overlaps the pool", fn);
    const int64_t zero = 0, kv_len = start + n;
    const int32_t *const tables[1] = {block_table};
    const lh_cpu_batch cb = {1, &zero, &n, &kv_len, NULL, tables};
    LH_KD_CHECK(check_blocks_distinct(ctx, fn, true, &cb, &pv));
    LH_KD_CHECK(check_bounds(ctx, fn, &cb, pv.block_size));
    const float *vd = v ? v->data : NULL; /* NULL: keys only (the pool's v is its k) */
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(paged_kv_write)(ctx, fn, &pv, &cb, k->data, vd, NULL),
                           lh_cpu_paged_kv_write(ctx, fn, &pv, &cb, k->data, vd, NULL));
}

LH_EXPORT lh_status lh_k_paged_kv_write_batch(lh_kctx *ctx, const lh_kv_pages *kv,
                                              const lh_paged_batch *b, const lh_tensor *k,
                                              const lh_tensor *v, const struct lh_rope *rope)
{
    static const char fn[] = "lh_k_paged_kv_write_batch";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    lh_cpu_pages pv;
    LH_KD_CHECK(pages_view(ctx, fn, kv, &pv));
    LH_KD_CHECK(write_tensors(ctx, fn, kv, &pv, k, v));
    LH_KD_CHECK(check_rope(ctx, fn, rope, pv.head_dim));
    lh_cpu_batch cb;
    LH_KD_CHECK(batch_view(ctx, fn, b, &cb));
    const int64_t T = k->shape[0], bs = pv.block_size;
    LH_KD_CHECK(batch_seq_basics(ctx, fn, b, T, v ? "k and v" : "k"));
    LH_KD_CHECK(check_rows_disjoint(ctx, fn, b));
    for (int64_t s = 0; s < b->n_seqs; s++) {
        const int64_t n = b->n_new[s], len = b->kv_len[s], nb = b->n_blocks[s];
        if (n == 0)
            continue;
        if (n > len)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": n_new[%" PRId64 "] = %" PRId64
                           " exceeds kv_len[%" PRId64 "] = %" PRId64
                           " (the new tokens are the last n_new of kv_len)",
                           fn, s, s, n, s, len);
        if (len > INT64_MAX / 2 || nb > INT64_MAX / 2 / bs || len > nb * bs)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: sequence %" PRId64 ": positions [%" PRId64 ", %" PRId64
                           ") do not fit the %" PRId64 " blocks of %" PRId64
                           " tokens in block_tables[%" PRId64 "] (n_blocks[%" PRId64 "])",
                           fn, s, len - n, len, nb, bs, s, s);
        seq_names nm;
        names_for(&nm, false, s);
        LH_KD_CHECK(check_table(ctx, fn, &nm, b->block_tables[s], nb, (len - n) / bs,
                                (len - 1) / bs + 1, &pv));
        if (rope) {
            if (!b->positions)
                return lh_kerr(ctx, LH_E_USAGE,
                               "%s: batch->positions is NULL, but the keys are to be rotated "
                               "(rope)",
                               fn);
            for (int64_t r = b->token_start[s]; r < b->token_start[s] + n; r++)
                if (b->positions[r] < 0 || b->positions[r] >= len)
                    return lh_kerr(ctx, LH_E_USAGE,
                                   "%s: sequence %" PRId64 ": positions[%" PRId64 "] = %" PRId32
                                   " is outside the sequence's context [0, %" PRId64
                                   ") (kv_len[%" PRId64 "])",
                                   fn, s, r, b->positions[r], len, s);
        }
    }
    if (overlaps_pool(k, kv, &pv) || overlaps_pool(v, kv, &pv))
        return lh_kerr(ctx, LH_E_USAGE, "%s: k or v overlaps the pool", fn);
    LH_KD_CHECK(check_blocks_distinct(ctx, fn, false, &cb, &pv));
    LH_KD_CHECK(check_bounds(ctx, fn, &cb, pv.block_size));
    const float *vd = v ? v->data : NULL; /* NULL: keys only (the pool's v is its k) */
    return LH_KD_ON_DEVICE(ctx, LH_CUDA(paged_kv_write)(ctx, fn, &pv, &cb, k->data, vd, rope),
                           lh_cpu_paged_kv_write(ctx, fn, &pv, &cb, k->data, vd, rope));
}
