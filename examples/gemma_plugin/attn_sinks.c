/* An out-of-tree attention backend, "sinks": StreamingLLM (Xiao et al., "Efficient Streaming
 * Language Models with Attention Sinks", 2023) -- attention sinks plus a sliding window, for
 * endless generation in bounded memory.
 *
 * Each sequence keeps, per layer, a KV ring buffer of N_SINKS + WINDOW slots of its own (not
 * the host's paged cache: no LH_ATTN_CAP_PAGED_KV). Position p goes to
 *     slot p                                        when p < N_SINKS (kept forever),
 *     slot N_SINKS + (p - N_SINKS) % WINDOW          otherwise (overwrites the oldest
 *                                                    non-sink position, p - WINDOW),
 * and the position each slot holds is tracked on the host (k_pos, -1 while empty). A query at
 * position q sees the sinks (positions < N_SINKS) and the WINDOW most recent positions
 * (q - WINDOW, q], i.e. at most N_SINKS + WINDOW keys: exactly what the ring holds. Memory is
 * N_SINKS + WINDOW slots per sequence and layer, however long the generation runs. While a
 * sequence is shorter than N_SINKS + WINDOW tokens nothing is evicted and every key is
 * visible, so the result equals full attention.
 *
 * N_SINKS and WINDOW are compile-time constants (meson options n_sinks and window, default 4
 * and 1020: 1024 slots), independent of the run config and the environment. A model whose
 * config has its own sliding window (geometry.sliding_window > 0, e.g. Mistral) is attended
 * with exactly that window and no sinks, which is the model's own semantics in a ring of
 * sliding_window slots.
 *
 * Keys and values are written into their slots with lh_k_copy and attended with
 * lh_k_attention_positions, both from the host's kernel library (on the kernel context's
 * device, CPU or CUDA); this file contains no numeric code. A step's new tokens are attended
 * together while no slot they need is overwritten (the prompt up to N_SINKS + WINDOW tokens
 * at once), then one token at a time.
 *
 * The contract is plugin_api/lh_attention.h: geometry-only create, prepare once per step
 * (checks the step against what each slot holds), forward appends and attends, release
 * forgets a slot, destroy frees everything. */
#include "lh_attention.h"
#include "lh_kernels.h"
#include "lh_plugin.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef SINKS_N_SINKS
#define SINKS_N_SINKS 4
#endif
#ifndef SINKS_WINDOW
#define SINKS_WINDOW 1020
#endif
_Static_assert(SINKS_N_SINKS >= 0 && SINKS_WINDOW >= 1, "n_sinks >= 0, window >= 1");

typedef struct slot_ring {
    float *k, *v;    /* [cap, kv_heads, head_dim], device memory of the layer's context */
    int32_t *k_pos;  /* [ring] host: the position in each slot, -1 while empty */
    int64_t cap;     /* slots allocated (grows by doubling up to ring) */
    int64_t len;     /* positions seen: the sequence's length */
} slot_ring;

struct lh_attn_layer {
    lh_attn_geometry g;
    int64_t n_sinks, window, ring; /* ring = n_sinks + window */
    slot_ring *slots;              /* [max_seqs] */
    lh_kctx *kctx;                 /* the context the rings live on (the first forward's) */
};

static int64_t slot_of(const lh_attn_layer *l, int64_t pos)
{
    return pos < l->n_sinks ? pos : l->n_sinks + (pos - l->n_sinks) % l->window;
}

static lh_status create(const lh_attn_geometry *g, lh_attn_layer **out, lh_error *err)
{
    *out = NULL;
    if (g->num_heads <= 0 || g->num_kv_heads <= 0 || g->head_dim <= 0 ||
        g->num_heads % g->num_kv_heads != 0 || g->max_seqs <= 0)
        return lh_error_set(err, LH_E_USAGE,
                            "sinks: layer %lld: invalid geometry (heads %lld, kv heads %lld, "
                            "head_dim %lld, max_seqs %lld)", (long long)g->layer_index,
                            (long long)g->num_heads, (long long)g->num_kv_heads,
                            (long long)g->head_dim, (long long)g->max_seqs);
    /* f32 rings only; none of the ABI 2 features this backend does not declare */
    if (g->struct_size >= offsetof(lh_attn_geometry, kv_max_tokens) + sizeof g->kv_max_tokens &&
        g->kv_dtype != LH_DTYPE_F32 && g->kv_dtype != LH_DTYPE_INVALID)
        return lh_error_set(err, LH_E_UNSUPPORTED,
                            "sinks: kv_cache.dtype other than float32 is not supported");
    if (g->struct_size >= offsetof(lh_attn_geometry, mla) + sizeof g->mla) {
        if (g->kv_v_dtype != LH_DTYPE_F32 && g->kv_v_dtype != LH_DTYPE_INVALID)
            return lh_error_set(err, LH_E_UNSUPPORTED,
                                "sinks: kv_cache.v_dtype other than float32 is not supported");
        if (g->sparse_top_k || g->sparse_local_blocks || g->fused_rope || g->mla ||
            g->attention_chunk_size)
            return lh_error_set(err, LH_E_UNSUPPORTED,
                                "sinks: %s is not supported",
                                g->mla ? "MLA" : g->fused_rope ? "fused RoPE"
                                : g->attention_chunk_size ? "chunked attention"
                                                          : "sparse attention");
    }
    /* nor the ABI 3 one: logit soft-capping (the host refuses it first: no LH_ATTN_CAP_SOFTCAP) */
    if (g->struct_size >= offsetof(lh_attn_geometry, logit_softcap) + sizeof g->logit_softcap &&
        g->logit_softcap != 0.0f)
        return lh_error_set(err, LH_E_UNSUPPORTED, "sinks: logit soft-capping is not supported");
    lh_attn_layer *l = calloc(1, sizeof *l);
    if (l)
        l->slots = calloc((size_t)g->max_seqs, sizeof *l->slots);
    if (!l || !l->slots) {
        free(l);
        return lh_error_set(err, LH_E_NOMEM, "sinks: out of memory creating layer %lld",
                            (long long)g->layer_index);
    }
    l->g = *g;
    if (g->sliding_window > 0) { /* the model's own window, exactly */
        l->n_sinks = 0;
        l->window = g->sliding_window;
    } else {
        l->n_sinks = SINKS_N_SINKS;
        l->window = SINKS_WINDOW;
    }
    l->ring = l->n_sinks + l->window;
    *out = l;
    return LH_OK;
}

/* A contiguous [rows, kv_heads, head_dim] f32 view on the context's device. */
static lh_tensor rows_view(const lh_attn_layer *l, float *data, int64_t rows)
{
    int64_t shape[3] = {rows, l->g.num_kv_heads, l->g.head_dim};
    lh_tensor t = lh_tensor_cpu(LH_DTYPE_F32, data, 3, shape);
    t.device = lh_k_ctx_device(l->kctx);
    return t;
}

/* Grows the ring's storage to `need` slots (<= l->ring). Below the ring size nothing has
 * wrapped yet, so slots [0, len) move along as they are. */
static lh_status reserve(lh_attn_layer *l, slot_ring *c, int64_t need, lh_error *err)
{
    if (need > l->ring)
        need = l->ring;
    if (need <= c->cap)
        return LH_OK;
    int64_t cap = c->cap ? c->cap : 16;
    while (cap < need)
        cap *= 2;
    if (cap > l->ring)
        cap = l->ring;
    if (!c->k_pos) {
        c->k_pos = malloc((size_t)l->ring * sizeof *c->k_pos);
        if (!c->k_pos)
            return lh_error_set(err, LH_E_NOMEM, "sinks: out of memory");
        for (int64_t i = 0; i < l->ring; i++)
            c->k_pos[i] = -1;
    }
    const size_t row = (size_t)(l->g.num_kv_heads * l->g.head_dim) * sizeof(float);
    void *k = NULL, *v = NULL;
    lh_status st = lh_k_alloc(l->kctx, (size_t)cap * row, &k);
    if (st == LH_OK)
        st = lh_k_alloc(l->kctx, (size_t)cap * row, &v);
    int64_t used = c->len < c->cap ? c->len : c->cap;
    if (st == LH_OK && used > 0) {
        lh_tensor dk = rows_view(l, k, used), sk = rows_view(l, c->k, used);
        lh_tensor dv = rows_view(l, v, used), sv = rows_view(l, c->v, used);
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
        return lh_error_set(err, st, "sinks: layer %lld: growing the KV ring to %lld slots: "
                            "%s", (long long)l->g.layer_index, (long long)cap, why);
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
            return lh_error_set(err, LH_E_USAGE, "sinks: sequence slot %lld outside [0, %lld)",
                                (long long)slot, (long long)l->g.max_seqs);
        if (step->ctx_len[s] != l->slots[slot].len || step->n_new[s] < 0)
            return lh_error_set(err, LH_E_USAGE,
                                "sinks: layer %lld slot %lld has seen %lld tokens, the step says "
                                "%lld", (long long)l->g.layer_index, (long long)slot,
                                (long long)l->slots[slot].len, (long long)step->ctx_len[s]);
        if (step->ctx_len[s] + step->n_new[s] > INT32_MAX)
            return lh_error_set(err, LH_E_UNSUPPORTED, "sinks: positions beyond 2^31");
    }
    return LH_OK;
}

/* Writes rows [r0, r0 + cnt) of the step's k and v (token rows) at positions pos0 .. pos0 +
 * cnt - 1 of ring c; the positions' slots are consecutive (no wrap inside). */
static lh_status write_rows(lh_attn_layer *l, lh_kctx *kctx, slot_ring *c, const lh_tensor *k,
                            const lh_tensor *v, int64_t r0, int64_t pos0, int64_t cnt)
{
    const size_t row = (size_t)(l->g.num_kv_heads * l->g.head_dim);
    int64_t s0 = slot_of(l, pos0);
    lh_tensor dk = rows_view(l, c->k + (size_t)s0 * row, cnt);
    lh_tensor dv = rows_view(l, c->v + (size_t)s0 * row, cnt);
    lh_tensor sk = rows_view(l, (float *)k->data + (size_t)r0 * row, cnt);
    lh_tensor sv = rows_view(l, (float *)v->data + (size_t)r0 * row, cnt);
    sk.device = k->device;
    sv.device = v->device;
    lh_status st = lh_k_copy(kctx, &dk, &sk);
    if (st == LH_OK)
        st = lh_k_copy(kctx, &dv, &sv);
    if (st != LH_OK)
        return st;
    for (int64_t i = 0; i < cnt; i++)
        c->k_pos[s0 + i] = (int32_t)(pos0 + i);
    return LH_OK;
}

static lh_status forward(lh_attn_layer *l, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_attn_forward_args *args, lh_tensor *q, lh_tensor *k,
                         const lh_tensor *v, lh_tensor *out, lh_error *err)
{
    (void)args; /* its own ring, never fused */
    if (!kctx)
        return lh_error_set(err, LH_E_USAGE, "sinks: layer %lld: forward without a kernel "
                            "context", (long long)l->g.layer_index);
    if (!l->kctx)
        l->kctx = kctx;
    if (l->kctx != kctx)
        return lh_error_set(err, LH_E_USAGE, "sinks: layer %lld: forward on another kernel "
                            "context than the one its ring lives on",
                            (long long)l->g.layer_index);
    const int64_t H = l->g.num_heads, D = l->g.head_dim;
    for (int64_t s = 0; s < step->n_seqs; s++) {
        const int64_t slot = step->slot[s];
        if (slot < 0 || slot >= l->g.max_seqs || step->ctx_len[s] != l->slots[slot].len ||
            step->n_new[s] < 0)
            return lh_error_set(err, LH_E_USAGE, "sinks: forward before prepare for slot "
                                "%lld", (long long)slot);
        slot_ring *c = &l->slots[slot];
        const int64_t t0 = step->token_start[s], nn = step->n_new[s];
        lh_status st = reserve(l, c, c->len + nn, err);
        if (st != LH_OK)
            return st;
        /* Chunks of new tokens: all those whose slots are still free at once (nothing is
         * overwritten, so every earlier key stays visible), then one token at a time (writing
         * position p evicts p - window, which no query from p on may see). */
        for (int64_t done = 0; done < nn;) {
            const int64_t pos = c->len;
            int64_t cnt = pos < l->ring ? l->ring - pos : 1;
            if (cnt > nn - done)
                cnt = nn - done;
            st = write_rows(l, kctx, c, k, v, t0 + done, pos, cnt);
            if (st != LH_OK)
                return lh_error_set(err, st, "sinks: layer %lld: writing the KV ring: %s",
                                    (long long)l->g.layer_index, lh_k_last_error(kctx));
            const int64_t used = pos + cnt < l->ring ? pos + cnt : l->ring;
            int64_t qshape[3] = {cnt, H, D};
            const size_t qoff = (size_t)((t0 + done) * H * D);
            lh_tensor qs = lh_tensor_cpu(LH_DTYPE_F32, (float *)q->data + qoff, 3, qshape);
            lh_tensor os = lh_tensor_cpu(LH_DTYPE_F32, (float *)out->data + qoff, 3, qshape);
            qs.device = q->device;
            os.device = out->device;
            lh_tensor ks = rows_view(l, c->k, used), vs = rows_view(l, c->v, used);
            st = lh_k_attention_positions(kctx, &qs, &ks, &vs, step->positions + t0 + done,
                                          c->k_pos, l->g.scale, 0.0f /* no soft-cap */,
                                          l->window, l->n_sinks, &os);
            if (st != LH_OK)
                return lh_error_set(err, st, "sinks: layer %lld: %s",
                                    (long long)l->g.layer_index, lh_k_last_error(kctx));
            c->len += cnt;
            done += cnt;
        }
    }
    return LH_OK;
}

static void release(lh_attn_layer *l, int64_t slot)
{
    if (slot < 0 || slot >= l->g.max_seqs)
        return;
    slot_ring *c = &l->slots[slot];
    c->len = 0; /* keep the buffers: the slot will be reused */
    for (int64_t i = 0; c->k_pos && i < l->ring; i++)
        c->k_pos[i] = -1;
}

static void destroy(lh_attn_layer *l)
{
    if (!l)
        return;
    for (int64_t i = 0; i < l->g.max_seqs; i++) {
        if (l->kctx && l->slots[i].k)
            lh_k_free(l->kctx, l->slots[i].k);
        if (l->kctx && l->slots[i].v)
            lh_k_free(l->kctx, l->slots[i].v);
        free(l->slots[i].k_pos);
    }
    free(l->slots);
    free(l);
}

static const lh_attn_ops sinks_ops = {
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
        .name = "sinks",
        /* a model's own sliding window is honoured exactly (see above); nothing else */
        .capabilities = LH_ATTN_CAP_SLIDING_WINDOW,
        .ops = &sinks_ops,
    };
    return api->register_attention_backend(ctx, &p);
}

LH_PLUGIN_DEFINE("example_attn_sinks", "0.1.0", init)
