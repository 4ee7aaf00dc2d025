/* Built-in model plugin: Qwen2 and Qwen3 (the Llama family's decoder, llama_family.c), with
 * one variant each:
 *   Qwen2ForCausalLM: q/k/v projections carry a bias (o_proj does not);
 *   Qwen3ForCausalLM: per-head RMSNorm on q and k (q_norm, k_norm), no bias.
 * Their sliding window is opt-in (use_sliding_window) and, without transformers' layer_types,
 * applies to the layers from max_window_layers on. */
#include "../llama/llama_family.h"

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

static lh_status construct2(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return llama_construct(api, b, cfg, &qwen2);
}

static lh_status construct3(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return llama_construct(api, b, cfg, &qwen3);
}

static lh_status bind2(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                       void **model, lh_forward_info *info)
{
    return llama_bind(api, bd, cfg, &qwen2, model, info);
}

static lh_status bind3(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                       void **model, lh_forward_info *info)
{
    return llama_bind(api, bd, cfg, &qwen3, model, info);
}

static const lh_model_ops ops2 = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct2,
    .check_config = llama_check_config,
    .bind = bind2,
    .forward = llama_forward,
    .destroy = llama_destroy,
};
static const lh_model_ops ops3 = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct3,
    .check_config = llama_check_config,
    .bind = bind3,
    .forward = llama_forward,
    .destroy = llama_destroy,
};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    const lh_model_provider providers[] = {
        {sizeof(lh_model_provider), "Qwen2ForCausalLM", &ops2, NULL},
        {sizeof(lh_model_provider), "Qwen3ForCausalLM", &ops3, NULL},
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
    return LH_OK;
}

LH_PLUGIN_DEFINE("model_qwen", "0.2.0", init)
