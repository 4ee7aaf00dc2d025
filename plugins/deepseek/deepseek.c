/* Built-in model plugin: DeepSeek-V2 and DeepSeek-V3.
 *
 *   model.embed_tokens, model.norm, lm_head (untied)
 *   model.layers.N.input_layernorm / post_attention_layernorm
 *   model.layers.N.self_attn: multi-head latent attention -- q_proj (V2-Lite: no q_lora_rank)
 *     or q_a_proj, q_a_layernorm, q_b_proj; kv_a_proj_with_mqa (the kv_lora_rank latent and
 *     the shared qk_rope_head_dim key), kv_a_layernorm, kv_b_proj, o_proj (attention_bias:
 *     biases on q_a_proj, kv_a_proj_with_mqa and o_proj, as transformers); registered with
 *     its MLA geometry, so the KV cache plans the latent width. kv_b_proj is a plain
 *     parameter (never quantized by the quant config): the attention backend reads it per
 *     head, to expand the latent (vanilla) or to absorb it into the query and output (paged).
 *     RoPE pairs interleaved dims (V2 always, V3 unless rope_interleave is false); with yarn
 *     the softmax scale is multiplied by mscale(factor, mscale_all_dim)^2, as DeepSeek does.
 *   model.layers.N.mlp: a dense SiLU-gated MLP for N < first_k_dense_replace, else a mixture of
 *     n_routed_experts experts (moe_intermediate_size wide) with n_shared_experts folded into
 *     one shared expert "shared_experts", routed as transformers' modeling of the version does:
 *     V2 softmax scores, greedy or group-limited top-k (the group's best score), scaled by
 *     routed_scaling_factor, never renormalized; V3 sigmoid scores plus e_score_correction_bias
 *     for the choice, always group-limited with the groups scored by their two best,
 *     renormalized as norm_topk_prob says, scaled. Keys a config leaves out take transformers'
 *     defaults; moe_layer_freq other than 1 (which transformers ignores) is refused.
 * DeepSeek-V3's multi-token-prediction layer (num_nextn_predict_layers) is not part of the
 * tree: its weights, when a checkpoint has them, are reported as unexpected. The correction
 * bias is a buffer of the router (transformers counts it as no parameter; neither does
 * explain). */
#include "lh_kernels.h"
#include "lh_plugin.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ds_version {
    const char *arch;
    bool v3; /* sigmoid scores with a correction bias, groups scored by their top two */
    /* transformers' defaults for what a config leaves out */
    int64_t n_routed, top_k, n_group, topk_group, first_dense, n_shared, moe_inter;
    double scale;
    bool norm;
} ds_version;

static const ds_version v2 = {"DeepseekV2ForCausalLM", false, 64, 0, 0, 0, 0, 2, 1407, 1.0,
                              false};
static const ds_version v3 = {"DeepseekV3ForCausalLM", true, 256, 8, 8, 4, 3, 1, 2048, 2.5,
                              true};

static int64_t get_int(const lh_host_api *api, const lh_model_config *cfg, const char *key,
                       int64_t def)
{
    int64_t v;
    return api->config_get_int(cfg, key, &v) == 1 ? v : def;
}

/* What transformers' modeling of the version does, refused where the config asks for
 * something else (rather than run it another way). */
static lh_status check_version(const lh_host_api *api, const lh_model_config *cfg,
                               const ds_version *v, lh_error *err)
{
    static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "vocab_size", "kv_lora_rank",
                                       "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"};
    lh_status st = lh_config_require_ints(api, cfg, keys, sizeof keys / sizeof *keys, err);
    if (st != LH_OK)
        return st;
    if (!v->v3) { /* transformers' DeepseekV2Config has no default expert count per token */
        static const char *const v2keys[] = {"num_experts_per_tok"};
        if ((st = lh_config_require_ints(api, cfg, v2keys, 1, err)) != LH_OK)
            return st;
    }
    const char *m;
    if (!v->v3 && api->config_get_string(cfg, "topk_method", &m) == 1 &&
        strcmp(m, "greedy") != 0 && strcmp(m, "group_limited_greedy") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "topk_method '%s' is not part of "
                            "DeepSeek-V2 (greedy, group_limited_greedy)", m);
    if (api->config_get_string(cfg, "scoring_func", &m) == 1 &&
        strcmp(m, v->v3 ? "sigmoid" : "softmax") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "scoring_func '%s': %s scores with %s", m,
                            v->v3 ? "DeepSeek-V3" : "DeepSeek-V2", v->v3 ? "sigmoid" : "softmax");
    bool mlp_bias = false;
    if (api->config_get_bool(cfg, "mlp_bias", &mlp_bias) == 1 && mlp_bias)
        return lh_error_set(err, LH_E_UNSUPPORTED, "mlp_bias true: the MLP and expert "
                            "projections have no biases here");
    if (api->config_get_string(cfg, "hidden_act", &m) == 1 && strcmp(m, "silu") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "hidden_act '%s': DeepSeek's MLPs are "
                            "SiLU-gated (silu)", m);
    if (get_int(api, cfg, "moe_layer_freq", 1) != 1)
        return lh_error_set(err, LH_E_UNSUPPORTED, "moe_layer_freq %lld: every layer from "
                            "first_k_dense_replace on is sparse (transformers ignores the key)",
                            (long long)get_int(api, cfg, "moe_layer_freq", 1));
    return LH_OK;
}

static lh_status check_v2(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    return check_version(api, cfg, &v2, err);
}

static lh_status check_v3(const lh_host_api *api, const lh_model_config *cfg, lh_error *err)
{
    return check_version(api, cfg, &v3, err);
}

/* The MoE block of a sparse layer, as the version routes. */
static lh_moe_spec moe_spec(const lh_host_api *api, const lh_model_config *cfg,
                            const ds_version *v)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t inter = get_int(api, cfg, "moe_intermediate_size", v->moe_inter);
    /* transformers' V2 router never renormalizes (whatever norm_topk_prob says); V3's does
     * as told */
    bool norm = v->norm;
    if (v->v3)
        api->config_get_bool(cfg, "norm_topk_prob", &norm);
    double scale = v->scale;
    api->config_get_double(cfg, "routed_scaling_factor", &scale);
    /* V3 always limits the groups (transformers ignores topk_method); V2 only when told */
    const char *method = "greedy";
    api->config_get_string(cfg, "topk_method", &method);
    const bool grouped = v->v3 || strcmp(method, "group_limited_greedy") == 0;
    lh_moe_spec s = {
        .struct_size = sizeof s,
        .hidden = g->hidden_size,
        .n_experts = get_int(api, cfg, "n_routed_experts", v->n_routed),
        .expert_intermediate = inter,
        .route = {.top_k = get_int(api, cfg, "num_experts_per_tok", v->top_k),
                  .scoring = v->v3 ? LH_K_MOE_SIGMOID : LH_K_MOE_SOFTMAX,
                  .n_group = grouped ? get_int(api, cfg, "n_group", v->n_group) : 0,
                  .topk_group = grouped ? get_int(api, cfg, "topk_group", v->topk_group) : 0,
                  .group_score = v->v3 ? LH_K_MOE_GROUP_TOP2_SUM : LH_K_MOE_GROUP_MAX,
                  .renormalize = norm,
                  .renorm_eps = v->v3 ? 1e-20f : 0.0f,
                  .scale = (float)scale},
        .act = LH_ACT_SILU,
        .router = "gate",
        .correction_bias = v->v3 ? "e_score_correction_bias" : NULL,
        .experts = "experts",
        .gate_linear = "gate_proj",
        .up_linear = "up_proj",
        .down_linear = "down_proj",
        .shared_intermediate = inter * get_int(api, cfg, "n_shared_experts", v->n_shared),
        .shared = get_int(api, cfg, "n_shared_experts", v->n_shared) > 0 ? "shared_experts"
                                                                          : NULL,
    };
    return s;
}

/* transformers' yarn_get_mscale */
static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* DeepSeek's softmax scale: 1 / sqrt(qk head dim), times mscale(factor, mscale_all_dim)^2
 * under any scaled RoPE whose mscale_all_dim is set (transformers' yarn_apply_mscale). */
static double softmax_scale(const lh_model_geometry *g)
{
    double scale = 1.0 / sqrt((double)(g->qk_nope_head_dim + g->qk_rope_head_dim));
    const lh_rope_scaling *rs = &g->rope_scaling;
    if (rs->kind && strcmp(rs->kind, "default") != 0 && rs->mscale_all_dim != 0.0) {
        const double m = yarn_mscale(rs->factor, rs->mscale_all_dim);
        scale *= m * m;
    }
    return scale;
}

static bool get_bool(const lh_host_api *api, const lh_model_config *cfg, const char *key,
                     bool def)
{
    bool v = def;
    api->config_get_bool(cfg, key, &v);
    return v;
}

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                           const ds_version *v)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, H = g->num_attention_heads;
    const double eps = g->rms_norm_eps;
    const int64_t dense = get_int(api, cfg, "first_k_dense_replace", v->first_dense);
    const lh_moe_spec ms = moe_spec(api, cfg, v);
    const bool bias = get_bool(api, cfg, "attention_bias", false);
    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    api->add_embedding(b, model, "embed_tokens", g->vocab_size, hidden);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, layers, name);
        api->add_rmsnorm(b, layer, "input_layernorm", hidden, eps);
        const lh_attention_spec as = {
            .struct_size = sizeof as,
            .layer_index = i,
            .num_heads = H,
            .num_kv_heads = H,
            .head_dim = g->qk_nope_head_dim + g->qk_rope_head_dim,
            .rope = true,
            .rope_theta = g->rope_theta,
            .rope_scaling = g->rope_scaling,
            .max_positions = g->max_position_embeddings,
            .mla = true,
            .has_q_lora_rank = g->has_q_lora_rank,
            .q_lora_rank = g->q_lora_rank,
            .kv_lora_rank = g->kv_lora_rank,
            .qk_rope_head_dim = g->qk_rope_head_dim,
            .qk_nope_head_dim = g->qk_nope_head_dim,
            .v_head_dim = g->v_head_dim,
            .scale = softmax_scale(g),
            .rope_interleaved = !v->v3 || get_bool(api, cfg, "rope_interleave", true),
        };
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        const int64_t q_out = H * as.head_dim;
        if (g->has_q_lora_rank) {
            api->add_linear(b, attn, "q_a_proj", hidden, g->q_lora_rank, bias);
            api->add_rmsnorm(b, attn, "q_a_layernorm", g->q_lora_rank, eps);
            api->add_linear(b, attn, "q_b_proj", g->q_lora_rank, q_out, false);
        } else {
            api->add_linear(b, attn, "q_proj", hidden, q_out, false);
        }
        api->add_linear(b, attn, "kv_a_proj_with_mqa", hidden,
                        g->kv_lora_rank + g->qk_rope_head_dim, bias);
        api->add_rmsnorm(b, attn, "kv_a_layernorm", g->kv_lora_rank, eps);
        const int64_t kvb_shape[2] = {H * (g->qk_nope_head_dim + g->v_head_dim),
                                      g->kv_lora_rank};
        api->add_param(b, api->add_container(b, attn, "kv_b_proj"), "weight", 2, kvb_shape,
                       LH_PARAM_PLAIN);
        api->add_linear(b, attn, "o_proj", H * g->v_head_dim, hidden, bias);
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        if (ms.n_experts > 0 && i >= dense) {
            api->add_moe(b, layer, "mlp", &ms);
        } else {
            lh_module *mlp = api->add_mlp(b, layer, "mlp");
            api->add_linear(b, mlp, "gate_proj", hidden, g->intermediate_size, false);
            api->add_linear(b, mlp, "up_proj", hidden, g->intermediate_size, false);
            api->add_linear(b, mlp, "down_proj", g->intermediate_size, hidden, false);
        }
    }
    api->add_rmsnorm(b, model, "norm", hidden, eps);
    api->add_head(b, root, "lm_head", hidden, g->vocab_size, false);
    return api->build_status(b);
}

static lh_status construct_v2(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return construct(api, b, cfg, &v2);
}

static lh_status construct_v3(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return construct(api, b, cfg, &v3);
}

/* ---- bind and forward ------------------------------------------------------------------------ */

typedef struct ds_layer {
    const lh_weight *in_norm, *post_norm;
    const lh_weight *q, *q_a, *q_a_b, *q_a_norm, *q_b;      /* q, or q_a (+ bias), norm, q_b */
    const lh_weight *kv_a, *kv_a_b;                         /* kv_a_proj_with_mqa */
    const lh_weight *kv_norm, *kv_b, *o, *o_b;
    const lh_weight *gate, *up, *down;                      /* dense layers */
    const lh_moe_ref *moe;                                  /* sparse layers */
    const lh_attn_ref *attn;
} ds_layer;

typedef struct ds_model {
    int64_t hidden, inter, n_layers, heads, qk, lora, rope, vd, q_lora;
    float eps;
    const lh_weight *embed, *final_norm, *lm_head;
    ds_layer *layers;
} ds_model;

static void destroy(void *model)
{
    ds_model *m = model;
    if (m)
        free(m->layers);
    free(m);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      const ds_version *v, void **model, lh_forward_info *info)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    ds_model *m = calloc(1, sizeof *m);
    if (m)
        m->layers = calloc((size_t)g->num_hidden_layers, sizeof *m->layers);
    if (!m || !m->layers) {
        destroy(m);
        return api->bind_fail(bd, LH_E_NOMEM, "out of memory");
    }
    m->hidden = g->hidden_size;
    m->n_layers = g->num_hidden_layers;
    m->heads = g->num_attention_heads;
    m->qk = g->qk_nope_head_dim + g->qk_rope_head_dim;
    m->lora = g->kv_lora_rank;
    m->rope = g->qk_rope_head_dim;
    m->vd = g->v_head_dim;
    m->q_lora = g->has_q_lora_rank ? g->q_lora_rank : 0;
    m->eps = (float)g->rms_norm_eps;
    const int64_t dense = get_int(api, cfg, "first_k_dense_replace", v->first_dense);
    const lh_moe_spec ms = moe_spec(api, cfg, v);
    m->inter = g->intermediate_size; /* the dense layers' (the MoE block has its own memory) */
    m->embed = api->weight(bd, "model.embed_tokens.weight");
    m->final_norm = api->weight(bd, "model.norm.weight");
    m->lm_head = api->weight(bd, "lm_head.weight");
    for (int64_t i = 0; i < m->n_layers && api->bind_status(bd) == LH_OK; i++) {
        ds_layer *L = &m->layers[i];
        const char *p = "model.layers.%" PRId64 ".%s";
        L->in_norm = api->weight(bd, p, i, "input_layernorm.weight");
        L->post_norm = api->weight(bd, p, i, "post_attention_layernorm.weight");
        if (m->q_lora) {
            L->q_a = api->weight(bd, p, i, "self_attn.q_a_proj.weight");
            L->q_a_b = api->weight_opt(bd, p, i, "self_attn.q_a_proj.bias");
            L->q_a_norm = api->weight(bd, p, i, "self_attn.q_a_layernorm.weight");
            L->q_b = api->weight(bd, p, i, "self_attn.q_b_proj.weight");
        } else {
            L->q = api->weight(bd, p, i, "self_attn.q_proj.weight");
        }
        /* one projection, split after it: a quantized weight (int4, GGUF blocks) has no row
         * views to split it before */
        L->kv_a = api->weight(bd, p, i, "self_attn.kv_a_proj_with_mqa.weight");
        L->kv_a_b = api->weight_opt(bd, p, i, "self_attn.kv_a_proj_with_mqa.bias");
        L->kv_norm = api->weight(bd, p, i, "self_attn.kv_a_layernorm.weight");
        L->kv_b = api->weight(bd, p, i, "self_attn.kv_b_proj.weight");
        L->o = api->weight(bd, p, i, "self_attn.o_proj.weight");
        L->o_b = api->weight_opt(bd, p, i, "self_attn.o_proj.bias");
        if (ms.n_experts > 0 && i >= dense) {
            L->moe = api->moe(bd, p, i, "mlp");
        } else {
            L->gate = api->weight(bd, p, i, "mlp.gate_proj.weight");
            L->up = api->weight(bd, p, i, "mlp.up_proj.weight");
            L->down = api->weight(bd, p, i, "mlp.down_proj.weight");
        }
        L->attn = api->attention(bd, "model.layers.%" PRId64 ".self_attn", i);
    }
    lh_status st = api->bind_status(bd);
    if (st != LH_OK) {
        destroy(m);
        return st;
    }
    info->vocab_size = g->vocab_size;
    /* resid, h, proj [hidden]; q_a [q_lora, or 1 unused column without query compression];
     * q [heads x qk]; kv_a [lora + rope], split into kv_c [lora] and k_rope [rope];
     * attn [heads x v]; gate, up [inter] */
    info->scratch_bytes_per_token =
        (int64_t)sizeof(float) * (3 * m->hidden + (m->q_lora > 0 ? m->q_lora : 1) +
                                  m->heads * m->qk + 2 * (m->lora + m->rope) +
                                  m->heads * m->vd + 2 * m->inter);
    info->scratch_bytes_per_row = (int64_t)sizeof(float) * m->hidden;
    info->scratch_requests = 11;
    *model = m;
    return LH_OK;
}

static lh_status bind_v2(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                         void **model, lh_forward_info *info)
{
    return bind(api, bd, cfg, &v2, model, info);
}

static lh_status bind_v3(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                         void **model, lh_forward_info *info)
{
    return bind(api, bd, cfg, &v3, model, info);
}

/* kv_a [T, lora + rope] into the compressed KV [T, lora] and the rope key [T, rope]. */
static void split_kv_a(const lh_host_api *api, lh_fwd *f, const ds_model *m,
                       const lh_tensor *kva, lh_tensor *kvc, lh_tensor *kr)
{
    if (api->fwd_status(f) != LH_OK)
        return;
    const int64_t T = kva->shape[0], w = m->lora + m->rope;
    lh_tensor c = lh_k_view3(LH_DTYPE_F32, kva->data, 0, kva->device, T, 1, m->lora, w, w);
    lh_tensor r = lh_k_view3(LH_DTYPE_F32, kva->data, m->lora, kva->device, T, 1, m->rope, w, w);
    lh_tensor dc = lh_k_view3(LH_DTYPE_F32, kvc->data, 0, kvc->device, T, 1, m->lora, m->lora,
                              m->lora);
    lh_tensor dr = lh_k_view3(LH_DTYPE_F32, kr->data, 0, kr->device, T, 1, m->rope, m->rope,
                              m->rope);
    lh_kctx *k = api->fwd_kctx(f);
    lh_status st = lh_k_copy_view(k, &dc, &c);
    if (st == LH_OK)
        st = lh_k_copy_view(k, &dr, &r);
    if (st != LH_OK)
        api->fwd_fail(f, st, "splitting kv_a_proj_with_mqa: %s", lh_k_last_error(k));
}

static lh_status forward(void *model, const lh_host_api *api, lh_fwd *f)
{
    const ds_model *m = model;
    const int64_t T = api->fwd_step(f)->n_tokens, H = m->heads;
    lh_tensor resid = api->scratch(f, T, m->hidden), h = api->scratch(f, T, m->hidden);
    lh_tensor proj = api->scratch(f, T, m->hidden);
    lh_tensor qa = api->scratch(f, T, m->q_lora > 0 ? m->q_lora : 1);
    lh_tensor q = api->scratch(f, T, H * m->qk), kva = api->scratch(f, T, m->lora + m->rope);
    lh_tensor kvc = api->scratch(f, T, m->lora);
    lh_tensor kr = api->scratch(f, T, m->rope), attn = api->scratch(f, T, H * m->vd);
    lh_tensor gate = api->scratch(f, T, m->inter), up = api->scratch(f, T, m->inter);

    api->fwd_where(f, "embedding");
    api->embed(f, m->embed, &resid);
    api->rmsnorm(f, &resid, m->layers[0].in_norm, m->eps, 0.0f, &h);
    for (int64_t i = 0; i < m->n_layers && api->fwd_status(f) == LH_OK; i++) {
        const ds_layer *L = &m->layers[i];
        api->fwd_where(f, "layer %" PRId64, i);
        if (L->q_a) {
            api->linear(f, &h, L->q_a, L->q_a_b, &qa);
            api->rmsnorm(f, &qa, L->q_a_norm, m->eps, 0.0f, &qa);
            api->linear(f, &qa, L->q_b, NULL, &q);
        } else {
            api->linear(f, &h, L->q, NULL, &q);
        }
        api->linear(f, &h, L->kv_a, L->kv_a_b, &kva);
        split_kv_a(api, f, m, &kva, &kvc, &kr);
        api->rmsnorm(f, &kvc, L->kv_norm, m->eps, 0.0f, &kvc);
        api->attend_mla(f, L->attn, &q, &kvc, &kr, L->kv_b, &attn);
        api->linear(f, &attn, L->o, L->o_b, &proj);
        api->residual_rmsnorm(f, &resid, &proj, L->post_norm, m->eps, 0.0f, &h);
        if (L->moe) {
            api->moe_ffn(f, L->moe, &h, &proj);
        } else {
            api->linear(f, &h, L->gate, NULL, &gate);
            api->linear(f, &h, L->up, NULL, &up);
            api->act_mul(f, LH_ACT_SILU, &gate, &up, &gate);
            api->linear(f, &gate, L->down, NULL, &proj);
        }
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

static const lh_model_ops ops_v2 = {.struct_size = sizeof(lh_model_ops),
                                    .construct = construct_v2,
                                    .bind = bind_v2,
                                    .forward = forward,
                                    .destroy = destroy,
                                    .check_config = check_v2};
static const lh_model_ops ops_v3 = {.struct_size = sizeof(lh_model_ops),
                                    .construct = construct_v3,
                                    .bind = bind_v3,
                                    .forward = forward,
                                    .destroy = destroy,
                                    .check_config = check_v3};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider p[] = {
        {sizeof(lh_model_provider), v2.arch, &ops_v2, NULL},
        {sizeof(lh_model_provider), v3.arch, &ops_v3, NULL},
    };
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) {
        lh_status st = api->register_model(ctx, &p[i]);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

LH_PLUGIN_DEFINE("model_deepseek", "0.1.0", init)
