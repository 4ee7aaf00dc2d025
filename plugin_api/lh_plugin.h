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
#include "lh_model.h"
#include "lh_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LH_PLUGIN_MAGIC 0x504d484cu /* "LHMP" little-endian */
#define LH_PLUGIN_ABI_MAJOR 3
#define LH_PLUGIN_ABI_MINOR 3
#define LH_PLUGIN_ENTRY_SYMBOL "lh_plugin_entry"

typedef struct lh_host_api lh_host_api;
typedef struct lh_plugin_ctx lh_plugin_ctx; /* the loading plugin, as the host sees it */

/* ---- providers a plugin can register -------------------------------------------------- */

/* Optional: asked before construction whether this implementation serves the runtime `rt`.
 * Return LH_OK to accept; any other status refuses, with a human reason written to
 * reason[0..reason_len). Used for override targets (model_impl). */
typedef lh_status (*lh_model_check_runtime_fn)(const lh_host_api *api, const lh_model_config *cfg,
                                               const lh_runtime_desc *rt, char *reason,
                                               size_t reason_len);

/* A model implementation for one architecture (also a vision encoder: same contract). */
typedef struct lh_model_provider {
    uint32_t struct_size;
    const char *name; /* architecture, e.g. "LlamaForCausalLM"; copied by the host */
    const lh_model_ops *ops; /* lh_model.h; must outlive the process (a static const) */
    lh_model_check_runtime_fn check_runtime; /* may be NULL: serves every runtime */
} lh_model_provider;

/* A draft-model builder for one speculative-decoding mode (e.g. "eagle3", "mtp"). */
typedef struct lh_draft_provider {
    uint32_t struct_size;
    const char *mode;
    const lh_model_ops *ops; /* the draft model: the same contract as a model */
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
/* attention-logit soft-capping (lh_attn_geometry.logit_softcap, Gemma 2) */
#define LH_ATTN_CAP_SOFTCAP        (1u << 10)

/* An attention backend: its name, constant capabilities (readable without an instance) and
 * the per-layer vtable (lh_attention.h). */
typedef struct lh_attn_backend_provider {
    uint32_t struct_size;
    const char *name; /* matched case-insensitively */
    uint64_t capabilities;
    const lh_attn_ops *ops; /* may be NULL for a backend that is only described */
} lh_attn_backend_provider;

/* ---- the host API table --------------------------------------------------------------- */

struct lh_host_api {
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;

    /* Logging through the host logger (LLMHOST_LOG). ctx may be NULL outside init. */
    void (*log)(lh_plugin_ctx *ctx, lh_log_level level, const char *fmt, ...) LH_PRINTF(3, 4);
    /* Absolute path of the plugin file being initialized (to find data shipped beside it). */
    const char *(*plugin_path)(lh_plugin_ctx *ctx);
    /* Record why init fails (the first reason is kept); returns LH_E_INIT so init can
     * `return api->init_fail(...)`. */
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
    /* weight [out, in] (+ bias [out]) */
    lh_module *(*add_linear)(lh_build *b, lh_module *parent, const char *name, int64_t in,
                             int64_t out, bool bias);
    lh_module *(*add_rmsnorm)(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                              double eps);
    /* LayerNorm: weight [dim] (+ bias [dim]). */
    lh_module *(*add_layernorm)(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                                double eps, bool bias);
    /* A linear whose checkpoint stores the weight transposed, [in, out] (GPT-2's Conv1D), and
     * a bias [out]. The tree (and explain) keep the stored shape; the host transposes the
     * weight once when it binds the model, so the forward's linear sees [out, in] as always.
     * Not quantizable (quantization.* refuses it, naming it). */
    lh_module *(*add_linear_transposed)(lh_build *b, lh_module *parent, const char *name,
                                        int64_t in, int64_t out, bool bias);
    /* An attention layer (lh_module.h): a container registered in the attention-layer table
     * with its geometry; the plugin adds its projections under it. Errors (sticky, LH_E_USAGE):
     * NULL spec, struct_size smaller than the SDK's, invalid geometry (named). */
    lh_module *(*add_attention)(lh_build *b, lh_module *parent, const char *name,
                                const lh_attention_spec *spec);
    /* A feed-forward block: a container whose parameters the memory plan counts as "mlp". */
    lh_module *(*add_mlp)(lh_build *b, lh_module *parent, const char *name);
    /* The output head: add_linear whose parameters the memory plan counts as "lm_head" (the
     * bytes a decode step streams for the logits). */
    lh_module *(*add_head)(lh_build *b, lh_module *parent, const char *name, int64_t in,
                           int64_t out, bool bias);
    /* A raw parameter on a module, for layers the blocks above do not cover. */
    lh_status (*add_param)(lh_build *b, lh_module *m, const char *name, int ndim,
                           const int64_t *shape, lh_param_role role);
    /* `m` (a child of the root) is the base model, transformers' base_model_prefix: a
     * checkpoint of the base model alone names its tensors without m's name ("wte.weight"
     * for "transformer.wte.weight", as GPT-2's published files do); both spellings bind.
     * Errors (sticky, LH_E_USAGE): m NULL, not a child of the root, a second base model. */
    lh_status (*base_model)(lh_build *b, lh_module *m);
    /* Checkpoint tensors whose name ends with the dotted components `suffix` ("attn.bias":
     * "h.0.attn.bias", not "h.0.attn.c_attn.bias") are buffers, not parameters (GPT-2's
     * causal mask); binding skips them and counts them as ignored instead of reporting them
     * as unexpected. A parameter of the tree with such a name still binds. At most 8 per
     * model. Errors (sticky, LH_E_USAGE): an empty suffix, or more than 8. */
    lh_status (*ignore_tensors)(lh_build *b, const char *suffix);
    /* `dst`'s weight is `src`'s weight (tied embeddings); counted and stored once. */
    lh_status (*tie_weights)(lh_build *b, lh_module *dst, lh_module *src);
    /* Fail the build with a message; returns `code`. */
    lh_status (*build_fail)(lh_build *b, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
    /* LH_OK or the first error recorded in the build. */
    lh_status (*build_status)(lh_build *b);

    /* create_attention: one attention layer of backend `p` (as the host selected it) for
     * geometry `g`, with every construction-time check of DESIGN §8 before the backend's own
     * create runs: each feature the geometry asks for (sliding window, chunked attention, MLA,
     * fp8 / mixed-precision KV, sparse attention, fused RoPE, logit soft-capping) needs the
     * backend's capability flag; MLA dimensions and the soft-cap must be valid; num_kv_heads 0
     * means num_heads. Errors, in *err (may be NULL): LH_E_UNSUPPORTED (a missing capability
     * or implementation, naming both), LH_E_CONFIG (invalid MLA dimensions or a negative or
     * non-finite logit_softcap, naming the field), the backend's create status and message.
     * The caller owns *out and frees it with p->ops->destroy. */
    lh_status (*create_attention)(const lh_attn_backend_provider *p, const lh_attn_geometry *g,
                                  lh_attn_layer **out, lh_error *err);

    /* ---- bind phase (lh_model.h): handles to what the host bound, sticky on bd ----------- */
    /* The parameter whose full name ("model.layers.3.self_attn.q_proj.weight") the format
     * gives. Required: a name the tree lacks is recorded in bd (LH_E_USAGE, naming it) and
     * NULL returned. weight_opt returns NULL without an error for an absent name. */
    const lh_weight *(*weight)(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
    const lh_weight *(*weight_opt)(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
    /* The attention layer registered by the module of that full name ("model.layers.3.self_attn");
     * required as weight. */
    const lh_attn_ref *(*attention)(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
    /* The weight as a tensor on the engine's device, for kernels of lh_kernels.h that the
     * blocks below do not wrap (norm weights, biases, embeddings; ggml's block types are
     * tensors of their own; a weight-only quantized linear weight with a separate scale -- the
     * quant config's int8 / int4 / fp8, an FP8 checkpoint's -- has no plain tensor: NULL). */
    const lh_tensor *(*weight_tensor)(const lh_weight *w);
    /* Rows [start, start + count) of a weight [out, in] or bias [out] as a weight of its own:
     * the column view of a fused projection's output (qkv_proj, gate_up_proj, c_attn), no
     * copy; a weight-only quantized w takes its rows' scales along. Errors (sticky,
     * LH_E_USAGE): NULL w, a range outside the rows, a block-quantized or int4 w, a range
     * that cuts a scale block of several rows (FP8 checkpoints' 128-row blocks). */
    const lh_weight *(*weight_rows)(lh_bind *bd, const lh_weight *w, int64_t start,
                                    int64_t count);
    lh_status (*bind_fail)(lh_bind *bd, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
    lh_status (*bind_status)(lh_bind *bd);

    /* ---- forward blocks (lh_model.h), sticky on f; each returns f's status -------------- */
    /* The step: n_tokens packed tokens of n_seqs sequences, positions, lengths, slots. */
    const lh_attn_step *(*fwd_step)(lh_fwd *f);
    /* The kernel context the step runs on (for lh_kernels.h calls of the plugin's own). */
    lh_kctx *(*fwd_kctx)(lh_fwd *f);
    /* Names what the next blocks compute, for their error messages ("layer 3"). */
    void (*fwd_where)(lh_fwd *f, const char *fmt, ...) LH_PRINTF(2, 3);
    /* A zero-initialization-free f32 tensor [rows, cols] from the per-step arena (sized by
     * lh_forward_info; a request beyond it is LH_E_INTERNAL naming the numbers). On error the
     * returned tensor has no data and f has failed. */
    lh_tensor (*scratch)(lh_fwd *f, int64_t rows, int64_t cols);
    /* out [n_tokens, dim] = rows of `table` [vocab, dim] for the step's tokens. */
    lh_status (*embed)(lh_fwd *f, const lh_weight *table, lh_tensor *out);
    /* y [M, out] = x [M, in] @ w^T (+ bias); bias may be NULL. */
    lh_status (*linear)(lh_fwd *f, const lh_tensor *x, const lh_weight *w, const lh_weight *bias,
                        lh_tensor *y);
    /* out = x / rms(x) * (w + offset), rows of x's last dimension; out may alias x. */
    lh_status (*rmsnorm)(lh_fwd *f, const lh_tensor *x, const lh_weight *w, float eps,
                         float offset, lh_tensor *out);
    /* residual += x; out = rmsnorm(residual) (the norm fusion chain). out may alias x. */
    lh_status (*residual_rmsnorm)(lh_fwd *f, lh_tensor *residual, const lh_tensor *x,
                             const lh_weight *w, float eps, float offset, lh_tensor *out);
    /* out [n_tokens, dim] += rows of `table` [positions, dim] at the step's positions
     * (learned position embeddings). */
    lh_status (*embed_positions)(lh_fwd *f, const lh_weight *table, lh_tensor *out);
    /* LayerNorm over rows of x's last dimension; bias may be NULL; out may alias x. */
    lh_status (*layernorm)(lh_fwd *f, const lh_tensor *x, const lh_weight *w,
                           const lh_weight *bias, float eps, lh_tensor *out);
    /* y += x (a residual add), same shape. */
    lh_status (*add)(lh_fwd *f, lh_tensor *y, const lh_tensor *x);
    /* out = act(x); out may alias x. */
    lh_status (*act)(lh_fwd *f, lh_activation act, const lh_tensor *x, lh_tensor *out);
    /* x = cap * tanh(x / cap) in place (final-logit soft-capping); cap > 0. */
    lh_status (*softcap)(lh_fwd *f, lh_tensor *x, float cap);
    /* out = act(gate) * up; out may alias gate or up. */
    lh_status (*act_mul)(lh_fwd *f, lh_activation act, const lh_tensor *gate,
                         const lh_tensor *up, lh_tensor *out);
    /* x *= s in place. */
    lh_status (*scale)(lh_fwd *f, lh_tensor *x, float s);
    /* Attention of layer `a` through the selected backend: q [T, heads * head_dim], k and v
     * [T, kv_heads * head_dim] for the step's tokens (q and k are rotated in place by the
     * layer's RoPE, unless the backend fuses it); out [T, heads * head_dim]. */
    lh_status (*attend)(lh_fwd *f, const lh_attn_ref *a, lh_tensor *q, lh_tensor *k,
                        lh_tensor *v, lh_tensor *out);
    /* The rows of h [n_tokens, D] the runtime wants logits for, gathered into a scratch
     * tensor [n_out, D] (no scratch request counted against scratch_requests). */
    lh_tensor (*output_rows)(lh_fwd *f, const lh_tensor *h);
    /* The logits to write: [n_out, vocab_size] f32 on the step's device. A step that only
     * fills the KV cache asks for none: shape[0] is 0 and there is no data (skip the head). */
    lh_tensor (*logits)(lh_fwd *f);
    lh_status (*fwd_fail)(lh_fwd *f, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
    lh_status (*fwd_status)(lh_fwd *f);

    /* ---- ABI 3.1: GGUF files (lh_gguf.h) ------------------------------------------------ */
    /* Registration (valid only during init, like register_model): a GGUF architecture this
     * plugin serves. Errors: LH_E_USAGE for an empty gguf_arch or architecture, a struct_size
     * too small, a tensor entry without a gguf name (or without a name unless IGNORE), a key
     * entry without both keys, or a gguf_arch this plugin already registered. */
    lh_status (*register_gguf)(lh_plugin_ctx *ctx, const lh_gguf_provider *p);
    /* Metadata of the file, for finish: 1 and *out set when `key` is present with a matching
     * type (any integer width for get_int; float32 or float64 for get_double), 0 when absent,
     * -1 when present with another type (or an integer outside int64). Strings are NUL-
     * terminated copies owned by the source. */
    int (*gguf_get_int)(const lh_gguf_source *s, const char *key, int64_t *out);
    int (*gguf_get_double)(const lh_gguf_source *s, const char *key, double *out);
    int (*gguf_get_bool)(const lh_gguf_source *s, const char *key, bool *out);
    int (*gguf_get_string)(const lh_gguf_source *s, const char *key, const char **out);
    /* general.architecture, as the file spells it. */
    const char *(*gguf_arch)(const lh_gguf_source *s);
    /* Whether the file holds a tensor of that GGUF name ("output.weight"). */
    bool (*gguf_has_tensor)(const lh_gguf_source *s, const char *name);
    /* Set a key of the config being written (dotted: nested objects are created); a later
     * set replaces an earlier one. config_set_json takes a JSON text (an array, object,
     * null ...). Errors: LH_E_USAGE (NULL or empty key, a key path through a non-object,
     * JSON text that does not parse, non-finite double), LH_E_NOMEM. */
    lh_status (*config_set_int)(lh_gguf_config *c, const char *key, int64_t v);
    lh_status (*config_set_double)(lh_gguf_config *c, const char *key, double v);
    lh_status (*config_set_bool)(lh_gguf_config *c, const char *key, bool v);
    lh_status (*config_set_string)(lh_gguf_config *c, const char *key, const char *v);
    lh_status (*config_set_json)(lh_gguf_config *c, const char *key, const char *json_text);
    /* The value the config holds for `key` now (what a key table copied), as config_get_*
     * read it: 1 present, 0 absent, -1 other type. */
    int (*config_peek_int)(const lh_gguf_config *c, const char *key, int64_t *out);

    /* ---- ABI 3.2: mixture of experts (lh_model.h, lh_moe_spec) -------------------------- */
    /* Builds a MoE block and its parameters (meta phase). Errors (sticky): LH_E_USAGE for a
     * NULL spec, a struct_size smaller than the SDK's, a missing name, a non-positive width,
     * routing parameters lh_k_moe_route would refuse (named). */
    lh_module *(*add_moe)(lh_build *b, lh_module *parent, const char *name,
                          const lh_moe_spec *spec);
    /* The MoE block of that full name ("model.layers.3.mlp"); required as weight. */
    const lh_moe_ref *(*moe)(lh_bind *bd, const char *fmt, ...) LH_PRINTF(2, 3);
    /* out [T, hidden] = the block applied to x [T, hidden] (out must not alias x). */
    lh_status (*moe_ffn)(lh_fwd *f, const lh_moe_ref *m, const lh_tensor *x, lh_tensor *out);

    /* ---- ABI 3.3: multi-head latent attention (lh_attention_spec.mla) ------------------- */
    /* Attention of MLA layer `a` through the selected backend (which needs LH_ATTN_CAP_MLA):
     * q [T, heads * (qk_nope_head_dim + qk_rope_head_dim)] as the query projection gives it
     * (per head: nope dims, then rope dims), kv_c [T, kv_lora_rank] the compressed KV after
     * its norm, k_rope [T, qk_rope_head_dim] the key's rope dims shared by all heads; q and
     * k_rope unrotated: the backend applies the layer's RoPE; kv_b the up-projection
     * [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank] (per head: key rows, then value
     * rows), a weight with a plain f32 / bf16 / f16 tensor (add it as LH_PARAM_PLAIN: a
     * quantized one is refused); out [T, heads * v_head_dim]. The backend caches the latent
     * (paged: the host's pool holds kv_lora_rank + qk_rope_head_dim values per token and
     * layer) and attends as it chooses (vanilla expands keys and values per head; paged
     * absorbs kv_b into the query and the output). Errors (sticky): LH_E_USAGE for a layer
     * that is not MLA (and attend on one that is), shapes, a kv_b without a plain float
     * tensor; the backend's status and message. */
    lh_status (*attend_mla)(lh_fwd *f, const lh_attn_ref *a, lh_tensor *q, lh_tensor *kv_c,
                            lh_tensor *k_rope, const lh_weight *kv_b, lh_tensor *out);
};

#define LH_API_HAS(api, field) \
    ((api)->struct_size >= offsetof(lh_host_api, field) + sizeof((api)->field))

/* The integer config keys a model needs (its geometry, spelled as its family spells it):
 * LH_OK when each of keys[0..n) is present as an integer, else LH_E_CONFIG in err naming the
 * first one missing (or of another type); the host prefixes the architecture. Header-only,
 * for check_config. */
static inline lh_status lh_config_require_ints(const lh_host_api *api,
                                               const lh_model_config *cfg,
                                               const char *const *keys, size_t n, lh_error *err)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        const int got = api->config_get_int(cfg, keys[i], &v);
        if (got != 1)
            return lh_error_set(err, LH_E_CONFIG, "%s field '%s'",
                                got == 0 ? "missing required" : "non-integer", keys[i]);
    }
    return LH_OK;
}

typedef lh_status (*lh_plugin_init_fn)(const lh_host_api *api, lh_plugin_ctx *ctx);

/* The layout constants that decide the SDK's struct layouts, as a plugin was compiled with
 * them; the host compares each with its own before any plugin code runs (as PostgreSQL's
 * magic block does) and names the one that differs. */
typedef struct lh_plugin_layout {
    uint32_t max_dims;       /* LH_MAX_DIMS (lh_tensor) */
    uint32_t error_msg_size; /* LH_ERROR_MSG_SIZE (lh_error) */
    uint32_t pointer_size;   /* sizeof(void *) */
    uint32_t tensor_size;    /* sizeof(lh_tensor) */
} lh_plugin_layout;

#define LH_PLUGIN_LAYOUT_INIT                                                          \
    {LH_MAX_DIMS, LH_ERROR_MSG_SIZE, (uint32_t)sizeof(void *), (uint32_t)sizeof(lh_tensor)}

typedef struct lh_plugin_descriptor {
    uint32_t magic;       /* LH_PLUGIN_MAGIC */
    uint32_t struct_size; /* sizeof(lh_plugin_descriptor) as the plugin was built */
    uint16_t abi_major;
    uint16_t abi_minor;
    const char *name;
    const char *version;
    lh_plugin_init_fn init;
    /* --- ABI 3 --- */
    lh_plugin_layout layout;
} lh_plugin_descriptor;

typedef const lh_plugin_descriptor *(*lh_plugin_entry_fn)(void);

#define LH_PLUGIN_DEFINE(NAME, VERSION, INIT_FN)                                      \
    LH_EXPORT const lh_plugin_descriptor *lh_plugin_entry(void);                       \
    LH_EXPORT const lh_plugin_descriptor *lh_plugin_entry(void)                        \
    {                                                                                 \
        static const lh_plugin_descriptor lh_descriptor_ = {                          \
            LH_PLUGIN_MAGIC, (uint32_t)sizeof(lh_plugin_descriptor),                  \
            LH_PLUGIN_ABI_MAJOR, LH_PLUGIN_ABI_MINOR, (NAME), (VERSION), (INIT_FN),    \
            LH_PLUGIN_LAYOUT_INIT};                                                   \
        return &lh_descriptor_;                                                       \
    }

#ifdef __cplusplus
}
#endif
#endif
