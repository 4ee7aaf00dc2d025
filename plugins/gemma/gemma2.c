/* Built-in model plugin: Gemma 2 (Gemma2ForCausalLM) and Gemma 3 text (Gemma3ForCausalLM), as
 * transformers' modeling_gemma2.py / modeling_gemma3.py.
 *
 *   model.embed_tokens                          scaled by sqrt(hidden_size) on the way in
 *   model.layers.N.input_layernorm              \
 *   model.layers.N.self_attn.{q,k,v,o}_proj      | every norm is RMSNorm x / rms(x) * (1 + w)
 *     (Gemma 3: self_attn.q_norm / k_norm)       | (the stored w is an offset from 1)
 *   model.layers.N.post_attention_layernorm      | norms before and after both the attention
 *   model.layers.N.pre_feedforward_layernorm     | and the MLP
 *   model.layers.N.mlp.{gate,up,down}_proj       | (gelu_pytorch_tanh-gated)
 *   model.layers.N.post_feedforward_layernorm   /
 *   model.norm, lm_head (tied)
 *
 * Attention scale query_pre_attn_scalar^-1/2; layer_types (or the family's default pattern)
 * says which layers use the sliding window. Gemma 2 soft-caps the attention logits and the
 * final logits; Gemma 3 normalizes q and k per head and gives sliding layers their own RoPE
 * base (rope_local_base_freq, or rope_parameters.sliding_attention in transformers 5). */
#include "gemma_gguf.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemma_variant {
    const char *arch;
    bool gemma3;
} gemma_variant;

static const gemma_variant gemma2 = {"Gemma2ForCausalLM", false};
static const gemma_variant gemma3 = {"Gemma3ForCausalLM", true};

/* 1 when layer i slides. transformers' defaults when layer_types is absent: Gemma 2 slides on
 * even layers, Gemma 3 on all but every sliding_window_pattern-th (default 6). */
static bool layer_slides(const lh_host_api *api, const lh_model_config *cfg,
                         const gemma_variant *v, int64_t i)
{
    char key[64];
    snprintf(key, sizeof key, "layer_types.%" PRId64, i);
    const char *type;
    if (api->config_get_string(cfg, key, &type) == 1)
        return strcmp(type, "sliding_attention") == 0;
    if (!v->gemma3)
        return (i + 1) % 2 != 0;
    int64_t pattern = 6;
    if (api->config_get_int(cfg, "sliding_window_pattern", &pattern) != 1)
        api->config_get_int(cfg, "_sliding_window_pattern", &pattern);
    return pattern <= 0 || (i + 1) % pattern != 0;
}

/* A soft-cap key: 0 when absent or null. */
static double softcap(const lh_host_api *api, const lh_model_config *cfg, const char *key)
{
    double c = 0.0;
    return api->config_get_double(cfg, key, &c) == 1 ? c : 0.0;
}

/* The RoPE of a Gemma 3 layer type: transformers 5's rope_parameters.<type> {rope_type,
 * rope_theta, factor}, else the v4 keys (rope_theta and rope_scaling for full attention,
 * rope_local_base_freq unscaled for sliding). Gemma 2 has one RoPE: the config's. */
static lh_status layer_rope(const lh_host_api *api, const lh_model_config *cfg,
                            const gemma_variant *v, bool sliding, double *theta,
                            lh_rope_scaling *scaling, lh_error *err)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    *theta = g->rope_theta;
    *scaling = g->rope_scaling;
    if (!v->gemma3)
        return LH_OK;
    const char *type = sliding ? "sliding_attention" : "full_attention";
    char key[96];
    snprintf(key, sizeof key, "rope_parameters.%s.rope_theta", type);
    if (api->config_get_double(cfg, key, theta) == 1) {
        const char *kind = "default";
        snprintf(key, sizeof key, "rope_parameters.%s.rope_type", type);
        api->config_get_string(cfg, key, &kind);
        *scaling = (lh_rope_scaling){0};
        if (!strcmp(kind, "linear")) {
            snprintf(key, sizeof key, "rope_parameters.%s.factor", type);
            if (api->config_get_double(cfg, key, &scaling->factor) != 1)
                return lh_error_set(err, LH_E_CONFIG, "%s: linear RoPE without a factor", key);
            scaling->kind = "linear";
        } else if (strcmp(kind, "default") != 0) {
            return lh_error_set(err, LH_E_UNSUPPORTED, "rope_parameters.%s.rope_type '%s' is "
                                "not supported by %s (default, linear)", type, kind, v->arch);
        }
        return LH_OK;
    }
    if (sliding) {
        *theta = 10000.0;
        api->config_get_double(cfg, "rope_local_base_freq", theta);
        *scaling = (lh_rope_scaling){0};
    }
    return LH_OK;
}

static lh_status check(const lh_host_api *api, const lh_model_config *cfg,
                       const gemma_variant *v, lh_error *err)
{
    static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "vocab_size"};
    lh_status st = lh_config_require_ints(api, cfg, keys, sizeof keys / sizeof *keys, err);
    if (st != LH_OK)
        return st;
    const char *act = "gelu_pytorch_tanh";
    if (api->config_get_string(cfg, "hidden_activation", &act) != 1)
        api->config_get_string(cfg, "hidden_act", &act);
    if (strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu_new") != 0 &&
        strcmp(act, "gelu") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "hidden_activation '%s' is not supported by "
                            "%s (gelu_pytorch_tanh, gelu)", act, v->arch);
    bool bidir;
    if (api->config_get_bool(cfg, "use_bidirectional_attention", &bidir) == 1 && bidir)
        return lh_error_set(err, LH_E_UNSUPPORTED, "use_bidirectional_attention=true (an "
                            "embedding model) is not supported: %s runs causal", v->arch);
    for (int64_t i = 0; i < 2; i++) {
        double theta;
        lh_rope_scaling sc;
        lh_status st = layer_rope(api, cfg, v, i == 0, &theta, &sc, err);
        if (st != LH_OK)
            return st;
    }
    if (softcap(api, cfg, "attn_logit_softcapping") < 0 ||
        softcap(api, cfg, "final_logit_softcapping") < 0)
        return lh_error_set(err, LH_E_CONFIG, "attn_logit_softcapping and "
                            "final_logit_softcapping must be > 0 or null");
    return LH_OK;
}

static lh_activation activation(const lh_host_api *api, const lh_model_config *cfg)
{
    const char *act = "gelu_pytorch_tanh";
    if (api->config_get_string(cfg, "hidden_activation", &act) != 1)
        api->config_get_string(cfg, "hidden_act", &act);
    return strcmp(act, "gelu") == 0 ? LH_ACT_GELU : LH_ACT_GELU_TANH;
}

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                           const gemma_variant *v)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, D = g->head_dim, I = g->intermediate_size;
    const int64_t q_out = g->num_attention_heads * D, kv_out = g->num_key_value_heads * D;
    const double eps = g->rms_norm_eps;
    double qpas = (double)D;
    api->config_get_double(cfg, "query_pre_attn_scalar", &qpas);
    if (!(qpas > 0))
        return api->build_fail(b, LH_E_CONFIG, "query_pre_attn_scalar %g must be > 0", qpas);
    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", g->vocab_size, hidden);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, layers, name);
        api->add_rmsnorm(b, layer, "input_layernorm", hidden, eps);
        const bool slides = layer_slides(api, cfg, v, i);
        lh_attention_spec as = {
            .struct_size = sizeof as,
            .layer_index = i,
            .num_heads = g->num_attention_heads,
            .num_kv_heads = g->num_key_value_heads,
            .head_dim = D,
            .sliding_window = slides ? g->sliding_window : 0,
            .scale = 1.0 / sqrt(qpas),
            .rope = true,
            .max_positions = g->max_position_embeddings,
            .logit_softcap = softcap(api, cfg, "attn_logit_softcapping"),
        };
        lh_error e = {0};
        if (layer_rope(api, cfg, v, slides, &as.rope_theta, &as.rope_scaling, &e) != LH_OK)
            return api->build_fail(b, e.code, "%s", e.msg);
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        api->add_linear(b, attn, "q_proj", hidden, q_out, g->attention_bias);
        api->add_linear(b, attn, "k_proj", hidden, kv_out, g->attention_bias);
        api->add_linear(b, attn, "v_proj", hidden, kv_out, g->attention_bias);
        api->add_linear(b, attn, "o_proj", q_out, hidden, g->attention_bias);
        if (v->gemma3) {
            api->add_rmsnorm(b, attn, "q_norm", D, eps);
            api->add_rmsnorm(b, attn, "k_norm", D, eps);
        }
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        api->add_rmsnorm(b, layer, "pre_feedforward_layernorm", hidden, eps);
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

typedef struct gemma_layer {
    const lh_weight *in_norm, *post_attn_norm, *pre_ff_norm, *post_ff_norm;
    const lh_weight *wq, *wk, *wv, *wo, *bq, *bk, *bv, *bo, *q_norm, *k_norm;
    const lh_weight *gate, *up, *down;
    const lh_attn_ref *attn;
} gemma_layer;

typedef struct gemma_model {
    int64_t hidden, inter, n_layers, heads, kv_heads, head_dim;
    float eps, embed_scale, final_softcap;
    lh_activation act;
    const lh_weight *embed, *norm, *head;
    gemma_layer *layers;
} gemma_model;

static void destroy(void *model)
{
    gemma_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      const gemma_variant *v, void **model, lh_forward_info *info)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    gemma_model *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)g->num_hidden_layers, sizeof *m->layers);
    if (!m || !m->layers) {
        destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    m->hidden = g->hidden_size;
    m->inter = g->intermediate_size;
    m->n_layers = g->num_hidden_layers;
    m->heads = g->num_attention_heads;
    m->kv_heads = g->num_key_value_heads;
    m->head_dim = g->head_dim;
    m->eps = (float)g->rms_norm_eps;
    m->embed_scale = (float)sqrt((double)g->hidden_size);
    m->final_softcap = (float)softcap(api, cfg, "final_logit_softcapping");
    m->act = activation(api, cfg);
    m->embed = api->weight(bd, "model.embed_tokens.weight");
    m->norm = api->weight(bd, "model.norm.weight");
    m->head = api->weight(bd, "lm_head.weight");
    for (int64_t i = 0; i < m->n_layers; i++) {
        gemma_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->in_norm = api->weight(bd, p, i, "input_layernorm.weight");
        L->post_attn_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        L->pre_ff_norm = api->weight(bd, p, i, "pre_feedforward_layernorm.weight");
        L->post_ff_norm = api->weight(bd, p, i, "post_feedforward_layernorm.weight");
        L->wq = api->weight(bd, p, i, "self_attn.q_proj.weight");
        L->wk = api->weight(bd, p, i, "self_attn.k_proj.weight");
        L->wv = api->weight(bd, p, i, "self_attn.v_proj.weight");
        L->wo = api->weight(bd, p, i, "self_attn.o_proj.weight");
        L->bq = api->weight_opt(bd, p, i, "self_attn.q_proj.bias");
        L->bk = api->weight_opt(bd, p, i, "self_attn.k_proj.bias");
        L->bv = api->weight_opt(bd, p, i, "self_attn.v_proj.bias");
        L->bo = api->weight_opt(bd, p, i, "self_attn.o_proj.bias");
        if (v->gemma3) {
            L->q_norm = api->weight(bd, p, i, "self_attn.q_norm.weight");
            L->k_norm = api->weight(bd, p, i, "self_attn.k_norm.weight");
        }
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
    const int64_t qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    info->vocab_size = g->vocab_size;
    /* resid, h, proj [hidden]; q, attn [qd]; k, v [kvd]; gate, up [inter] */
    info->scratch_bytes_per_token =
        (int64_t)sizeof(float) * (3 * m->hidden + 2 * qd + 2 * kvd + 2 * m->inter);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 9;
    *model = m;
    return LH_OK;
}

/* [T, heads * D] as [T * heads, D]: one row per head, for the per-head q/k norm. */
static lh_tensor per_head(const lh_tensor *x, int64_t T, int64_t heads, int64_t D)
{
    const int64_t shape[2] = {T * heads, D};
    return lh_tensor_view(x, 2, shape);
}

static lh_status forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const gemma_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens, H = m->heads, KVH = m->kv_heads;
    const int64_t D = m->head_dim;
    const float eps = m->eps, one = 1.0f; /* (1 + w) norms */
    lh_tensor resid = api->scratch(f, T, m->hidden), h = api->scratch(f, T, m->hidden);
    lh_tensor q = api->scratch(f, T, H * D), k = api->scratch(f, T, KVH * D);
    lh_tensor v = api->scratch(f, T, KVH * D), attn = api->scratch(f, T, H * D);
    lh_tensor proj = api->scratch(f, T, m->hidden);
    lh_tensor gate = api->scratch(f, T, m->inter), up = api->scratch(f, T, m->inter);

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    api->scale(f, &resid, m->embed_scale);
    api->rmsnorm(f, &resid, m->layers[0].in_norm, eps, one, &h);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const gemma_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        api->linear(f, &h, L->wq, L->bq, &q);
        api->linear(f, &h, L->wk, L->bk, &k);
        api->linear(f, &h, L->wv, L->bv, &v);
        if (L->q_norm) {
            lh_tensor qh = per_head(&q, T, H, D), kh = per_head(&k, T, KVH, D);
            api->rmsnorm(f, &qh, L->q_norm, eps, one, &qh);
            api->rmsnorm(f, &kh, L->k_norm, eps, one, &kh);
        }
        api->attend(f, L->attn, &q, &k, &v, &attn);
        api->linear(f, &attn, L->wo, L->bo, &proj);
        /* residual += post_attention_layernorm(attention); h = pre_feedforward_layernorm */
        api->rmsnorm(f, &proj, L->post_attn_norm, eps, one, &proj);
        api->residual_rmsnorm(f, &resid, &proj, L->pre_ff_norm, eps, one, &h);
        api->linear(f, &h, L->gate, NULL, &gate);
        api->linear(f, &h, L->up, NULL, &up);
        api->act_mul(f, m->act, &gate, &up, &gate);
        api->linear(f, &gate, L->down, NULL, &proj);
        /* residual += post_feedforward_layernorm(mlp); h = the next input norm (model.norm) */
        api->rmsnorm(f, &proj, L->post_ff_norm, eps, one, &proj);
        const lh_weight *next = i + 1 < m->n_layers ? m->layers[i + 1].in_norm : m->norm;
        api->residual_rmsnorm(f, &resid, &proj, next, eps, one, &h);
    }
    lh_tensor logits = api->logits(f);
    if (logits.shape[0] == 0)
        return api->fwd_status(f);
    api->fwd_where(f, "lm_head");
    lh_tensor rows = api->output_rows(f, &h);
    api->linear(f, &rows, m->head, NULL, &logits);
    if (m->final_softcap > 0)
        api->softcap(f, &logits, m->final_softcap);
    return api->fwd_status(f);
}

static lh_status check2(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    return check(api, cfg, &gemma2, err);
}
static lh_status check3(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    return check(api, cfg, &gemma3, err);
}
static lh_status construct2(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return construct(api, b, cfg, &gemma2);
}
static lh_status construct3(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return construct(api, b, cfg, &gemma3);
}
static lh_status bind2(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                       void **model, lh_forward_info *info)
{
    return bind(api, bd, cfg, &gemma2, model, info);
}
static lh_status bind3(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                       void **model, lh_forward_info *info)
{
    return bind(api, bd, cfg, &gemma3, model, info);
}

static const lh_model_ops ops2 = {.struct_size = sizeof(lh_model_ops), .construct = construct2,
                                  .check_config = check2, .bind = bind2, .forward = forward,
                                  .destroy = destroy};
static const lh_model_ops ops3 = {.struct_size = sizeof(lh_model_ops), .construct = construct3,
                                  .check_config = check3, .bind = bind3, .forward = forward,
                                  .destroy = destroy};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider p2 = {.struct_size = sizeof p2, .name = gemma2.arch, .ops = &ops2};
    const lh_model_provider p3 = {.struct_size = sizeof p3, .name = gemma3.arch, .ops = &ops3};
    lh_status st = api->register_model(ctx, &p2);
    if (st == LH_OK)
        st = api->register_model(ctx, &p3);
    return st != LH_OK ? st : gemma_register_gguf(api, ctx);
}

LH_PLUGIN_DEFINE("model_gemma", "0.1.0", init)
