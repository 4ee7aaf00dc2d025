/* The public paged KV cache kernels: argument checks (same rules as kernel_dispatch.c: every
 * tensor on the CPU, contiguous row-major, dtypes and shapes consistent; the messages name the
 * argument and the numbers), then the CPU implementation in cpu/paged_attention.c. */
#include "cpu/paged_kernels.h"
#include "dispatch_checks.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>

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
    if (kv->k.dtype != kv->v.dtype || !lh_kd_same_shape(&kv->k, &kv->v))
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv.k %s %s and kv.v %s %s must have the same dtype and "
                       "shape", fn, LH_KD_SH(&kv->k), lh_kd_dt_name(kv->k.dtype), LH_KD_SH(&kv->v),
                       lh_kd_dt_name(kv->v.dtype));
    memset(pv, 0, sizeof *pv);
    pv->layout = kv->layout;
    pv->dtype = kv->k.dtype;
    pv->num_blocks = kv->k.shape[0];
    pv->block_size = kv->layout == LH_KV_NHD ? kv->k.shape[1] : kv->k.shape[2];
    pv->kv_heads = kv->layout == LH_KV_NHD ? kv->k.shape[2] : kv->k.shape[1];
    pv->head_dim = kv->k.shape[3];
    if (pv->num_blocks < 1 || pv->block_size < 1 || pv->kv_heads < 1 || pv->head_dim < 1)
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv.k %s (layout %s) has an empty dimension", fn,
                       LH_KD_SH(&kv->k), lay);
    if (lh_kd_overlaps(&kv->k, &kv->v))
        return lh_kerr(ctx, LH_E_USAGE, "%s: kv.k and kv.v overlap", fn);
    pv->esize = lh_k_dtype_bits(pv->dtype) / 8;
    pv->block_elems = pv->block_size * pv->kv_heads * pv->head_dim;
    pv->tok_stride = kv->layout == LH_KV_NHD ? pv->kv_heads * pv->head_dim : pv->head_dim;
    pv->head_stride = kv->layout == LH_KV_NHD ? pv->head_dim : pv->block_size * pv->head_dim;
    pv->k = kv->k.data;
    pv->v = kv->v.data;
    if (pv->dtype == LH_DTYPE_FP8_E4M3) {
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "kv.k_scale", &kv->k_scale, 2, 2, LH_KD_F32));
        LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "kv.v_scale", &kv->v_scale, 2, 2, LH_KD_F32));
        const lh_tensor *s[2] = {&kv->k_scale, &kv->v_scale};
        for (int i = 0; i < 2; i++)
            if (s[i]->shape[0] != pv->num_blocks || s[i]->shape[1] != pv->kv_heads)
                return lh_kerr(ctx, LH_E_USAGE,
                               "%s: fp8 pool: kv.%s %s must be [%" PRId64 ", %" PRId64
                               "] (num_blocks, kv_heads)",
                               fn, i ? "v_scale" : "k_scale", LH_KD_SH(s[i]), pv->num_blocks,
                               pv->kv_heads);
        if (lh_kd_overlaps(&kv->k_scale, &kv->v_scale) || lh_kd_overlaps(&kv->k_scale, &kv->k) ||
            lh_kd_overlaps(&kv->k_scale, &kv->v) || lh_kd_overlaps(&kv->v_scale, &kv->k) ||
            lh_kd_overlaps(&kv->v_scale, &kv->v))
            return lh_kerr(ctx, LH_E_USAGE, "%s: the fp8 scales overlap each other or the pool",
                           fn);
        pv->k_scale = kv->k_scale.data;
        pv->v_scale = kv->v_scale.data;
    }
    return LH_OK;
}

/* The table entries of logical blocks [b0, b1) are physical blocks of the pool. */
static lh_status check_table(lh_kctx *ctx, const char *fn, const int32_t *table, int64_t n_table,
                             int64_t b0, int64_t b1, const lh_cpu_pages *pv)
{
    if (b1 <= b0)
        return LH_OK;
    if (!table)
        return lh_kerr(ctx, LH_E_USAGE, "%s: block_table is NULL", fn);
    if (b1 > n_table)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the tokens need %" PRId64 " logical blocks of %" PRId64
                       ", but block_table has %" PRId64 " entries",
                       fn, b1, pv->block_size, n_table);
    for (int64_t i = b0; i < b1; i++)
        if (table[i] < 0 || table[i] >= pv->num_blocks)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: block_table[%" PRId64 "] = %" PRId32
                           " is not a block of the pool [0, %" PRId64 ")",
                           fn, i, table[i], pv->num_blocks);
    return LH_OK;
}

static bool overlaps_pool(const lh_tensor *t, const lh_kv_pages *kv, const lh_cpu_pages *pv)
{
    if (lh_kd_overlaps(t, &kv->k) || lh_kd_overlaps(t, &kv->v))
        return true;
    return pv->dtype == LH_DTYPE_FP8_E4M3 &&
           (lh_kd_overlaps(t, &kv->k_scale) || lh_kd_overlaps(t, &kv->v_scale));
}

#define PARAM_HAS(p, field)                                                                       \
    ((p)->struct_size >= offsetof(lh_paged_attn_params, field) + sizeof((p)->field))

LH_EXPORT lh_status lh_k_paged_attention(lh_kctx *ctx, const lh_tensor *q, const lh_kv_pages *kv,
                                         const int32_t *block_table, int64_t n_table,
                                         int64_t ctx_len, const int32_t *q_pos,
                                         const lh_paged_attn_params *params, lh_tensor *out)
{
    static const char fn[] = "lh_k_paged_attention";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "q", q, 3, 3, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "out", out, 3, 3, LH_KD_F32));
    lh_cpu_pages pv;
    LH_KD_CHECK(pages_view(ctx, fn, kv, &pv));
    if (!params)
        return lh_kerr(ctx, LH_E_USAGE, "%s: params is NULL", fn);
    if (!PARAM_HAS(params, scale))
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: params->struct_size %u is too small (set it to "
                       "sizeof(lh_paged_attn_params))",
                       fn, params->struct_size);
    const int64_t window = PARAM_HAS(params, sliding_window) ? params->sliding_window : 0;
    const int64_t chunk = PARAM_HAS(params, chunk_size) ? params->chunk_size : 0;
    const int64_t n_splits = PARAM_HAS(params, n_splits) ? params->n_splits : 0;
    const int64_t T = q->shape[0], H = q->shape[1], D = q->shape[2];
    if (D != pv.head_dim)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q %s and the pool kv.k %s disagree on head_dim", fn,
                       LH_KD_SH(q), LH_KD_SH(&kv->k));
    if (H % pv.kv_heads != 0)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: the %" PRId64 " query heads of q %s are not a multiple of the %" PRId64
                       " kv heads of the pool",
                       fn, H, LH_KD_SH(q), pv.kv_heads);
    if (!lh_kd_same_shape(out, q))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out %s must have the shape of q %s", fn, LH_KD_SH(out),
                       LH_KD_SH(q));
    if (!isfinite(params->scale))
        return lh_kerr(ctx, LH_E_USAGE, "%s: scale %g is not finite", fn, (double)params->scale);
    if (n_splits < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n_splits %" PRId64 " is negative", fn, n_splits);
    if (ctx_len < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: ctx_len %" PRId64 " is negative", fn, ctx_len);
    if (n_table < 0)
        return lh_kerr(ctx, LH_E_USAGE, "%s: n_table %" PRId64 " is negative", fn, n_table);
    if (T > 0 && !q_pos)
        return lh_kerr(ctx, LH_E_USAGE, "%s: q_pos is NULL (q %s)", fn, LH_KD_SH(q));
    for (int64_t t = 0; t < T; t++)
        if (q_pos[t] < 0 || q_pos[t] >= ctx_len)
            return lh_kerr(ctx, LH_E_USAGE,
                           "%s: q_pos[%" PRId64 "] = %" PRId32
                           " is outside the cached context [0, %" PRId64 ")",
                           fn, t, q_pos[t], ctx_len);
    if (T > 0)
        LH_KD_CHECK(check_table(ctx, fn, block_table, n_table, 0,
                          (ctx_len + pv.block_size - 1) / pv.block_size, &pv));
    if (lh_kd_overlaps(out, q) || overlaps_pool(out, kv, &pv))
        return lh_kerr(ctx, LH_E_USAGE, "%s: out overlaps q or the pool", fn);
    return lh_cpu_paged_attention(ctx, q, &pv, block_table, ctx_len, q_pos, params->scale, window,
                                  chunk, n_splits, out);
}

LH_EXPORT lh_status lh_k_paged_kv_write(lh_kctx *ctx, const lh_kv_pages *kv,
                                        const int32_t *block_table, int64_t n_table,
                                        int64_t start, const lh_tensor *k, const lh_tensor *v)
{
    static const char fn[] = "lh_k_paged_kv_write";
    LH_KD_CHECK(lh_kd_begin(ctx, fn));
    lh_cpu_pages pv;
    LH_KD_CHECK(pages_view(ctx, fn, kv, &pv));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "k", k, 3, 3, LH_KD_F32));
    LH_KD_CHECK(lh_kd_check_tensor(ctx, fn, "v", v, 3, 3, LH_KD_F32));
    const int64_t n = k->shape[0];
    if (!lh_kd_same_shape(k, v) || k->shape[1] != pv.kv_heads || k->shape[2] != pv.head_dim)
        return lh_kerr(ctx, LH_E_USAGE,
                       "%s: k %s and v %s must both be [n, %" PRId64 ", %" PRId64
                       "] (kv heads and head_dim of the pool)",
                       fn, LH_KD_SH(k), LH_KD_SH(v), pv.kv_heads, pv.head_dim);
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
    LH_KD_CHECK(check_table(ctx, fn, block_table, n_table, start / pv.block_size,
                      (start + n - 1) / pv.block_size + 1, &pv));
    if (overlaps_pool(k, kv, &pv) || overlaps_pool(v, kv, &pv))
        return lh_kerr(ctx, LH_E_USAGE, "%s: k or v overlaps the pool", fn);
    return lh_cpu_paged_kv_write(ctx, &pv, block_table, start, n, k->data, v->data);
}
