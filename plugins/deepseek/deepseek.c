/* Built-in model plugin: DeepSeek-V2 and DeepSeek-V3, their module trees so far.
 *
 *   model.embed_tokens, model.norm, lm_head (untied)
 *   model.layers.N.input_layernorm / post_attention_layernorm
 *   model.layers.N.self_attn: multi-head latent attention -- q_proj (V2-Lite: no q_lora_rank)
 *     or q_a_proj, q_a_layernorm, q_b_proj; kv_a_proj_with_mqa (the kv_lora_rank latent and
 *     the shared qk_rope_head_dim key), kv_a_layernorm, kv_b_proj, o_proj; registered with its
 *     MLA geometry, so the KV cache plans the latent width
 *   model.layers.N.mlp: a dense SiLU-gated MLP for N < first_k_dense_replace, else a mixture of
 *     n_routed_experts experts (moe_intermediate_size wide) with n_shared_experts folded into
 *     one shared expert "shared_experts", routed as transformers' modeling of the version does:
 *     V2 softmax scores, greedy or group-limited top-k (the group's best score), scaled by
 *     routed_scaling_factor, never renormalized; V3 sigmoid scores plus e_score_correction_bias
 *     for the choice, always group-limited with the groups scored by their two best,
 *     renormalized as norm_topk_prob says, scaled. Keys a config leaves out take transformers'
 *     defaults; moe_layer_freq other than 1 (which transformers ignores) is refused.
 * The tree gives explain its exact counts (active_parameters too) and the KV plan; there is no
 * forward pass yet (multi-head latent attention is not implemented in the attention backends),
 * so an engine refuses the model when it opens, saying so. DeepSeek-V3's multi-token-prediction
 * layer (num_nextn_predict_layers) is not part of the tree. The correction bias is a buffer of
 * the router (transformers counts it as no parameter; neither does explain). */
#include "lh_plugin.h"

#include <inttypes.h>
#include <stdio.h>
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

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                           const ds_version *v)
{
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, H = g->num_attention_heads;
    const double eps = g->rms_norm_eps;
    const int64_t dense = get_int(api, cfg, "first_k_dense_replace", v->first_dense);
    const lh_moe_spec ms = moe_spec(api, cfg, v);
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
        };
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        const int64_t q_out = H * as.head_dim;
        if (g->has_q_lora_rank) {
            api->add_linear(b, attn, "q_a_proj", hidden, g->q_lora_rank, false);
            api->add_rmsnorm(b, attn, "q_a_layernorm", g->q_lora_rank, eps);
            api->add_linear(b, attn, "q_b_proj", g->q_lora_rank, q_out, false);
        } else {
            api->add_linear(b, attn, "q_proj", hidden, q_out, false);
        }
        api->add_linear(b, attn, "kv_a_proj_with_mqa", hidden,
                        g->kv_lora_rank + g->qk_rope_head_dim, false);
        api->add_rmsnorm(b, attn, "kv_a_layernorm", g->kv_lora_rank, eps);
        api->add_linear(b, attn, "kv_b_proj", g->kv_lora_rank,
                        H * (g->qk_nope_head_dim + g->v_head_dim), false);
        api->add_linear(b, attn, "o_proj", H * g->v_head_dim, hidden, false);
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

/* construct only: the runner refuses a provider without bind / forward, naming it */
static const lh_model_ops ops_v2 = {.struct_size = sizeof(lh_model_ops),
                                    .construct = construct_v2,
                                    .check_config = check_v2};
static const lh_model_ops ops_v3 = {.struct_size = sizeof(lh_model_ops),
                                    .construct = construct_v3,
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
