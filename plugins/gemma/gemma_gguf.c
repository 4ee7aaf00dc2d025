/* Gemma 2 and Gemma 3 in GGUF files (lh_gguf.h): llama.cpp's names, and what its converter and
 * loader assume without writing it down.
 *
 *   - Every norm weight is stored as 1 + w (llama.cpp applies x * w), so each norm tensor is
 *     LH_GGUF_PLUS_ONE: the host takes 1 back and the forward pass keeps transformers' (1 + w).
 *   - The head is always the embedding: the converter drops lm_head.weight.
 *   - query_pre_attn_scalar is not stored: llama.cpp uses hidden_size / heads for the 27B
 *     models (46 layers for Gemma 2, 62 for Gemma 3) and head_dim otherwise.
 *   - Gemma 2 slides on even layers (the plugin's default without layer_types); Gemma 3 on all
 *     but every sixth unless {arch}.attention.sliding_window_pattern says otherwise, and its
 *     sliding layers use RoPE base 10000 ({arch}.rope.freq_base_swa when present). */
#include "gemma_gguf.h"

#include <stdio.h>
#include <string.h>

static const lh_gguf_key keys[] = {
    LH_GGUF_COMMON_KEYS,
    {"rope_local_base_freq", "{arch}.rope.freq_base_swa", 0},
    {"attn_logit_softcapping", "{arch}.attn_logit_softcapping", 0},
    {"final_logit_softcapping", "{arch}.final_logit_softcapping", 0},
};

#define LAYER(g, n, layout) {"blk.{L}." g, "model.layers.{L}." n, layout}
static const lh_gguf_tensor_name tensors[] = {
    {"token_embd.weight", "model.embed_tokens.weight", LH_GGUF_AS_STORED},
    {"output_norm.weight", "model.norm.weight", LH_GGUF_PLUS_ONE},
    {"output.weight", "lm_head.weight", LH_GGUF_AS_STORED},
    LAYER("attn_norm.weight", "input_layernorm.weight", LH_GGUF_PLUS_ONE),
    LAYER("attn_q.weight", "self_attn.q_proj.weight", LH_GGUF_AS_STORED),
    LAYER("attn_k.weight", "self_attn.k_proj.weight", LH_GGUF_AS_STORED),
    LAYER("attn_v.weight", "self_attn.v_proj.weight", LH_GGUF_AS_STORED),
    LAYER("attn_output.weight", "self_attn.o_proj.weight", LH_GGUF_AS_STORED),
    LAYER("attn_q_norm.weight", "self_attn.q_norm.weight", LH_GGUF_PLUS_ONE),
    LAYER("attn_k_norm.weight", "self_attn.k_norm.weight", LH_GGUF_PLUS_ONE),
    LAYER("post_attention_norm.weight", "post_attention_layernorm.weight", LH_GGUF_PLUS_ONE),
    LAYER("ffn_norm.weight", "pre_feedforward_layernorm.weight", LH_GGUF_PLUS_ONE),
    LAYER("ffn_gate.weight", "mlp.gate_proj.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_up.weight", "mlp.up_proj.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_down.weight", "mlp.down_proj.weight", LH_GGUF_AS_STORED),
    LAYER("post_ffw_norm.weight", "post_feedforward_layernorm.weight", LH_GGUF_PLUS_ONE),
};

static lh_status finish(const lh_host_api *api, const lh_gguf_source *src, lh_gguf_config *c,
                        lh_error *err)
{
    const char *arch = api->gguf_arch(src);
    const bool g3 = strcmp(arch, "gemma3") == 0;
    lh_status st = api->config_set_string(c, "model_type", g3 ? "gemma3_text" : "gemma2");
    if (st == LH_OK)
        st = api->config_set_string(c, "hidden_activation", "gelu_pytorch_tanh");
    if (st == LH_OK)
        st = api->config_set_bool(c, "tie_word_embeddings",
                                  !api->gguf_has_tensor(src, "output.weight"));
    int64_t layers = 0, hidden = 0, heads = 0, head_dim = 0;
    api->config_peek_int(c, "num_hidden_layers", &layers);
    api->config_peek_int(c, "hidden_size", &hidden);
    api->config_peek_int(c, "num_attention_heads", &heads);
    if (api->config_peek_int(c, "head_dim", &head_dim) != 1)
        head_dim = heads > 0 ? hidden / heads : 0;
    const bool is_27b = layers == (g3 ? 62 : 46);
    if (st == LH_OK && heads > 0)
        st = api->config_set_int(c, "query_pre_attn_scalar", is_27b ? hidden / heads : head_dim);
    if (st == LH_OK && g3) {
        char key[160];
        snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
        int64_t pattern = 6;
        const int got = api->gguf_get_int(src, key, &pattern);
        if (got < 0)
            return lh_error_set(err, LH_E_UNSUPPORTED, "metadata key '%s' is not an integer "
                                "(a per-layer pattern is not supported)", key);
        st = api->config_set_int(c, "sliding_window_pattern", pattern);
        int64_t base;
        if (st == LH_OK && api->config_peek_int(c, "rope_local_base_freq", &base) == 0)
            st = api->config_set_double(c, "rope_local_base_freq", 10000.0);
    }
    return st == LH_OK ? LH_OK : lh_error_set(err, st, "cannot write the config");
}

lh_status gemma_register_gguf(const lh_host_api *api, lh_plugin_ctx *ctx)
{
    static const char *const archs[][2] = {{"gemma2", "Gemma2ForCausalLM"},
                                           {"gemma3", "Gemma3ForCausalLM"}};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        const lh_gguf_provider g = {
            .struct_size = sizeof(lh_gguf_provider),
            .gguf_arch = archs[i][0],
            .architecture = archs[i][1],
            .keys = keys,
            .n_keys = sizeof keys / sizeof keys[0],
            .tensors = tensors,
            .n_tensors = sizeof tensors / sizeof tensors[0],
            .finish = finish,
        };
        lh_status st = api->register_gguf(ctx, &g);
        if (st != LH_OK)
            return st;
    }
    return LH_OK;
}
