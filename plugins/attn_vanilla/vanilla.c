/* Built-in attention backend "vanilla": the plain reference. Each sequence slot keeps its
 * keys and values contiguously in f32 ([tokens, kv_heads, head_dim]), grown by doubling up to
 * max_seq_len; attention itself is the kernel library's lh_k_attention (causal, GQA, sliding
 * window). It is the oracle the production backends are tested against, so it stays simple. */
#include "lh_attention.h"
#include "lh_kernels.h"
#include "lh_plugin.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot_cache {
    float *k, *v;   /* [cap, kv_heads, head_dim] */
    int64_t cap;    /* tokens allocated */
    int64_t len;    /* tokens cached */
} slot_cache;

struct lh_attn_layer {
    lh_attn_geometry g;
    slot_cache *slots; /* [max_seqs] */
};

static lh_status create(const lh_attn_geometry *g, lh_attn_layer **out, char *err, size_t n)
{
    *out = NULL;
    if (g->num_heads <= 0 || g->num_kv_heads <= 0 || g->head_dim <= 0 ||
        g->num_heads % g->num_kv_heads != 0 || g->max_seq_len <= 0 || g->max_seqs <= 0)
        return lh_attn_fail(err, n, LH_E_USAGE,
                            "vanilla: layer %lld: invalid geometry (heads %lld, kv heads %lld, "
                            "head_dim %lld, max_seq_len %lld, max_seqs %lld)",
                            (long long)g->layer_index, (long long)g->num_heads,
                            (long long)g->num_kv_heads, (long long)g->head_dim,
                            (long long)g->max_seq_len, (long long)g->max_seqs);
    /* the oracle keeps its cache in f32, contiguously: it honours no other KV setting */
    bool has_kv = g->struct_size >= offsetof(lh_attn_geometry, kv_max_tokens) +
                                        sizeof g->kv_max_tokens;
    if (has_kv && g->kv_dtype != LH_DTYPE_F32 && g->kv_dtype != LH_DTYPE_INVALID)
        return lh_attn_fail(err, n, LH_E_UNSUPPORTED,
                            "vanilla: kv_cache.dtype other than float32 is not supported (the "
                            "reference backend keeps its cache in f32); use the paged backend");
    /* ABI 2 fields: what the host never asks of a backend without the capability */
    if (g->struct_size >= offsetof(lh_attn_geometry, fused_rope) + sizeof g->fused_rope) {
        if (g->kv_v_dtype != LH_DTYPE_F32 && g->kv_v_dtype != LH_DTYPE_INVALID)
            return lh_attn_fail(err, n, LH_E_UNSUPPORTED,
                                "vanilla: kv_cache.v_dtype other than float32 is not supported; "
                                "use the paged backend");
        if (g->sparse_top_k || g->sparse_local_blocks || g->fused_rope)
            return lh_attn_fail(err, n, LH_E_UNSUPPORTED,
                                "vanilla: %s is not supported (the reference backend attends "
                                "densely to RoPE-rotated inputs)",
                                g->fused_rope ? "fused RoPE" : "sparse attention");
    }
    lh_attn_layer *l = calloc(1, sizeof *l);
    if (l)
        l->slots = calloc((size_t)g->max_seqs, sizeof *l->slots);
    if (!l || !l->slots) {
        free(l);
        return lh_attn_fail(err, n, LH_E_NOMEM, "vanilla: out of memory creating layer %lld",
                            (long long)g->layer_index);
    }
    l->g = *g;
    *out = l;
    return LH_OK;
}

static lh_status reserve(lh_attn_layer *l, slot_cache *c, int64_t tokens, char *err, size_t n)
{
    if (tokens <= c->cap)
        return LH_OK;
    int64_t cap = c->cap ? c->cap : 16;
    while (cap < tokens)
        cap *= 2;
    if (cap > l->g.max_seq_len)
        cap = l->g.max_seq_len;
    size_t row = (size_t)(l->g.num_kv_heads * l->g.head_dim) * sizeof(float);
    float *k = realloc(c->k, (size_t)cap * row);
    if (k)
        c->k = k;
    float *v = k ? realloc(c->v, (size_t)cap * row) : NULL;
    if (v)
        c->v = v;
    if (!k || !v)
        return lh_attn_fail(err, n, LH_E_NOMEM, "vanilla: layer %lld: out of memory growing the KV "
                            "cache to %lld tokens (%zu bytes)", (long long)l->g.layer_index,
                            (long long)cap, 2 * (size_t)cap * row);
    c->cap = cap;
    return LH_OK;
}

static lh_status prepare(lh_attn_layer *l, const lh_attn_step *step, char *err, size_t n)
{
    for (int64_t s = 0; s < step->n_seqs; s++) {
        int64_t slot = step->slot[s];
        if (slot < 0 || slot >= l->g.max_seqs)
            return lh_attn_fail(err, n, LH_E_USAGE, "vanilla: sequence slot %lld outside [0, %lld)",
                                (long long)slot, (long long)l->g.max_seqs);
        slot_cache *c = &l->slots[slot];
        if (step->ctx_len[s] != c->len)
            return lh_attn_fail(err, n, LH_E_USAGE,
                                "vanilla: layer %lld slot %lld holds %lld tokens, the step says "
                                "%lld", (long long)l->g.layer_index, (long long)slot,
                                (long long)c->len, (long long)step->ctx_len[s]);
        int64_t need = c->len + step->n_new[s];
        if (need > l->g.max_seq_len)
            return lh_attn_fail(err, n, LH_E_UNSUPPORTED,
                                "vanilla: sequence in slot %lld needs %lld tokens, more than "
                                "max_seq_len %lld",
                                (long long)slot, (long long)need,
                                (long long)l->g.max_seq_len);
        lh_status st = reserve(l, c, need, err, n);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

static lh_status forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_attn_forward_args *args, lh_tensor *q, lh_tensor *k,
                         const lh_tensor *v, lh_tensor *out, char *err, size_t n)
{
    (void)args; /* its own contiguous cache; never fused */
    const int64_t H = l->g.num_heads, KVH = l->g.num_kv_heads, D = l->g.head_dim;
    const size_t row = (size_t)(KVH * D);
    for (int64_t s = 0; s < step->n_seqs; s++) {
        slot_cache *c = &l->slots[step->slot[s]];
        int64_t t0 = step->token_start[s], nn = step->n_new[s];
        if (c->len + nn > c->cap)
            return lh_attn_fail(err, n, LH_E_USAGE, "vanilla: forward before prepare for slot %lld",
                                (long long)step->slot[s]);
        memcpy(c->k + (size_t)c->len * row, (const float *)k->data + (size_t)t0 * row,
               (size_t)nn * row * sizeof(float));
        memcpy(c->v + (size_t)c->len * row, (const float *)v->data + (size_t)t0 * row,
               (size_t)nn * row * sizeof(float));
        int64_t total = c->len + nn;
        int64_t qshape[3] = {nn, H, D}, kvshape[3] = {total, KVH, D};
        lh_tensor qs = lh_tensor_cpu(LH_DTYPE_F32, (float *)q->data + (size_t)(t0 * H * D), 3, qshape);
        lh_tensor os = lh_tensor_cpu(LH_DTYPE_F32, (float *)out->data + (size_t)(t0 * H * D), 3, qshape);
        lh_tensor ks = lh_tensor_cpu(LH_DTYPE_F32, c->k, 3, kvshape);
        lh_tensor vs = lh_tensor_cpu(LH_DTYPE_F32, c->v, 3, kvshape);
        lh_status st = lh_k_attention(kctx, &qs, &ks, &vs, step->positions + t0, l->g.scale,
                                      l->g.sliding_window, &os);
        if (st != LH_OK)
            return lh_attn_fail(err, n, st, "vanilla: layer %lld: %s", (long long)l->g.layer_index,
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
    for (int64_t i = 0; i < l->g.max_seqs; i++) {
        free(l->slots[i].k);
        free(l->slots[i].v);
    }
    free(l->slots);
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
        .capabilities = LH_ATTN_CAP_SLIDING_WINDOW,
        .ops = &vanilla_ops,
    };
    return api->register_attention_backend(ctx, &p);
}

LH_PLUGIN_DEFINE("attn_vanilla", "0.1.0", init)
