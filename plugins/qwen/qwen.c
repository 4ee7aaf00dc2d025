/* Built-in model plugin: Qwen2 and Qwen3.
 *
 * Both are the standard decoder-only LM the host builds from the config's geometry
 * (build_decoder_lm), with one variant each:
 *   Qwen2ForCausalLM: q/k/v projections carry a bias (o_proj does not);
 *   Qwen3ForCausalLM: per-head RMSNorm on q and k (q_norm, k_norm), no bias. */
#include "lh_plugin.h"

static lh_status construct_qwen2(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    const lh_decoder_spec spec = {
        .struct_size = sizeof(lh_decoder_spec),
        .qkv_bias = true,
        .qk_norm = false,
    };
    return api->build_decoder_lm(b, cfg, &spec);
}

static lh_status construct_qwen3(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    const lh_decoder_spec spec = {
        .struct_size = sizeof(lh_decoder_spec),
        .qkv_bias = false,
        .qk_norm = true,
    };
    return api->build_decoder_lm(b, cfg, &spec);
}

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    if (!LH_API_HAS(api, build_decoder_lm))
        return api->init_fail(ctx, "host API too old: no build_decoder_lm");
    const lh_model_provider providers[] = {
        {sizeof(lh_model_provider), "Qwen2ForCausalLM", construct_qwen2, NULL},
        {sizeof(lh_model_provider), "Qwen3ForCausalLM", construct_qwen3, NULL},
    };
    for (size_t i = 0; i < sizeof providers / sizeof providers[0]; i++) {
        lh_status st = api->register_model(ctx, &providers[i]);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}

LH_PLUGIN_DEFINE("model_qwen", "0.1.0", init)
