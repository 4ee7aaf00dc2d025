/* Built-in model plugin: Llama and Mistral (the Llama family's decoder, llama_family.c).
 *
 * Both are the plain member of the family: q/k/v/o carry a bias only when the config sets
 * attention_bias, no q/k norm. Mistral's sliding window comes from the config (every layer,
 * unless transformers' layer_types says which layers slide). */
#include "llama_family.h"

static int64_t window(const lh_host_api *api, const lh_model_config *cfg, int64_t i)
{
    int64_t w;
    if (llama_layer_types_window(api, cfg, i, &w))
        return w;
    return api->config_geometry(cfg)->sliding_window;
}

static const llama_variant llama = {.arch = "LlamaForCausalLM", .layer_window = window};

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return llama_construct(api, b, cfg, &llama);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info)
{
    return llama_bind(api, bd, cfg, &llama, model, info);
}

static const lh_model_ops ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct,
    .check_config = llama_check_config,
    .bind = bind,
    .forward = llama_forward,
    .destroy = llama_destroy,
};

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const lh_model_provider p = {
            .struct_size = sizeof(lh_model_provider),
            .name = archs[i],
            .ops = &ops,
        };
        lh_status st = api->register_model(ctx, &p);
        if (st != LH_OK)
            return st;
    }
    const lh_gguf_provider g = {
        .struct_size = sizeof(lh_gguf_provider),
        .gguf_arch = "llama",
        .architecture = "LlamaForCausalLM",
        .keys = llama_gguf_keys,
        .n_keys = llama_gguf_n_keys,
        .tensors = llama_gguf_tensors_permuted,
        .n_tensors = llama_gguf_n_tensors_permuted,
        .finish = llama_gguf_finish,
    };
    return api->register_gguf(ctx, &g);
}

LH_PLUGIN_DEFINE("model_llama", "0.2.0", init)
