/* The Llama family's decoder, shared by the built-in plugins libmodel_llama (Llama, Mistral)
 * and libmodel_qwen (Qwen2, Qwen3): compiled into each (hidden symbols), never into the host.
 *
 *   model.embed_tokens                      [vocab, hidden]
 *   model.layers.N.input_layernorm          [hidden]
 *   model.layers.N.self_attn.{q,k,v,o}_proj (q_norm / k_norm [head_dim] with qk_norm)
 *   model.layers.N.post_attention_layernorm [hidden]
 *   model.layers.N.mlp.{gate,up,down}_proj  (SiLU-gated; or, where the member says so, a
 *                                           mixture of experts under its own name)
 *   model.norm                              [hidden]
 *   lm_head                                 [vocab, hidden], tied to embed_tokens when
 *                                           tie_word_embeddings
 *
 * Pre-norm residual blocks; each layer's second residual add runs fused with the next layer's
 * input norm (the last one with model.norm). A family member differs only by the variant. */
#ifndef LH_PLUGIN_LLAMA_FAMILY_H
#define LH_PLUGIN_LLAMA_FAMILY_H

#include "lh_plugin.h"

typedef struct llama_variant {
    const char *arch;
    bool qkv_bias;   /* q/k/v carry a bias whatever attention_bias says (Qwen2; o_proj has none) */
    bool qk_norm;    /* per-head RMSNorm on q and k before RoPE (Qwen3) */
    /* The window of layer i (0: full attention), from the config's sliding_window geometry and
     * the member's own rule. */
    int64_t (*layer_window)(const lh_host_api *api, const lh_model_config *cfg, int64_t i);
    /* A config key that says whether q/k/v carry a bias (Qwen2-MoE's qkv_bias, default true
     * when absent); NULL: qkv_bias above decides. */
    const char *qkv_bias_key;
    /* Layer i's feed-forward as a mixture of experts: fills *spec (names included) and *name
     * (the block's module name) and returns true; false: the dense gated MLP "mlp". NULL:
     * every layer dense. */
    bool (*layer_moe)(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                      lh_moe_spec *spec, const char **name);
} llama_variant;

/* transformers' layer_types ("sliding_attention" / "full_attention") when the config has it:
 * 1 and *window set, else 0. */
int llama_layer_types_window(const lh_host_api *api, const lh_model_config *cfg, int64_t i,
                             int64_t *window);

/* The knobs of the family that this implementation does not implement, refused by name. */
lh_status llama_check_config(const lh_host_api *api, const lh_model_config *cfg,
                             lh_error *err);
lh_status llama_construct(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                          const llama_variant *v);
lh_status llama_bind(const lh_host_api *api, lh_bind *bd, const lh_model_config *cfg,
                     const llama_variant *v, void **model, lh_forward_info *info);
lh_status llama_forward(void *model, const lh_host_api *api, lh_fwd *f);

/* GGUF (llama_gguf.c): the family's metadata keys, its tensor names with llama.cpp's RoPE
 * row permutation of q/k ("llama" files) or without it (qwen2, qwen3), and the finish hook
 * (model_type, hidden_act, tied head, attention bias). */
extern const lh_gguf_key llama_gguf_keys[];
extern const size_t llama_gguf_n_keys;
extern const lh_gguf_tensor_name llama_gguf_tensors_permuted[];
extern const size_t llama_gguf_n_tensors_permuted;
extern const lh_gguf_tensor_name llama_gguf_tensors_neox[];
extern const size_t llama_gguf_n_tensors_neox;
lh_status llama_gguf_finish(const lh_host_api *api, const lh_gguf_source *src, lh_gguf_config *c,
                            lh_error *err);
/* qwen2moe / qwen3moe files (llama.cpp runs every layer sparse, renormalizing as told): their
 * keys (the common ones and the experts'), tensors, and the finish hook's shared part. */
extern const lh_gguf_key llama_gguf_keys_moe[];
extern const size_t llama_gguf_n_keys_moe;
extern const lh_gguf_tensor_name llama_gguf_tensors_moe[];
extern const size_t llama_gguf_n_tensors_moe;
lh_status llama_gguf_finish_moe(const lh_host_api *api, const lh_gguf_source *src,
                                lh_gguf_config *c, const char *model_type, bool norm_topk,
                                lh_error *err);
void llama_destroy(void *model);

#endif
