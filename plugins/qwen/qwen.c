/* Built-in model plugin: Qwen2, Qwen3 and their mixtures of experts (the Llama family's
 * decoder, llama_family.c), with one variant each:
 *   Qwen2ForCausalLM: q/k/v projections carry a bias (o_proj does not);
 *   Qwen3ForCausalLM: per-head RMSNorm on q and k (q_norm, k_norm), no bias;
 *   Qwen2MoeForCausalLM: Qwen2's attention (q/k/v bias as qkv_bias says), sparse layers with a
 *   shared expert behind a sigmoid gate;
 *   Qwen3MoeForCausalLM: Qwen3's attention, sparse layers without a shared expert.
 * Their sliding window is opt-in (use_sliding_window) and, without transformers' layer_types,
 * applies to the layers from max_window_layers on. */
#include "../llama/llama_family.h"

#include <inttypes.h>
#include <stdio.h>

static int64_t window(const lh_host_api *api, const lh_model_config *cfg, int64_t i)
{
    /* opt-in: transformers' Qwen2Config / Qwen3Config default use_sliding_window to false */
    bool use_sw = false;
    const int64_t w = api->config_geometry(cfg)->sliding_window;
    if (w <= 0 || api->config_get_bool(cfg, "use_sliding_window", &use_sw) != 1 || !use_sw)
        return 0;
    int64_t lw;
    if (llama_layer_types_window(api, cfg, i, &lw))
        return lw;
    int64_t mwl;
    if (api->config_get_int(cfg, "max_window_layers", &mwl) == 1)
        return i >= mwl ? w : 0;
    return w;
}

static const llama_variant qwen2 = {.arch = "Qwen2ForCausalLM", .qkv_bias = true,
                                    .layer_window = window};
static const llama_variant qwen3 = {.arch = "Qwen3ForCausalLM", .qk_norm = true,
                                    .layer_window = window};

/* Qwen2-MoE / Qwen3-MoE: layer i is sparse unless it is listed in mlp_only_layers, and then
 * only every decoder_sparse_step-th layer ((i + 1) % step == 0), as transformers decides. */
/* transformers' defaults for what a config leaves out: Qwen2-MoE (shared) / Qwen3-MoE */
#define QWEN_DEFAULT(shared, q2, q3) ((shared) ? (q2) : (q3))

/* transformers 5 writes Qwen3-MoE's expert count as num_local_experts, Qwen2-MoE's (and
 * every earlier version's) as num_experts */
static int64_t n_experts(const lh_host_api *api, const lh_model_config *cfg, bool shared)
{
    int64_t n = QWEN_DEFAULT(shared, 60, 128);
    if (api->config_get_int(cfg, "num_experts", &n) != 1)
        api->config_get_int(cfg, "num_local_experts", &n);
    return n;
}

static bool sparse_layer(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                         bool shared)
{
    int64_t step = 1, v;
    if (n_experts(api, cfg, shared) <= 0)
        return false;
    char key[48];
    for (int64_t j = 0;; j++) {
        snprintf(key, sizeof key, "mlp_only_layers.%" PRId64, j);
        if (api->config_get_int(cfg, key, &v) != 1)
            break;
        if (v == i)
            return false;
    }
    if (api->config_get_int(cfg, "decoder_sparse_step", &step) == 1 && step > 0)
        return (i + 1) % step == 0;
    return true;
}

/* The experts of both: mlp.gate routes to num_experts_per_tok of num_experts SiLU-gated
 * experts (mlp.experts.N.{gate,up,down}_proj, moe_intermediate_size wide), softmax scores,
 * renormalized over the chosen ones only with norm_topk_prob. Qwen2-MoE adds a shared expert
 * (mlp.shared_expert) scaled by sigmoid(mlp.shared_expert_gate(x)). */
static bool qwen_moe(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                     lh_moe_spec *s, const char **name, bool shared)
{
    if (!sparse_layer(api, cfg, i, shared))
        return false;
    const lh_model_geometry *g = api->config_geometry(cfg);
    int64_t n = n_experts(api, cfg, shared), k = QWEN_DEFAULT(shared, 4, 8);
    int64_t inter = QWEN_DEFAULT(shared, 1408, 768), sh = shared ? 5632 : 0;
    bool norm = false;
    api->config_get_int(cfg, "num_experts_per_tok", &k);
    api->config_get_int(cfg, "moe_intermediate_size", &inter);
    api->config_get_bool(cfg, "norm_topk_prob", &norm);
    if (shared)
        api->config_get_int(cfg, "shared_expert_intermediate_size", &sh);
    *s = (lh_moe_spec){
        .struct_size = sizeof *s,
        .hidden = g->hidden_size,
        .n_experts = n,
        .expert_intermediate = inter,
        .route = {.top_k = k, .scoring = LH_K_MOE_SOFTMAX, .renormalize = norm, .scale = 1.0f},
        .act = LH_ACT_SILU,
        .router = "gate",
        .experts = "experts",
        .gate_linear = "gate_proj",
        .up_linear = "up_proj",
        .down_linear = "down_proj",
        .shared_intermediate = sh,
        .shared = sh > 0 ? "shared_expert" : NULL,
        .shared_gate = sh > 0 ? "shared_expert_gate" : NULL,
    };
    *name = "mlp";
    return true;
}

static bool qwen2_moe_layer(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                            lh_moe_spec *s, const char **name)
{
    return qwen_moe(api, cfg, i, s, name, true);
}

static bool qwen3_moe_layer(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                            lh_moe_spec *s, const char **name)
{
    return qwen_moe(api, cfg, i, s, name, false);
}

static const llama_variant qwen2_moe = {.arch = "Qwen2MoeForCausalLM", .qkv_bias_key = "qkv_bias",
                                        .layer_window = window, .layer_moe = qwen2_moe_layer};
static const llama_variant qwen3_moe = {.arch = "Qwen3MoeForCausalLM", .qk_norm = true,
                                        .layer_window = window, .layer_moe = qwen3_moe_layer};

#define QWEN_OPS(NAME, VARIANT)                                                                 \
    static lh_status construct_##NAME(const lh_host_api *api, lh_build *b,                     \
                                      const lh_model_config *cfg)                                \
    {                                                                                           \
        return llama_construct(api, b, cfg, &VARIANT);                                          \
    }                                                                                           \
    static lh_status bind_##NAME(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg, \
                                 void **model, lh_forward_info *info)                           \
    {                                                                                           \
        return llama_bind(api, bd, cfg, &VARIANT, model, info);                                 \
    }                                                                                           \
    static const lh_model_ops ops_##NAME = {                                                    \
        .struct_size = sizeof(lh_model_ops),                                                    \
        .construct = construct_##NAME,                                                          \
        .check_config = llama_check_config,                                                     \
        .bind = bind_##NAME,                                                                    \
        .forward = llama_forward,                                                               \
        .destroy = llama_destroy,                                                               \
    };

QWEN_OPS(qwen2, qwen2)
QWEN_OPS(qwen3, qwen3)
QWEN_OPS(qwen2_moe, qwen2_moe)
QWEN_OPS(qwen3_moe, qwen3_moe)

static lh_status finish_qwen2moe(const lh_host_api *api, const lh_gguf_source *src,
                                 lh_gguf_config *c, lh_error *err)
{
    return llama_gguf_finish_moe(api, src, c, "qwen2_moe", false, err);
}

static lh_status finish_qwen3moe(const lh_host_api *api, const lh_gguf_source *src,
                                 lh_gguf_config *c, lh_error *err)
{
    return llama_gguf_finish_moe(api, src, c, "qwen3_moe", true, err);
}

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider providers[] = {
        {sizeof(lh_model_provider), "Qwen2ForCausalLM", &ops_qwen2, NULL},
        {sizeof(lh_model_provider), "Qwen3ForCausalLM", &ops_qwen3, NULL},
        {sizeof(lh_model_provider), "Qwen2MoeForCausalLM", &ops_qwen2_moe, NULL},
        {sizeof(lh_model_provider), "Qwen3MoeForCausalLM", &ops_qwen3_moe, NULL},
    };
    for (size_t i = 0; i < sizeof providers / sizeof providers[0]; i++) {
        lh_status st = api->register_model(ctx, &providers[i]);
        if (st != LH_OK)
            return st;
    }
    /* llama.cpp stores both as the checkpoint has them (NEOX RoPE: no row permutation) */
    static const char *const gguf[][2] = {{"qwen2", "Qwen2ForCausalLM"},
                                          {"qwen3", "Qwen3ForCausalLM"}};
    for (size_t i = 0; i < sizeof gguf / sizeof gguf[0]; i++) {
        const lh_gguf_provider g = {
            .struct_size = sizeof(lh_gguf_provider),
            .gguf_arch = gguf[i][0],
            .architecture = gguf[i][1],
            .keys = llama_gguf_keys,
            .n_keys = llama_gguf_n_keys,
            .tensors = llama_gguf_tensors_neox,
            .n_tensors = llama_gguf_n_tensors_neox,
            .finish = llama_gguf_finish,
        };
        lh_status st = api->register_gguf(ctx, &g);
        if (st != LH_OK)
            return st;
    }
    /* llama.cpp's mixtures of experts: qwen2moe keeps softmax weights as they are,
     * qwen3moe renormalizes them (what llama.cpp runs, whatever the source checkpoint said) */
    const lh_gguf_provider moe[] = {
        {.struct_size = sizeof(lh_gguf_provider), .gguf_arch = "qwen2moe",
         .architecture = "Qwen2MoeForCausalLM", .keys = llama_gguf_keys_moe,
         .n_keys = llama_gguf_n_keys_moe, .tensors = llama_gguf_tensors_moe,
         .n_tensors = llama_gguf_n_tensors_moe, .finish = finish_qwen2moe},
        {.struct_size = sizeof(lh_gguf_provider), .gguf_arch = "qwen3moe",
         .architecture = "Qwen3MoeForCausalLM", .keys = llama_gguf_keys_moe,
         .n_keys = llama_gguf_n_keys_moe, .tensors = llama_gguf_tensors_moe,
         .n_tensors = llama_gguf_n_tensors_moe, .finish = finish_qwen3moe},
    };
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) {
        lh_status st = api->register_gguf(ctx, &moe[i]);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

LH_PLUGIN_DEFINE("model_qwen", "0.2.0", init)
