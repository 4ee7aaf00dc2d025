/* The Llama family in GGUF files (lh_gguf.h): llama.cpp's names for its tensors and metadata.
 * Compiled into libmodel_llama and libmodel_qwen, as llama_family.c is.
 *
 * llama.cpp runs "llama" files with interleaved RoPE, so its converter permutes the rows of
 * q_proj and k_proj (and their biases) per head; Qwen2 and Qwen3 files keep the rotate-half
 * order the checkpoint has (llama.cpp's NEOX RoPE) and are stored as they are. */
#include "llama_family.h"

#include <stdio.h>
#include <string.h>


const lh_gguf_key llama_gguf_keys[] = {
    LH_GGUF_COMMON_KEYS,
    {"num_local_experts", "{arch}.expert_count", 0},
    {"num_experts_per_tok", "{arch}.expert_used_count", 0},
};
const size_t llama_gguf_n_keys = sizeof llama_gguf_keys / sizeof llama_gguf_keys[0];

#define LAYER(g, n, layout) {"blk.{L}." g, "model.layers.{L}." n, layout}
#define COMMON_TENSORS                                                                      \
    {"token_embd.weight", "model.embed_tokens.weight", LH_GGUF_AS_STORED},                   \
    {"output_norm.weight", "model.norm.weight", LH_GGUF_AS_STORED},                          \
    {"output.weight", "lm_head.weight", LH_GGUF_AS_STORED},                                  \
    LAYER("attn_norm.weight", "input_layernorm.weight", LH_GGUF_AS_STORED),                  \
    LAYER("attn_v.weight", "self_attn.v_proj.weight", LH_GGUF_AS_STORED),                    \
    LAYER("attn_v.bias", "self_attn.v_proj.bias", LH_GGUF_AS_STORED),                        \
    LAYER("attn_output.weight", "self_attn.o_proj.weight", LH_GGUF_AS_STORED),               \
    LAYER("attn_output.bias", "self_attn.o_proj.bias", LH_GGUF_AS_STORED),                   \
    LAYER("ffn_norm.weight", "post_attention_layernorm.weight", LH_GGUF_AS_STORED),          \
    LAYER("ffn_gate.weight", "mlp.gate_proj.weight", LH_GGUF_AS_STORED),                     \
    LAYER("ffn_up.weight", "mlp.up_proj.weight", LH_GGUF_AS_STORED),                         \
    LAYER("ffn_down.weight", "mlp.down_proj.weight", LH_GGUF_AS_STORED)

const lh_gguf_tensor_name llama_gguf_tensors_permuted[] = {
    COMMON_TENSORS,
    /* Mixtral: "llama" files with expert_count, the experts stacked per layer */
    LAYER("ffn_gate_inp.weight", "block_sparse_moe.gate.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_gate_exps.weight", "block_sparse_moe.experts.{E}.w1.weight", LH_GGUF_EXPERTS),
    LAYER("ffn_up_exps.weight", "block_sparse_moe.experts.{E}.w3.weight", LH_GGUF_EXPERTS),
    LAYER("ffn_down_exps.weight", "block_sparse_moe.experts.{E}.w2.weight", LH_GGUF_EXPERTS),
    LAYER("attn_q.weight", "self_attn.q_proj.weight", LH_GGUF_ROPE_ROWS_Q),
    LAYER("attn_q.bias", "self_attn.q_proj.bias", LH_GGUF_ROPE_ROWS_Q),
    LAYER("attn_k.weight", "self_attn.k_proj.weight", LH_GGUF_ROPE_ROWS_K),
    LAYER("attn_k.bias", "self_attn.k_proj.bias", LH_GGUF_ROPE_ROWS_K),
};
const size_t llama_gguf_n_tensors_permuted =
    sizeof llama_gguf_tensors_permuted / sizeof llama_gguf_tensors_permuted[0];

const lh_gguf_tensor_name llama_gguf_tensors_neox[] = {
    COMMON_TENSORS,
    LAYER("attn_q.weight", "self_attn.q_proj.weight", LH_GGUF_AS_STORED),
    LAYER("attn_q.bias", "self_attn.q_proj.bias", LH_GGUF_AS_STORED),
    LAYER("attn_k.weight", "self_attn.k_proj.weight", LH_GGUF_AS_STORED),
    LAYER("attn_k.bias", "self_attn.k_proj.bias", LH_GGUF_AS_STORED),
    LAYER("attn_q_norm.weight", "self_attn.q_norm.weight", LH_GGUF_AS_STORED),
    LAYER("attn_k_norm.weight", "self_attn.k_norm.weight", LH_GGUF_AS_STORED),
};
const size_t llama_gguf_n_tensors_neox =
    sizeof llama_gguf_tensors_neox / sizeof llama_gguf_tensors_neox[0];

/* qwen2moe / qwen3moe: the neox names, the router and stacked experts under "mlp", and
 * qwen2moe's shared expert with its gate */
#define NEOX_TENSORS                                                                        \
    COMMON_TENSORS,                                                                         \
    LAYER("attn_q.weight", "self_attn.q_proj.weight", LH_GGUF_AS_STORED),                   \
    LAYER("attn_q.bias", "self_attn.q_proj.bias", LH_GGUF_AS_STORED),                       \
    LAYER("attn_k.weight", "self_attn.k_proj.weight", LH_GGUF_AS_STORED),                   \
    LAYER("attn_k.bias", "self_attn.k_proj.bias", LH_GGUF_AS_STORED),                       \
    LAYER("attn_q_norm.weight", "self_attn.q_norm.weight", LH_GGUF_AS_STORED),              \
    LAYER("attn_k_norm.weight", "self_attn.k_norm.weight", LH_GGUF_AS_STORED)
const lh_gguf_tensor_name llama_gguf_tensors_moe[] = {
    NEOX_TENSORS,
    LAYER("ffn_gate_inp.weight", "mlp.gate.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_gate_exps.weight", "mlp.experts.{E}.gate_proj.weight", LH_GGUF_EXPERTS),
    LAYER("ffn_up_exps.weight", "mlp.experts.{E}.up_proj.weight", LH_GGUF_EXPERTS),
    LAYER("ffn_down_exps.weight", "mlp.experts.{E}.down_proj.weight", LH_GGUF_EXPERTS),
    LAYER("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", LH_GGUF_AS_STORED),
    LAYER("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", LH_GGUF_AS_STORED),
};
const size_t llama_gguf_n_tensors_moe =
    sizeof llama_gguf_tensors_moe / sizeof llama_gguf_tensors_moe[0];

const lh_gguf_key llama_gguf_keys_moe[] = {
    LH_GGUF_COMMON_KEYS,
    {"num_experts", "{arch}.expert_count", LH_GGUF_REQUIRED},
    {"num_experts_per_tok", "{arch}.expert_used_count", LH_GGUF_REQUIRED},
    {"moe_intermediate_size", "{arch}.expert_feed_forward_length", LH_GGUF_REQUIRED},
    {"shared_expert_intermediate_size", "{arch}.expert_shared_feed_forward_length", 0},
};
const size_t llama_gguf_n_keys_moe = sizeof llama_gguf_keys_moe / sizeof llama_gguf_keys_moe[0];

/* What every member's file says the same way: the refusals, and model_type / hidden_act /
 * tie_word_embeddings / attention_bias. */
static lh_status finish_common(const lh_host_api *api, const lh_gguf_source *src,
                               lh_gguf_config *c, const char *model_type, lh_error *err);

lh_status llama_gguf_finish(const lh_host_api *api, const lh_gguf_source *src, lh_gguf_config *c,
                            lh_error *err)
{
    /* llama.cpp writes Mixtral as a "llama" file with experts */
    char key[160];
    int64_t n_exp = 0;
    snprintf(key, sizeof key, "%s.expert_count", api->gguf_arch(src));
    const bool moe = api->gguf_get_int(src, key, &n_exp) == 1 && n_exp > 0;
    if (moe && strcmp(api->gguf_arch(src), "llama") != 0)
        return lh_error_set(err, LH_E_UNSUPPORTED, "%s = %lld: experts in '%s' files are not "
                            "supported yet (llama files with experts are read as Mixtral)", key,
                            (long long)n_exp, api->gguf_arch(src));
    if (moe && api->config_set_json(c, "architectures", "[\"MixtralForCausalLM\"]") != LH_OK)
        return lh_error_set(err, LH_E_NOMEM, "cannot write the config");
    /* transformers' model_type is llama.cpp's architecture name for every member (Mixtral's
     * is its own) */
    return finish_common(api, src, c, moe ? "mixtral" : api->gguf_arch(src), err);
}

lh_status llama_gguf_finish_moe(const lh_host_api *api, const lh_gguf_source *src,
                                lh_gguf_config *c, const char *model_type, bool norm_topk,
                                lh_error *err)
{
    /* llama.cpp runs every layer of these files sparse and renormalizes as the architecture
     * does unless {arch}.expert_weights_norm says otherwise */
    char key[160];
    snprintf(key, sizeof key, "%s.expert_weights_norm", api->gguf_arch(src));
    bool norm = norm_topk;
    if (api->gguf_get_bool(src, key, &norm) < 0)
        return lh_error_set(err, LH_E_CONFIG, "metadata key '%s' is not a bool", key);
    lh_status st = LH_OK;
    int64_t v;
    /* a shared expert whose width the file does not say is feed_forward_length wide
     * (llama.cpp's fallback) */
    if (api->gguf_has_tensor(src, "blk.0.ffn_gate_shexp.weight") &&
        api->config_peek_int(c, "shared_expert_intermediate_size", &v) != 1 &&
        api->config_peek_int(c, "intermediate_size", &v) == 1)
        st = api->config_set_int(c, "shared_expert_intermediate_size", v);
    if (st == LH_OK)
        st = api->config_set_int(c, "decoder_sparse_step", 1);
    if (st == LH_OK)
        st = api->config_set_json(c, "mlp_only_layers", "[]");
    if (st == LH_OK)
        st = api->config_set_bool(c, "norm_topk_prob", norm);
    if (st != LH_OK)
        return lh_error_set(err, st, "cannot write the config");
    return finish_common(api, src, c, model_type, err);
}

static lh_status finish_common(const lh_host_api *api, const lh_gguf_source *src,
                               lh_gguf_config *c, const char *model_type, lh_error *err)
{
    /* what the family's forward does not implement, refused by name rather than run wrong */
    if (api->gguf_has_tensor(src, "rope_freqs.weight"))
        return lh_error_set(err, LH_E_UNSUPPORTED, "rope_freqs.weight (llama.cpp's per-frequency "
                            "factors, Llama 3.1's llama3 RoPE scaling) is not supported yet");
    char key[160];
    snprintf(key, sizeof key, "%s.rope.dimension_count", api->gguf_arch(src));
    int64_t rot, hd = 0, hidden = 0, heads = 0;
    if (api->gguf_get_int(src, key, &rot) == 1) {
        api->config_peek_int(c, "hidden_size", &hidden);
        api->config_peek_int(c, "num_attention_heads", &heads);
        if (api->config_peek_int(c, "head_dim", &hd) != 1)
            hd = heads > 0 ? hidden / heads : 0;
        if (rot != hd)
            return lh_error_set(err, LH_E_UNSUPPORTED, "%s = %lld with head_dim %lld: partial "
                                "rotary embeddings are not part of this family", key,
                                (long long)rot, (long long)hd);
    }
    lh_status st = api->config_set_string(c, "model_type", model_type);
    if (st == LH_OK)
        st = api->config_set_string(c, "hidden_act", "silu");
    /* llama.cpp's converter leaves output.weight out when the head is tied */
    if (st == LH_OK)
        st = api->config_set_bool(c, "tie_word_embeddings",
                                  !api->gguf_has_tensor(src, "output.weight"));
    if (st == LH_OK)
        st = api->config_set_bool(c, "attention_bias",
                                  api->gguf_has_tensor(src, "blk.0.attn_output.bias"));
    return st == LH_OK ? LH_OK : lh_error_set(err, st, "cannot write the config");
}
