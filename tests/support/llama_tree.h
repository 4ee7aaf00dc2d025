/* Test-local model constructors, built only through the host API table (lh_plugin.h), as a
 * plugin builds them.
 *
 * Since plugin ABI 3 the host builds no architecture: the Llama family's tree is built by the
 * built-in plugins (plugins/llama/llama_family.c). The tree and memory-plan tests need that
 * same tree without linking plugin code, so this is a copy of it:
 *
 *   model.embed_tokens                      [vocab, hidden]
 *   model.layers.N.input_layernorm          [hidden]
 *   model.layers.N.self_attn.{q,k,v,o}_proj (q_norm / k_norm [head_dim] with qk_norm)
 *   model.layers.N.post_attention_layernorm [hidden]
 *   model.layers.N.mlp.{gate,up,down}_proj
 *   model.norm                              [hidden]
 *   lm_head (add_head)                      [vocab, hidden], tied to embed_tokens when
 *                                           tie_word_embeddings
 *
 * Same names, order, shapes and tie as llama_construct: the tests' parameter counts,
 * iteration order and checkpoints depend on it. Keep the two in step. */
#ifndef LH_TEST_LLAMA_TREE_H
#define LH_TEST_LLAMA_TREE_H

#include "lh_plugin.h"

#include <stdbool.h>

/* The Llama family tree for cfg. qkv_bias: q/k/v carry a bias whatever attention_bias says
 * (Qwen2); qk_norm: per-head q_norm / k_norm (Qwen3). attention_bias puts a bias on q, k, v
 * and o. A config with MLA geometry (kv_lora_rank) gets DeepSeek's MLA attention
 * (test_mla_projections) in place of q/k/v/o, as the host's build_decoder_lm did before ABI 3:
 * the memory plan of a DeepSeek config stays testable (its MoE MLP is not built: the MLP
 * stays dense). Missing decoder fields fail the build with LH_E_CONFIG naming the field.
 * Returns api->build_status(b). */
lh_status test_llama_tree(const lh_host_api *api, lh_build *b, const lh_model_config *cfg,
                          bool qkv_bias, bool qk_norm);

/* The projections of one DeepSeek-V2/V3 multi-head latent attention layer under `attn` (an
 * add_attention module whose spec is `s`, s->mla set), named as DeepSeek checkpoints name
 * them:
 *   q_a_proj [q_lora_rank, hidden], q_a_layernorm, q_b_proj [heads * (nope + rope), q_lora_rank]
 *     (or q_proj [heads * (nope + rope), hidden] without q_lora_rank)
 *   kv_a_proj_with_mqa [kv_lora_rank + rope, hidden], kv_a_layernorm [kv_lora_rank]
 *   kv_b_proj [heads * (nope + v), kv_lora_rank], o_proj [hidden, heads * v]
 * Returns api->build_status(b). */
lh_status test_mla_projections(const lh_host_api *api, lh_build *b, lh_module *attn,
                               int64_t hidden, const lh_attention_spec *s, double eps);

#endif
