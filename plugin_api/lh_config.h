/* llmhost plugin SDK: the typed model configuration (from config.json) and the runtime
 * description a model implementation may inspect before agreeing to serve.
 *
 * Ownership: every pointer in these structs is owned by the host and stays valid for as long
 * as the plugin call that received it runs. Plugins must copy what they keep. */
#ifndef LH_CONFIG_H
#define LH_CONFIG_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handle to the parsed config.json; read extra keys through the host API accessors. */
typedef struct lh_model_config lh_model_config;

/* RoPE scaling as Hugging Face defines it ("rope_scaling" object). kind is NULL when absent.
 * Fields not used by the kind are zero. */
typedef struct lh_rope_scaling {
    const char *kind; /* "default", "linear", "dynamic", "llama3", "yarn", ... as given */
    double factor;
    double low_freq_factor, high_freq_factor; /* llama3 */
    int64_t original_max_position_embeddings; /* llama3, yarn, dynamic */
    double beta_fast, beta_slow, attention_factor, mscale, mscale_all_dim; /* yarn */
    /* longrope (Phi-3): per-frequency divisors of inv_freq, n_factors (= rotary_dim / 2)
     * each: short_factor for sequences up to original_max_position_embeddings, long_factor
     * beyond; attention_factor as yarn's (0: from the ratio of max_position_embeddings to
     * original_max_position_embeddings). NULL / 0 for other kinds. */
    const double *short_factor, *long_factor;
    int64_t n_factors;
} lh_rope_scaling;

/* Geometry of a decoder-only transformer. Absent optional integer fields are 0 and their
 * has_ flag is false. num_key_value_heads defaults to num_attention_heads and head_dim to
 * hidden_size / num_attention_heads, as in transformers. */
typedef struct lh_model_geometry {
    uint32_t struct_size;
    const char *architecture; /* architectures[0] as written */
    const char *model_type;   /* may be NULL */
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_hidden_layers;
    int64_t num_attention_heads;
    int64_t num_key_value_heads;
    int64_t head_dim;
    int64_t vocab_size;
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    lh_rope_scaling rope_scaling;
    bool tie_word_embeddings;
    bool attention_bias;
    lh_dtype torch_dtype; /* LH_DTYPE_INVALID when the config does not say */
    /* Multi-head latent attention (DeepSeek-V2/V3). has_mla is true when kv_lora_rank is set. */
    bool has_mla;
    bool has_q_lora_rank; /* false when absent or null: queries are not compressed */
    int64_t q_lora_rank;
    int64_t kv_lora_rank;
    int64_t qk_rope_head_dim;
    int64_t qk_nope_head_dim;
    int64_t v_head_dim;
    int64_t sliding_window;       /* 0: none */
    int64_t attention_chunk_size; /* 0: none */
    bool has_draft_vocab_size;    /* EAGLE-3 draft checkpoints carry this */
    int64_t draft_vocab_size;
} lh_model_geometry;

/* What the runtime will ask of a model implementation; a target implementation may refuse it. */
typedef struct lh_runtime_desc {
    uint32_t struct_size;
    lh_dtype dtype;           /* compute/storage dtype chosen for weights */
    int64_t max_seq_len;
    int64_t max_batch_size;
    bool mm_encoder_only;
} lh_runtime_desc;

#ifdef __cplusplus
}
#endif
#endif
