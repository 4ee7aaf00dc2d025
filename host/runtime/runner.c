#include "runner_internal.h"

#include "core/err.h"
#include "core/log.h"
#include "core/strutil.h"
#include "api/host_api_table.h"
#include "runtime/attn_create.h"
#include "weights/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

lh_tensor lh_runner_view(lh_device dev, lh_dtype dt, void *data, int ndim, const int64_t *shape)
{
    lh_tensor t = lh_tensor_cpu(dt, data, ndim, shape);
    t.device = dev;
    return t;
}

const char *lh_runner_device_name(lh_device dev, char *buf, size_t n)
{
    if (dev.kind == LH_DEVICE_CPU)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", dev.index);
    return buf;
}

static int64_t numel(const lh_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

/* ---- weights on the device ------------------------------------------------------------------ */

typedef struct collect_ctx {
    lh_runner *r;
    const lh_model *m;
    lh_status st;
    lh_err *err;
} collect_ctx;

/* A weight the checkpoint stores [in, out] (add_linear_transposed) becomes an [out, in] copy
 * the runner owns, so every linear reads one layout. Done once, at bind. */
static lh_status transpose_weight(lh_runner *r, lh_weight *w, lh_err *err)
{
    const lh_tensor *t = &w->t;
    const int64_t bits = lh_k_dtype_bits(t->dtype);
    if (t->ndim != 2 || t->device.kind != LH_DEVICE_CPU || (bits != 16 && bits != 32) ||
        t->stride[1] != 1 || t->stride[0] != t->shape[1])
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: a transposed weight must be a contiguous "
                          "2-D f32/bf16/f16 tensor in host memory (got %d dims, %lld-bit "
                          "elements)", w->name, t->ndim, (long long)bits);
    const int64_t in = t->shape[0], out = t->shape[1];
    const size_t es = (size_t)bits / 8;
    unsigned char *dst = malloc((size_t)(in * out) * es);
    void **grown = dst ? realloc(r->tbufs, (size_t)(r->n_tbufs + 1) * sizeof *r->tbufs) : NULL;
    if (!grown) {
        free(dst);
        return lh_err_set(err, LH_E_NOMEM, "out of memory transposing %s", w->name);
    }
    r->tbufs = grown;
    r->tbufs[r->n_tbufs++] = dst;
    const unsigned char *src = t->data;
    for (int64_t i = 0; i < in; i++)
        for (int64_t o = 0; o < out; o++)
            memcpy(dst + (size_t)(o * in + i) * es, src + (size_t)(i * out + o) * es, es);
    const int64_t shape[2] = {out, in};
    w->t = lh_runner_view(t->device, t->dtype, dst, 2, shape);
    return LH_OK;
}

static void collect_param(const lh_param_info *p, void *user)
{
    collect_ctx *c = user;
    if (c->st != LH_OK)
        return;
    lh_weight *w = &c->r->weights[c->r->n_weights];
    size_t n = strlen(p->module) + strlen(p->name) + 2;
    w->name = malloc(n);
    if (!w->name) {
        c->st = lh_err_set(c->err, LH_E_NOMEM, "out of memory");
        return;
    }
    snprintf(w->name, n, "%s%s%s", p->module, p->module[0] ? "." : "", p->name);
    c->r->n_weights++;
    lh_status st = lh_model_param_tensor_by_name(c->m, p->module, p->name, &w->t);
    if (st != LH_OK)
        c->st = lh_err_set(c->err, LH_E_INTERNAL, "%s is in the tree but not bound (%s)",
                           w->name, lh_status_name(st));
    else if (p->transposed)
        c->st = transpose_weight(c->r, w, c->err);
    if (c->st == LH_OK && p->scale_param) {
        const size_t sn = strlen(p->module) + strlen(p->scale_param) + 2;
        if (!(w->scale_name = malloc(sn))) {
            c->st = lh_err_set(c->err, LH_E_NOMEM, "out of memory");
            return;
        }
        snprintf(w->scale_name, sn, "%s%s%s", p->module, p->module[0] ? "." : "",
                 p->scale_param);
        w->block_rows = p->scale_block_rows;
        w->block_cols = p->scale_block_cols;
    }
}

/* Each quantized weight gets its scale tensor, as placed (after any upload). */
static lh_status link_scales(lh_runner *r, lh_err *err)
{
    for (int64_t i = 0; i < r->n_weights; i++) {
        lh_weight *w = &r->weights[i];
        if (!w->scale_name)
            continue;
        const lh_weight *s = lh_runner_find_weight(r, w->scale_name);
        if (!s)
            return lh_err_set(err, LH_E_INTERNAL, "%s: its scale %s is not among the weights",
                              w->name, w->scale_name);
        w->scale = s->t;
    }
    return LH_OK;
}

static void count_param(const lh_param_info *p, void *user)
{
    (void)p;
    (*(int64_t *)user)++;
}

/* LLMHOST_COPY_WEIGHTS=1: a CPU context, too, computes from copies made by lh_k_alloc and
 * lh_k_copy, so that the upload path runs (and is checked under ASan) without a GPU. */
static bool copy_weights_forced(void)
{
    const char *v = getenv("LLMHOST_COPY_WEIGHTS");
    return v && strcmp(v, "1") == 0;
}

/* Copies every weight to the context's device and points the views at the copies. A tensor
 * whose storage an earlier one already holds (lm_head tied to the embedding) is uploaded once
 * and shared. */
static lh_status upload_weights(lh_runner *r, lh_err *err)
{
    const int64_t n = r->n_weights;
    lh_weight *w = r->weights;
    const void **src = malloc((size_t)(n ? n : 1) * sizeof *src);
    r->wbufs = src ? calloc((size_t)(n ? n : 1), sizeof *r->wbufs) : NULL;
    if (!r->wbufs) {
        free(src);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    char dev[32];
    lh_runner_device_name(r->dev, dev, sizeof dev);
    /* the bytes to move, each storage once (the bar's total) */
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        src[i] = w[i].t.data;
        bool dup = false;
        for (int64_t j = 0; j < i && !dup; j++)
            dup = src[j] == src[i];
        if (!dup)
            total += lh_k_dtype_bytes(w[i].t.dtype, numel(&w[i].t));
    }
    lh_progress pg;
    lh_progress_begin(&pg, "uploading weights", total);
    lh_status st = LH_OK;
    for (int64_t i = 0; i < n && st == LH_OK; i++) {
        lh_tensor *t = &w[i].t;
        int64_t j = 0;
        while (j < i && src[j] != src[i])
            j++;
        if (j < i) { /* shared storage: same dtype and shape as the first holder */
            const lh_tensor *first = &w[j].t;
            if (first->dtype != t->dtype || numel(first) != numel(t)) {
                st = lh_err_set(err, LH_E_UNSUPPORTED, "%s shares its storage with %s but not "
                                "its dtype or size", w[i].name, w[j].name);
                break;
            }
            *t = lh_runner_view(r->dev, t->dtype, first->data, t->ndim, t->shape);
            continue;
        }
        const int64_t bytes = lh_k_dtype_bytes(t->dtype, numel(t));
        if (bytes <= 0) {
            st = lh_err_set(err, LH_E_UNSUPPORTED, "%s: dtype %d cannot be uploaded", w[i].name,
                            (int)t->dtype);
            break;
        }
        void *p = NULL;
        st = lh_k_alloc(r->kctx, (size_t)bytes, &p);
        if (st != LH_OK) {
            st = lh_err_set(err, st, "uploading the weights to %s: %s (%lld bytes, %lld of %lld "
                            "bytes uploaded): %s", dev, w[i].name, (long long)bytes,
                            (long long)r->weight_bytes, (long long)total,
                            lh_k_last_error(r->kctx));
            break;
        }
        r->wbufs[r->n_wbufs++] = p;
        lh_tensor dst = lh_runner_view(r->dev, t->dtype, p, t->ndim, t->shape);
        st = lh_k_copy(r->kctx, &dst, t);
        if (st != LH_OK) {
            st = lh_err_set(err, st, "uploading %s to %s: %s", w[i].name, dev,
                            lh_k_last_error(r->kctx));
            break;
        }
        *t = dst;
        r->weight_bytes += bytes;
        lh_progress_add(&pg, bytes);
    }
    lh_progress_end(&pg);
    free(src);
    return st;
}

static lh_status init_weights(lh_runner *r, const lh_model *m, lh_err *err)
{
    int64_t n = 0;
    lh_model_foreach_param(m, count_param, &n);
    r->weights = calloc((size_t)(n ? n : 1), sizeof *r->weights);
    if (!r->weights)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    collect_ctx c = {.r = r, .m = m, .st = LH_OK, .err = err};
    lh_model_foreach_param(m, collect_param, &c);
    if (c.st != LH_OK)
        return c.st;
    lh_status st = LH_OK;
    if (r->dev.kind != LH_DEVICE_CPU || copy_weights_forced())
        st = upload_weights(r, err); /* the CPU reads the bound tensors */
    if (st == LH_OK && !lh_runner_index_weights(r))
        st = lh_err_set(err, LH_E_NOMEM, "out of memory");
    return st == LH_OK ? link_scales(r, err) : st;
}

/* ---- attention layers ----------------------------------------------------------------------- */

static bool same_scaling(const lh_rope_scaling *a, const lh_rope_scaling *b)
{
    const char *ka = a->kind ? a->kind : "", *kb = b->kind ? b->kind : "";
    return strcmp(ka, kb) == 0 && a->factor == b->factor &&
           a->low_freq_factor == b->low_freq_factor && a->high_freq_factor == b->high_freq_factor &&
           a->original_max_position_embeddings == b->original_max_position_embeddings &&
           a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow &&
           a->attention_factor == b->attention_factor && a->mscale == b->mscale &&
           a->mscale_all_dim == b->mscale_all_dim && a->n_factors == b->n_factors &&
           (a->n_factors == 0 ||
            (memcmp(a->short_factor, b->short_factor, (size_t)a->n_factors * sizeof(double)) == 0 &&
             memcmp(a->long_factor, b->long_factor, (size_t)a->n_factors * sizeof(double)) == 0));
}

/* The RoPE table a spec asks for, shared by every layer that asks for the same one. */
static lh_status rope_for(lh_runner *r, const lh_attention_spec *s, const char *module,
                          const lh_rope **out, lh_err *err)
{
    *out = NULL;
    if (!s->rope)
        return LH_OK;
    for (int64_t i = 0; i < r->n_ropes; i++) {
        const lh_rope *x = &r->ropes[i];
        if (x->rotary_dim == s->rotary_dim && x->theta == s->rope_theta &&
            x->interleaved == s->rope_interleaved &&
            x->max_position_embeddings == s->max_positions &&
            same_scaling(&x->scaling, &s->rope_scaling)) {
            *out = x;
            return LH_OK;
        }
    }
    lh_rope *x = &r->ropes[r->n_ropes];
    if (lh_k_rope_init(x, s->rotary_dim, s->rope_theta, &s->rope_scaling, s->max_positions) !=
        LH_OK)
        return lh_err_set(err, LH_E_CONFIG, "%s: cannot build the RoPE table (rope_theta %g, "
                          "scaling '%s'): %s", module, s->rope_theta,
                          s->rope_scaling.kind ? s->rope_scaling.kind : "default",
                          lh_k_last_error(NULL));
    x->interleaved = s->rope_interleaved;
    r->n_ropes++;
    *out = x;
    return LH_OK;
}

/* The host's KV cache for a paged backend: sized from kv_cache, one table pointer per slot.
 * Every layer shares the pool's geometry, so the layers must agree on it. */
/* What a layer keeps per token in the pool: kv heads x dims of keys and of values, or one
 * latent (MLA) that serves as both. */
typedef struct kv_width {
    int64_t heads, dim;
    bool latent;
} kv_width;

static kv_width kv_width_of(const lh_attention_spec *s)
{
    if (s->mla)
        return (kv_width){1, s->kv_lora_rank + s->qk_rope_head_dim, true};
    return (kv_width){s->num_kv_heads, s->head_dim, false};
}

static lh_status init_kv_cache(lh_runner *r, const lh_attn_runtime *attn, lh_err *err)
{
    const kv_width w0 = kv_width_of(r->attn[0].spec);
    for (int64_t i = 1; i < r->n_attn; i++) {
        const kv_width w = kv_width_of(r->attn[i].spec);
        if (w.heads != w0.heads || w.dim != w0.dim || w.latent != w0.latent)
            return lh_err_set(err, LH_E_UNSUPPORTED, "%s: attention layers of different KV "
                              "geometry (%s: %lld kv heads x %lld%s, %s: %lld x %lld%s) are not "
                              "supported by the host's KV cache yet", r->arch, r->attn[0].module,
                              (long long)w0.heads, (long long)w0.dim, w0.latent ? " latent" : "",
                              r->attn[i].module, (long long)w.heads, (long long)w.dim,
                              w.latent ? " latent" : "");
    }
    lh_kv_plan plan;
    bool sparse = attn->sparse_top_k > 0 || attn->sparse_local_blocks > 0;
    lh_status st = LH_OK;
    if (attn->kv_plan) {
        plan = *attn->kv_plan;
        if (plan.n_layers != r->n_attn || plan.kv_heads != w0.heads ||
            plan.head_dim != w0.dim || plan.latent != w0.latent ||
            plan.max_seqs != r->max_seqs || plan.max_seq_len != r->max_seq_len ||
            plan.summaries != sparse)
            return lh_err_set(err, LH_E_INTERNAL, "%s: the KV plan (%lld layers x %lld kv heads "
                              "x %lld%s) does not match the model's attention layers (%lld x "
                              "%lld x %lld%s)", r->arch, (long long)plan.n_layers,
                              (long long)plan.kv_heads, (long long)plan.head_dim,
                              plan.latent ? " latent" : "", (long long)r->n_attn,
                              (long long)w0.heads, (long long)w0.dim, w0.latent ? " latent" : "");
    } else {
        st = lh_kv_plan_compute(attn->kv, r->n_attn, w0.heads, w0.dim, sparse, w0.latent,
                                r->max_seq_len, r->max_seqs, NULL, &plan, err);
    }
    if (st == LH_OK)
        st = lh_kv_cache_create(&plan, r->kctx, &r->kv, err);
    if (st != LH_OK)
        return st;
    r->tables = calloc((size_t)r->max_seqs, sizeof *r->tables);
    r->table_len = calloc((size_t)r->max_seqs, sizeof *r->table_len);
    r->tokens_after = calloc((size_t)r->max_seqs, sizeof *r->tokens_after);
    if (!r->tables || !r->table_len || !r->tokens_after)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    return LH_OK;
}

static lh_status init_attention(lh_runner *r, const lh_model *m, const lh_attn_runtime *attn,
                                lh_err *err)
{
    const size_t n = lh_model_attention_count(m);
    if (n == 0)
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: the model has no attention layer (its "
                          "constructor registered none with add_attention)", r->arch);
    r->attn = calloc(n, sizeof *r->attn);
    r->ropes = calloc(n, sizeof *r->ropes);
    if (!r->attn || !r->ropes)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    r->n_attn = (int64_t)n;
    for (size_t i = 0; i < n; i++) {
        lh_attn_ref *a = &r->attn[i];
        a->index = (int64_t)i;
        a->module = lh_model_attention_lookup(m, lh_model_attention_key(m, i));
        a->spec = lh_model_attention_spec(m, a->module);
        if (!a->spec)
            return lh_err_set(err, LH_E_INTERNAL, "attention table entry %zu has no spec", i);
        lh_status st = rope_for(r, a->spec, a->module, &a->rope, err);
        if (st != LH_OK)
            return st;
    }
    lh_status st = LH_OK;
    if (attn->caps & LH_ATTN_CAP_PAGED_KV)
        st = init_kv_cache(r, attn, err);
    const lh_kv_cache_config *kv = attn->kv;
    for (int64_t i = 0; i < r->n_attn && st == LH_OK; i++) {
        lh_attn_ref *a = &r->attn[i];
        const lh_attention_spec *s = a->spec;
        lh_attn_geometry ag = {
            .struct_size = sizeof ag,
            .layer_index = s->layer_index,
            .num_heads = s->num_heads,
            .num_kv_heads = s->num_kv_heads,
            .head_dim = s->head_dim,
            .sliding_window = s->sliding_window,
            .scale = (float)s->scale,
            .max_seq_len = r->max_seq_len,
            .max_seqs = r->max_seqs,
            .attention_chunk_size = s->attention_chunk_size,
            .kv_block_size = kv->block_size,
            .kv_dtype = kv->k_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->k_dtype,
            .kv_layout = kv->layout,
            .kv_max_tokens = kv->max_tokens,
            /* an MLA layer's latent serves as keys and values: one dtype (the plan's) */
            .kv_v_dtype = s->mla ? (kv->k_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->k_dtype)
                                 : kv->v_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->v_dtype,
            .sparse_top_k = attn->sparse_top_k,
            .sparse_local_blocks = attn->sparse_local_blocks,
            /* a layer without RoPE has nothing to fuse */
            /* an MLA backend rotates its own rearranged query and latent */
            .fused_rope = attn->fused_rope && a->rope && !s->mla,
            .mla = s->mla,
            .has_q_lora_rank = s->has_q_lora_rank,
            .q_lora_rank = s->q_lora_rank,
            .kv_lora_rank = s->kv_lora_rank,
            .qk_nope_head_dim = s->qk_nope_head_dim,
            .qk_rope_head_dim = s->qk_rope_head_dim,
            .v_head_dim = s->v_head_dim,
            .logit_softcap = (float)s->logit_softcap,
        };
        if (s->mla && lh_attn_mla_workspace_bytes(&ag, 1) > r->mla_ws_per_token)
            r->mla_ws_per_token = lh_attn_mla_workspace_bytes(&ag, 1);
        lh_err aerr = {0};
        st = lh_create_attention(attn->provider, &ag, &a->layer, &aerr);
        if (st != LH_OK)
            lh_err_set(err, st, "attention backend (%s): %s", a->module, aerr.msg);
    }
    return st;
}

const char *lh_prefix_refusal(bool own_kv, const char *rope_kind)
{
    if (own_kv)
        return "the attention backend keeps its own KV cache (prefix caching shares the host's "
               "paged blocks)";
    if (rope_kind && strcmp(rope_kind, "longrope") == 0)
        return "longrope switches RoPE tables with the sequence length, so a block's keys "
               "depend on more than its tokens";
    if (rope_kind && strcmp(rope_kind, "dynamic") == 0)
        return "dynamic RoPE scaling rotates keys with frequencies of the sequence length at "
               "their write, so a block's keys depend on more than its tokens";
    return NULL;
}

const char *lh_runner_prefix_refusal(const lh_runner *r)
{
    const char *why = lh_prefix_refusal(!r || !r->kv, NULL);
    return why ? why : lh_runner_rope_refusal(r);
}

const char *lh_runner_rope_refusal(const lh_runner *r)
{
    const char *why = NULL;
    for (int64_t i = 0; r && !why && i < r->n_ropes; i++)
        why = lh_prefix_refusal(false, r->ropes[i].scaling.kind);
    return why;
}

bool lh_runner_claim_slots(lh_runner *r)
{
    bool expected = false;
    return r && atomic_compare_exchange_strong(&r->slots_claimed, &expected, true);
}

void lh_runner_unclaim_slots(lh_runner *r)
{
    if (r)
        atomic_store(&r->slots_claimed, false);
}

bool lh_runner_slots_claimed(const lh_runner *r)
{
    return r && atomic_load(&((lh_runner *)r)->slots_claimed);
}

int64_t lh_runner_rope_switch_len(const lh_runner *r)
{
    int64_t len = 0;
    for (int64_t i = 0; r && i < r->n_ropes; i++) {
        const lh_rope *x = &r->ropes[i];
        if (!x->inv_freq_long)
            continue;
        const int64_t orig = x->scaling.original_max_position_embeddings > 0
                                 ? x->scaling.original_max_position_embeddings
                                 : x->max_position_embeddings;
        if (len == 0 || orig < len)
            len = orig;
    }
    return len;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static void dfree(lh_runner *r, void **p)
{
    if (*p)
        lh_k_free(r->kctx, *p);
    *p = NULL;
}

void lh_runner_free(lh_runner *r)
{
    if (!r)
        return;
    if (r->bound && r->ops->destroy)
        r->ops->destroy(r->state);
    if (r->attn)
        for (int64_t i = 0; i < r->n_attn; i++)
            if (r->attn[i].layer)
                r->attn_ops->destroy(r->attn[i].layer);
    free(r->attn);
    for (int64_t i = 0; i < r->n_ropes; i++)
        lh_k_rope_free(&r->ropes[i]);
    free(r->ropes);
    if (r->graph)
        for (int64_t i = 0; i < r->max_seqs; i++)
            if (r->graph[i])
                lh_k_graph_free(r->graph[i]);
    free(r->graph);
    dfree(r, &r->arena);
    dfree(r, &r->mla_ws);
    dfree(r, (void **)&r->logits);
    for (int64_t i = 0; i < r->n_wbufs; i++)
        lh_k_free(r->kctx, r->wbufs[i]);
    free(r->wbufs);
    for (int64_t i = 0; i < r->n_tbufs; i++)
        free(r->tbufs[i]);
    free(r->tbufs);
    for (int64_t i = 0; i < r->n_weights; i++) {
        free(r->weights[i].name);
        free(r->weights[i].scale_name);
    }
    free(r->weights);
    free(r->by_name);
    for (int64_t i = 0; i < r->n_views; i++) {
        free(r->views[i]->name);
        free(r->views[i]);
    }
    free(r->views);
    lh_runner_free_moe(r);
    lh_kv_cache_free(r->kv);
    free(r->tables);
    free(r->table_len);
    free(r->tokens_after);
    free(r);
}

static lh_status bind_plugin(lh_runner *r, const lh_host_api *api, const lh_model_config *cfg,
                             lh_err *err)
{
    lh_bind bd = {.r = r};
    lh_forward_info info = {.struct_size = sizeof info};
    void *state = NULL;
    lh_status st = r->ops->bind(api, &bd, cfg, &state, &info);
    if (bd.err.code != LH_OK || st != LH_OK) {
        if (bd.err.code == LH_OK) /* failing with no recorded message is still a failure */
            lh_err_set(&bd.err, st, "bind failed (%s) without recording a message",
                       lh_status_name(st));
        if (st == LH_OK && r->ops->destroy) /* recorded an error but returned OK: drop it */
            r->ops->destroy(state);
        return lh_err_set(err, bd.err.code, "%s: %s", r->arch, bd.err.msg);
    }
    r->state = state;
    r->bound = true;
    /* a logits row is indexed by int32 token ids */
    if (info.vocab_size <= 0 || info.vocab_size > INT32_MAX || info.scratch_bytes_per_token < 0 ||
        info.scratch_bytes_per_row < 0 || info.scratch_requests < 0)
        return lh_err_set(err, LH_E_INTERNAL, "%s: bind reported vocab_size %lld and scratch "
                          "%lld B/token, %lld B/row, %lld requests (vocab must be in [1, 2^31 - 1], "
                          "the others >= 0)", r->arch, (long long)info.vocab_size,
                          (long long)info.scratch_bytes_per_token,
                          (long long)info.scratch_bytes_per_row,
                          (long long)info.scratch_requests);
    r->info = info;
    return LH_OK;
}

lh_status lh_runner_create(const lh_model *m, const lh_model_provider *prov,
                           const lh_model_config *cfg, const lh_attn_runtime *attn,
                           int64_t max_seq_len, int64_t max_seqs, lh_kctx *kctx,
                           lh_runner **out, lh_err *err)
{
    *out = NULL;
    if (!kctx)
        return lh_err_set(err, LH_E_USAGE, "runner: no kernel context");
    if (!prov->ops->bind || !prov->ops->forward)
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: its plugin describes the model (construct) "
                          "but provides no forward pass (bind/forward), so it cannot run",
                          prov->name);
    lh_runner *r = calloc(1, sizeof *r);
    if (!r)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    atomic_init(&r->slots_claimed, false);
    r->arch = prov->name;
    r->ops = prov->ops;
    r->kctx = kctx;
    r->dev = lh_k_ctx_device(kctx);
    r->attn_ops = attn->ops;
    r->fused_rope = attn->fused_rope;
    r->max_seq_len = max_seq_len;
    r->max_seqs = max_seqs;
    lh_status st = init_weights(r, m, err);
    if (st == LH_OK)
        st = init_attention(r, m, attn, err);
    if (st == LH_OK)
        st = lh_runner_init_moe(r, m, err);
    if (st == LH_OK)
        st = bind_plugin(r, lh_host_api_table(), cfg, err);
    const char *no_graphs = lh_runner_graphs_refusal(r->n_moes > 0, !r->kv);
    if (st == LH_OK && attn->cuda_graphs && r->dev.kind == LH_DEVICE_CUDA) {
        if (no_graphs) {
            lh_log(LH_LOG_INFO, "cuda graphs: %s; decode steps run eagerly", no_graphs);
        } else {
            const int64_t bs = lh_kv_cache_plan(r->kv)->block_size;
            r->graph = calloc((size_t)r->max_seqs, sizeof *r->graph);
            if (!r->graph)
                st = lh_err_set(err, LH_E_NOMEM, "out of memory");
            else if ((st = lh_k_ctx_set_bounds(kctx, max_seq_len, (max_seq_len + bs - 1) / bs)))
                st = lh_err_set(err, st, "cuda graphs: %s", lh_k_last_error(kctx));
            r->graphs = st == LH_OK;
        }
    }
    if (st != LH_OK) {
        lh_runner_free(r);
        return st;
    }
    *out = r;
    return LH_OK;
}

int64_t lh_runner_vocab(const lh_runner *r)
{
    return r ? r->info.vocab_size : 0;
}

int64_t lh_runner_max_seq_len(const lh_runner *r)
{
    return r ? r->max_seq_len : 0;
}

int64_t lh_runner_max_seqs(const lh_runner *r)
{
    return r ? r->max_seqs : 0;
}

const lh_kv_cache *lh_runner_kv(const lh_runner *r)
{
    return r ? r->kv : NULL;
}

int64_t lh_runner_weight_bytes(const lh_runner *r)
{
    return r ? r->weight_bytes : 0;
}

const char *lh_runner_graphs_refusal(bool moe, bool own_kv)
{
    /* the routing brings each token's experts back to the host, which a captured step
     * cannot wait for; a backend's own KV memory may move (grow) during a step, and a graph
     * would replay the old addresses */
    if (moe)
        return "off for a mixture-of-experts model (the routing waits for the device once "
               "per MoE block)";
    if (own_kv)
        return "off for this attention backend (it keeps its own KV cache, which may move "
               "as it grows)";
    return NULL;
}

bool lh_runner_graphs(const lh_runner *r)
{
    return r && r->graphs;
}

void lh_runner_release(lh_runner *r, int64_t slot)
{
    lh_kv_cache_release(r->kv, slot);
    if (r->attn_ops->release)
        for (int64_t i = 0; i < r->n_attn; i++)
            r->attn_ops->release(r->attn[i].layer, slot);
}

void lh_runner_graph_counts(const lh_runner *r, int64_t *captures, int64_t *replays)
{
    int64_t c = 0, p = 0;
    if (r && r->graph)
        for (int64_t i = 0; i < r->max_seqs; i++)
            if (r->graph[i]) {
                int64_t gc = 0, gr = 0;
                lh_k_graph_counts(r->graph[i], &gc, &gr);
                c += gc;
                p += gr;
            }
    if (captures)
        *captures = c;
    if (replays)
        *replays = p;
}

/* ---- one step ------------------------------------------------------------------------------- */

/* The arena a step of T tokens and n_out logits rows may take, as the plugin declared it. */
static lh_status reserve_arena(lh_runner *r, int64_t T, int64_t n_out, lh_err *err)
{
    const lh_forward_info *in = &r->info;
    /* each request may lose up to LH_SCRATCH_ALIGN - 1 bytes to alignment; output_rows takes
     * one more request of its own */
    double need = (double)T * (double)in->scratch_bytes_per_token +
                  (double)n_out * (double)in->scratch_bytes_per_row +
                  (double)(in->scratch_requests + 1) * LH_SCRATCH_ALIGN;
    if (need > (double)(SIZE_MAX / 2))
        return lh_err_set(err, LH_E_NOMEM, "%s: the scratch of a step of %lld tokens overflows",
                          r->arch, (long long)T);
    size_t bytes = (size_t)need;
    if (bytes <= r->arena_bytes)
        return LH_OK;
    dfree(r, &r->arena);
    r->arena_bytes = 0;
    void *p = NULL;
    lh_status st = lh_k_alloc(r->kctx, bytes, &p);
    if (st != LH_OK) {
        char dev[32];
        return lh_err_set(err, st, "out of %s memory for the activations of %lld tokens "
                          "(%zu bytes): %s", lh_runner_device_name(r->dev, dev, sizeof dev),
                          (long long)T, bytes, lh_k_last_error(r->kctx));
    }
    r->arena = p;
    r->arena_bytes = bytes;
    return LH_OK;
}

/* The MLA layers' working memory for a step of T tokens (none without MLA). Grown only, so
 * a step size that has run before finds the same addresses (graph replays). */
static lh_status reserve_mla(lh_runner *r, int64_t T, lh_err *err)
{
    if (r->mla_ws_per_token == 0)
        return LH_OK;
    if ((size_t)T > SIZE_MAX / 2 / r->mla_ws_per_token)
        return lh_err_set(err, LH_E_NOMEM, "%s: the attention working memory of %lld tokens "
                          "overflows", r->arch, (long long)T);
    const size_t bytes = (size_t)T * r->mla_ws_per_token;
    if (bytes <= r->mla_ws_bytes)
        return LH_OK;
    dfree(r, &r->mla_ws);
    r->mla_ws_bytes = 0;
    void *p = NULL;
    lh_status st = lh_k_alloc(r->kctx, bytes, &p);
    if (st != LH_OK) {
        char dev[32];
        return lh_err_set(err, st, "out of %s memory for the latent attention of %lld tokens "
                          "(%zu bytes): %s", lh_runner_device_name(r->dev, dev, sizeof dev),
                          (long long)T, bytes, lh_k_last_error(r->kctx));
    }
    r->mla_ws = p;
    r->mla_ws_bytes = bytes;
    return LH_OK;
}

static lh_status reserve_logits(lh_runner *r, int64_t rows, lh_err *err)
{
    if (rows <= r->logit_rows)
        return LH_OK;
    dfree(r, (void **)&r->logits);
    r->logit_rows = 0;
    void *p = NULL;
    const int64_t vocab = r->info.vocab_size; /* bind_plugin bounded it: no overflow here */
    if (rows > INT64_MAX / (vocab * (int64_t)sizeof(float)))
        return lh_err_set(err, LH_E_USAGE, "the logits of %lld rows x %lld vocab overflow a "
                          "byte size", (long long)rows, (long long)vocab);
    lh_status st = lh_k_alloc(r->kctx, (size_t)rows * (size_t)vocab * sizeof(float), &p);
    if (st != LH_OK) {
        char dev[32];
        return lh_err_set(err, st, "out of %s memory for the logits of %lld rows: %s",
                          lh_runner_device_name(r->dev, dev, sizeof dev), (long long)rows,
                          lh_k_last_error(r->kctx));
    }
    r->logits = p;
    r->logit_rows = rows;
    return LH_OK;
}

/* The plugin's forward over a fresh step context (the arena restarts at its base, so the
 * same step's calls see the same addresses: what a graph replay needs). */
static lh_status run_plugin(lh_runner *r, lh_kctx *kctx, const lh_attn_step *step,
                            const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                            lh_err *err)
{
    lh_err e = {0};
    lh_fwd f = {.r = r, .kctx = kctx, .step = step, .tokens = tokens, .out_rows = out_rows,
                .n_out = n_out, .err = &e};
    lh_status st = r->ops->forward(r->state, lh_host_api_table(), &f);
    if (e.code != LH_OK)
        return lh_err_set(err, e.code, "%s", e.msg);
    if (st != LH_OK)
        return lh_err_set(err, st, "%s: forward failed (%s) without recording a message",
                          r->arch, lh_status_name(st));
    return LH_OK;
}

/* The plugin's forward recorded once per batch size and replayed: begin/end around the same
 * calls, once more when the replay found them different from the recording (a fresh capture). */
static lh_status graph_step(lh_runner *r, lh_kctx *kctx, const lh_attn_step *step,
                            const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                            lh_err *err)
{
    lh_k_graph **g = &r->graph[step->n_seqs - 1];
    lh_status st;
    if (!*g && (st = lh_k_graph_create(kctx, g)) != LH_OK) {
        *g = NULL;
        return lh_err_set(err, st, "cuda graph: %s", lh_k_last_error(kctx));
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((st = lh_k_graph_begin(kctx, *g)) != LH_OK)
            return lh_err_set(err, st, "cuda graph begin: %s", lh_k_last_error(kctx));
        st = run_plugin(r, kctx, step, tokens, out_rows, n_out, err);
        if (st != LH_OK) {
            lh_k_graph_abort(kctx, *g);
            return st;
        }
        bool rerun = false;
        if ((st = lh_k_graph_end(kctx, *g, &rerun)) != LH_OK)
            return lh_err_set(err, st, "cuda graph end: %s", lh_k_last_error(kctx));
        if (!rerun)
            return LH_OK;
    }
    return lh_err_set(err, LH_E_INTERNAL, "cuda graph: a decode step of %lld sequences differs "
                      "from its own fresh capture", (long long)step->n_seqs);
}

lh_status lh_runner_forward_dev(lh_runner *r, lh_kctx *kctx, const lh_attn_step *step,
                                const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                                lh_tensor *logits, lh_err *err)
{
    const int64_t T = step->n_tokens;
    if (T <= 0)
        return lh_err_set(err, LH_E_USAGE, "forward: empty batch");
    if (!kctx || lh_k_ctx_device(kctx).kind != r->dev.kind ||
        lh_k_ctx_device(kctx).index != r->dev.index)
        return lh_err_set(err, LH_E_USAGE, "forward: a kernel context of another device than "
                          "the runner's");
    if (step->n_seqs < 1 || step->n_seqs > r->max_seqs)
        return lh_err_set(err, LH_E_USAGE, "forward: a step of %lld sequences (max_batch_size "
                          "%lld)", (long long)step->n_seqs, (long long)r->max_seqs);
    bool decode = true; /* every sequence one new token: the shape a graph replays */
    for (int64_t s = 0; s < step->n_seqs; s++) {
        if (step->ctx_len[s] < 0 || step->n_new[s] < 0 || step->n_new[s] > T)
            return lh_err_set(err, LH_E_USAGE, "forward: sequence %lld: %lld cached and %lld new "
                              "tokens", (long long)s, (long long)step->ctx_len[s],
                              (long long)step->n_new[s]);
        const int64_t after = step->ctx_len[s] + step->n_new[s]; /* both bounded: no overflow */
        if (step->ctx_len[s] > r->max_seq_len || after > r->max_seq_len)
            return lh_err_set(err, LH_E_UNSUPPORTED, "forward: the sequence in slot %lld needs "
                              "%lld tokens, more than max_seq_len %lld", (long long)step->slot[s],
                              (long long)after, (long long)r->max_seq_len);
        decode = decode && step->n_new[s] == 1;
    }
    if (n_out < 0 || n_out > T)
        return lh_err_set(err, LH_E_USAGE, "forward: %lld logits rows for a batch of %lld tokens",
                          (long long)n_out, (long long)T);
    for (int64_t i = 0; i < n_out; i++)
        if (out_rows[i] < 0 || out_rows[i] >= T)
            return lh_err_set(err, LH_E_USAGE, "forward: logits row %lld outside the batch of "
                              "%lld tokens", (long long)out_rows[i], (long long)T);
    lh_status st = reserve_arena(r, T, n_out, err);
    if (st == LH_OK)
        st = reserve_mla(r, T, err);
    if (st == LH_OK && n_out > 0)
        st = reserve_logits(r, n_out, err);
    if (st != LH_OK)
        return st;
    /* blocks for every sequence's tokens after this step, all or nothing, before any layer */
    lh_attn_step paged = *step;
    if (r->kv) {
        for (int64_t s = 0; s < step->n_seqs; s++)
            r->tokens_after[s] = step->ctx_len[s] + step->n_new[s];
        if ((st = lh_kv_cache_reserve(r->kv, step->slot, r->tokens_after, step->n_seqs, err)))
            return st;
        for (int64_t s = 0; s < step->n_seqs; s++)
            r->tables[s] = lh_kv_cache_table(r->kv, step->slot[s], &r->table_len[s]);
        paged.struct_size = sizeof paged;
        paged.block_tables = r->tables;
        paged.n_blocks = r->table_len;
        step = &paged;
    }
    /* the backends' host-side bookkeeping, outside any graph */
    for (int64_t i = 0; i < r->n_attn; i++) {
        lh_err aerr; /* per layer and step: only what a failure reads is set */
        aerr.code = LH_OK;
        aerr.msg[0] = '\0';
        if (r->attn_ops->prepare &&
            (st = r->attn_ops->prepare(r->attn[i].layer, step, &aerr)) != LH_OK)
            return lh_err_set(err, st, "%s attention prepare: %s", r->attn[i].module, aerr.msg);
    }
    if (r->graphs && decode)
        st = graph_step(r, kctx, step, tokens, out_rows, n_out, err);
    else
        st = run_plugin(r, kctx, step, tokens, out_rows, n_out, err);
    if (st == LH_OK && n_out > 0) {
        int64_t shape[2] = {n_out, r->info.vocab_size};
        *logits = lh_runner_view(r->dev, LH_DTYPE_F32, r->logits, 2, shape);
    }
    return st;
}

lh_status lh_runner_forward(lh_runner *r, lh_kctx *kctx, const lh_attn_step *step,
                            const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                            float *logits, lh_err *err)
{
    lh_tensor dev_logits;
    lh_status st = lh_runner_forward_dev(r, kctx, step, tokens, out_rows, n_out, &dev_logits,
                                         err);
    if (st != LH_OK || n_out == 0)
        return st;
    int64_t shape[2] = {n_out, r->info.vocab_size};
    lh_tensor host = lh_tensor_cpu(LH_DTYPE_F32, logits, 2, shape);
    st = lh_k_copy(kctx, &host, &dev_logits);
    if (st != LH_OK)
        return lh_err_set(err, st, "logits download: %s", lh_k_last_error(kctx));
    return LH_OK;
}
