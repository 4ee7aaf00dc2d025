/* Internal: the module tree (meta phase), the building blocks behind the host API, the
 * layer-wise quant config applied to the tree, and the memory plan.
 *
 * Lifecycle: lh_model_build creates an lh_build, calls the provider's constructor, checks the
 * result (sticky build error), applies the quant config, and returns an
 * lh_model that owns the tree. No weight memory is allocated at any point: tensors are shape
 * and dtype descriptors. */
#ifndef LH_MODEL_MODEL_H
#define LH_MODEL_MODEL_H

#include "llmhost.h"
#include "lh_plugin.h"
#include "../config/model_config.h"
#include "../config/run_config.h"
#include "lh_tensor.h"
#include <jansson.h>

typedef struct lh_model lh_model;
typedef struct lh_checkpoint lh_checkpoint; /* host/weights/checkpoint.h */

/* Module kinds, for the plan's per-group breakdown and for explain. */
typedef enum lh_module_kind {
    LH_MOD_CONTAINER = 0,
    LH_MOD_EMBEDDING,
    LH_MOD_LINEAR,
    LH_MOD_RMSNORM,
    LH_MOD_MLP,
    LH_MOD_ATTENTION,
    LH_MOD_HEAD, /* the output head: a linear the memory plan counts as "lm_head" */
    LH_MOD_LAYERNORM,
    LH_MOD_CUSTOM,
    LH_MOD_MOE,    /* a mixture-of-experts block (add_moe): counted as "mlp" */
    LH_MOD_EXPERTS /* its routed experts: top_k / n_experts of them active per token */
} lh_module_kind;

/* Builds the tree for `prov` (api is the host API table handed to the constructor).
 * dtype: the weight dtype (run config dtype, else torch_dtype, else bfloat16).
 * Errors: whatever the constructor or a building block recorded (message prefixed with the
 * provider name), LH_E_NOMEM. *out owned by caller. */
lh_status lh_model_build(const lh_host_api *api, const lh_model_provider *prov,
                         const lh_model_config *cfg, const lh_run_config *rc, lh_model **out,
                         lh_err *err);
void lh_model_free(lh_model *m);

/* Memory plan, all computed from the tree (nothing allocated). */
typedef struct lh_plan_group {
    const char *name; /* "embedding", "attention", "mlp", "norm", "lm_head", "other" */
    int64_t parameters;
    int64_t bytes;
} lh_plan_group;

typedef struct lh_memory_plan {
    int64_t parameters;          /* tied weights once; quantization scales not counted */
    int64_t active_parameters;   /* per token: routed experts count top_k / n_experts */
    int64_t routed_expert_bytes; /* every routed expert's weights (MoE blocks) */
    double routed_share;         /* top_k / n_experts of those blocks (the largest; 0: none) */
    int64_t weight_bytes;        /* after the quant config */
    lh_dtype weight_dtype;
    int64_t kv_bytes_per_token;  /* sum over attention layers; MLA uses the latent width */
    int64_t kv_pool_tokens;      /* max_seq_len * max_batch_size */
    int64_t kv_pool_bytes;
    int64_t peak_construction_bytes; /* bytes the tree itself occupied at its largest */
    int64_t num_attention_layers;
    int64_t quantized_linears;
    lh_plan_group groups[6];
    size_t n_groups;
} lh_memory_plan;

lh_status lh_model_plan(const lh_model *m, lh_memory_plan *out, lh_err *err);
/* JSON object: parameters, weight_bytes, weight_dtype, kv_bytes_per_token, kv_pool_tokens,
 * kv_pool_bytes, peak_construction_bytes, groups {name: {parameters, bytes}}, and
 * attention_layers (keys of the attention-layer table), quantized_linears. New reference. */
json_t *lh_model_plan_json(const lh_model *m, const lh_memory_plan *plan);

/* Inspection, for tests and explain. Names are full dotted names. */
typedef struct lh_module_info {
    const char *name;
    lh_module_kind kind;
    lh_quant_scheme quant; /* linears only */
    int64_t parameters;    /* own parameters, tied ones counted on the source only */
    int64_t bytes;
    int n_params;
} lh_module_info;
/* 1 and fills *info when found, 0 otherwise. */
int lh_model_find(const lh_model *m, const char *name, lh_module_info *info);
/* Shape of parameter `param` ("weight", "bias") of module `name`; returns ndim, 0 if absent. */
int lh_model_param_shape(const lh_model *m, const char *name, const char *param,
                         int64_t shape[LH_MAX_DIMS]);
size_t lh_model_attention_count(const lh_model *m);
/* Key of the i-th attention table entry ("3", or "3_0"/"3_1" for duplicates), NULL past end. */
const char *lh_model_attention_key(const lh_model *m, size_t i);
/* Full module name registered under `key`, NULL if none. Non-owning. */
const char *lh_model_attention_lookup(const lh_model *m, const char *key);

/* ---- weights (host/weights/bind.c) ---------------------------------------------------- */

typedef struct lh_bind_stats {
    size_t bound;          /* params bound from a checkpoint tensor (tied params not counted) */
    size_t zero_copy;      /* ... pointing into the checkpoint mapping */
    size_t converted;      /* ... converted to the param's dtype into an owned buffer */
    size_t copied;         /* ... same dtype, copied because the data was misaligned */
    size_t quantized;      /* ... quantized at load (the quant config) into an owned buffer */
    size_t tied;           /* params sharing their tie source's data */
    size_t ignored;        /* checkpoint tensors deliberately unused (see bind rules) */
    size_t stored_float;   /* params that keep their stored float dtype (MoE routers) bound
                            * in it, whatever the model dtype (counted among the others too) */
    int64_t mapped_bytes;  /* bytes used in place */
    int64_t owned_bytes;   /* bytes of owned (converted or copied) buffers */
} lh_bind_stats;

/* Binds every parameter of the tree to the checkpoint tensor "<module>.<param>"
 * (e.g. model.layers.0.self_attn.q_proj.weight).
 *
 * Rules:
 *  - Zero-copy when the tensor's dtype equals the param's storage dtype and its data is
 *    aligned for the type (the param points into the read-only mapping); otherwise converted
 *    (f32/bf16/f16, any direction) or copied into an owned 64-byte-aligned buffer, with a
 *    progress bar on stderr when stderr is a terminal.
 *  - A tied param (e.g. lm_head.weight tied to model.embed_tokens.weight) shares its source's
 *    data. A checkpoint tensor with the tied param's name is accepted and unused (transformers
 *    saves it in some checkpoints); its shape must still match. When the source's tensor is
 *    absent but a tied param's tensor is present, the source is bound from that one.
 *  - Ignored, never "unexpected": the non-parameter buffers *.rotary_emb.inv_freq,
 *    *.rotary_emb.cos_cached, *.rotary_emb.sin_cached that old checkpoints carry.
 *  - Every other mismatch is reported at once in one LH_E_CONFIG error: missing tensors,
 *    unexpected tensors, mis-shaped tensors (expected vs found) and tensors of a dtype other
 *    than F32/F16/BF16, each list cut after 20 entries (fewer when the message would not fit)
 *    with its full count; LLMHOST_LOG=debug logs every entry.
 *  - A weight the quant config quantizes (fp8 / int8 / int4) is read from its float32 /
 *    bfloat16 / float16 tensor and quantized into owned buffers, the weight and its derived
 *    "weight_scale" (quant_apply.c; lh_k_quantize_scaled), layer by layer with the progress
 *    bar; the bytes are those the memory plan counted. ggml's block types (from a GGUF file,
 *    lh_model_adopt_stored_dtypes) bind as stored.
 *  - A GGUF tensor in another layout (lh_gguf_layout: RoPE-permuted rows, stored + 1) is
 *    copied into the tree's layout.
 * Ownership: the call always consumes `ck`. On success the model owns it (the mapping must
 *    outlive every zero-copy param; lh_model_free closes it); on any failure it is closed
 *    before returning and nothing is bound. The caller never closes it after this call.
 * Errors: LH_E_USAGE (NULL argument, weights already bound), LH_E_UNSUPPORTED, LH_E_CONFIG,
 * LH_E_NOMEM. */
lh_status lh_model_bind_weights(lh_model *m, lh_checkpoint *ck, lh_err *err);
/* A source whose weights are used as stored (a GGUF file): every non-tied param whose tensor
 * `ck` holds, with the param's shape and a readable type, takes that type (and its bytes) in
 * the tree, so the memory plan and binding see what the file holds. Absent, mis-shaped or
 * unreadable tensors are left for binding to report. Call after building, before planning or
 * binding; ck is not consumed. Errors: LH_E_CONFIG (a block-type tensor whose rows are not
 * whole blocks), LH_E_USAGE, LH_E_NOMEM. */
lh_status lh_model_adopt_stored_dtypes(lh_model *m, const lh_checkpoint *ck, lh_err *err);
/* Moves every bound parameter into one anonymous mapping with transparent huge pages
 * requested (madvise), freeing conversion buffers; tied parameters follow their source. The
 * model owns the region. Errors: LH_E_USAGE before binding, LH_E_NOMEM with the size. */
lh_status lh_model_place_weights_huge(lh_model *m, lh_err *err);
/* Bytes of the huge-page region (0 when the weights are where binding left them). */
size_t lh_model_weight_region_bytes(const lh_model *m);
/* lh_checkpoint_open(path) then lh_model_bind_weights. path: a model directory, an index
 * or a safetensors file. */
lh_status lh_model_load_weights(lh_model *m, const char *path, lh_err *err);
bool lh_model_weights_bound(const lh_model *m);
/* What the successful bind did; false (and *out zeroed) when nothing is bound. */
bool lh_model_bind_stats(const lh_model *m, lh_bind_stats *out);
/* The checkpoint the model owns, NULL before binding. */
const lh_checkpoint *lh_model_checkpoint(const lh_model *m);
/* A CPU tensor view (dtype = the param's storage dtype, its shape, contiguous) of the bound
 * data of param `param` of `mod`; a tied param views its source's data. The view is valid
 * while the model lives; its data is read-only (it may point into a read-only mapping).
 * Returns LH_OK, or LH_E_USAGE (and leaves *out untouched) for a NULL argument, a module of
 * another model, no such param, or weights not bound yet: callers name what they needed. */
lh_status lh_model_param_tensor(const lh_model *m, const lh_module *mod, const char *param,
                                lh_tensor *out);
/* The same by full module name ("" for the root); LH_E_USAGE also when there is no such
 * module. */
lh_status lh_model_param_tensor_by_name(const lh_model *m, const char *module_name,
                                        const char *param, lh_tensor *out);

/* Every parameter of the tree in tree order (tied ones included, flagged). */
typedef struct lh_param_info {
    const char *module; /* full module name */
    const char *name;   /* "weight", "bias" */
    int ndim;
    int64_t shape[LH_MAX_DIMS];
    lh_dtype dtype;     /* storage dtype */
    bool tied;          /* shares another parameter's data (not stored itself) */
    bool transposed;    /* stored [in, out] (add_linear_transposed) */
    /* weight-only quantized (tree_internal.h lh_param.scale): the name of its scale param in
     * the same module and the scale's block; NULL / 0 otherwise */
    const char *scale_param;
    int64_t scale_block_rows, scale_block_cols;
} lh_param_info;
typedef void (*lh_param_visit_fn)(const lh_param_info *p, void *user);
void lh_model_foreach_param(const lh_model *m, lh_param_visit_fn fn, void *user);

/* ---- building blocks: the implementations behind the host API table (lh_plugin.h) ---- */
lh_module *lh_build_module_root(lh_build *b);
lh_module *lh_build_add_container(lh_build *b, lh_module *parent, const char *name);
lh_module *lh_build_add_embedding(lh_build *b, lh_module *parent, const char *name, int64_t num,
                                  int64_t dim);
lh_module *lh_build_add_linear(lh_build *b, lh_module *parent, const char *name, int64_t in,
                               int64_t out, bool bias);
lh_module *lh_build_add_rmsnorm(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                                double eps);
lh_module *lh_build_add_layernorm(lh_build *b, lh_module *parent, const char *name,
                                  int64_t dim, double eps, bool bias);
lh_module *lh_build_add_linear_transposed(lh_build *b, lh_module *parent, const char *name,
                                          int64_t in, int64_t out, bool bias);
lh_module *lh_build_add_mlp(lh_build *b, lh_module *parent, const char *name);
lh_module *lh_build_add_moe(lh_build *b, lh_module *parent, const char *name,
                            const lh_moe_spec *spec);
/* The MoE blocks of the tree in pre-order: the i-th block's full name and spec (both owned by
 * the model; names in the spec point into the tree), NULL past the end. */
const lh_moe_spec *lh_model_moe_at(const lh_model *m, size_t i, const char **name);
lh_module *lh_build_add_head(lh_build *b, lh_module *parent, const char *name, int64_t in,
                             int64_t out, bool bias);
lh_module *lh_build_add_attention(lh_build *b, lh_module *parent, const char *name,
                                  const lh_attention_spec *spec);
lh_status lh_build_add_param(lh_build *b, lh_module *m, const char *name, int ndim,
                             const int64_t *shape, lh_param_role role);
lh_status lh_build_tie_weights(lh_build *b, lh_module *dst, lh_module *src);
lh_status lh_build_base_model(lh_build *b, lh_module *m);
lh_status lh_build_ignore_tensors(lh_build *b, const char *suffix);
lh_status lh_build_fail(lh_build *b, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
lh_status lh_build_status(lh_build *b);
/* The attention geometry a run derives from the tree's attention layers rather than from
 * config keys a family may spell its own way (GPT-2's n_layer, n_head): `base` (the config's
 * geometry) with num_hidden_layers = the number of attention layers; heads, kv heads,
 * head_dim, MLA dimensions, RoPE scaling and max_positions (when set) of the first layer;
 * sliding_window and attention_chunk_size the largest any layer has. A tree without attention
 * layers (or m NULL) leaves base as it is. */
void lh_model_run_geometry(const lh_model *m, const lh_model_geometry *base,
                           lh_model_geometry *out);
/* The attention spec a module was registered with (add_attention, normalized), NULL for
 * other modules. */
const lh_attention_spec *lh_model_attention_spec(const lh_model *m, const char *module_name);

#endif
