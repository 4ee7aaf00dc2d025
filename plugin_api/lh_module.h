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
#include "lh_config.h"
#include "lh_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_build lh_build;   /* one model construction; owned by the host */
typedef struct lh_module lh_module; /* a node of the tree; owned by the build */

/* Geometry of one attention layer, registered by add_attention in the per-model
 * attention-layer table under layer_index. The attention module holds no parameters itself:
 * the plugin adds its projections (and norms) under it, named as its checkpoint names them.
 * At run time the host creates the layer's backend instance from this geometry and the run
 * config, and the forward block `attend` applies the RoPE described here to q and k (or lets
 * the backend fuse it) before the backend attends. */
typedef struct lh_attention_spec {
    uint32_t struct_size;
    int64_t layer_index;
    int64_t num_heads;
    int64_t num_kv_heads;   /* 0 means num_heads */
    int64_t head_dim;
    int64_t sliding_window; /* 0: full attention */
    double scale;           /* multiplies q.k; 0 means 1 / sqrt(head_dim) */
    /* Chunked attention (Llama 4): queries attend only within their chunk. 0: none. */
    int64_t attention_chunk_size;
    /* Rotary position embedding of q and k (rotate_half layout, as Hugging Face computes
     * it). rope false: none (learned or no positions). rope_scaling.kind NULL: unscaled. */
    bool rope;
    double rope_theta;
    lh_rope_scaling rope_scaling; /* copied, kind and factor arrays included */
    /* The longest sequence the layer was trained for (max_position_embeddings): the run's
     * default max_seq_len, and what dynamic, yarn and longrope scaling read. 0: the config's
     * max_position_embeddings. */
    int64_t max_positions;
    /* Multi-head latent attention: the cached width per token is kv_lora_rank +
     * qk_rope_head_dim (latent), not 2 x kv_heads x head_dim. head_dim is the query / key
     * head (qk_nope_head_dim + qk_rope_head_dim; 0 means that sum), the RoPE table rotates
     * qk_rope_head_dim dims (rotary_dim is set to it), scale 0 means 1 / sqrt(head_dim), and
     * the forward block is attend_mla, not attend (lh_plugin.h). */
    bool mla;
    bool has_q_lora_rank;
    int64_t q_lora_rank;
    int64_t kv_lora_rank;
    int64_t qk_rope_head_dim;
    int64_t qk_nope_head_dim;
    int64_t v_head_dim;
    /* Partial rotary: RoPE rotates the first rotary_dim dims of each head and passes the rest
     * (partial_rotary_factor). 0: the whole head. Even, <= head_dim. */
    int64_t rotary_dim;
    /* Attention-logit soft-capping (Gemma 2): scores = cap * tanh(scores / cap) before the
     * mask and softmax; needs a backend with LH_ATTN_CAP_SOFTCAP. 0: none. */
    double logit_softcap;
    /* --- ABI 3.3 --- */
    /* RoPE pairs dims (2i, 2i + 1) of the rotary part (GPT-J; DeepSeek's rope_interleave)
     * instead of (i, i + rotary_dim / 2). */
    bool rope_interleaved;
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
