/* Built-in attention backend "paged": keys and values live in the host's KV cache manager
 * (LH_ATTN_CAP_PAGED_KV): a pool of fixed-size blocks, NHD or HND, f32 / bf16 / f16 / fp8 e4m3
 * (per-block scales) with keys and values in different dtypes if asked (mixed precision),
 * addressed through per-sequence block tables that arrive in the step metadata.
 *
 * Per step, for the whole packed batch at once: lh_k_paged_kv_write_batch stores the new keys
 * (rotated on the way in when RoPE is fused) and values, and maintains the per-block key
 * summaries sparse selection reads; lh_k_paged_attention_batch then attends — causal, GQA,
 * sliding window, chunked (Llama 4), logit soft-capping (Gemma 2), sparse top-k block
 * selection, decode contexts split into partitions that run in parallel and merge exactly
 * (flash-decoding) — in one thread-pool job for all sequences. */
#include "paged.h"

#include "lh_kernels.h"
#include "lh_plugin.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lh_attn_layer {
    lh_attn_geometry g;
    int64_t *kv_len; /* [max_seqs]: tokens each sequence of the step holds after it */
};

static void destroy(lh_attn_layer *l)
{
    if (!l)
        return;
    free(l->kv_len);
    free(l);
}

static lh_status create(const lh_attn_geometry *g, lh_attn_layer **out, lh_error *err)
{
    *out = NULL;
    /* everything this backend reads is in the ABI 2 geometry */
    if (g->struct_size < offsetof(lh_attn_geometry, fused_rope) + sizeof g->fused_rope)
        return lh_error_set(err, LH_E_USAGE, "paged: the host's attention geometry (%u bytes) "
                            "predates the paged KV cache contract", g->struct_size);
    if (g->num_heads <= 0 || g->num_kv_heads <= 0 || g->head_dim <= 0 ||
        g->num_heads % g->num_kv_heads != 0 || g->max_seq_len <= 0 || g->max_seqs <= 0 ||
        g->attention_chunk_size < 0 || g->sparse_top_k < 0 || g->sparse_local_blocks < 0 ||
        (g->sparse_top_k > 0 && g->sparse_local_blocks < 1))
        return lh_error_set(err, LH_E_USAGE,
                            "paged: layer %lld: invalid geometry (heads %lld, kv heads %lld, "
                            "head_dim %lld, max_seq_len %lld, max_seqs %lld, chunk %lld, sparse "
                            "top_k %lld / local %lld)",
                            (long long)g->layer_index, (long long)g->num_heads,
                            (long long)g->num_kv_heads, (long long)g->head_dim,
                            (long long)g->max_seq_len, (long long)g->max_seqs,
                            (long long)g->attention_chunk_size, (long long)g->sparse_top_k,
                            (long long)g->sparse_local_blocks);
    lh_attn_layer *l = calloc(1, sizeof *l);
    if (l)
        l->kv_len = calloc((size_t)g->max_seqs, sizeof *l->kv_len);
    if (!l || !l->kv_len) {
        destroy(l);
        return lh_error_set(err, LH_E_NOMEM, "paged: out of memory creating layer %lld",
                            (long long)g->layer_index);
    }
    l->g = *g;
    if (g->struct_size < offsetof(lh_attn_geometry, logit_softcap) + sizeof g->logit_softcap)
        l->g.logit_softcap = 0.0f; /* a geometry without the field asks for no cap */
    *out = l;
    return LH_OK;
}

static lh_status prepare(lh_attn_layer *l, const lh_attn_step *step, lh_error *err)
{
    if (step->struct_size < offsetof(lh_attn_step, n_blocks) + sizeof step->n_blocks ||
        !step->block_tables || !step->n_blocks)
        return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: the step carries no KV block "
                            "tables (the host must manage the paged KV cache)",
                            (long long)l->g.layer_index);
    if (step->n_seqs < 0 || step->n_seqs > l->g.max_seqs)
        return lh_error_set(err, LH_E_USAGE,
                            "paged: a step of %lld sequences, but max_seqs is %lld",
                            (long long)step->n_seqs, (long long)l->g.max_seqs);
    for (int64_t s = 0; s < step->n_seqs; s++) {
        if (step->ctx_len[s] < 0 || step->n_new[s] < 0 || step->ctx_len[s] > l->g.max_seq_len ||
            step->n_new[s] > l->g.max_seq_len - step->ctx_len[s])
            return lh_error_set(err, LH_E_USAGE,
                                "paged: sequence %lld: %lld cached + %lld new tokens (max_seq_len "
                                "%lld)", (long long)s, (long long)step->ctx_len[s],
                                (long long)step->n_new[s], (long long)l->g.max_seq_len);
        l->kv_len[s] = step->ctx_len[s] + step->n_new[s]; /* the kernels check the tables */
    }
    return LH_OK;
}

static lh_status forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_attn_forward_args *args, lh_tensor *q, lh_tensor *k,
                         const lh_tensor *v, lh_tensor *out, lh_error *err)
{
    if (!args || args->struct_size < offsetof(lh_attn_forward_args, rope) + sizeof args->rope ||
        !args->kv)
        return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: forward without the layer's KV "
                            "blocks", (long long)l->g.layer_index);
    if (l->g.fused_rope && !args->rope)
        return lh_error_set(err, LH_E_USAGE,
                            "paged: layer %lld: fused RoPE without a RoPE table",
                            (long long)l->g.layer_index);
    const lh_rope *rope = l->g.fused_rope ? args->rope : NULL;
    const lh_paged_batch b = {.struct_size = sizeof b, .n_seqs = step->n_seqs,
                              .token_start = step->token_start, .n_new = step->n_new,
                              .kv_len = l->kv_len, .positions = step->positions,
                              .block_tables = step->block_tables, .n_blocks = step->n_blocks};
    const lh_paged_attn_params prm = {.struct_size = sizeof prm, .scale = l->g.scale,
                                      .sliding_window = l->g.sliding_window,
                                      .chunk_size = l->g.attention_chunk_size,
                                      .rope = rope, .sparse_top_k = l->g.sparse_top_k,
                                      .sparse_local_blocks = l->g.sparse_local_blocks,
                                      .softcap = l->g.logit_softcap};
    lh_status st = lh_k_paged_kv_write_batch(kctx, args->kv, &b, k, v, rope);
    if (st == LH_OK)
        st = lh_k_paged_attention_batch(kctx, q, args->kv, &b, &prm, out);
    if (st != LH_OK)
        return lh_error_set(err, st, "paged: layer %lld: %s", (long long)l->g.layer_index,
                            lh_k_last_error(kctx));
    return LH_OK;
}

const lh_attn_ops paged_ops = {
    .struct_size = sizeof(lh_attn_ops),
    .create = create,
    .prepare = prepare,
    .forward = forward,
    .release = NULL, /* nothing per sequence: the host's KV cache owns the blocks */
    .destroy = destroy,
};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_attn_backend_provider p = {
        .struct_size = sizeof p,
        .name = "paged",
        .capabilities = PAGED_CAPABILITIES,
        .ops = &paged_ops,
    };
    return api->register_attention_backend(ctx, &p);
}

LH_PLUGIN_DEFINE("attn_paged", "0.1.0", init)
