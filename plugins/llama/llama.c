/* Built-in model plugin: Llama and Mistral.
 *
 * Both are the standard decoder-only LM that the host builds from the config's geometry
 * (build_decoder_lm): no q/k/v bias (unless the config sets attention_bias), no q/k norm.
 * Mistral's sliding window comes from the geometry. This file is the example to copy for a
 * new architecture: include only plugin_api headers, keep everything static, register in
 * init. */
#include "lh_plugin.h"

static lh_status construct_llama(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    const lh_decoder_spec spec = {
        .struct_size = sizeof(lh_decoder_spec),
        .qkv_bias = false,
        .qk_norm = false,
    };
    return api->build_decoder_lm(b, cfg, &spec);
}

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    if (!LH_API_HAS(api, build_decoder_lm))
        return api->init_fail(ctx, "host API too old: no build_decoder_lm");
    static const char *const archs[] = {"LlamaForCausalLM", "MistralForCausalLM"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const lh_model_provider p = {
            .struct_size = sizeof(lh_model_provider),
            .name = archs[i],
            .construct = construct_llama,
            .check_runtime = NULL,
        };
        lh_status st = api->register_model(ctx, &p);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

LH_PLUGIN_DEFINE("model_llama", "0.1.0", init)
