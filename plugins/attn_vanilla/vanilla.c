/* Built-in attention backend "vanilla": the plain reference. Each sequence slot keeps its
 * keys and values contiguously in f32 ([tokens, kv_heads, head_dim]), grown by doubling up to
 * max_seq_len; attention itself is the kernel library's lh_k_attention (causal, GQA, sliding
 * window, logit soft-capping). It is the oracle the production backends are tested against,
 * so it stays simple.
 *
 * Multi-head latent attention the plain way, as the paper writes it: each new token's latent
 * is expanded through kv_b into per-head keys (the nope dims from W_UK, the shared rope key
 * repeated per head) and values (W_UV), cached expanded, and attended over by
 * lh_k_attention_positions with the values' own head dim. Every head's keys and the query
 * are laid out rope dims first, so the layer's RoPE table rotates dims [0, qk_rope_head_dim)
 * of contiguous heads; the order of the dims does not change q.k. The paged backend's
 * absorbed form is tested against this one.
 *
 * The cache lives on the device of the kernel context forward() is given: memory from
 * lh_k_alloc on that context (the first forward's; every later call must pass the same one,
 * which destroy frees with), new rows appended with lh_k_copy. Growing happens inside
 * forward, so the host never records its steps as CUDA graphs (the decoder runs it eagerly). */
#include "lh_attention.h"
#include "lh_kernels.h"
#include "lh_plugin.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot_cache {
    float *k, *v;   /* [cap, kv_heads, head_dim], device memory of the layer's context */
    int64_t cap;    /* tokens allocated */
    int64_t len;    /* tokens cached */
} slot_cache;

struct lh_attn_layer {
    lh_attn_geometry g;
    slot_cache *slots; /* [max_seqs] */
    lh_kctx *kctx;     /* the context the caches were allocated on (the first forward's) */
    /* floats per cached token and head dims of keys and values: kv_heads x head_dim each, or
     * for MLA heads x (qk_rope_head_dim + qk_nope_head_dim) and heads x v_head_dim */
    int64_t kheads, kdim, vdim;
    /* MLA: cache positions 0 .. kpos_len - 1 for lh_k_attention_positions, grown with the
     * longest slot cache */
    int32_t *kpos;
    int64_t kpos_len;
};

static lh_status create(const lh_attn_geometry *g, lh_attn_layer **out, lh_error *err)
{
    *out = NULL;
    if (g->num_heads <= 0 || g->num_kv_heads <= 0 || g->head_dim <= 0 ||
        g->num_heads % g->num_kv_heads != 0 || g->max_seq_len <= 0 || g->max_seqs <= 0)
        return lh_error_set(err, LH_E_USAGE,
                            "vanilla: layer %lld: invalid geometry (heads %lld, kv heads %lld, "
                            "head_dim %lld, max_seq_len %lld, max_seqs %lld)",
                            (long long)g->layer_index, (long long)g->num_heads,
                            (long long)g->num_kv_heads, (long long)g->head_dim,
                            (long long)g->max_seq_len, (long long)g->max_seqs);
    /* the oracle keeps its cache in f32, contiguously: it honours no other KV setting */
    bool has_kv = g->struct_size >= offsetof(lh_attn_geometry, kv_max_tokens) +
                                        sizeof g->kv_max_tokens;
    if (has_kv && g->kv_dtype != LH_DTYPE_F32 && g->kv_dtype != LH_DTYPE_INVALID)
        return lh_error_set(err, LH_E_UNSUPPORTED,
                            "vanilla: kv_cache.dtype other than float32 is not supported (the "
                            "reference backend keeps its cache in f32); use the paged backend");
    /* ABI 2 fields: what the host never asks of a backend without the capability */
    if (g->struct_size >= offsetof(lh_attn_geometry, fused_rope) + sizeof g->fused_rope) {
        if (g->kv_v_dtype != LH_DTYPE_F32 && g->kv_v_dtype != LH_DTYPE_INVALID)
            return lh_error_set(err, LH_E_UNSUPPORTED,
                                "vanilla: kv_cache.v_dtype other than float32 is not supported; "
                                "use the paged backend");
        if (g->sparse_top_k || g->sparse_local_blocks || g->fused_rope)
            return lh_error_set(err, LH_E_UNSUPPORTED,
                                "vanilla: %s is not supported (the reference backend attends "
                                "densely to RoPE-rotated inputs)",
                                g->fused_rope ? "fused RoPE" : "sparse attention");
    }
    const bool mla = g->struct_size >= offsetof(lh_attn_geometry, v_head_dim) +
                                           sizeof g->v_head_dim && g->mla;
    if (mla && (g->kv_lora_rank <= 0 || g->qk_nope_head_dim <= 0 || g->v_head_dim <= 0 ||
                g->qk_rope_head_dim < 0 || g->head_dim != g->qk_nope_head_dim + g->qk_rope_head_dim))
        return lh_error_set(err, LH_E_USAGE, "vanilla: layer %lld: invalid MLA geometry "
                            "(kv_lora_rank %lld, qk_nope_head_dim %lld, qk_rope_head_dim %lld, "
                            "v_head_dim %lld, head_dim %lld)", (long long)g->layer_index,
                            (long long)g->kv_lora_rank, (long long)g->qk_nope_head_dim,
                            (long long)g->qk_rope_head_dim, (long long)g->v_head_dim,
                            (long long)g->head_dim);
    lh_attn_layer *l = calloc(1, sizeof *l);
    if (l)
        l->slots = calloc((size_t)g->max_seqs, sizeof *l->slots);
    if (!l || !l->slots) {
        if (l)
            free(l->slots);
        free(l);
        return lh_error_set(err, LH_E_NOMEM, "vanilla: out of memory creating layer %lld",
                            (long long)g->layer_index);
    }
    l->g = *g;
    l->g.mla = mla;
    l->kheads = mla ? g->num_heads : g->num_kv_heads;
    l->kdim = g->head_dim;
    l->vdim = mla ? g->v_head_dim : g->head_dim;
    if (g->struct_size < offsetof(lh_attn_geometry, logit_softcap) + sizeof g->logit_softcap)
        l->g.logit_softcap = 0.0f; /* a geometry without the field asks for no cap */
    *out = l;
    return LH_OK;
}

/* A contiguous [tokens, heads, dim] f32 view on the context's device. */
static lh_tensor rows_view(const lh_attn_layer *l, float *data, int64_t tokens, int64_t heads,
                           int64_t dim)
{
    int64_t shape[3] = {tokens, heads, dim};
    lh_tensor t = lh_tensor_cpu(LH_DTYPE_F32, data, 3, shape);
    t.device = lh_k_ctx_device(l->kctx);
    return t;
}

/* Grows the slot's cache to hold `tokens` tokens, keeping the c->len cached ones. */
static lh_status reserve(lh_attn_layer *l, slot_cache *c, int64_t tokens, lh_error *err)
{
    if (tokens <= c->cap)
        return LH_OK;
    int64_t cap = c->cap ? c->cap : 16;
    while (cap < tokens)
        cap *= 2;
    if (cap > l->g.max_seq_len)
        cap = l->g.max_seq_len;
    const int64_t KVH = l->kheads;
    const size_t krow = (size_t)(KVH * l->kdim) * sizeof(float);
    const size_t vrow = (size_t)(KVH * l->vdim) * sizeof(float);
    void *k = NULL, *v = NULL;
    lh_status st = lh_k_alloc(l->kctx, (size_t)cap * krow, &k);
    if (st == LH_OK)
        st = lh_k_alloc(l->kctx, (size_t)cap * vrow, &v);
    if (st == LH_OK && c->len > 0) { /* the cached tokens move along */
        lh_tensor dk = rows_view(l, k, c->len, KVH, l->kdim);
        lh_tensor sk = rows_view(l, c->k, c->len, KVH, l->kdim);
        lh_tensor dv = rows_view(l, v, c->len, KVH, l->vdim);
        lh_tensor sv = rows_view(l, c->v, c->len, KVH, l->vdim);
        st = lh_k_copy(l->kctx, &dk, &sk);
        if (st == LH_OK)
            st = lh_k_copy(l->kctx, &dv, &sv);
    }
    if (st != LH_OK) {
        const char *why = lh_k_last_error(l->kctx);
        if (k)
            lh_k_free(l->kctx, k);
        if (v)
            lh_k_free(l->kctx, v);
        return lh_error_set(err, st, "vanilla: layer %lld: growing the KV cache to %lld "
                            "tokens (%zu bytes): %s", (long long)l->g.layer_index,
                            (long long)cap, (size_t)cap * (krow + vrow), why);
    }
    if (c->k)
        lh_k_free(l->kctx, c->k);
    if (c->v)
        lh_k_free(l->kctx, c->v);
    c->k = k;
    c->v = v;
    c->cap = cap;
    return LH_OK;
}

static lh_status prepare(lh_attn_layer *l, const lh_attn_step *step, lh_error *err)
{
    for (int64_t s = 0; s < step->n_seqs; s++) {
        int64_t slot = step->slot[s];
        if (slot < 0 || slot >= l->g.max_seqs)
            return lh_error_set(err, LH_E_USAGE, "vanilla: sequence slot %lld outside [0, %lld)",
                                (long long)slot, (long long)l->g.max_seqs);
        slot_cache *c = &l->slots[slot];
        if (step->ctx_len[s] != c->len)
            return lh_error_set(err, LH_E_USAGE,
                                "vanilla: layer %lld slot %lld holds %lld tokens, the step says "
                                "%lld", (long long)l->g.layer_index, (long long)slot,
                                (long long)c->len, (long long)step->ctx_len[s]);
        int64_t need = c->len + step->n_new[s];
        if (need > l->g.max_seq_len)
            return lh_error_set(err, LH_E_UNSUPPORTED,
                                "vanilla: sequence in slot %lld needs %lld tokens, more than "
                                "max_seq_len %lld",
                                (long long)slot, (long long)need,
                                (long long)l->g.max_seq_len);
        /* prepare has no kernel context: the memory is found in forward, by reserve */
    }
    return LH_OK;
}

/* The kernel library's message for a failed call, with the layer and what was being done. */
static lh_status kfail(const lh_attn_layer *l, lh_kctx *kctx, lh_status st, const char *what,
                       lh_error *err)
{
    return lh_error_set(err, st, "vanilla: layer %lld: %s: %s", (long long)l->g.layer_index,
                        what, lh_k_last_error(kctx));
}

/* One sequence of an MLA step: tokens [t0, t0 + nn) of q [T, H, nope + rope], the compressed
 * KV kc [T, 1, lora] and the rope key kr [T, 1, rope], appended to the slot's cache expanded,
 * attended into out [T, H, v]. */
static lh_status mla_sequence(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                              const lh_attn_forward_args *args, int64_t s, const lh_tensor *q,
                              const lh_tensor *kc_in, const lh_tensor *kr_in, lh_tensor *out,
                              lh_error *err)
{
    const lh_attn_geometry *g = &l->g;
    const int64_t H = g->num_heads, nope = g->qk_nope_head_dim, rope = g->qk_rope_head_dim;
    const int64_t lora = g->kv_lora_rank, vd = g->v_head_dim, D = nope + rope;
    const int64_t kvb = (nope + vd) * lora; /* kv_b elements per head */
    slot_cache *c = &l->slots[step->slot[s]];
    const int64_t t0 = step->token_start[s], nn = step->n_new[s], total = c->len + nn;
    const lh_device dev = q->device;
    const lh_tensor *w = args->kv_b;
    const int32_t *pos = step->positions + t0;
    lh_status st = reserve(l, c, total, err);
    if (st != LH_OK)
        return st;
    if (total > l->kpos_len) {
        int32_t *kp = realloc(l->kpos, (size_t)c->cap * sizeof *kp);
        if (!kp)
            return lh_error_set(err, LH_E_NOMEM, "vanilla: layer %lld: out of memory for %lld "
                                "cache positions", (long long)g->layer_index, (long long)c->cap);
        for (int64_t i = l->kpos_len; i < c->cap; i++)
            kp[i] = (int32_t)i;
        l->kpos = kp;
        l->kpos_len = c->cap;
    }
    /* keys: [rope key (shared, rotated) | W_UK c] per head, written into the cache */
    float *knew = c->k + (size_t)(c->len * H * D), *vnew = c->v + (size_t)(c->len * H * vd);
    lh_tensor kc = lh_k_view3(LH_DTYPE_F32, kc_in->data, t0 * lora, dev, nn, H, lora, lora, 0);
    lh_tensor kr = lh_k_view3(LH_DTYPE_F32, kr_in->data, t0 * rope, dev, nn, H, rope, rope, 0);
    lh_tensor dr = lh_k_view3(LH_DTYPE_F32, knew, 0, dev, nn, H, rope, H * D, D);
    lh_tensor dn = lh_k_view3(LH_DTYPE_F32, knew, rope, dev, nn, H, nope, H * D, D);
    lh_tensor wk = lh_k_view3(w->dtype, w->data, 0, dev, H, nope, lora, kvb, lora);
    lh_tensor wv = lh_k_view3(w->dtype, w->data, nope * lora, dev, H, vd, lora, kvb, lora);
    lh_tensor vn = rows_view(l, vnew, nn, H, vd);
    lh_tensor kn = rows_view(l, knew, nn, H, D);
    if (rope > 0 && (st = lh_k_copy_view(kctx, &dr, &kr)) != LH_OK)
        return kfail(l, kctx, st, "the rope key", err);
    if (args->rope && (st = lh_k_rope_apply(kctx, args->rope, &kn, pos, total)) != LH_OK)
        return kfail(l, kctx, st, "rotating the keys", err);
    if ((st = lh_k_matmul_heads(kctx, &kc, &wk, false, &dn)) != LH_OK ||
        (st = lh_k_matmul_heads(kctx, &kc, &wv, false, &vn)) != LH_OK)
        return kfail(l, kctx, st, "expanding the latent", err);
    /* the query in the keys' layout, in the workspace: [rope dims | nope dims] per head */
    float *qx = (float *)args->workspace + (size_t)(t0 * H * D);
    lh_tensor qr = lh_k_view3(LH_DTYPE_F32, q->data, t0 * H * D + nope, dev, nn, H, rope, H * D, D);
    lh_tensor qn = lh_k_view3(LH_DTYPE_F32, q->data, t0 * H * D, dev, nn, H, nope, H * D, D);
    lh_tensor xr = lh_k_view3(LH_DTYPE_F32, qx, 0, dev, nn, H, rope, H * D, D);
    lh_tensor xn = lh_k_view3(LH_DTYPE_F32, qx, rope, dev, nn, H, nope, H * D, D);
    lh_tensor qs = rows_view(l, qx, nn, H, D);
    if ((rope > 0 && (st = lh_k_copy_view(kctx, &xr, &qr)) != LH_OK) ||
        (st = lh_k_copy_view(kctx, &xn, &qn)) != LH_OK)
        return kfail(l, kctx, st, "the query", err);
    if (args->rope && (st = lh_k_rope_apply(kctx, args->rope, &qs, pos, total)) != LH_OK)
        return kfail(l, kctx, st, "rotating the query", err);
    lh_tensor ks = rows_view(l, c->k, total, H, D), vs = rows_view(l, c->v, total, H, vd);
    lh_tensor os = lh_k_view3(LH_DTYPE_F32, out->data, t0 * H * vd, dev, nn, H, vd, H * vd, vd);
    st = lh_k_attention_positions(kctx, &qs, &ks, &vs, pos, l->kpos, g->scale, g->logit_softcap,
                                  g->sliding_window, 0, &os);
    if (st != LH_OK)
        return kfail(l, kctx, st, "attention", err);
    c->len = total;
    return LH_OK;
}

static lh_status mla_forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                             const lh_attn_forward_args *args, const lh_tensor *q,
                             const lh_tensor *kc, const lh_tensor *kr, lh_tensor *out,
                             lh_error *err)
{
    const lh_attn_geometry *g = &l->g;
    if (!args || args->struct_size < offsetof(lh_attn_forward_args, workspace_bytes) +
                                         sizeof args->workspace_bytes || !args->kv_b ||
        (step->n_tokens > 0 &&
         (!args->workspace || args->workspace_bytes < lh_attn_mla_workspace_bytes(g, step->n_tokens))))
        return lh_error_set(err, LH_E_USAGE, "vanilla: layer %lld: an MLA forward needs kv_b "
                            "and a workspace of %zu bytes", (long long)g->layer_index,
                            lh_attn_mla_workspace_bytes(g, step->n_tokens));
    if (!lh_attn_mla_kv_b_ok(g, args->kv_b))
        return lh_error_set(err, LH_E_USAGE, "vanilla: layer %lld: kv_b must be a contiguous "
                            "float32, bfloat16 or float16 [%lld, %lld] tensor",
                            (long long)g->layer_index,
                            (long long)(g->num_heads * (g->qk_nope_head_dim + g->v_head_dim)),
                            (long long)g->kv_lora_rank);
    const int64_t H = g->num_heads, D = g->head_dim, T = step->n_tokens;
    if (!lh_attn_mla_shapes_ok(g, T, q, kc, kr, out))
        return lh_error_set(err, LH_E_USAGE, "vanilla: layer %lld: MLA q, kv_c, k_rope and out "
                            "must be [%lld, %lld, %lld], [%lld, 1, %lld], [%lld, 1, %lld] and "
                            "[%lld, %lld, %lld]", (long long)g->layer_index, (long long)T,
                            (long long)H, (long long)D, (long long)T,
                            (long long)g->kv_lora_rank, (long long)T,
                            (long long)g->qk_rope_head_dim, (long long)T, (long long)H,
                            (long long)g->v_head_dim);
    for (int64_t s = 0; s < step->n_seqs; s++) {
        if (step->n_new[s] == 0)
            continue;
        lh_status st = mla_sequence(l, kctx, step, args, s, q, kc, kr, out, err);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

static lh_status forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_attn_forward_args *args, lh_tensor *q, lh_tensor *k,
                         const lh_tensor *v, lh_tensor *out, lh_error *err)
{
    if (!kctx)
        return lh_error_set(err, LH_E_USAGE, "vanilla: layer %lld: forward without a kernel "
                            "context", (long long)l->g.layer_index);
    if (!l->kctx)
        l->kctx = kctx;
    if (l->kctx != kctx)
        return lh_error_set(err, LH_E_USAGE, "vanilla: layer %lld: forward on another kernel "
                            "context than the one its cache lives on",
                            (long long)l->g.layer_index);
    for (int64_t s = 0; s < step->n_seqs; s++) {
        const int64_t slot = step->slot[s];
        if (slot < 0 || slot >= l->g.max_seqs || step->ctx_len[s] != l->slots[slot].len ||
            step->n_new[s] < 0 || l->slots[slot].len + step->n_new[s] > l->g.max_seq_len)
            return lh_error_set(err, LH_E_USAGE, "vanilla: forward before prepare for slot "
                                "%lld", (long long)slot);
    }
    if (l->g.mla)
        return mla_forward(l, kctx, step, args, q, k, v, out, err);
    /* its own contiguous cache; never fused: args carries nothing for it */
    const int64_t H = l->g.num_heads, KVH = l->g.num_kv_heads, D = l->g.head_dim;
    const size_t row = (size_t)(KVH * D);
    for (int64_t s = 0; s < step->n_seqs; s++) {
        slot_cache *c = &l->slots[step->slot[s]];
        int64_t t0 = step->token_start[s], nn = step->n_new[s];
        if (nn == 0)
            continue;
        lh_status st = reserve(l, c, c->len + nn, err);
        if (st != LH_OK)
            return st;
        /* the new rows, appended device to device */
        lh_tensor dk = rows_view(l, c->k + (size_t)c->len * row, nn, KVH, D);
        lh_tensor dv = rows_view(l, c->v + (size_t)c->len * row, nn, KVH, D);
        lh_tensor sk = rows_view(l, (float *)k->data + (size_t)t0 * row, nn, KVH, D);
        lh_tensor sv = rows_view(l, (float *)v->data + (size_t)t0 * row, nn, KVH, D);
        sk.device = k->device;
        sv.device = v->device;
        st = lh_k_copy(kctx, &dk, &sk);
        if (st == LH_OK)
            st = lh_k_copy(kctx, &dv, &sv);
        if (st != LH_OK)
            return lh_error_set(err, st, "vanilla: layer %lld: appending to the KV cache: %s",
                                (long long)l->g.layer_index, lh_k_last_error(kctx));
        int64_t total = c->len + nn;
        int64_t qshape[3] = {nn, H, D};
        lh_tensor qs = lh_tensor_cpu(LH_DTYPE_F32, (float *)q->data + (size_t)(t0 * H * D), 3,
                                     qshape);
        lh_tensor os = lh_tensor_cpu(LH_DTYPE_F32, (float *)out->data + (size_t)(t0 * H * D), 3,
                                     qshape);
        qs.device = q->device;
        os.device = out->device;
        lh_tensor ks = rows_view(l, c->k, total, KVH, D), vs = rows_view(l, c->v, total, KVH, D);
        st = lh_k_attention(kctx, &qs, &ks, &vs, step->positions + t0, l->g.scale,
                            l->g.logit_softcap, l->g.sliding_window, &os);
        if (st != LH_OK)
            return lh_error_set(err, st, "vanilla: layer %lld: %s", (long long)l->g.layer_index,
                                lh_k_last_error(kctx));
        c->len = total;
    }
    return LH_OK;
}

static void release(lh_attn_layer *l, int64_t slot)
{
    if (slot >= 0 && slot < l->g.max_seqs)
        l->slots[slot].len = 0; /* keep the buffers: the slot will be reused */
}

static void destroy(lh_attn_layer *l)
{
    if (!l)
        return;
    for (int64_t i = 0; l->kctx && i < l->g.max_seqs; i++) {
        if (l->slots[i].k)
            lh_k_free(l->kctx, l->slots[i].k);
        if (l->slots[i].v)
            lh_k_free(l->kctx, l->slots[i].v);
    }
    free(l->slots);
    free(l->kpos);
    free(l);
}

static const lh_attn_ops vanilla_ops = {
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
        .name = "vanilla",
        .capabilities = LH_ATTN_CAP_SLIDING_WINDOW | LH_ATTN_CAP_SOFTCAP | LH_ATTN_CAP_MLA,
        .ops = &vanilla_ops,
    };
    return api->register_attention_backend(ctx, &p);
}

LH_PLUGIN_DEFINE("attn_vanilla", "0.1.0", init)
