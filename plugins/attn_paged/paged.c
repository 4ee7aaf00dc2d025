/* Built-in attention backend "paged": the KV cache lives in fixed-size blocks handed out from
 * a pool as sequences grow (kv_pool.c) and addressed through per-sequence block tables;
 * attention is the kernel library's lh_k_paged_attention (causal, GQA, sliding window,
 * chunked; decode steps split long contexts into partitions run in parallel and merged
 * exactly), and new keys and values are stored by lh_k_paged_kv_write (f32, bf16, f16, or
 * fp8 e4m3 with per-block scales).
 *
 * Per step: prepare() reserves the blocks every sequence of the step needs, all or nothing
 * (running out is an error naming blocks needed, free and total); forward() writes each
 * sequence's new keys and values into its blocks, then attends over its whole context.
 *
 * Settings come from lh_attn_geometry (the run config's kv_cache: block_size, dtype, layout,
 * max_tokens; attention_chunk_size); unset ones fall back to paged_default_config (block_size
 * 16, NHD, f32 KV, a pool that holds max_seqs sequences of max_seq_len tokens, allocated as it
 * fills). */
#include "paged.h"

#include "lh_kernels.h"
#include "lh_plugin.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const paged_config paged_default_config = {
    .block_size = 16,
    .layout = LH_KV_NHD,
    .kv_dtype = LH_DTYPE_F32,
    .num_blocks = 0,
    .chunk_size = 0,
    .n_splits = 0,
};

struct lh_attn_layer {
    lh_attn_geometry g;
    paged_config cfg;
    paged_pool *pool;
    int64_t *tokens; /* [max_seqs]: scratch for prepare */
};

static lh_status fail(char *err, size_t n, lh_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static lh_status fail(char *err, size_t n, lh_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return code;
}

static void destroy(lh_attn_layer *l)
{
    if (!l)
        return;
    paged_pool_destroy(l->pool);
    free(l->tokens);
    free(l);
}

lh_status paged_create_with(const lh_attn_geometry *g, const paged_config *cfg,
                            lh_attn_layer **out, char *err, size_t n)
{
    *out = NULL;
    if (g->num_heads <= 0 || g->num_kv_heads <= 0 || g->head_dim <= 0 ||
        g->num_heads % g->num_kv_heads != 0 || g->max_seq_len <= 0 || g->max_seqs <= 0)
        return fail(err, n, LH_E_USAGE,
                    "paged: layer %lld: invalid geometry (heads %lld, kv heads %lld, head_dim "
                    "%lld, max_seq_len %lld, max_seqs %lld)",
                    (long long)g->layer_index, (long long)g->num_heads,
                    (long long)g->num_kv_heads, (long long)g->head_dim,
                    (long long)g->max_seq_len, (long long)g->max_seqs);
    if (cfg->block_size < 1 || cfg->chunk_size < 0 || cfg->n_splits < 0 || cfg->num_blocks < 0)
        return fail(err, n, LH_E_USAGE, "paged: layer %lld: invalid settings (block_size %lld, "
                    "num_blocks %lld, chunk_size %lld, n_splits %lld)",
                    (long long)g->layer_index, (long long)cfg->block_size,
                    (long long)cfg->num_blocks, (long long)cfg->chunk_size,
                    (long long)cfg->n_splits);
    paged_pool_config pc = {.block_size = cfg->block_size, .layout = cfg->layout,
                            .dtype = cfg->kv_dtype, .num_blocks = cfg->num_blocks};
    if (pc.num_blocks == 0) {
        int64_t per_seq = (g->max_seq_len + cfg->block_size - 1) / cfg->block_size;
        if (per_seq > INT32_MAX / g->max_seqs)
            return fail(err, n, LH_E_UNSUPPORTED, "paged: layer %lld: %lld sequences of %lld "
                        "tokens need more than %d blocks of %lld; use a larger block size",
                        (long long)g->layer_index, (long long)g->max_seqs,
                        (long long)g->max_seq_len, INT32_MAX, (long long)cfg->block_size);
        pc.num_blocks = per_seq * g->max_seqs;
    }
    lh_attn_layer *l = calloc(1, sizeof *l);
    if (l)
        l->tokens = calloc((size_t)g->max_seqs, sizeof *l->tokens);
    if (!l || !l->tokens) {
        destroy(l);
        return fail(err, n, LH_E_NOMEM, "paged: out of memory creating layer %lld",
                    (long long)g->layer_index);
    }
    l->g = *g;
    l->cfg = *cfg;
    char msg[384];
    lh_status st = paged_pool_create(&pc, g->num_kv_heads, g->head_dim, g->max_seqs,
                                     g->max_seq_len, &l->pool, msg, sizeof msg);
    if (st != LH_OK) {
        destroy(l);
        return fail(err, n, st, "paged: layer %lld: KV pool: %s", (long long)g->layer_index,
                    msg);
    }
    *out = l;
    return LH_OK;
}

static lh_status create(const lh_attn_geometry *g, lh_attn_layer **out, char *err, size_t n)
{
    paged_config cfg = paged_default_config;
    /* geometry fields appended after ABI 1.0 exist only when struct_size covers them */
    if (g->struct_size >= offsetof(lh_attn_geometry, kv_max_tokens) + sizeof g->kv_max_tokens) {
        cfg.chunk_size = g->attention_chunk_size;
        if (g->kv_block_size > 0)
            cfg.block_size = g->kv_block_size;
        if (g->kv_dtype != LH_DTYPE_INVALID)
            cfg.kv_dtype = g->kv_dtype;
        cfg.layout = g->kv_layout == 1 ? LH_KV_HND : LH_KV_NHD;
        if (g->kv_max_tokens > 0) /* whole blocks holding at least that many tokens */
            cfg.num_blocks = (g->kv_max_tokens + cfg.block_size - 1) / cfg.block_size;
    }
    return paged_create_with(g, &cfg, out, err, n);
}

paged_pool *paged_layer_pool(lh_attn_layer *l)
{
    return l->pool;
}

static lh_status prepare(lh_attn_layer *l, const lh_attn_step *step, char *err, size_t n)
{
    if (step->n_seqs < 0 || step->n_seqs > l->g.max_seqs)
        return fail(err, n, LH_E_USAGE, "paged: a step of %lld sequences, but max_seqs is %lld",
                    (long long)step->n_seqs, (long long)l->g.max_seqs);
    for (int64_t s = 0; s < step->n_seqs; s++) {
        int64_t slot = step->slot[s];
        const paged_seq *q = paged_pool_seq(l->pool, slot);
        if (!q)
            return fail(err, n, LH_E_USAGE, "paged: sequence slot %lld outside [0, %lld)",
                        (long long)slot, (long long)l->g.max_seqs);
        if (step->ctx_len[s] != q->len)
            return fail(err, n, LH_E_USAGE, "paged: layer %lld slot %lld holds %lld tokens, "
                        "the step says %lld", (long long)l->g.layer_index, (long long)slot,
                        (long long)q->len, (long long)step->ctx_len[s]);
        if (step->n_new[s] < 0)
            return fail(err, n, LH_E_USAGE, "paged: slot %lld: %lld new tokens",
                        (long long)slot, (long long)step->n_new[s]);
        int64_t need = q->len + step->n_new[s];
        if (need > l->g.max_seq_len)
            return fail(err, n, LH_E_UNSUPPORTED, "paged: sequence in slot %lld needs %lld "
                        "tokens, more than max_seq_len %lld", (long long)slot, (long long)need,
                        (long long)l->g.max_seq_len);
        l->tokens[s] = need;
    }
    char msg[448];
    lh_status st = paged_pool_reserve(l->pool, step->slot, l->tokens, step->n_seqs, msg,
                                      sizeof msg);
    if (st != LH_OK)
        return fail(err, n, st, "paged: layer %lld: %s", (long long)l->g.layer_index, msg);
    return LH_OK;
}

static lh_status forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_tensor *q, const lh_tensor *k, const lh_tensor *v,
                         lh_tensor *out, char *err, size_t n)
{
    const int64_t H = l->g.num_heads, KVH = l->g.num_kv_heads, D = l->g.head_dim;
    const lh_kv_pages pages = paged_pool_pages(l->pool);
    const lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = l->g.scale,
                                      .sliding_window = l->g.sliding_window,
                                      .chunk_size = l->cfg.chunk_size,
                                      .n_splits = l->cfg.n_splits};
    for (int64_t s = 0; s < step->n_seqs; s++) {
        paged_seq *c = paged_pool_seq(l->pool, step->slot[s]);
        const int64_t t0 = step->token_start[s], nn = step->n_new[s];
        if (!c || step->ctx_len[s] != c->len ||
            c->n_blocks * l->cfg.block_size < c->len + nn)
            return fail(err, n, LH_E_USAGE, "paged: layer %lld: forward before prepare for slot "
                        "%lld", (long long)l->g.layer_index, (long long)step->slot[s]);
        if (nn == 0)
            continue;
        if (t0 < 0 || t0 + nn > q->shape[0])
            return fail(err, n, LH_E_USAGE, "paged: slot %lld: tokens [%lld, %lld) outside the "
                        "step's %lld", (long long)step->slot[s], (long long)t0,
                        (long long)(t0 + nn), (long long)q->shape[0]);
        int64_t qshape[3] = {nn, H, D}, kvshape[3] = {nn, KVH, D};
        lh_tensor ks = lh_tensor_cpu(LH_DTYPE_F32, (float *)k->data + t0 * KVH * D, 3, kvshape);
        lh_tensor vs = lh_tensor_cpu(LH_DTYPE_F32, (float *)v->data + t0 * KVH * D, 3, kvshape);
        lh_tensor qs = lh_tensor_cpu(LH_DTYPE_F32, (float *)q->data + t0 * H * D, 3, qshape);
        lh_tensor os = lh_tensor_cpu(LH_DTYPE_F32, (float *)out->data + t0 * H * D, 3, qshape);
        lh_status st = lh_k_paged_kv_write(kctx, &pages, c->blocks, c->n_blocks, c->len, &ks,
                                           &vs);
        if (st == LH_OK)
            st = lh_k_paged_attention(kctx, &qs, &pages, c->blocks, c->n_blocks, c->len + nn,
                                      step->positions + t0, &prm, &os);
        if (st != LH_OK)
            return fail(err, n, st, "paged: layer %lld: %s", (long long)l->g.layer_index,
                        lh_k_last_error(kctx));
        c->len += nn;
    }
    return LH_OK;
}

static void release(lh_attn_layer *l, int64_t slot)
{
    paged_pool_release(l->pool, slot);
}

const lh_attn_ops paged_ops = {
    .struct_size = sizeof(lh_attn_ops),
    .create = create,
    .prepare = prepare,
    .forward = forward,
    .release = release,
    .destroy = destroy,
};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_attn_backend_provider p = {
        .struct_size = sizeof p,
        .name = "paged",
        .capabilities = LH_ATTN_CAP_SLIDING_WINDOW | LH_ATTN_CAP_CHUNKED | LH_ATTN_CAP_FP8_KV,
        .ops = &paged_ops,
    };
    return api->register_attention_backend(ctx, &p);
}

LH_PLUGIN_DEFINE("attn_paged", "0.1.0", init)
