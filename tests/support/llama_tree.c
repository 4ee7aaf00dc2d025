#include "llama_tree.h"

#include <inttypes.h>
#include <stdio.h>

/* The fields every decoder needs; the host no longer checks them for the plugin. */
static lh_status require_geometry(const lh_host_api *api, lh_build *b, const lh_model_config *cfg)
{
    static const char *const keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "vocab_size"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        int64_t v;
        if (api->config_get_int(cfg, keys[i], &v) != 1)
            return api->build_fail(b, LH_E_CONFIG, "missing required field '%s' for a decoder "
                                   "model (architecture %s)", keys[i],
                                   api->config_geometry(cfg)->architecture);
    }
    return LH_OK;
}

lh_status test_mla_projections(const lh_host_api *api, lh_build *b, lh_module *attn,
                               int64_t hidden, const lh_attention_spec *s, double eps)
{
    const int64_t q_out = s->num_heads * (s->qk_nope_head_dim + s->qk_rope_head_dim);
    if (s->has_q_lora_rank) {
        api->add_linear(b, attn, "q_a_proj", hidden, s->q_lora_rank, false);
        api->add_rmsnorm(b, attn, "q_a_layernorm", s->q_lora_rank, eps);
        api->add_linear(b, attn, "q_b_proj", s->q_lora_rank, q_out, false);
    } else {
        api->add_linear(b, attn, "q_proj", hidden, q_out, false);
    }
    /* the compressed KV latent and the shared RoPE key: what the cache holds */
    api->add_linear(b, attn, "kv_a_proj_with_mqa", hidden, s->kv_lora_rank + s->qk_rope_head_dim,
                    false);
    api->add_rmsnorm(b, attn, "kv_a_layernorm", s->kv_lora_rank, eps);
    api->add_linear(b, attn, "kv_b_proj", s->kv_lora_rank,
                    s->num_heads * (s->qk_nope_head_dim + s->v_head_dim), false);
    api->add_linear(b, attn, "o_proj", s->num_heads * s->v_head_dim, hidden, false);
    return api->build_status(b);
}

lh_status test_llama_tree(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                          bool qkv_bias, bool qk_norm)
{
    if (!cfg)
        return api->build_fail(b, LH_E_USAGE, "test_llama_tree: NULL config");
    lh_status st = require_geometry(api, b, cfg);
    if (st != LH_OK)
        return st;
    const lh_model_geometry *g = api->config_geometry(cfg);
    const int64_t hidden = g->hidden_size, vocab = g->vocab_size, D = g->head_dim;
    const int64_t q_out = g->num_attention_heads * D, kv_out = g->num_key_value_heads * D;
    const double eps = g->rms_norm_eps;
    /* transformers: Llama/Mistral put attention_bias on q, k, v and o; Qwen2 has q/k/v bias
     * and no o bias */
    const bool bias = qkv_bias || g->attention_bias, o_bias = g->attention_bias;
    /* Qwen2 configs carry a sliding_window value with use_sliding_window: false */
    int64_t window = g->sliding_window;
    bool use_sw;
    if (api->config_get_bool(cfg, "use_sliding_window", &use_sw) == 1 && !use_sw)
        window = 0;

    lh_module *root = api->module_root(b);
    lh_module *model = api->add_container(b, root, "model");
    lh_module *embed = api->add_embedding(b, model, "embed_tokens", vocab, hidden);
    lh_module *layers = api->add_container(b, model, "layers");
    for (int64_t i = 0; i < g->num_hidden_layers && api->build_status(b) == LH_OK; i++) {
        char name[24];
        snprintf(name, sizeof name, "%" PRId64, i);
        lh_module *layer = api->add_container(b, layers, name);
        api->add_rmsnorm(b, layer, "input_layernorm", hidden, eps);
        lh_attention_spec as = {
            .struct_size = sizeof as,
            .layer_index = i,
            .num_heads = g->num_attention_heads,
            .num_kv_heads = g->num_key_value_heads,
            .head_dim = D,
            .sliding_window = window,
            .attention_chunk_size = g->attention_chunk_size,
            .rope = true,
            .rope_theta = g->rope_theta,
            .rope_scaling = g->rope_scaling,
            .max_positions = g->max_position_embeddings,
        };
        if (g->has_mla) {
            as.mla = true;
            /* the query/key head is the non-rotated part plus the rotated part */
            as.head_dim = g->qk_nope_head_dim + g->qk_rope_head_dim;
            as.has_q_lora_rank = g->has_q_lora_rank;
            as.q_lora_rank = g->has_q_lora_rank ? g->q_lora_rank : 0;
            as.kv_lora_rank = g->kv_lora_rank;
            as.qk_rope_head_dim = g->qk_rope_head_dim;
            as.qk_nope_head_dim = g->qk_nope_head_dim;
            as.v_head_dim = g->v_head_dim;
        }
        lh_module *attn = api->add_attention(b, layer, "self_attn", &as);
        if (g->has_mla) {
            test_mla_projections(api, b, attn, hidden, &as, eps);
        } else {
            api->add_linear(b, attn, "q_proj", hidden, q_out, bias);
            api->add_linear(b, attn, "k_proj", hidden, kv_out, bias);
            api->add_linear(b, attn, "v_proj", hidden, kv_out, bias);
            api->add_linear(b, attn, "o_proj", q_out, hidden, o_bias);
            if (qk_norm) {
                api->add_rmsnorm(b, attn, "q_norm", D, eps);
                api->add_rmsnorm(b, attn, "k_norm", D, eps);
            }
        }
        api->add_rmsnorm(b, layer, "post_attention_layernorm", hidden, eps);
        lh_module *mlp = api->add_mlp(b, layer, "mlp");
        api->add_linear(b, mlp, "gate_proj", hidden, g->intermediate_size, false);
        api->add_linear(b, mlp, "up_proj", hidden, g->intermediate_size, false);
        api->add_linear(b, mlp, "down_proj", g->intermediate_size, hidden, false);
    }
    api->add_rmsnorm(b, model, "norm", hidden, eps);
    /* add_head: a linear the memory plan counts as "lm_head" */
    lh_module *head = api->add_head(b, root, "lm_head", hidden, vocab, false);
    if (g->tie_word_embeddings)
        api->tie_weights(b, head, embed);
    return api->build_status(b);
}
