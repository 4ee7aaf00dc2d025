/* llmhost plugin SDK: serving GGUF files (llama.cpp's container) with a model provider.
 *
 * A GGUF file carries no config.json and names its tensors in llama.cpp's spelling
 * ("blk.3.attn_q.weight"); which of its metadata keys mean what, and which tensor is which
 * parameter of the module tree, is architecture knowledge, so it lives in the plugin that
 * serves the architecture. The plugin registers, beside its model providers, one GGUF provider
 * per value of `general.architecture` it serves (register_gguf), saying:
 *
 *   architecture  the model provider the file feeds ("LlamaForCausalLM"; the same plugin
 *                 registers it), written as the config's architectures[0];
 *   keys          metadata keys copied into the config the provider's constructor reads
 *                 ({"hidden_size", "{arch}.embedding_length"}); "{arch}" is replaced with
 *                 general.architecture; integers stay integers, floats become the shortest
 *                 decimal that reads back as the stored float32;
 *   finish        optional: what a table cannot say (constants of the family, values derived
 *                 from several keys or from which tensors the file has), through the host
 *                 API's gguf_* getters and config_set_* setters;
 *   tensors       GGUF tensor names ("blk.{L}.attn_q.weight", "{L}" standing for a layer
 *                 index) and the checkpoint names of the tree ("model.layers.{L}.self_attn.
 *                 q_proj.weight"), with the layout the file stores them in.
 *
 * The host (not the plugin) then: writes architectures[0] and, unless the table set them,
 * vocab_size (the length of tokenizer.ggml.tokens), bos/eos/pad_token_id (from
 * tokenizer.ggml.*) and rope_scaling (the format's {arch}.rope.scaling.type / factor /
 * original_context_length: none, linear or yarn); parses the result as a config.json, with every check config.json gets;
 * reads the tokenizer and chat template from tokenizer.ggml.* / tokenizer.chat_template; and
 * binds the tensors as stored (F32, F16, BF16 and ggml's block types, zero-copy from the
 * mapping unless a layout needs a copy). A GGUF tensor no table entry names is an error naming
 * it (so an unsupported variant is never half-loaded).
 *
 * Ownership: the host copies the struct and gguf_arch; architecture, the tables and their
 * strings are referenced, so they must outlive the process (static const data). */
#ifndef LH_GGUF_H
#define LH_GGUF_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_host_api lh_host_api;
/* The GGUF file being read (metadata and tensor names), owned by the host. */
typedef struct lh_gguf_source lh_gguf_source;
/* The config.json being written from it, owned by the host. */
typedef struct lh_gguf_config lh_gguf_config;

/* How a GGUF tensor's values relate to the checkpoint tensor the tree names. In every layout
 * the dims are the tree's, reversed (GGUF lists ne[0], the contiguous one, first). */
typedef enum lh_gguf_layout {
    LH_GGUF_AS_STORED = 0,
    /* Rows permuted by llama.cpp's converter for interleaved ("NORM") RoPE: within each head
     * of head_dim rows, GGUF row 2i + j is checkpoint row j * head_dim / 2 + i (convert_hf_to_
     * gguf.py LlamaModel.permute). The host undoes it over num_attention_heads heads (Q) or
     * num_key_value_heads heads (K), whole rows, so block-quantized rows move as they are. */
    LH_GGUF_ROPE_ROWS_Q = 1,
    LH_GGUF_ROPE_ROWS_K = 2,
    /* Values stored as w + 1 (llama.cpp's Gemma norms, which it applies as x * w): the host
     * subtracts 1, F32 tensors only (exact for stored values in [0.5, 2]). */
    LH_GGUF_PLUS_ONE = 3,
    /* A tensor the model does not use: bound to nothing, counted as ignored. */
    LH_GGUF_IGNORE = 4,
    /* Stacked experts (llama.cpp's blk.N.ffn_{gate,up,down}_exps): a 3-D tensor [n_experts,
     * rows, cols] whose expert e is the tree's 2-D parameter named with "{E}" replaced by e
     * (e.g. "model.layers.{L}.block_sparse_moe.experts.{E}.w1.weight"); each expert is bound
     * in place (its rows are contiguous in the file), in whatever type the file has. */
    LH_GGUF_EXPERTS = 5
} lh_gguf_layout;

typedef struct lh_gguf_tensor_name {
    const char *gguf; /* "blk.{L}.attn_q.weight"; at most one "{L}" */
    const char *name; /* "model.layers.{L}.self_attn.q_proj.weight"; NULL with LH_GGUF_IGNORE;
                         with LH_GGUF_EXPERTS exactly one "{E}" as well */
    lh_gguf_layout layout;
} lh_gguf_tensor_name;

#define LH_GGUF_REQUIRED 1u /* absent: LH_E_CONFIG naming the metadata key and the config key */

typedef struct lh_gguf_key {
    const char *config_key; /* "hidden_size"; dotted for a nested object ("rope_scaling.factor") */
    const char *gguf_key;   /* "{arch}.embedding_length" */
    uint32_t flags;         /* LH_GGUF_REQUIRED or 0 */
} lh_gguf_key;

/* The format's own model keys (ggml docs/gguf.md, "LLM" keys) under the config.json names the
 * Llama-style families share (the host's geometry: lh_model_geometry): a provider whose
 * config reads them so starts its key table with this list. Families that spell their config
 * otherwise (GPT-2's n_embd) write their own. */
#define LH_GGUF_COMMON_KEYS                                                                   \
    {"hidden_size", "{arch}.embedding_length", LH_GGUF_REQUIRED},                             \
    {"intermediate_size", "{arch}.feed_forward_length", LH_GGUF_REQUIRED},                    \
    {"num_hidden_layers", "{arch}.block_count", LH_GGUF_REQUIRED},                            \
    {"num_attention_heads", "{arch}.attention.head_count", LH_GGUF_REQUIRED},                 \
    {"num_key_value_heads", "{arch}.attention.head_count_kv", 0},                             \
    {"head_dim", "{arch}.attention.key_length", 0},                                           \
    {"max_position_embeddings", "{arch}.context_length", 0},                                  \
    {"rms_norm_eps", "{arch}.attention.layer_norm_rms_epsilon", LH_GGUF_REQUIRED},            \
    {"rope_theta", "{arch}.rope.freq_base", 0},                                               \
    {"vocab_size", "{arch}.vocab_size", 0},                                                   \
    {"sliding_window", "{arch}.attention.sliding_window", 0}

typedef struct lh_gguf_provider {
    uint32_t struct_size;
    const char *gguf_arch;    /* general.architecture ("llama"); copied by the host */
    const char *architecture; /* the model provider fed ("LlamaForCausalLM"); static */
    const lh_gguf_key *keys;
    size_t n_keys;
    const lh_gguf_tensor_name *tensors;
    size_t n_tensors;
    /* Optional. Runs after the keys were copied; returns LH_OK or an error in err (the host
     * prefixes the file). */
    lh_status (*finish)(const lh_host_api *api, const lh_gguf_source *src, lh_gguf_config *cfg,
                        lh_error *err);
} lh_gguf_provider;

#ifdef __cplusplus
}
#endif
#endif
