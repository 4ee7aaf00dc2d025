#include "decoder.h"

#include "core/err.h"
#include "core/log.h"
#include "runtime/attn_create.h"
#include "weights/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- binding the tree's tensors ------------------------------------------------------------ */

static lh_status need(const lh_model *m, const char *module, const char *param, lh_tensor *out,
                      lh_err *err)
{
    lh_status st = lh_model_param_tensor_by_name(m, module, param, out);
    if (st != LH_OK)
        return lh_err_set(err, LH_E_UNSUPPORTED,
                          "the forward pass of the standard decoder LM needs %s.%s, which this "
                          "model's tree lacks or has not bound (%s)",
                          module, param, lh_status_name(st));
    return LH_OK;
}

static bool has(const lh_model *m, const char *module, const char *param, lh_tensor *out)
{
    return lh_model_param_tensor_by_name(m, module, param, out) == LH_OK;
}

static lh_status bind_layer(lh_decoder_layer *L, const lh_model *m, int64_t i, lh_err *err)
{
    char p[160];
    lh_status st;
#define NEED(suffix, param, field)                                                      \
    do {                                                                                \
        snprintf(p, sizeof p, "model.layers.%lld.%s", (long long)i, suffix);            \
        if ((st = need(m, p, param, &L->field, err)) != LH_OK)                          \
            return st;                                                                  \
    } while (0)
    NEED("input_layernorm", "weight", input_norm);
    NEED("post_attention_layernorm", "weight", post_norm);
    NEED("self_attn.q_proj", "weight", wq);
    NEED("self_attn.k_proj", "weight", wk);
    NEED("self_attn.v_proj", "weight", wv);
    NEED("self_attn.o_proj", "weight", wo);
    NEED("mlp.gate_proj", "weight", w_gate);
    NEED("mlp.up_proj", "weight", w_up);
    NEED("mlp.down_proj", "weight", w_down);
    snprintf(p, sizeof p, "model.layers.%lld.self_attn.q_proj", (long long)i);
    L->has_qkv_bias = has(m, p, "bias", &L->bq);
    if (L->has_qkv_bias) {
        NEED("self_attn.k_proj", "bias", bk);
        NEED("self_attn.v_proj", "bias", bv);
    }
    snprintf(p, sizeof p, "model.layers.%lld.self_attn.o_proj", (long long)i);
    L->has_o_bias = has(m, p, "bias", &L->bo);
    snprintf(p, sizeof p, "model.layers.%lld.self_attn.q_norm", (long long)i);
    L->qk_norm = has(m, p, "weight", &L->q_norm);
    if (L->qk_norm)
        NEED("self_attn.k_norm", "weight", k_norm);
#undef NEED
    return LH_OK;
}

/* What this forward pass implements of the Llama-family knobs; anything else is refused by
 * name rather than silently computed the Llama way. */
static lh_status check_supported(const lh_model_config *cfg, const lh_decoder_spec *spec,
                                 lh_err *err)
{
    const lh_model_geometry *g = &cfg->geo;
    if (g->has_mla)
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: multi-head latent attention has no forward "
                          "pass yet (kv_lora_rank is set)", cfg->path);
    /* The MLP activation is the architecture's (the plugin's spec); the config must agree.
     * transformers' Gemma maps the legacy "gelu" of the official configs to the tanh
     * approximation (GemmaConfig), and older releases read hidden_activation first: every one
     * of the two keys that is present must name the spec's activation. */
    static const char *const act_keys[] = {"hidden_act", "hidden_activation"};
    for (size_t i = 0; i < sizeof act_keys / sizeof *act_keys; i++) {
        const char *act;
        if (lh_model_config_get_string(cfg, act_keys[i], &act) != 1)
            continue;
        if (spec->mlp_act == LH_MLP_GELU_TANH) {
            if (strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu") != 0)
                return lh_err_set(err, LH_E_UNSUPPORTED, "%s: %s '%s' does not match the "
                                  "architecture's MLP activation: its plugin asks for GELU with "
                                  "the tanh approximation (gelu_pytorch_tanh, or Gemma's legacy "
                                  "gelu)", cfg->path, act_keys[i], act);
        } else if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0) {
            return lh_err_set(err, LH_E_UNSUPPORTED, "%s: %s '%s' is not supported; the "
                              "gated MLP of this architecture implements silu", cfg->path,
                              act_keys[i], act);
        }
    }
    static const char *const prf_keys[] = {"partial_rotary_factor",
                                           "rope_parameters.partial_rotary_factor",
                                           "rope_scaling.partial_rotary_factor"};
    for (size_t i = 0; i < sizeof prf_keys / sizeof *prf_keys; i++) {
        double prf;
        if (lh_model_config_get_double(cfg, prf_keys[i], &prf) == 1 && prf != 1.0)
            return lh_err_set(err, LH_E_UNSUPPORTED, "%s: %s=%g is not supported (RoPE over the "
                              "whole head only)", cfg->path, prf_keys[i], prf);
    }
    static const char *const trunc_keys[] = {"rope_parameters.truncate", "rope_scaling.truncate"};
    for (size_t i = 0; i < sizeof trunc_keys / sizeof *trunc_keys; i++) {
        bool t;
        if (lh_model_config_get_bool(cfg, trunc_keys[i], &t) == 1 && !t)
            return lh_err_set(err, LH_E_UNSUPPORTED, "%s: %s=false (untruncated yarn correction "
                              "range) is not supported", cfg->path, trunc_keys[i]);
    }
    bool mlp_bias;
    if (lh_model_config_get_bool(cfg, "mlp_bias", &mlp_bias) == 1 && mlp_bias)
        return lh_err_set(err, LH_E_UNSUPPORTED, "%s: mlp_bias=true is not supported", cfg->path);
    return LH_OK;
}

/* The window of layer i: transformers' layer_types when given, else Qwen2's
 * max_window_layers (layers from that index on slide), else every layer. */
static int64_t layer_window(const lh_model_config *cfg, int64_t i)
{
    int64_t w = cfg->geo.sliding_window;
    if (w <= 0)
        return 0;
    char key[64];
    snprintf(key, sizeof key, "layer_types.%lld", (long long)i);
    const char *type;
    if (lh_model_config_get_string(cfg, key, &type) == 1)
        return strcmp(type, "sliding_attention") == 0 ? w : 0;
    int64_t mwl;
    if (lh_model_config_get_int(cfg, "max_window_layers", &mwl) == 1)
        return i >= mwl ? w : 0;
    return w;
}

/* ---- device placement ---------------------------------------------------------------------- */

/* A contiguous view on `dev` (lh_tensor_cpu with the device set). */
static lh_tensor view(lh_device dev, lh_dtype dt, void *data, int ndim, const int64_t *shape)
{
    lh_tensor t = lh_tensor_cpu(dt, data, ndim, shape);
    t.device = dev;
    return t;
}

static const char *device_name(lh_device dev, char *buf, size_t n)
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

/* One weight the forward pass reads: where its view lives in the decoder, and its name. */
typedef struct weight_ref {
    lh_tensor *t;
    char name[96];
} weight_ref;

/* Every tensor the forward pass reads, in checkpoint order; *n receives the count. The array
 * is malloc'ed (NULL when out of memory). */
static weight_ref *list_weights(lh_decoder *d, int64_t *n)
{
    static const struct {
        size_t off;
        const char *name;
        int when; /* 0 always, 1 qkv bias, 2 o bias, 3 qk norm */
    } fields[] = {
        {offsetof(lh_decoder_layer, input_norm), "input_layernorm.weight", 0},
        {offsetof(lh_decoder_layer, wq), "self_attn.q_proj.weight", 0},
        {offsetof(lh_decoder_layer, bq), "self_attn.q_proj.bias", 1},
        {offsetof(lh_decoder_layer, wk), "self_attn.k_proj.weight", 0},
        {offsetof(lh_decoder_layer, bk), "self_attn.k_proj.bias", 1},
        {offsetof(lh_decoder_layer, wv), "self_attn.v_proj.weight", 0},
        {offsetof(lh_decoder_layer, bv), "self_attn.v_proj.bias", 1},
        {offsetof(lh_decoder_layer, q_norm), "self_attn.q_norm.weight", 3},
        {offsetof(lh_decoder_layer, k_norm), "self_attn.k_norm.weight", 3},
        {offsetof(lh_decoder_layer, wo), "self_attn.o_proj.weight", 0},
        {offsetof(lh_decoder_layer, bo), "self_attn.o_proj.bias", 2},
        {offsetof(lh_decoder_layer, post_norm), "post_attention_layernorm.weight", 0},
        {offsetof(lh_decoder_layer, w_gate), "mlp.gate_proj.weight", 0},
        {offsetof(lh_decoder_layer, w_up), "mlp.up_proj.weight", 0},
        {offsetof(lh_decoder_layer, w_down), "mlp.down_proj.weight", 0},
    };
    const size_t nf = sizeof fields / sizeof *fields;
    weight_ref *w = malloc((3 + (size_t)d->n_layers * nf) * sizeof *w);
    if (!w)
        return NULL;
    int64_t k = 0;
    w[k].t = &d->embed;
    snprintf(w[k++].name, sizeof w->name, "model.embed_tokens.weight");
    for (int64_t l = 0; l < d->n_layers; l++) {
        lh_decoder_layer *L = &d->layers[l];
        for (size_t f = 0; f < nf; f++) {
            const int when = fields[f].when;
            if ((when == 1 && !L->has_qkv_bias) || (when == 2 && !L->has_o_bias) ||
                (when == 3 && !L->qk_norm))
                continue;
            w[k].t = (lh_tensor *)((char *)L + fields[f].off);
            snprintf(w[k++].name, sizeof w->name, "model.layers.%lld.%s", (long long)l,
                     fields[f].name);
        }
    }
    w[k].t = &d->final_norm;
    snprintf(w[k++].name, sizeof w->name, "model.norm.weight");
    w[k].t = &d->lm_head;
    snprintf(w[k++].name, sizeof w->name, "lm_head.weight");
    *n = k;
    return w;
}

/* LLMHOST_COPY_WEIGHTS=1: a CPU context, too, computes from copies made by lh_k_alloc and
 * lh_k_copy, so that the upload path runs (and is checked under ASan) without a GPU. */
static bool copy_weights_forced(void)
{
    const char *v = getenv("LLMHOST_COPY_WEIGHTS");
    return v && strcmp(v, "1") == 0;
}

/* Copies every weight the forward pass reads to the context's device and points the
 * decoder's views at the copies. A tensor whose storage an earlier one already holds (lm_head
 * tied to the embedding) is uploaded once and shared. */
static lh_status upload_weights(lh_decoder *d, lh_err *err)
{
    int64_t n = 0;
    weight_ref *w = list_weights(d, &n);
    const void **src = w ? malloc((size_t)n * sizeof *src) : NULL;
    d->wbufs = src ? calloc((size_t)n, sizeof *d->wbufs) : NULL;
    if (!d->wbufs) {
        free(w);
        free(src);
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    }
    char dev[32];
    device_name(d->dev, dev, sizeof dev);
    /* the bytes to move, each storage once (the bar's total) */
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        src[i] = w[i].t->data;
        bool dup = false;
        for (int64_t j = 0; j < i && !dup; j++)
            dup = src[j] == src[i];
        if (!dup)
            total += lh_k_dtype_bytes(w[i].t->dtype, numel(w[i].t));
    }
    lh_progress pg;
    lh_progress_begin(&pg, "uploading weights", total);
    lh_status st = LH_OK;
    for (int64_t i = 0; i < n && st == LH_OK; i++) {
        lh_tensor *t = w[i].t;
        int64_t j = 0;
        while (j < i && src[j] != src[i])
            j++;
        if (j < i) { /* shared storage: same dtype and shape as the first holder */
            lh_tensor *first = w[j].t;
            if (first->dtype != t->dtype || numel(first) != numel(t)) {
                st = lh_err_set(err, LH_E_UNSUPPORTED, "%s shares its storage with %s but not "
                                "its dtype or size", w[i].name, w[j].name);
                break;
            }
            *t = view(d->dev, t->dtype, first->data, t->ndim, t->shape);
            continue;
        }
        const int64_t bytes = lh_k_dtype_bytes(t->dtype, numel(t));
        if (bytes <= 0) {
            st = lh_err_set(err, LH_E_UNSUPPORTED, "%s: dtype %d cannot be uploaded", w[i].name,
                            (int)t->dtype);
            break;
        }
        void *p = NULL;
        st = lh_k_alloc(d->kctx, (size_t)bytes, &p);
        if (st != LH_OK) {
            st = lh_err_set(err, st, "uploading the weights to %s: %s (%lld bytes, %lld of %lld "
                            "bytes uploaded): %s", dev, w[i].name, (long long)bytes,
                            (long long)d->weight_bytes, (long long)total,
                            lh_k_last_error(d->kctx));
            break;
        }
        d->wbufs[d->n_wbufs++] = p;
        lh_tensor dst = view(d->dev, t->dtype, p, t->ndim, t->shape);
        st = lh_k_copy(d->kctx, &dst, t);
        if (st != LH_OK) {
            st = lh_err_set(err, st, "uploading %s to %s: %s", w[i].name, dev,
                            lh_k_last_error(d->kctx));
            break;
        }
        *t = dst;
        d->weight_bytes += bytes;
        lh_progress_add(&pg, bytes);
    }
    lh_progress_end(&pg);
    free(w);
    free(src);
    return st;
}

/* The host's KV cache for a paged backend: sized from kv_cache, one table pointer per slot. */
static lh_status init_kv_cache(lh_decoder *d, const lh_attn_runtime *attn, lh_err *err)
{
    lh_kv_plan plan;
    bool sparse = attn->sparse_top_k > 0 || attn->sparse_local_blocks > 0;
    lh_status st = LH_OK;
    if (attn->kv_plan) {
        plan = *attn->kv_plan;
        if (plan.n_layers != d->n_layers || plan.kv_heads != d->kv_heads ||
            plan.head_dim != d->head_dim || plan.max_seqs != d->max_seqs ||
            plan.max_seq_len != d->max_seq_len || plan.summaries != sparse)
            return lh_err_set(err, LH_E_INTERNAL, "the KV plan does not match the decoder");
    } else {
        st = lh_kv_plan_compute(attn->kv, d->n_layers, d->kv_heads, d->head_dim, sparse,
                                d->max_seq_len, d->max_seqs, NULL, &plan, err);
    }
    if (st == LH_OK)
        st = lh_kv_cache_create(&plan, d->kctx, &d->kv, err);
    if (st != LH_OK)
        return st;
    d->tables = calloc((size_t)d->max_seqs, sizeof *d->tables);
    d->table_len = calloc((size_t)d->max_seqs, sizeof *d->table_len);
    d->tokens_after = calloc((size_t)d->max_seqs, sizeof *d->tokens_after);
    if (!d->tables || !d->table_len || !d->tokens_after)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    return LH_OK;
}

lh_status lh_decoder_init(lh_decoder *d, const lh_model *m, const lh_model_config *cfg,
                          const lh_attn_runtime *attn, int64_t max_seq_len, int64_t max_seqs,
                          lh_kctx *kctx, lh_err *err)
{
    const lh_attn_ops *ops = attn->ops;
    const lh_kv_cache_config *kv = attn->kv;
    memset(d, 0, sizeof *d);
    if (!kctx)
        return lh_err_set(err, LH_E_USAGE, "decoder: no kernel context");
    d->kctx = kctx;
    d->dev = lh_k_ctx_device(kctx);
    const lh_model_geometry *g = &cfg->geo;
    const lh_decoder_spec *spec = lh_model_decoder_spec(m);
    const lh_decoder_spec llama = {.struct_size = sizeof llama};
    if (!spec) /* a tree built without build_decoder_lm: the Llama variant */
        spec = &llama;
    lh_status st0 = check_supported(cfg, spec, err);
    if (st0 != LH_OK)
        return st0;
    d->mlp_act = spec->mlp_act;
    d->norm_offset = spec->norm_weight_offset;
    d->hidden = g->hidden_size;
    d->intermediate = g->intermediate_size;
    d->n_layers = g->num_hidden_layers;
    d->heads = g->num_attention_heads;
    d->kv_heads = g->num_key_value_heads;
    d->head_dim = g->head_dim;
    d->vocab = g->vocab_size;
    d->eps = (float)g->rms_norm_eps;
    d->attn_ops = ops;
    d->fused_rope = attn->fused_rope;
    d->max_seq_len = max_seq_len;
    d->max_seqs = max_seqs;
    lh_status st = need(m, "model.embed_tokens", "weight", &d->embed, err);
    if (st == LH_OK)
        st = need(m, "model.norm", "weight", &d->final_norm, err);
    if (st == LH_OK)
        st = need(m, "lm_head", "weight", &d->lm_head, err);
    if (st != LH_OK)
        return st;
    d->embed_scale = 1.0f;
    if (spec->scale_embeddings) {
        /* transformers: normalizer = torch.tensor(hidden_size**0.5, dtype=hidden_states.dtype) */
        float f = (float)sqrt((double)d->hidden);
        if (d->embed.dtype == LH_DTYPE_BF16)
            f = lh_k_bf16_to_f32(lh_k_f32_to_bf16(f));
        else if (d->embed.dtype == LH_DTYPE_F16)
            f = lh_k_f16_to_f32(lh_k_f32_to_f16(f));
        d->embed_scale = f;
    }
    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    if (!d->layers)
        return lh_err_set(err, LH_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < d->n_layers && st == LH_OK; i++)
        st = bind_layer(&d->layers[i], m, i, err);
    if (st == LH_OK && (d->dev.kind != LH_DEVICE_CPU || copy_weights_forced()))
        st = upload_weights(d, err); /* the CPU reads the bound tensors */
    if (st == LH_OK) {
        st = lh_k_rope_init(&d->rope, d->head_dim, g->rope_theta, &g->rope_scaling,
                            g->max_position_embeddings);
        if (st != LH_OK)
            st = lh_err_set(err, LH_E_CONFIG, "%s: cannot build the RoPE table (rope_theta %g, "
                            "scaling '%s'): %s", cfg->path, g->rope_theta,
                            g->rope_scaling.kind ? g->rope_scaling.kind : "default",
                            lh_k_last_error(NULL));
    }
    if (st == LH_OK && (attn->caps & LH_ATTN_CAP_PAGED_KV))
        st = init_kv_cache(d, attn, err);
    for (int64_t i = 0; i < d->n_layers && st == LH_OK; i++) {
        lh_attn_geometry ag = {
            .struct_size = sizeof ag,
            .layer_index = i,
            .num_heads = d->heads,
            .num_kv_heads = d->kv_heads,
            .head_dim = d->head_dim,
            .sliding_window = layer_window(cfg, i),
            .scale = (float)(1.0 / sqrt((double)d->head_dim)),
            .max_seq_len = max_seq_len,
            .max_seqs = max_seqs,
            .attention_chunk_size = g->attention_chunk_size,
            .kv_block_size = kv->block_size,
            .kv_dtype = kv->k_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->k_dtype,
            .kv_layout = kv->layout,
            .kv_max_tokens = kv->max_tokens,
            .kv_v_dtype = kv->v_dtype == LH_DTYPE_INVALID ? LH_DTYPE_F32 : kv->v_dtype,
            .sparse_top_k = attn->sparse_top_k,
            .sparse_local_blocks = attn->sparse_local_blocks,
            .fused_rope = attn->fused_rope,
            .mla = g->has_mla,
            .has_q_lora_rank = g->has_q_lora_rank,
            .q_lora_rank = g->q_lora_rank,
            .kv_lora_rank = g->kv_lora_rank,
            .qk_nope_head_dim = g->qk_nope_head_dim,
            .qk_rope_head_dim = g->qk_rope_head_dim,
            .v_head_dim = g->v_head_dim,
        };
        char msg[512] = "";
        st = lh_create_attention(attn->provider, &ag, &d->layers[i].attn, msg, sizeof msg);
        if (st != LH_OK)
            lh_err_set(err, st, "attention backend: %s", msg);
    }
    if (st == LH_OK && attn->cuda_graphs && d->dev.kind == LH_DEVICE_CUDA) {
        if (!d->kv) {
            /* a backend's own KV memory may move (grow) during a step: a graph would replay
             * the old addresses */
            lh_log(LH_LOG_INFO, "cuda graphs: off for this attention backend (it keeps its own "
                   "KV cache); decode steps run eagerly");
        } else {
            const int64_t bs = lh_kv_cache_plan(d->kv)->block_size;
            d->graph = calloc((size_t)d->max_seqs, sizeof *d->graph);
            if (!d->graph)
                st = lh_err_set(err, LH_E_NOMEM, "out of memory");
            else if ((st = lh_k_ctx_set_bounds(kctx, max_seq_len, (max_seq_len + bs - 1) / bs)))
                st = lh_err_set(err, st, "cuda graphs: %s", lh_k_last_error(kctx));
            d->graphs = st == LH_OK;
        }
    }
    if (st != LH_OK)
        lh_decoder_free(d);
    return st;
}

/* Device memory of the decoder's context; NULL when freed or never allocated. */
static void dfree(lh_decoder *d, float **p)
{
    if (*p)
        lh_k_free(d->kctx, *p);
    *p = NULL;
}

static void free_scratch(lh_decoder *d)
{
    dfree(d, &d->resid);
    dfree(d, &d->h);
    dfree(d, &d->q);
    dfree(d, &d->k);
    dfree(d, &d->v);
    dfree(d, &d->attn_out);
    dfree(d, &d->proj);
    dfree(d, &d->gate);
    dfree(d, &d->up);
    d->scratch_tokens = 0;
}

void lh_decoder_free(lh_decoder *d)
{
    if (!d)
        return;
    if (d->layers)
        for (int64_t i = 0; i < d->n_layers; i++)
            if (d->layers[i].attn)
                d->attn_ops->destroy(d->layers[i].attn);
    free(d->layers);
    lh_k_rope_free(&d->rope);
    if (d->graph)
        for (int64_t i = 0; i < d->max_seqs; i++)
            if (d->graph[i])
                lh_k_graph_free(d->graph[i]);
    free(d->graph);
    free_scratch(d);
    dfree(d, &d->logits);
    for (int64_t i = 0; i < d->n_wbufs; i++)
        lh_k_free(d->kctx, d->wbufs[i]);
    free(d->wbufs);
    lh_kv_cache_free(d->kv);
    free(d->tables);
    free(d->table_len);
    free(d->tokens_after);
    memset(d, 0, sizeof *d);
}

void lh_decoder_release(lh_decoder *d, int64_t slot)
{
    lh_kv_cache_release(d->kv, slot);
    if (d->attn_ops->release)
        for (int64_t i = 0; i < d->n_layers; i++)
            d->attn_ops->release(d->layers[i].attn, slot);
}

void lh_decoder_graph_counts(const lh_decoder *d, int64_t *captures, int64_t *replays)
{
    int64_t c = 0, r = 0;
    if (d && d->graph)
        for (int64_t i = 0; i < d->max_seqs; i++)
            if (d->graph[i]) {
                int64_t gc = 0, gr = 0;
                lh_k_graph_counts(d->graph[i], &gc, &gr);
                c += gc;
                r += gr;
            }
    if (captures)
        *captures = c;
    if (replays)
        *replays = r;
}

static lh_status reserve_scratch(lh_decoder *d, int64_t T, lh_err *err)
{
    if (T <= d->scratch_tokens)
        return LH_OK;
    free_scratch(d);
    size_t t = (size_t)T;
    size_t qd = (size_t)(d->heads * d->head_dim), kvd = (size_t)(d->kv_heads * d->head_dim);
    size_t wide = (size_t)d->hidden > qd ? (size_t)d->hidden : qd;
    struct {
        float **p;
        size_t elems;
    } bufs[] = {
        {&d->resid, t * (size_t)d->hidden}, {&d->h, t * (size_t)d->hidden},
        {&d->q, t * qd}, {&d->k, t * kvd}, {&d->v, t * kvd}, {&d->attn_out, t * qd},
        {&d->proj, t * wide}, {&d->gate, t * (size_t)d->intermediate},
        {&d->up, t * (size_t)d->intermediate},
    };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) {
        void *p = NULL;
        lh_status st = lh_k_alloc(d->kctx, bufs[i].elems * sizeof(float), &p);
        if (st != LH_OK) {
            char dev[32];
            st = lh_err_set(err, st, "out of %s memory for the activations of %lld tokens: %s",
                            device_name(d->dev, dev, sizeof dev), (long long)T,
                            lh_k_last_error(d->kctx));
            free_scratch(d);
            return st;
        }
        *bufs[i].p = p;
    }
    d->scratch_tokens = T;
    return LH_OK;
}

static lh_status reserve_logits(lh_decoder *d, int64_t rows, lh_err *err)
{
    if (rows <= d->logit_rows)
        return LH_OK;
    dfree(d, &d->logits);
    d->logit_rows = 0;
    void *p = NULL;
    lh_status st = lh_k_alloc(d->kctx, (size_t)rows * (size_t)d->vocab * sizeof(float), &p);
    if (st != LH_OK) {
        char dev[32];
        return lh_err_set(err, st, "out of %s memory for the logits of %lld rows: %s",
                          device_name(d->dev, dev, sizeof dev), (long long)rows,
                          lh_k_last_error(d->kctx));
    }
    d->logits = p;
    d->logit_rows = rows;
    return LH_OK;
}

static lh_tensor mat(const lh_decoder *d, float *data, int64_t rows, int64_t cols)
{
    int64_t shape[2] = {rows, cols};
    return view(d->dev, LH_DTYPE_F32, data, 2, shape);
}

static lh_status kcheck(lh_status st, lh_kctx *kctx, const char *what, int64_t layer, lh_err *err)
{
    if (st == LH_OK)
        return LH_OK;
    if (layer >= 0)
        return lh_err_set(err, st, "layer %lld %s: %s", (long long)layer, what,
                          lh_k_last_error(kctx));
    return lh_err_set(err, st, "%s: %s", what, lh_k_last_error(kctx));
}

/* q/k [T, heads, D]: per-head RMSNorm (Qwen3), then RoPE per sequence with its own length. */
static lh_status qk_prepare(lh_decoder *d, lh_kctx *kctx, const lh_decoder_layer *L,
                            const lh_attn_step *step, float *x, int64_t nh,
                            const lh_tensor *norm_w, int64_t layer, lh_err *err)
{
    const int64_t T = step->n_tokens, D = d->head_dim;
    lh_status st;
    if (L->qk_norm) {
        lh_tensor rows = mat(d, x, T * nh, D);
        st = lh_k_rmsnorm(kctx, &rows, norm_w, d->eps, d->norm_offset, &rows);
        if ((st = kcheck(st, kctx, "q/k norm", layer, err)) != LH_OK)
            return st;
    }
    if (d->fused_rope) /* the backend rotates q and k itself */
        return LH_OK;
    for (int64_t s = 0; s < step->n_seqs; s++) {
        if (step->n_new[s] == 0) /* nothing to rotate (and no empty view to pass) */
            continue;
        int64_t shape[3] = {step->n_new[s], nh, D};
        lh_tensor part = view(d->dev, LH_DTYPE_F32, x + step->token_start[s] * nh * D, 3, shape);
        int64_t seq_len = step->ctx_len[s] + step->n_new[s];
        st = lh_k_rope_apply(kctx, &d->rope, &part, step->positions + step->token_start[s],
                             seq_len);
        if ((st = kcheck(st, kctx, "rope", layer, err)) != LH_OK)
            return st;
    }
    return LH_OK;
}

static lh_status layer_forward(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                               int64_t li, lh_err *err)
{
    lh_decoder_layer *L = &d->layers[li];
    const int64_t T = step->n_tokens, H = d->heads, KVH = d->kv_heads, D = d->head_dim;
    lh_tensor h = mat(d, d->h, T, d->hidden), resid = mat(d, d->resid, T, d->hidden);
    lh_tensor q = mat(d, d->q, T, H * D), k = mat(d, d->k, T, KVH * D);
    lh_tensor v = mat(d, d->v, T, KVH * D);
    lh_status st = lh_k_matmul(kctx, &h, &L->wq, L->has_qkv_bias ? &L->bq : NULL, &q);
    if (st == LH_OK)
        st = lh_k_matmul(kctx, &h, &L->wk, L->has_qkv_bias ? &L->bk : NULL, &k);
    if (st == LH_OK)
        st = lh_k_matmul(kctx, &h, &L->wv, L->has_qkv_bias ? &L->bv : NULL, &v);
    if ((st = kcheck(st, kctx, "q/k/v projection", li, err)) != LH_OK)
        return st;
    if ((st = qk_prepare(d, kctx, L, step, d->q, H, &L->q_norm, li, err)) != LH_OK ||
        (st = qk_prepare(d, kctx, L, step, d->k, KVH, &L->k_norm, li, err)) != LH_OK)
        return st;

    int64_t qs[3] = {T, H, D}, ks[3] = {T, KVH, D};
    lh_tensor q3 = view(d->dev, LH_DTYPE_F32, d->q, 3, qs);
    lh_tensor k3 = view(d->dev, LH_DTYPE_F32, d->k, 3, ks);
    lh_tensor v3 = view(d->dev, LH_DTYPE_F32, d->v, 3, ks);
    lh_tensor o3 = view(d->dev, LH_DTYPE_F32, d->attn_out, 3, qs);
    const lh_attn_forward_args args = {.struct_size = sizeof args,
                                       .kv = lh_kv_cache_layer(d->kv, li),
                                       .rope = d->fused_rope ? &d->rope : NULL};
    char msg[512] = "";
    st = d->attn_ops->forward(L->attn, kctx, step, &args, &q3, &k3, &v3, &o3, msg, sizeof msg);
    if (st != LH_OK)
        return lh_err_set(err, st, "layer %lld attention: %s", (long long)li, msg);

    lh_tensor attn_out = mat(d, d->attn_out, T, H * D), proj = mat(d, d->proj, T, d->hidden);
    st = lh_k_matmul(kctx, &attn_out, &L->wo, L->has_o_bias ? &L->bo : NULL, &proj);
    if (st == LH_OK) /* residual += attention; h = post_attention_layernorm(residual) */
        st = lh_k_add_rmsnorm(kctx, &resid, &proj, &L->post_norm, d->eps, d->norm_offset, &h);
    if ((st = kcheck(st, kctx, "attention output", li, err)) != LH_OK)
        return st;

    lh_tensor gate = mat(d, d->gate, T, d->intermediate), up = mat(d, d->up, T, d->intermediate);
    st = lh_k_matmul(kctx, &h, &L->w_gate, NULL, &gate);
    if (st == LH_OK)
        st = lh_k_matmul(kctx, &h, &L->w_up, NULL, &up);
    if (st == LH_OK)
        st = d->mlp_act == LH_MLP_GELU_TANH ? lh_k_gelu_tanh_mul(kctx, &gate, &up, &gate)
                                            : lh_k_silu_mul(kctx, &gate, &up, &gate);
    if (st == LH_OK)
        st = lh_k_matmul(kctx, &gate, &L->w_down, NULL, &proj);
    /* the norm fusion chain: residual += mlp; h = next layer's input norm (or the final norm) */
    const lh_tensor *next = li + 1 < d->n_layers ? &d->layers[li + 1].input_norm : &d->final_norm;
    if (st == LH_OK)
        st = lh_k_add_rmsnorm(kctx, &resid, &proj, next, d->eps, d->norm_offset, &h);
    return kcheck(st, kctx, "mlp", li, err);
}

/* The part of a step a CUDA graph records: the layers (ending in the final norm), the gather
 * of the rows asked for and lm_head into d->logits. */
static lh_status step_body(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                           const int64_t *out_rows, int64_t n_out, lh_err *err)
{
    lh_status st = LH_OK;
    for (int64_t i = 0; i < d->n_layers && st == LH_OK; i++)
        st = layer_forward(d, kctx, step, i, err);
    if (st != LH_OK || n_out == 0)
        return st;
    /* logits only for the rows asked for (usually each sequence's last token) */
    lh_tensor h = mat(d, d->h, step->n_tokens, d->hidden);
    lh_tensor rows = mat(d, d->proj, n_out, d->hidden), out = mat(d, d->logits, n_out, d->vocab);
    st = lh_k_gather_rows(kctx, &h, out_rows, n_out, &rows);
    if ((st = kcheck(st, kctx, "logits rows", -1, err)) != LH_OK)
        return st;
    st = lh_k_matmul(kctx, &rows, &d->lm_head, NULL, &out);
    return kcheck(st, kctx, "lm_head", -1, err);
}

/* step_body recorded once per batch size and replayed: begin/end around the same calls, once
 * more when the replay found them different from the recording (a fresh capture). */
static lh_status graph_step(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                            const int64_t *out_rows, int64_t n_out, lh_err *err)
{
    lh_k_graph **g = &d->graph[step->n_seqs - 1];
    lh_status st;
    if (!*g && (st = lh_k_graph_create(kctx, g)) != LH_OK) {
        *g = NULL;
        return kcheck(st, kctx, "cuda graph", -1, err);
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if ((st = lh_k_graph_begin(kctx, *g)) != LH_OK)
            return kcheck(st, kctx, "cuda graph begin", -1, err);
        st = step_body(d, kctx, step, out_rows, n_out, err);
        if (st != LH_OK) {
            lh_k_graph_abort(kctx, *g);
            return st;
        }
        bool rerun = false;
        if ((st = lh_k_graph_end(kctx, *g, &rerun)) != LH_OK)
            return kcheck(st, kctx, "cuda graph end", -1, err);
        if (!rerun)
            return LH_OK;
    }
    return lh_err_set(err, LH_E_INTERNAL, "cuda graph: a decode step of %lld sequences differs "
                      "from its own fresh capture", (long long)step->n_seqs);
}

lh_status lh_decoder_forward_dev(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                                 const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                                 lh_tensor *logits, lh_err *err)
{
    const int64_t T = step->n_tokens;
    if (T <= 0)
        return lh_err_set(err, LH_E_USAGE, "forward: empty batch");
    if (!kctx || lh_k_ctx_device(kctx).kind != d->dev.kind ||
        lh_k_ctx_device(kctx).index != d->dev.index)
        return lh_err_set(err, LH_E_USAGE, "forward: a kernel context of another device than "
                          "the decoder's");
    if (step->n_seqs < 1 || step->n_seqs > d->max_seqs)
        return lh_err_set(err, LH_E_USAGE, "forward: a step of %lld sequences (max_batch_size "
                          "%lld)", (long long)step->n_seqs, (long long)d->max_seqs);
    bool decode = true; /* every sequence one new token: the shape a graph replays */
    for (int64_t s = 0; s < step->n_seqs; s++) {
        if (step->ctx_len[s] < 0 || step->n_new[s] < 0 || step->n_new[s] > T)
            return lh_err_set(err, LH_E_USAGE, "forward: sequence %lld: %lld cached and %lld new "
                              "tokens", (long long)s, (long long)step->ctx_len[s],
                              (long long)step->n_new[s]);
        const int64_t after = step->ctx_len[s] + step->n_new[s]; /* both bounded: no overflow */
        if (step->ctx_len[s] > d->max_seq_len || after > d->max_seq_len)
            return lh_err_set(err, LH_E_UNSUPPORTED, "forward: the sequence in slot %lld needs "
                              "%lld tokens, more than max_seq_len %lld", (long long)step->slot[s],
                              (long long)after, (long long)d->max_seq_len);
        decode = decode && step->n_new[s] == 1;
    }
    if (n_out < 0 || n_out > T)
        return lh_err_set(err, LH_E_USAGE, "forward: %lld logits rows for a batch of %lld tokens",
                          (long long)n_out, (long long)T);
    for (int64_t i = 0; i < n_out; i++)
        if (out_rows[i] < 0 || out_rows[i] >= T)
            return lh_err_set(err, LH_E_USAGE, "forward: logits row %lld outside the batch of "
                              "%lld tokens", (long long)out_rows[i], (long long)T);
    lh_status st = reserve_scratch(d, T, err);
    if (st == LH_OK && n_out > 0)
        st = reserve_logits(d, n_out, err);
    if (st != LH_OK)
        return st;
    /* blocks for every sequence's tokens after this step, all or nothing, before any layer */
    lh_attn_step paged = *step;
    if (d->kv) {
        for (int64_t s = 0; s < step->n_seqs; s++)
            d->tokens_after[s] = step->ctx_len[s] + step->n_new[s];
        if ((st = lh_kv_cache_reserve(d->kv, step->slot, d->tokens_after, step->n_seqs, err)))
            return st;
        for (int64_t s = 0; s < step->n_seqs; s++)
            d->tables[s] = lh_kv_cache_table(d->kv, step->slot[s], &d->table_len[s]);
        paged.struct_size = sizeof paged;
        paged.block_tables = d->tables;
        paged.n_blocks = d->table_len;
        step = &paged;
    }
    /* the backends' host-side bookkeeping, outside any graph */
    for (int64_t i = 0; i < d->n_layers; i++) {
        char msg[512] = "";
        if (d->attn_ops->prepare &&
            (st = d->attn_ops->prepare(d->layers[i].attn, step, msg, sizeof msg)) != LH_OK)
            return lh_err_set(err, st, "layer %lld attention prepare: %s", (long long)i, msg);
    }
    lh_tensor resid = mat(d, d->resid, T, d->hidden), h = mat(d, d->h, T, d->hidden);
    st = lh_k_embedding(kctx, &d->embed, tokens, T, &resid);
    if (st == LH_OK && d->embed_scale != 1.0f) /* Gemma: embeddings * sqrt(hidden_size) */
        st = lh_k_scale(kctx, &resid, d->embed_scale);
    if (st == LH_OK)
        st = lh_k_rmsnorm(kctx, &resid, &d->layers[0].input_norm, d->eps, d->norm_offset, &h);
    if ((st = kcheck(st, kctx, "embedding", -1, err)) != LH_OK)
        return st;
    if (d->graphs && decode)
        st = graph_step(d, kctx, step, out_rows, n_out, err);
    else
        st = step_body(d, kctx, step, out_rows, n_out, err);
    if (st == LH_OK && n_out > 0)
        *logits = mat(d, d->logits, n_out, d->vocab);
    return st;
}

lh_status lh_decoder_forward(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                             const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                             float *logits, lh_err *err)
{
    lh_tensor dev_logits;
    lh_status st = lh_decoder_forward_dev(d, kctx, step, tokens, out_rows, n_out, &dev_logits,
                                          err);
    if (st != LH_OK || n_out == 0)
        return st;
    int64_t shape[2] = {n_out, d->vocab};
    lh_tensor host = lh_tensor_cpu(LH_DTYPE_F32, logits, 2, shape);
    st = lh_k_copy(kctx, &host, &dev_logits);
    return kcheck(st, kctx, "logits download", -1, err);
}
