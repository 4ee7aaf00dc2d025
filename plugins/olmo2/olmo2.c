/* Built-in model plugin: OLMo 2 (Olmo2ForCausalLM), as transformers' modeling_olmo2.py.
 *
 *   model.embed_tokens
 *   model.layers.N.self_attn.{q,k,v,o}_proj
 *   model.layers.N.self_attn.q_norm / k_norm   RMSNorm over the whole q / k projection
 *                                              ([heads x head_dim], before RoPE)
 *   model.layers.N.post_attention_layernorm    RMSNorm of the attention output
 *   model.layers.N.mlp.{gate,up,down}_proj     SiLU-gated
 *   model.layers.N.post_feedforward_layernorm  RMSNorm of the MLP output
 *   model.norm, lm_head
 *
 * Norms sit after the blocks, not before: the residual stream itself feeds the attention and
 * the MLP, and each block's output is normalized before it is added back. */
#include "lh_plugin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lh_status check_config(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "vocab_size"};
    lh_status st = lh_config_require_ints(api, cfg, keys, sizeof keys / sizeof *keys, err);
    if (st != LH_OK)
        return st;
    const char *act;
    if (api->config_get_string(cfg, "hidden_act", &act) == 1 && strcmp(act, "silu") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "hidden_act '%s' is not supported; "
                            "Olmo2ForCausalLM's gated MLP implements silu", act);
    double clip;
    if (api->config_get_double(cfg, "clip_qkv", &clip) == 1)
        return lh_error_set(err, LH_E_UNSUPPORTED, "clip_qkv=%g is not supported by "
                            "Olmo2ForCausalLM (OLMo 1's q/k/v clamp)", clip);
    return LH_OK;
}

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, D = g->head_dim, I = g->intermediate_size;
    const int64_t q_out = g->num_attention_heads * D, kv_out = g->num_key_value_heads * D;
    const double eps = g->rms_norm_eps;
    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", g->vocab_size, hidden);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, layers, name);
        const lh_attention_spec as = {
            .struct_size = sizeof as,
            .layer_index = i,
            .num_heads = g->num_attention_heads,
            .num_kv_heads = g->num_key_value_heads,
            .head_dim = D,
            .rope = true,
            .rope_theta = g->rope_theta,
            .rope_scaling = g->rope_scaling,
            .max_positions = g->max_position_embeddings,
        };
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        api->add_linear(b, attn, "q_proj", hidden, q_out, g->attention_bias);
        api->add_linear(b, attn, "k_proj", hidden, kv_out, g->attention_bias);
        api->add_linear(b, attn, "v_proj", hidden, kv_out, g->attention_bias);
        api->add_linear(b, attn, "o_proj", q_out, hidden, g->attention_bias);
        api->add_rmsnorm(b, attn, "q_norm", q_out, eps);
        api->add_rmsnorm(b, attn, "k_norm", kv_out, eps);
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear(b, mlp, "gate_proj", hidden, I, false);
        api->add_linear(b, mlp, "up_proj", hidden, I, false);
        api->add_linear(b, mlp, "down_proj", I, hidden, false);
        api->add_rmsnorm(b, layer, "post_feedforward_layernorm", hidden, eps);
    }
    api->add_rmsnorm(b, model, "norm", hidden, eps);
    lh_module *head = api->add_head(b, root, "lm_head", hidden, g->vocab_size, false);
    if (g->tie_word_embeddings)
        api->tie_weights(b, head, embed);
    return api->build_status(b);
}

typedef struct olmo2_layer {
    const lh_weight *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo, *q_norm, *k_norm;
    const lh_weight *post_attn_norm, *post_ff_norm, *gate, *up, *down;
    const lh_attn_ref *attn;
} olmo2_layer;

typedef struct olmo2_model {
    int64_t hidden, inter, n_layers, q_dim, kv_dim;
    float eps;
    const lh_weight *embed, *norm, *head;
    olmo2_layer *layers;
} olmo2_model;

static void destroy(void *model)
{
    olmo2_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    olmo2_model *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)g->num_hidden_layers, sizeof *m->layers);
    if (!m || !m->layers) {
        destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    m->hidden = g->hidden_size;
    m->inter = g->intermediate_size;
    m->n_layers = g->num_hidden_layers;
    m->q_dim = g->num_attention_heads * g->head_dim;
    m->kv_dim = g->num_key_value_heads * g->head_dim;
    m->eps = (float)g->rms_norm_eps;
    m->embed = api->weight(bd, "model.embed_tokens.weight");
    m->norm = api->weight(bd, "model.norm.weight");
    m->head = api->weight(bd, "lm_head.weight");
    for (int64_t i = 0; i < m->n_layers; i++) {
        olmo2_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->wq = api->weight(bd, p, i, "self_attn.q_proj.weight");
        L->wk = api->weight(bd, p, i, "self_attn.k_proj.weight");
        L->wv = api->weight(bd, p, i, "self_attn.v_proj.weight");
        L->wo = api->weight(bd, p, i, "self_attn.o_proj.weight");
        L->bq = api->weight_opt(bd, p, i, "self_attn.q_proj.bias");
        L->bk = api->weight_opt(bd, p, i, "self_attn.k_proj.bias");
        L->bv = api->weight_opt(bd, p, i, "self_attn.v_proj.bias");
        L->bo = api->weight_opt(bd, p, i, "self_attn.o_proj.bias");
        L->q_norm = api->weight(bd, p, i, "self_attn.q_norm.weight");
        L->k_norm = api->weight(bd, p, i, "self_attn.k_norm.weight");
        L->post_attn_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        L->post_ff_norm = api->weight(bd, p, i, "post_feedforward_layernorm.weight");
        L->gate = api->weight(bd, p, i, "mlp.gate_proj.weight");
        L->up = api->weight(bd, p, i, "mlp.up_proj.weight");
        L->down = api->weight(bd, p, i, "mlp.down_proj.weight");
        L->attn = api->attention(bd, "model.layers.%" PRId64 ".self_attn", i);
    }
    lh_status st = api->bind_status(bd);
    if (st != LH_OK) {
        destroy(m);
        return st;
    }
    info->vocab_size = g->vocab_size;
    /* resid, proj [hidden]; q, attn [q_dim]; k, v [kv_dim]; gate, up [inter] */
    info->scratch_bytes_per_token = (int64_t)sizeof(float) *
                                    (2 * m->hidden + 2 * m->q_dim + 2 * m->kv_dim + 2 * m->inter);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 8;
    *model = m;
    return LH_OK;
}

static lh_status forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const olmo2_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens;
    lh_tensor resid = api->scratch(f, T, m->hidden), proj = api->scratch(f, T, m->hidden);
    lh_tensor q = api->scratch(f, T, m->q_dim), k = api->scratch(f, T, m->kv_dim);
    lh_tensor v = api->scratch(f, T, m->kv_dim), attn = api->scratch(f, T, m->q_dim);
    lh_tensor gate = api->scratch(f, T, m->inter), up = api->scratch(f, T, m->inter);

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const olmo2_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        api->linear(f, &resid, L->wq, L->bq, &q);
        api->linear(f, &resid, L->wk, L->bk, &k);
        api->linear(f, &resid, L->wv, L->bv, &v);
        api->rmsnorm(f, &q, L->q_norm, m->eps, 0.0f, &q);
        api->rmsnorm(f, &k, L->k_norm, m->eps, 0.0f, &k);
        api->attend(f, L->attn, &q, &k, &v, &attn);
        api->linear(f, &attn, L->wo, L->bo, &proj);
        api->rmsnorm(f, &proj, L->post_attn_norm, m->eps, 0.0f, &proj);
        api->add(f, &resid, &proj);
        api->linear(f, &resid, L->gate, NULL, &gate);
        api->linear(f, &resid, L->up, NULL, &up);
        api->act_mul(f, LH_ACT_SILU, &gate, &up, &gate);
        api->linear(f, &gate, L->down, NULL, &proj);
        api->rmsnorm(f, &proj, L->post_ff_norm, m->eps, 0.0f, &proj);
        api->add(f, &resid, &proj);
    }
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0)
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor rows = api->output_rows(f, &resid); /* model.norm only on the rows asked for */
    api->rmsnorm(f, &rows, m->norm, m->eps, 0.0f, &rows);
    api->linear(f, &rows, m->head, NULL, &logits);
    return api->fwd_status(f);
}

static const lh_model_ops ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct,
    .check_config = check_config,
    .bind = bind,
    .forward = forward,
    .destroy = destroy,
};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider p = {.struct_size = sizeof p, .name = "Olmo2ForCausalLM", .ops = &ops};
    return api->register_model(ctx, &p);
}

LH_PLUGIN_DEFINE("model_olmo2", "0.1.0", init)
