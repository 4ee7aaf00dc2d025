/* Built-in model plugin: Llama, Mistral and Mixtral (the Llama family's decoder,
 * llama_family.c).
 *
 * All are the plain member of the family: q/k/v/o carry a bias only when the config sets
 * attention_bias, no q/k norm. Mistral's sliding window comes from the config (every layer,
 * unless transformers' layer_types says which layers slide). Mixtral is Mistral with every
 * feed-forward a mixture of experts: block_sparse_moe.gate routes each token to
 * num_experts_per_tok of num_local_experts SiLU-gated experts (w1 gate, w3 up, w2 down), softmax
 * scores renormalized over the chosen ones. */
#include "llama_family.h"

static int64_t window(const lh_host_api *api, const lh_model_config *cfg, int64_t i)
{
    int64_t w;
    if (llama_layer_types_window(api, cfg, i, &w))
        return w;
    return api->config_geometry(cfg)->sliding_window;
}

static const llama_variant llama = {.arch = "LlamaForCausalLM", .layer_window = window};

static bool mixtral_moe(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                        lh_moe_spec *s, const char **name)
{
    (void)i;
    const lh_model_geometry *g = api->config_geometry(cfg);
    int64_t n = 8, k = 2;
    api->config_get_int(cfg, "num_local_experts", &n);
    api->config_get_int(cfg, "num_experts_per_tok", &k);
    *s = (lh_moe_spec){
        .struct_size = sizeof *s,
        .hidden = g->hidden_size,
        .n_experts = n,
        .expert_intermediate = g->intermediate_size,
        .route = {.top_k = k, .scoring = LH_K_MOE_SOFTMAX, .renormalize = true, .scale = 1.0f},
        .act = LH_ACT_SILU,
        .router = "gate",
        .experts = "experts",
        .gate_linear = "w1",
        .up_linear = "w3",
        .down_linear = "w2",
    };
    *name = "block_sparse_moe";
    return true;
}

static const llama_variant mixtral = {.arch = "MixtralForCausalLM", .layer_window = window,
                                      .layer_moe = mixtral_moe};

static lh_status construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    return llama_construct(api, b, cfg, &llama);
}

static lh_status bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                      void **model, lh_forward_info *info)
{
    return llama_bind(api, bd, cfg, &llama, model, info);
}

static lh_status construct_mixtral(const lh_host_api *api, lh_build *b,
                                   const lh_model_config *cfg)
{
    return llama_construct(api, b, cfg, &mixtral);
}

static lh_status bind_mixtral(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                              void **model, lh_forward_info *info)
{
    return llama_bind(api, bd, cfg, &mixtral, model, info);
}

static const lh_model_ops ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct,
    .check_config = llama_check_config,
    .bind = bind,
    .forward = llama_forward,
    .destroy = llama_destroy,
};

static const lh_model_ops mixtral_ops = {
    .struct_size = sizeof(lh_model_ops),
    .construct = construct_mixtral,
    .check_config = llama_check_config,
    .bind = bind_mixtral,
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
    const lh_model_provider mx = {sizeof(lh_model_provider), "MixtralForCausalLM", &mixtral_ops,
                                  NULL};
    lh_status st = api->register_model(ctx, &mx);
    if (st != LH_OK)
        return st;
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
