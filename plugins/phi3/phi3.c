/* Built-in model plugin: Phi-3 (Phi3ForCausalLM: Phi-3, Phi-3.5, Phi-4-mini), as
 * transformers' modeling_phi3.py.
 *
 *   model.embed_tokens
 *   model.layers.N.input_layernorm             RMSNorm
 *   model.layers.N.self_attn.qkv_proj          fused q | k | v, no bias
 *   model.layers.N.self_attn.o_proj
 *   model.layers.N.post_attention_layernorm    RMSNorm
 *   model.layers.N.mlp.gate_up_proj            fused gate | up, SiLU-gated
 *   model.layers.N.mlp.down_proj
 *   model.norm, lm_head (tied when tie_word_embeddings)
 *
 * RoPE over the first partial_rotary_factor x head_dim dims of each head (Phi-4-mini: 0.75),
 * any scaling the kernels know, longrope (short/long factors) included; the config's sliding
 * window applies to every layer. */
#include "lh_plugin.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double partial_rotary_factor(const lh_host_api *api, const lh_model_config *cfg)
{
    /* transformers 5 keeps it in rope_parameters; earlier configs at the top level */
    double f = 1.0;
    if (api->config_get_double(cfg, "rope_parameters.partial_rotary_factor", &f) != 1 &&
        api->config_get_double(cfg, "rope_scaling.partial_rotary_factor", &f) != 1)
        api->config_get_double(cfg, "partial_rotary_factor", &f);
    return f;
}

/* Phi-3's RoPE: transformers' Phi3Config reads the old names "su" and "yarn" as longrope and
 * accepts nothing but default and longrope. */
static lh_rope_scaling rope_scaling(const lh_host_api *api, const lh_model_config *cfg)
{
    lh_rope_scaling s = api->config_geometry(cfg)->rope_scaling;
    if (s.kind && (!strcmp(s.kind, "su") || !strcmp(s.kind, "yarn")))
        s.kind = "longrope";
    return s;
}

static lh_status check_config(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "vocab_size"};
    lh_status st = lh_config_require_ints(api, cfg, keys, sizeof keys / sizeof *keys, err);
    if (st != LH_OK)
        return st;
    const char *act;
    if (api->config_get_string(cfg, "hidden_act", &act) == 1 && strcmp(act, "silu") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "hidden_act '%s' is not supported; "
                            "Phi3ForCausalLM's gated MLP implements silu", act);
    const lh_rope_scaling rs = rope_scaling(api, cfg);
    if (rs.kind && strcmp(rs.kind, "default") != 0 && strcmp(rs.kind, "longrope") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "rope_scaling type '%s' is not supported by "
                            "Phi3ForCausalLM (default, longrope; su and yarn mean longrope)",
                            rs.kind);
    const double prf = partial_rotary_factor(api, cfg);
    const int64_t rot = (int64_t)((double)g->head_dim * prf);
    if (!(prf > 0.0 && prf <= 1.0) || rot < 2 || rot % 2 != 0)
        return lh_error_set(err, LH_E_CONFIG, "partial_rotary_factor=%g gives %" PRId64
                            " rotary dims of head_dim %" PRId64 " (must be even and >= 2)",
                            prf, rot, g->head_dim);
    return LH_OK;
}

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, D = g->head_dim, I = g->intermediate_size;
    const int64_t qkv = (g->num_attention_heads + 2 * g->num_key_value_heads) * D;
    const double eps = g->rms_norm_eps;
    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", g->vocab_size, hidden);
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
            .sliding_window = g->sliding_window,
            .rope = true,
            .rope_theta = g->rope_theta,
            .rope_scaling = rope_scaling(api, cfg),
            .max_positions = g->max_position_embeddings,
            .rotary_dim = (int64_t)((double)D * partial_rotary_factor(api, cfg)),
        };
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        api->add_linear(b, attn, "qkv_proj", hidden, qkv, false);
        api->add_linear(b, attn, "o_proj", g->num_attention_heads * D, hidden, false);
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear(b, mlp, "gate_up_proj", hidden, 2 * I, false);
        api->add_linear(b, mlp, "down_proj", I, hidden, false);
    }
    api->add_rmsnorm(b, model, "norm", hidden, eps);
    lh_module *head = api->add_head(b, root, "lm_head", hidden, g->vocab_size, false);
    if (g->tie_word_embeddings)
        api->tie_weights(b, head, embed);
    return api->build_status(b);
}

typedef struct phi3_layer {
    const lh_weight *in_norm, *post_norm, *wq, *wk, *wv, *wo, *gate, *up, *down;
    const lh_attn_ref *attn;
} phi3_layer;

typedef struct phi3_model {
    int64_t hidden, inter, n_layers, q_dim, kv_dim;
    float eps;
    const lh_weight *embed, *norm, *head;
    phi3_layer *layers;
} phi3_model;

static void destroy(void *model)
{
    phi3_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    phi3_model *m = calloc(1, sizeof *m);
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
        phi3_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->in_norm = api->weight(bd, p, i, "input_layernorm.weight");
        L->post_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        const lh_weight *qkv = api->weight(bd, p, i, "self_attn.qkv_proj.weight");
        L->wq = api->weight_rows(bd, qkv, 0, m->q_dim);
        L->wk = api->weight_rows(bd, qkv, m->q_dim, m->kv_dim);
        L->wv = api->weight_rows(bd, qkv, m->q_dim + m->kv_dim, m->kv_dim);
        L->wo = api->weight(bd, p, i, "self_attn.o_proj.weight");
        const lh_weight *gate_up = api->weight(bd, p, i, "mlp.gate_up_proj.weight");
        L->gate = api->weight_rows(bd, gate_up, 0, m->inter);
        L->up = api->weight_rows(bd, gate_up, m->inter, m->inter);
        L->down = api->weight(bd, p, i, "mlp.down_proj.weight");
        L->attn = api->attention(bd, "model.layers.%" PRId64 ".self_attn", i);
    }
    lh_status st = api->bind_status(bd);
    if (st != LH_OK) {
        destroy(m);
        return st;
    }
    info->vocab_size = g->vocab_size;
    /* resid, h, proj [hidden]; q, attn [q_dim]; k, v [kv_dim]; gate, up [inter] */
    info->scratch_bytes_per_token = (int64_t)sizeof(float) *
                                    (3 * m->hidden + 2 * m->q_dim + 2 * m->kv_dim + 2 * m->inter);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 9;
    *model = m;
    return LH_OK;
}

static lh_status forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const phi3_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens;
    lh_tensor resid = api->scratch(f, T, m->hidden), h = api->scratch(f, T, m->hidden);
    lh_tensor q = api->scratch(f, T, m->q_dim), k = api->scratch(f, T, m->kv_dim);
    lh_tensor v = api->scratch(f, T, m->kv_dim), attn = api->scratch(f, T, m->q_dim);
    lh_tensor proj = api->scratch(f, T, m->hidden);
    lh_tensor gate = api->scratch(f, T, m->inter), up = api->scratch(f, T, m->inter);

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    api->rmsnorm(f, &resid, m->layers[0].in_norm, m->eps, 0.0f, &h);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const phi3_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        api->linear(f, &h, L->wq, NULL, &q);
        api->linear(f, &h, L->wk, NULL, &k);
        api->linear(f, &h, L->wv, NULL, &v);
        api->attend(f, L->attn, &q, &k, &v, &attn);
        api->linear(f, &attn, L->wo, NULL, &proj);
        api->residual_rmsnorm(f, &resid, &proj, L->post_norm, m->eps, 0.0f, &h);
        api->linear(f, &h, L->gate, NULL, &gate);
        api->linear(f, &h, L->up, NULL, &up);
        api->act_mul(f, LH_ACT_SILU, &gate, &up, &gate);
        api->linear(f, &gate, L->down, NULL, &proj);
        const lh_weight *next = i + 1 < m->n_layers ? m->layers[i + 1].in_norm : m->norm;
        api->residual_rmsnorm(f, &resid, &proj, next, m->eps, 0.0f, &h);
    }
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0)
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor rows = api->output_rows(f, &h);
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
    const lh_model_provider p = {.struct_size = sizeof p, .name = "Phi3ForCausalLM", .ops = &ops};
    return api->register_model(ctx, &p);
}

LH_PLUGIN_DEFINE("model_phi3", "0.1.0", init)
