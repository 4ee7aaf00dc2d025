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
 * (flash-decoding) — in one thread-pool job for all sequences.
 *
 * Multi-head latent attention (LH_ATTN_CAP_MLA) in the absorbed form: the pool holds one
 * latent per token and layer, [rope key | compressed KV] (kv_heads 1, head_dim qk_rope_head_dim
 * + kv_lora_rank; the pool's v is its k). Each head's query becomes [its rope dims | W_UK^T q_nope]
 * (lh_k_matmul_heads through kv_b's key rows), so q.k over the latent equals the expanded
 * q_nope.k_nope + q_rope.k_rope; the same latent serves as the values, and the output's latent
 * part goes through W_UV (kv_b's value rows) to each head's values. Prefill and decode take
 * the same path, so a step reads the latent, never per-head keys and values, and RoPE is
 * fused into the write and the attention (dims [0, qk_rope_head_dim) of the latent). */
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
    if (g->mla && (g->kv_lora_rank <= 0 || g->qk_nope_head_dim <= 0 || g->v_head_dim <= 0 ||
                   g->qk_rope_head_dim < 0 ||
                   g->head_dim != g->qk_nope_head_dim + g->qk_rope_head_dim))
        return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: invalid MLA geometry "
                            "(kv_lora_rank %lld, qk_nope_head_dim %lld, qk_rope_head_dim %lld, "
                            "v_head_dim %lld, head_dim %lld)", (long long)g->layer_index,
                            (long long)g->kv_lora_rank, (long long)g->qk_nope_head_dim,
                            (long long)g->qk_rope_head_dim, (long long)g->v_head_dim,
                            (long long)g->head_dim);
    if (g->mla && g->kv_v_dtype != g->kv_dtype)
        return lh_error_set(err, LH_E_UNSUPPORTED, "paged: layer %lld: multi-head latent "
                            "attention caches one latent for keys and values, so mixed-precision "
                            "KV (kv_cache.v_dtype %s, dtype %s) does not apply",
                            (long long)g->layer_index, lh_k_dtype_name(g->kv_v_dtype),
                            lh_k_dtype_name(g->kv_dtype));
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

/* The absorbed MLA step over the whole batch (see the top of the file). Workspace: the
 * latent [T, 1, W], the query and the output [T, H, W], W = rope + lora. */
static lh_status mla_forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_forward_args *args,
                             const lh_paged_batch *b, const lh_paged_attn_params *prm,
                             const lh_tensor *q, const lh_tensor *kc, const lh_tensor *kr,
                             lh_tensor *out, const char **what)
{
    const lh_attn_geometry *g = &l->g;
    const int64_t T = q->shape[0], H = g->num_heads, nope = g->qk_nope_head_dim;
    const int64_t rope = g->qk_rope_head_dim, lora = g->kv_lora_rank, vd = g->v_head_dim;
    const int64_t D = nope + rope, W = rope + lora, kvb = (nope + vd) * lora;
    const lh_device dev = q->device;
    const lh_tensor *w = args->kv_b;
    float *lat2 = args->workspace, *qa = lat2 + T * W, *oa = qa + T * H * W;
    int64_t lshape[3] = {T, 1, W}, qshape[3] = {T, H, W};
    lh_tensor lt = lh_tensor_cpu(LH_DTYPE_F32, lat2, 3, lshape);
    lh_tensor qt = lh_tensor_cpu(LH_DTYPE_F32, qa, 3, qshape);
    lh_tensor ot = lh_tensor_cpu(LH_DTYPE_F32, oa, 3, qshape);
    lt.device = qt.device = ot.device = dev;
    /* the latent as the pool keeps it: [rope key | compressed KV] */
    lh_tensor lr = lh_k_view3(LH_DTYPE_F32, kr->data, 0, dev, T, 1, rope, rope, rope);
    lh_tensor lc = lh_k_view3(LH_DTYPE_F32, kc->data, 0, dev, T, 1, lora, lora, lora);
    lh_tensor dr = lh_k_view3(LH_DTYPE_F32, lat2, 0, dev, T, 1, rope, W, W);
    lh_tensor dc = lh_k_view3(LH_DTYPE_F32, lat2, rope, dev, T, 1, lora, W, W);
    /* each head's query: [its rope dims | W_UK^T q_nope] */
    lh_tensor qr = lh_k_view3(LH_DTYPE_F32, q->data, nope, dev, T, H, rope, H * D, D);
    lh_tensor qn = lh_k_view3(LH_DTYPE_F32, q->data, 0, dev, T, H, nope, H * D, D);
    lh_tensor xr = lh_k_view3(LH_DTYPE_F32, qa, 0, dev, T, H, rope, H * W, W);
    lh_tensor xc = lh_k_view3(LH_DTYPE_F32, qa, rope, dev, T, H, lora, H * W, W);
    lh_tensor wk = lh_k_view3(w->dtype, w->data, 0, dev, H, nope, lora, kvb, lora);
    lh_tensor wv = lh_k_view3(w->dtype, w->data, nope * lora, dev, H, vd, lora, kvb, lora);
    lh_tensor oc = lh_k_view3(LH_DTYPE_F32, oa, rope, dev, T, H, lora, H * W, W);
    lh_status st;
    *what = "the latent";
    if ((rope > 0 && (st = lh_k_copy_view(kctx, &dr, &lr)) != LH_OK) ||
        (st = lh_k_copy_view(kctx, &dc, &lc)) != LH_OK)
        return st;
    *what = "the absorbed query";
    if ((rope > 0 && (st = lh_k_copy_view(kctx, &xr, &qr)) != LH_OK) ||
        (st = lh_k_matmul_heads(kctx, &qn, &wk, true, &xc)) != LH_OK)
        return st;
    *what = "the latent cache";
    if ((st = lh_k_paged_kv_write_batch(kctx, args->kv, b, &lt, NULL, prm->rope)) != LH_OK)
        return st;
    *what = "attention over the latent";
    if ((st = lh_k_paged_attention_batch(kctx, &qt, args->kv, b, prm, &ot)) != LH_OK)
        return st;
    *what = "the values";
    return lh_k_matmul_heads(kctx, &oc, &wv, false, out);
}

static lh_status forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_attn_forward_args *args, lh_tensor *q, lh_tensor *k,
                         const lh_tensor *v, lh_tensor *out, lh_error *err)
{
    if (!args || args->struct_size < offsetof(lh_attn_forward_args, rope) + sizeof args->rope ||
        !args->kv)
        return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: forward without the layer's KV "
                            "blocks", (long long)l->g.layer_index);
    if (l->g.mla) {
        const int64_t T = step->n_tokens;
        if (args->struct_size < offsetof(lh_attn_forward_args, workspace_bytes) +
                                    sizeof args->workspace_bytes || !args->kv_b ||
            (T > 0 && (!args->workspace ||
                       args->workspace_bytes < lh_attn_mla_workspace_bytes(&l->g, T))))
            return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: an MLA forward needs kv_b "
                                "and a workspace of %zu bytes", (long long)l->g.layer_index,
                                lh_attn_mla_workspace_bytes(&l->g, T));
        if (!lh_attn_mla_kv_b_ok(&l->g, args->kv_b))
            return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: kv_b must be a contiguous "
                                "float32, bfloat16 or float16 [%lld, %lld] tensor",
                                (long long)l->g.layer_index,
                                (long long)(l->g.num_heads *
                                            (l->g.qk_nope_head_dim + l->g.v_head_dim)),
                                (long long)l->g.kv_lora_rank);
        const lh_attn_geometry *g = &l->g;
        if (!lh_attn_mla_shapes_ok(g, T, q, k, v, out))
            return lh_error_set(err, LH_E_USAGE, "paged: layer %lld: MLA q, kv_c, k_rope and "
                                "out must be [%lld, %lld, %lld], [%lld, 1, %lld], [%lld, 1, "
                                "%lld] and [%lld, %lld, %lld]", (long long)g->layer_index,
                                (long long)T, (long long)g->num_heads, (long long)g->head_dim,
                                (long long)T, (long long)g->kv_lora_rank, (long long)T,
                                (long long)g->qk_rope_head_dim, (long long)T,
                                (long long)g->num_heads, (long long)g->v_head_dim);
        if (T == 0)
            return LH_OK;
    }
    if (l->g.fused_rope && !args->rope)
        return lh_error_set(err, LH_E_USAGE,
                            "paged: layer %lld: fused RoPE without a RoPE table",
                            (long long)l->g.layer_index);
    /* an MLA layer always rotates on the way (its own layout); others when fused */
    const lh_rope *rope = l->g.fused_rope || l->g.mla ? args->rope : NULL;
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
    lh_status st;
    if (l->g.mla) {
        const char *what = "";
        st = mla_forward(l, kctx, args, &b, &prm, q, k, v, out, &what);
        if (st != LH_OK)
            return lh_error_set(err, st, "paged: layer %lld: %s: %s", (long long)l->g.layer_index,
                                what, lh_k_last_error(kctx));
        return LH_OK;
    }
    st = lh_k_paged_kv_write_batch(kctx, args->kv, &b, k, v, rope);
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
