/* Internal: the module tree (meta phase), the building blocks behind the host API, the
 * layer-wise quant config applied to the tree, and the memory plan.
 *
 * Lifecycle: lh_model_build creates an lh_build, calls the provider's constructor, checks the
 * result (sticky build error, norm chain complete), applies the quant config, and returns an
 * lh_model that owns the tree. No weight memory is allocated at any point: tensors are shape
 * and dtype descriptors. */
#ifndef LH_MODEL_MODEL_H
#define LH_MODEL_MODEL_H

#include "llmhost.h"
#include "lh_plugin.h"
#include "../config/model_config.h"
#include "../config/run_config.h"
#include <jansson.h>

typedef struct lh_model lh_model;

/* Module kinds, for the plan's per-group breakdown and for explain. */
typedef enum lh_module_kind {
    LH_MOD_CONTAINER = 0,
    LH_MOD_EMBEDDING,
    LH_MOD_LINEAR,
    LH_MOD_RMSNORM,
    LH_MOD_GATED_MLP,
    LH_MOD_ATTENTION,
    LH_MOD_CUSTOM
} lh_module_kind;

/* Builds the tree for `prov` (api is the host API table handed to the constructor).
 * dtype: the weight dtype (run config dtype, else torch_dtype, else bfloat16).
 * Errors: whatever the constructor or a building block recorded (message prefixed with the
 * provider name), LH_E_CONFIG for an incomplete norm chain, LH_E_NOMEM. *out owned by caller. */
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
    int64_t parameters;          /* tied weights counted once */
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
 * attention_layers (keys of the attention-layer table), norm_chain (list of
 * "layer -> next_norm"), quantized_linears. New reference. */
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
/* Name of the norm that `layer_name`'s residual add is fused with, NULL if unchained. */
const char *lh_model_next_norm(const lh_model *m, const char *layer_name);

/* ---- building blocks: the implementations behind the host API table (lh_plugin.h) ---- */
lh_module *lh_build_module_root(lh_build *b);
lh_module *lh_build_add_container(lh_build *b, lh_module *parent, const char *name);
lh_module *lh_build_add_embedding(lh_build *b, lh_module *parent, const char *name, int64_t num,
                                  int64_t dim);
lh_module *lh_build_add_linear(lh_build *b, lh_module *parent, const char *name, int64_t in,
                               int64_t out, bool bias);
lh_module *lh_build_add_rmsnorm(lh_build *b, lh_module *parent, const char *name, int64_t dim,
                                double eps);
lh_module *lh_build_add_gated_mlp(lh_build *b, lh_module *parent, const char *name,
                                  int64_t hidden, int64_t intermediate);
lh_module *lh_build_add_attention(lh_build *b, lh_module *parent, const char *name,
                                  const lh_attention_spec *spec);
lh_status lh_build_add_param(lh_build *b, lh_module *m, const char *name, int ndim,
                             const int64_t *shape, lh_param_role role);
lh_status lh_build_chain_norm(lh_build *b, lh_module *layer, lh_module *next_norm);
lh_status lh_build_tie_weights(lh_build *b, lh_module *dst, lh_module *src);
lh_status lh_build_fail(lh_build *b, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
lh_status lh_build_status(lh_build *b);
lh_status lh_build_decoder_lm(lh_build *b, const lh_model_config *cfg,
                              const lh_decoder_spec *spec);

#endif
