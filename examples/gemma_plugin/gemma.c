/* An out-of-tree model plugin: Gemma (GemmaForCausalLM), built only against the installed
 * plugin SDK (pkg-config llmhost-plugin).
 *
 * Gemma is the standard decoder-only LM the host builds from the config's geometry
 * (api->build_decoder_lm: Hugging Face module names, attention through the selected backend,
 * RoPE, the norm fusion chain) with three variants, all selected by lh_decoder_spec (plugin
 * ABI 2.1):
 *   - the gated MLP uses GELU with the tanh approximation (gelu_pytorch_tanh), not SiLU;
 *   - every RMSNorm scales by (1 + w): the checkpoint stores the weights as offsets from 1;
 *   - the token embeddings are multiplied by sqrt(hidden_size) on the way in.
 * lm_head is tied to model.embed_tokens (Gemma configs say tie_word_embeddings: true), and
 * head_dim comes from config.json (256 in the released models, not hidden / heads): the host
 * reads both from the geometry, so nothing here has to.
 *
 * Everything but the entry point is static; the numeric work happens in the host's kernel
 * library (libllmhost_kernels), which this plugin links but never copies. */
#include "lh_plugin.h"

#include <string.h>

/* Gemma's activation: config.json's hidden_activation when present (the released Gemma
 * checkpoints say "gelu_pytorch_tanh" there and a legacy "gelu" in hidden_act, which
 * transformers also maps to the tanh approximation), else hidden_act. */
static lh_status check_activation(const lh_host_api *api, lh_build *b,
                                  const lh_model_config *cfg)
{
    static const char *const keys[] = {"hidden_activation", "hidden_act"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *act = NULL;
        int r = api->config_get_string(cfg, keys[i], &act);
        if (r < 0)
            return api->build_fail(b, LH_E_CONFIG, "GemmaForCausalLM: %s must be a string",
                                   keys[i]);
        if (r == 0)
            continue;
        if (strcmp(act, "gelu_pytorch_tanh") == 0 || strcmp(act, "gelu") == 0 ||
            strcmp(act, "gelu_new") == 0)
            return LH_OK;
        return api->build_fail(b, LH_E_UNSUPPORTED,
                               "GemmaForCausalLM: %s \"%s\" is not supported (this plugin "
                               "implements gelu_pytorch_tanh)", keys[i], act);
    }
    return LH_OK; /* neither key: transformers' default, gelu_pytorch_tanh */
}

static lh_status construct_gemma(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    lh_status st = check_activation(api, b, cfg);
    if (st != LH_OK)
        return st;
    const lh_decoder_spec spec = {
        .struct_size = sizeof(lh_decoder_spec),
        .qkv_bias = false,
        .qk_norm = false,
        .mlp_act = LH_MLP_GELU_TANH,
        .norm_weight_offset = 1.0f,
        .scale_embeddings = true,
    };
    return api->build_decoder_lm(b, cfg, &spec);
}

static lh_status init(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    /* The spec fields above exist from plugin ABI 2.1 on; an older host would ignore them
     * and build a Llama. (The host refuses a plugin whose ABI minor exceeds its own anyway.) */
    if (api->abi_minor < 1 || !LH_API_HAS(api, build_decoder_lm))
        return api->init_fail(ctx, "GemmaForCausalLM needs plugin ABI 2.1 or later (GELU-tanh "
                              "MLP, offset RMSNorm, scaled embeddings); the host has %u.%u",
                              (unsigned)api->abi_major, (unsigned)api->abi_minor);
    const lh_model_provider p = {
        .struct_size = sizeof(lh_model_provider),
        .name = "GemmaForCausalLM",
        .construct = construct_gemma,
        .check_runtime = NULL,
    };
    return api->register_model(ctx, &p);
}

LH_PLUGIN_DEFINE("example_gemma", "0.1.0", init)
