/* llmhost plugin SDK: the module tree a model constructor builds.
 *
 * Construction is the "meta" phase: modules hold names, shapes and dtypes only; no weight
 * memory exists yet. Building-block functions live in the host and reach plugins through the
 * host API table (lh_plugin.h); the types here describe their arguments.
 *
 * Error convention for building: every add_* call returns NULL on failure and records the
 * first error in the build context ("sticky"). Later calls on a failed build return NULL at
 * once, so a constructor may chain calls and check api->build_status(b) once at the end. */
#ifndef LH_MODULE_H
#define LH_MODULE_H

#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_build lh_build;   /* one model construction; owned by the host */
typedef struct lh_module lh_module; /* a node of the tree; owned by the build */

#ifndef LH_MAX_DIMS
#define LH_MAX_DIMS 4
#endif

/* Geometry of one attention layer. The host creates the projections (names as in Hugging Face
 * checkpoints) and registers the layer in the per-model attention-layer table under
 * layer_index. */
typedef struct lh_attention_spec {
    uint32_t struct_size;
    int64_t layer_index;
    int64_t hidden_size;
    int64_t num_heads;
    int64_t num_kv_heads; /* 0 means num_heads */
    int64_t head_dim;
    bool qkv_bias;  /* q/k/v projections carry a bias (Qwen2) */
    bool o_bias;
    bool qk_norm;   /* per-head RMSNorm on q and k (Qwen3): q_norm, k_norm of width head_dim */
    double norm_eps;
    int64_t sliding_window; /* 0: full attention */
    /* Multi-head latent attention. When mla is true the projections are
     * q_proj (or q_a_proj, q_a_layernorm, q_b_proj when q_lora_rank > 0), kv_a_proj_with_mqa,
     * kv_a_layernorm, kv_b_proj, o_proj, and the cached width per token is
     * kv_lora_rank + qk_rope_head_dim. */
    bool mla;
    int64_t q_lora_rank;
    int64_t kv_lora_rank;
    int64_t qk_rope_head_dim;
    int64_t qk_nope_head_dim;
    int64_t v_head_dim;
} lh_attention_spec;

/* How a parameter may be stored once the quant config has been applied. */
typedef enum lh_param_role {
    LH_PARAM_WEIGHT_QUANTIZABLE = 0, /* a linear layer's weight matrix [out, in] */
    LH_PARAM_PLAIN = 1               /* norms, biases, embeddings: kept in the model dtype */
} lh_param_role;

#ifdef __cplusplus
}
#endif
#endif
