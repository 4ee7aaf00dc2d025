/* llmhost plugin SDK: the plugin ABI, the registration contract and the host API table.
 *
 * A plugin is a shared object exporting exactly one symbol, LH_PLUGIN_ENTRY_SYMBOL, a function
 * returning a constant descriptor. Define it with one line:
 *
 *     LH_PLUGIN_DEFINE("my_models", "1.0.0", my_init);
 *
 * The host checks the descriptor (magic, size, ABI version) before it runs any other plugin
 * code, then calls init(api, ctx) once per process. init registers providers through the api
 * table. Registration is transactional: if init returns an error, nothing it registered stays.
 *
 * ABI rules: LH_PLUGIN_ABI_MAJOR must equal the host's; LH_PLUGIN_ABI_MINOR must not exceed it.
 * Structs carry their own size and only ever grow at the end (append-only). A plugin reads a
 * host API field only if api->struct_size covers it (LH_API_HAS).
 *
 * Plugins include only plugin_api/ headers and reference no symbol of libllmhost; everything
 * they need from the host arrives through lh_host_api. */
#ifndef LH_PLUGIN_H
#define LH_PLUGIN_H

#include "lh_types.h"
#include "lh_config.h"
#include "lh_module.h"
#include "lh_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LH_PLUGIN_MAGIC 0x504d484cu /* "LHMP" little-endian */
#define LH_PLUGIN_ABI_MAJOR 2
#define LH_PLUGIN_ABI_MINOR 1
#define LH_PLUGIN_ENTRY_SYMBOL "lh_plugin_entry"

typedef struct lh_host_api lh_host_api;
typedef struct lh_plugin_ctx lh_plugin_ctx; /* the loading plugin, as the host sees it */

/* ---- providers a plugin can register -------------------------------------------------- */

/* Builds the module tree for one architecture. Must touch no weight memory. Returns LH_OK or
 * the status recorded in the build (api->build_status). */
typedef lh_status (*lh_model_construct_fn)(const lh_host_api *api, lh_build *b,
                                           const lh_model_config *cfg);

/* Optional: asked before construction whether this implementation serves the runtime `rt`.
 * Return LH_OK to accept; any other status refuses, with a human reason written to
 * reason[0..reason_len). Used for override targets (model_impl). */
typedef lh_status (*lh_model_check_runtime_fn)(const lh_host_api *api, const lh_model_config *cfg,
                                               const lh_runtime_desc *rt, char *reason,
                                               size_t reason_len);

typedef struct lh_model_provider {
    uint32_t struct_size;
    const char *name; /* architecture, e.g. "LlamaForCausalLM"; copied by the host */
    lh_model_construct_fn construct;
    lh_model_check_runtime_fn check_runtime; /* may be NULL: serves every runtime */
} lh_model_provider;

/* A draft-model builder for one speculative-decoding mode (e.g. "eagle3", "mtp"). */
typedef struct lh_draft_provider {
    uint32_t struct_size;
    const char *mode;
    lh_model_construct_fn construct;
} lh_draft_provider;

/* Attention backend capability flags: constant, readable without an instance. */
#define LH_ATTN_CAP_FUSED_ROPE     (1u << 0)
#define LH_ATTN_CAP_FUSED_QKV      (1u << 1)
#define LH_ATTN_CAP_MLA            (1u << 2)
#define LH_ATTN_CAP_FP8_KV         (1u << 3)
#define LH_ATTN_CAP_FP4_KV         (1u << 4)
#define LH_ATTN_CAP_CHUNKED        (1u << 5)
#define LH_ATTN_CAP_SPARSE         (1u << 6)
#define LH_ATTN_CAP_SLIDING_WINDOW (1u << 7)
/* mixed-precision KV: keys and values in different dtypes (kv_cache.k_dtype / v_dtype) */
#define LH_ATTN_CAP_MIXED_KV       (1u << 8)
/* keys and values live in the host's paged KV cache manager (lh_attention.h) */
#define LH_ATTN_CAP_PAGED_KV       (1u << 9)

/* An attention backend: its name, constant capabilities (readable without an instance) and
 * the per-layer vtable (lh_attention.h). */
typedef struct lh_attn_backend_provider {
    uint32_t struct_size;
    const char *name; /* matched case-insensitively */
    uint64_t capabilities;
    const lh_attn_ops *ops; /* may be NULL for a backend that is only described */
} lh_attn_backend_provider;

/* The gated MLP's activation: out = act(gate_proj(x)) * up_proj(x). */
typedef enum lh_mlp_activation { LH_MLP_SILU = 0, LH_MLP_GELU_TANH = 1 } lh_mlp_activation;

/* Variants of the standard decoder-only LM (see lh_host_api.build_decoder_lm).
 * Append-only: the host reads a field only when struct_size covers it; fields beyond a
 * caller's struct_size read as their defaults (zero: the Llama way). The smallest accepted
 * struct_size is offsetof(lh_decoder_spec, mlp_act) (ABI 2.0). */
typedef struct lh_decoder_spec {
    uint32_t struct_size;
    bool qkv_bias; /* q/k/v projections carry a bias (Qwen2); also forced by attention_bias */
    bool qk_norm;  /* per-head RMSNorm on q and k (Qwen3) */
    /* --- ABI 2.1 --- */
    lh_mlp_activation mlp_act;  /* LH_MLP_SILU = 0 (default) | LH_MLP_GELU_TANH = 1 */
    float norm_weight_offset;   /* every RMSNorm computes x / rms(x) * (w + offset): 0 Llama, 1 Gemma */
    bool scale_embeddings;      /* hidden = embedding * sqrt(hidden_size), the factor rounded to the checkpoint's dtype first (HF) */
} lh_decoder_spec;

/* ---- the host API table --------------------------------------------------------------- */

struct lh_host_api {
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;

    /* Logging through the host logger (LLMHOST_LOG). ctx may be NULL outside init. */
    void (*log)(lh_plugin_ctx *ctx, lh_log_level level, const char *fmt, ...) LH_PRINTF(3, 4);
    /* Absolute path of the plugin file being initialized (to find data shipped beside it). */
    const char *(*plugin_path)(lh_plugin_ctx *ctx);
    /* Record why init fails; returns LH_E_INIT so init can `return api->init_fail(...)`. */
    lh_status (*init_fail)(lh_plugin_ctx *ctx, const char *fmt, ...) LH_PRINTF(2, 3);

    /* Registration: valid only during init. The host copies the struct and its strings.
     * Errors: LH_E_USAGE for a NULL/empty name, a missing function, a struct_size too small,
     * or a (kind, name) this plugin already registered; LH_E_USAGE after init returned. */
    lh_status (*register_model)(lh_plugin_ctx *ctx, const lh_model_provider *p);
    lh_status (*register_vision_encoder)(lh_plugin_ctx *ctx, const lh_model_provider *p);
    lh_status (*register_draft)(lh_plugin_ctx *ctx, const lh_draft_provider *p);
    lh_status (*register_attention_backend)(lh_plugin_ctx *ctx, const lh_attn_backend_provider *p);

    /* Model config: the typed geometry, and raw access to any other key. `key` is a dotted
     * path ("rope_scaling.factor"). Getters return 1 and set *out when present with the right
     * type, 0 when absent or null, -1 when present with another type. Strings are owned by
     * the config. */
    const lh_model_geometry *(*config_geometry)(const lh_model_config *cfg);
    int (*config_get_int)(const lh_model_config *cfg, const char *key, int64_t *out);
    int (*config_get_double)(const lh_model_config *cfg, const char *key, double *out);
    int (*config_get_bool)(const lh_model_config *cfg, const char *key, bool *out);
    int (*config_get_string)(const lh_model_config *cfg, const char *key, const char **out);

    /* Building blocks (meta phase). See lh_module.h for the sticky error convention. Names
     * are single path components ("q_proj"); the host joins them with '.'. */
    lh_module *(*module_root)(lh_build *b);
    lh_module *(*add_container)(lh_build *b, lh_module *parent, const char *name);
    lh_module *(*add_embedding)(lh_build *b, lh_module *parent, const char *name, int64_t num,
                                int64_t dim);
    lh_module *(*add_linear)(lh_build *b, lh_module *parent, const char *name, int64_t in,
                             int64_t out, bool bias);
    lh_module *(*add_rmsnorm)(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                              double eps);
    /* gate_proj, up_proj [inter x hidden] and down_proj [hidden x inter], no bias, SiLU. */
    lh_module *(*add_gated_mlp)(lh_build *b, lh_module *parent, const char *name, int64_t hidden,
                                int64_t intermediate);
    lh_module *(*add_attention)(lh_build *b, lh_module *parent, const char *name,
                                const lh_attention_spec *spec);
    /* A raw parameter on a module, for layers the blocks above do not cover. */
    lh_status (*add_param)(lh_build *b, lh_module *m, const char *name, int ndim,
                           const int64_t *shape, lh_param_role role);
    /* Norm fusion chain: `layer`'s residual add runs fused with `next_norm`. */
    lh_status (*chain_norm)(lh_build *b, lh_module *layer, lh_module *next_norm);
    /* `dst`'s weight is `src`'s weight (tied embeddings); counted and stored once. */
    lh_status (*tie_weights)(lh_build *b, lh_module *dst, lh_module *src);
    /* Fail the build with a message; returns `code`. */
    lh_status (*build_fail)(lh_build *b, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
    /* LH_OK or the first error recorded in the build. */
    lh_status (*build_status)(lh_build *b);
    /* The whole Llama-family causal LM from cfg's geometry, with Hugging Face names:
     * model.embed_tokens, model.layers.N.{input_layernorm, self_attn, post_attention_layernorm,
     * mlp}, model.norm, lm_head (tied to embed_tokens when tie_word_embeddings), the
     * attention-layer table and the norm fusion chain. Variants are chosen by `spec` (see
     * lh_decoder_spec; NULL means all defaults), recorded with the tree for the forward pass.
     * Errors: LH_E_USAGE for a spec struct_size below offsetof(lh_decoder_spec, mlp_act), an
     * mlp_act outside lh_mlp_activation, a non-finite norm_weight_offset. */
    lh_status (*build_decoder_lm)(lh_build *b, const lh_model_config *cfg,
                                  const lh_decoder_spec *spec);

    /* --- ABI 2 --- */
    /* create_attention: one attention layer of backend `p` (as the host selected it) for
     * geometry `g`, with every construction-time check of DESIGN §8 before the backend's own
     * create runs: each feature the geometry asks for (sliding window, chunked attention, MLA,
     * fp8 / mixed-precision KV, sparse attention, fused RoPE) needs the backend's capability
     * flag; MLA dimensions must be valid; num_kv_heads 0 means num_heads. Errors:
     * LH_E_UNSUPPORTED (a missing capability or implementation, naming both), LH_E_CONFIG
     * (invalid MLA dimensions, naming the field), the backend's create status. The caller owns
     * *out and frees it with p->ops->destroy. */
    lh_status (*create_attention)(const lh_attn_backend_provider *p, const lh_attn_geometry *g,
                                  lh_attn_layer **out, char *err, size_t n);
};

#define LH_API_HAS(api, field) \
    ((api)->struct_size >= offsetof(lh_host_api, field) + sizeof((api)->field))

typedef lh_status (*lh_plugin_init_fn)(const lh_host_api *api, lh_plugin_ctx *ctx);

typedef struct lh_plugin_descriptor {
    uint32_t magic;       /* LH_PLUGIN_MAGIC */
    uint32_t struct_size; /* sizeof(lh_plugin_descriptor) as the plugin was built */
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *name;
    const char *version;
    lh_plugin_init_fn init;
} lh_plugin_descriptor;

typedef const lh_plugin_descriptor *(*lh_plugin_entry_fn)(void);

#define LH_PLUGIN_DEFINE(NAME, VERSION, INIT_FN)                                      \
    LH_EXPORT const lh_plugin_descriptor *lh_plugin_entry(void);                       \
    LH_EXPORT const lh_plugin_descriptor *lh_plugin_entry(void)                        \
    {                                                                                 \
        static const lh_plugin_descriptor lh_descriptor_ = {                          \
            LH_PLUGIN_MAGIC, (uint32_t)sizeof(lh_plugin_descriptor),                  \
            LH_PLUGIN_ABI_MAJOR, LH_PLUGIN_ABI_MINOR, (NAME), (VERSION), (INIT_FN)};   \
        return &lh_descriptor_;                                                       \
    }

#ifdef __cplusplus
}
#endif
#endif
