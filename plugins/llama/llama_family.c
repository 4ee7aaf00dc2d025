#include "llama_family.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config ---------------------------------------------------------------------------------- */

int llama_layer_types_window(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                             int64_t *window)
{
    char key[64];
    snprintf(key, sizeof key, "layer_types.%" PRId64, i);
    const char *type;
    if (api->config_get_string(cfg, key, &type) != 1)
        return 0;
    *window = strcmp(type, "sliding_attention") == 0 ? api->config_geometry(cfg)->sliding_window
                                                     : 0;
    return 1;
}

lh_status llama_check_config(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const char *arch = g->architecture;
    if (g->has_mla)
        return lh_error_set(err, LH_E_UNSUPPORTED, "multi-head latent attention (kv_lora_rank) "
                            "is not part of %s", arch);
    static const char *const act_keys[] = {"hidden_act", "hidden_activation"};
    for (size_t i = 0; i < sizeof act_keys / sizeof *act_keys; i++) {
        const char *act;
        if (api->config_get_string(cfg, act_keys[i], &act) == 1 && strcmp(act, "silu") != 0 &&
            strcmp(act, "swish") != 0)
            return lh_error_set(err, LH_E_UNSUPPORTED, "%s '%s' is not supported; the gated "
                                "MLP of %s implements silu", act_keys[i], act, arch);
    }
    static const char *const prf_keys[] = {"partial_rotary_factor",
                                           "rope_parameters.partial_rotary_factor",
                                           "rope_scaling.partial_rotary_factor"};
    for (size_t i = 0; i < sizeof prf_keys / sizeof *prf_keys; i++) {
        double prf;
        if (api->config_get_double(cfg, prf_keys[i], &prf) == 1 && prf != 1.0)
            return lh_error_set(err, LH_E_UNSUPPORTED, "%s=%g is not supported by %s (RoPE over "
                                "the whole head only)", prf_keys[i], prf, arch);
    }
    static const char *const trunc_keys[] = {"rope_parameters.truncate", "rope_scaling.truncate"};
    for (size_t i = 0; i < sizeof trunc_keys / sizeof *trunc_keys; i++) {
        bool t;
        if (api->config_get_bool(cfg, trunc_keys[i], &t) == 1 && !t)
            return lh_error_set(err, LH_E_UNSUPPORTED, "%s=false (untruncated yarn correction "
                                "range) is not supported", trunc_keys[i]);
    }
    bool mlp_bias;
    if (api->config_get_bool(cfg, "mlp_bias", &mlp_bias) == 1 && mlp_bias)
        return lh_error_set(err, LH_E_UNSUPPORTED, "mlp_bias=true is not supported by %s", arch);
    return LH_OK;
}

/* ---- construct ------------------------------------------------------------------------------- */

static lh_status require_geometry(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "vocab_size"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int64_t v;
        if (api->config_get_int(cfg, keys[i], &v) != 1)
            return api->build_fail(b, LH_E_CONFIG, "missing required field '%s' for a decoder "
                                   "model (architecture %s)", keys[i],
                                   api->config_geometry(cfg)->architecture);
    }
    return LH_OK;
}

lh_status llama_construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                          const llama_variant *v)
{
    lh_status st = require_geometry(api, b, cfg);
    if (st != LH_OK)
        return st;
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, vocab = g->vocab_size, D = g->head_dim;
    const int64_t q_out = g->num_attention_heads * D, kv_out = g->num_key_value_heads * D;
    const double eps = g->rms_norm_eps;
    /* transformers: Llama/Mistral put attention_bias on q, k, v and o; Qwen2 has q/k/v bias
     * and no o bias */
    bool qkv_bias = v->qkv_bias || g->attention_bias;
    const bool o_bias = g->attention_bias;
    bool kb;
    if (v->qkv_bias_key)
        qkv_bias = api->config_get_bool(cfg, v->qkv_bias_key, &kb) == 1 ? kb : true;

    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", vocab, hidden);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, layers, name);
        api->add_rmsnorm(b, layer, "input_layernorm", hidden, eps);
        const lh_attention_spec as = {
            .struct_size = sizeof as,
            .layer_index = i,
            .num_heads = g->num_attention_heads,
            .num_kv_heads = g->num_key_value_heads,
            .head_dim = D,
            .sliding_window = v->layer_window(api, cfg, i),
            .attention_chunk_size = g->attention_chunk_size,
            .rope = true,
            .rope_theta = g->rope_theta,
            .rope_scaling = g->rope_scaling,
            .max_positions = g->max_position_embeddings,
        };
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        api->add_linear(b, attn, "q_proj", hidden, q_out, qkv_bias);
        api->add_linear(b, attn, "k_proj", hidden, kv_out, qkv_bias);
        api->add_linear(b, attn, "v_proj", hidden, kv_out, qkv_bias);
        api->add_linear(b, attn, "o_proj", q_out, hidden, o_bias);
        if (v->qk_norm) {
            api->add_rmsnorm(b, attn, "q_norm", D, eps);
            api->add_rmsnorm(b, attn, "k_norm", D, eps);
        }
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        lh_moe_spec ms;
        const char *moe_name;
        if (v->layer_moe && v->layer_moe(api, cfg, i, &ms, &moe_name)) {
            api->add_moe(b, layer, moe_name, &ms);
            continue;
        }
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear(b, mlp, "gate_proj", hidden, g->intermediate_size, false);
        api->add_linear(b, mlp, "up_proj", hidden, g->intermediate_size, false);
        api->add_linear(b, mlp, "down_proj", g->intermediate_size, hidden, false);
    }
    api->add_rmsnorm(b, model, "norm", hidden, eps);
    lh_module *head = api->add_head(b, root, "lm_head", hidden, vocab, false);
    if (g->tie_word_embeddings)
        api->tie_weights(b, head, embed);
    return api->build_status(b);
}

/* ---- bind ------------------------------------------------------------------------------------ */

typedef struct llama_layer {
    const lh_weight *in_norm, *post_norm;
    const lh_weight *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo;
    const lh_weight *q_norm, *k_norm; /* NULL without qk_norm */
    const lh_weight *gate, *up, *down; /* dense layers */
    const lh_moe_ref *moe;             /* MoE layers (gate, up, down NULL) */
    const lh_attn_ref *attn;
} llama_layer;

typedef struct llama_model {
    int64_t hidden, intermediate, n_layers, heads, kv_heads, head_dim;
    float eps;
    const lh_weight *embed, *final_norm, *lm_head;
    llama_layer *layers;
} llama_model;

void llama_destroy(void *model)
{
    llama_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

lh_status llama_bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                     const llama_variant *v, void **model, lh_forward_info *info)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    llama_model *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)g->num_hidden_layers, sizeof *m->layers);
    if (!m || !m->layers) {
        llama_destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    m->hidden = g->hidden_size;
    m->intermediate = g->intermediate_size;
    m->n_layers = g->num_hidden_layers;
    m->heads = g->num_attention_heads;
    m->kv_heads = g->num_key_value_heads;
    m->head_dim = g->head_dim;
    m->eps = (float)g->rms_norm_eps;
    m->embed = api->weight(bd, "model.embed_tokens.weight");
    m->final_norm = api->weight(bd, "model.norm.weight");
    m->lm_head = api->weight(bd, "lm_head.weight");
    for (int64_t i = 0; i < m->n_layers; i++) {
        llama_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->in_norm = api->weight(bd, p, i, "input_layernorm.weight");
        L->post_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        L->wq = api->weight(bd, p, i, "self_attn.q_proj.weight");
        L->wk = api->weight(bd, p, i, "self_attn.k_proj.weight");
        L->wv = api->weight(bd, p, i, "self_attn.v_proj.weight");
        L->wo = api->weight(bd, p, i, "self_attn.o_proj.weight");
        L->bq = api->weight_opt(bd, p, i, "self_attn.q_proj.bias");
        L->bk = api->weight_opt(bd, p, i, "self_attn.k_proj.bias");
        L->bv = api->weight_opt(bd, p, i, "self_attn.v_proj.bias");
        L->bo = api->weight_opt(bd, p, i, "self_attn.o_proj.bias");
        if (v->qk_norm) {
            L->q_norm = api->weight(bd, p, i, "self_attn.q_norm.weight");
            L->k_norm = api->weight(bd, p, i, "self_attn.k_norm.weight");
        }
        lh_moe_spec ms;
        const char *moe_name;
        if (v->layer_moe && v->layer_moe(api, cfg, i, &ms, &moe_name)) {
            L->moe = api->moe(bd, "model.layers.%" PRId64 ".%s", i, moe_name);
        } else {
            L->gate = api->weight(bd, p, i, "mlp.gate_proj.weight");
            L->up = api->weight(bd, p, i, "mlp.up_proj.weight");
            L->down = api->weight(bd, p, i, "mlp.down_proj.weight");
        }
        L->attn = api->attention(bd, "model.layers.%" PRId64 ".self_attn", i);
    }
    lh_status st = api->bind_status(bd);
    if (st != LH_OK) {
        llama_destroy(m);
        return st;
    }
    const int64_t qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    info->vocab_size = g->vocab_size;
    /* resid, h, proj [hidden]; q, attn_out [qd]; k, v [kvd]; gate, up [intermediate] */
    info->scratch_bytes_per_token =
        (int64_t)sizeof(float) * (3 * m->hidden + 2 * qd + 2 * kvd + 2 * m->intermediate);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 9;
    *model = m;
    return LH_OK;
}

/* ---- forward --------------------------------------------------------------------------------- */

/* [T, heads * D] as [T * heads, D]: one row per head, for the per-head q/k norm. */
static lh_tensor per_head(const lh_tensor *x, int64_t T, int64_t heads, int64_t D)
{
    const int64_t shape[2] = {T * heads, D};
    return lh_tensor_view(x, 2, shape);
}

lh_status llama_forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const llama_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens, H = m->heads, KVH = m->kv_heads;
    const int64_t D = m->head_dim;
    lh_tensor resid = api->scratch(f, T, m->hidden), h = api->scratch(f, T, m->hidden);
    lh_tensor q = api->scratch(f, T, H * D), k = api->scratch(f, T, KVH * D);
    lh_tensor v = api->scratch(f, T, KVH * D), attn = api->scratch(f, T, H * D);
    lh_tensor proj = api->scratch(f, T, m->hidden);
    lh_tensor gate = api->scratch(f, T, m->intermediate), up = api->scratch(f, T, m->intermediate);

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    api->rmsnorm(f, &resid, m->layers[0].in_norm, m->eps, 0.0f, &h);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const llama_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        api->linear(f, &h, L->wq, L->bq, &q);
        api->linear(f, &h, L->wk, L->bk, &k);
        api->linear(f, &h, L->wv, L->bv, &v);
        if (L->q_norm) {
            lh_tensor qh = per_head(&q, T, H, D), kh = per_head(&k, T, KVH, D);
            api->rmsnorm(f, &qh, L->q_norm, m->eps, 0.0f, &qh);
            api->rmsnorm(f, &kh, L->k_norm, m->eps, 0.0f, &kh);
        }
        api->attend(f, L->attn, &q, &k, &v, &attn);
        api->linear(f, &attn, L->wo, L->bo, &proj);
        /* residual += attention; h = post_attention_layernorm(residual) */
        api->residual_rmsnorm(f, &resid, &proj, L->post_norm, m->eps, 0.0f, &h);
        if (L->moe) {
            api->moe_ffn(f, L->moe, &h, &proj);
        } else {
            api->linear(f, &h, L->gate, NULL, &gate);
            api->linear(f, &h, L->up, NULL, &up);
            api->act_mul(f, LH_ACT_SILU, &gate, &up, &gate);
            api->linear(f, &gate, L->down, NULL, &proj);
        }
        /* the norm fusion chain: residual += mlp; h = next layer's input norm (or model.norm) */
        const lh_weight *next = i + 1 < m->n_layers ? m->layers[i + 1].in_norm : m->final_norm;
        api->residual_rmsnorm(f, &resid, &proj, next, m->eps, 0.0f, &h);
    }
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0)
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor rows = api->output_rows(f, &h);
    api->linear(f, &rows, m->lm_head, NULL, &logits);
    return api->fwd_status(f);
}
