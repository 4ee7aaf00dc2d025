/* Private to host/model: the module tree's data structures, shared by module_tree.c (tree,
 * arena, indexes, model lifecycle and inspection), blocks.c (building blocks), quant_apply.c and memory_plan.c.
 *
 * Memory: every byte the tree occupies comes from the build's arena (nodes, names, params,
 * attention specs) or from two tracked side tables (the name index and the attention-layer
 * table). b->bytes_now / b->bytes_peak count them all, so peak_construction_bytes is real. */
#ifndef LH_MODEL_TREE_INTERNAL_H
#define LH_MODEL_TREE_INTERNAL_H

#include "model.h"

#include <stdarg.h>

typedef struct lh_param {
    const char *name;            /* "weight", "bias" (arena) */
    int ndim;
    int64_t shape[LH_MAX_DIMS];
    int64_t numel;
    lh_param_role role;
    lh_dtype dtype;              /* storage dtype after the quant config */
    int64_t bytes;               /* storage bytes (quant scales included); 0 when tied */
    struct lh_param *tied_to;    /* the source param when tied (never itself tied) */
    int tie_dependents;          /* how many params are tied to this one */
    struct lh_module *owner;
    struct lh_param *next;
    /* Weight data, set by lh_model_bind_weights (host/weights/bind.c); NULL before. numel
     * elements of `dtype`, row-major. Either a pointer into the model's checkpoint mapping
     * (read-only, data_owned false) or an aligned buffer the model owns (data_owned true,
     * freed by lh_model_free). A tied param points at its source's data, never owned. */
    void *data;
    bool data_owned;
    /* stored [in, out] (add_linear_transposed): the runner binds the transpose */
    bool transposed;
    /* A weight-only quantized weight (INT8 / INT4 / FP8_E4M3): its scale param (a sibling in
     * the same module, f32 or f16 [ceil(out / scale_block_rows), ceil(in / scale_block_cols)]),
     * dequant(w)[n][k] = w[n][k] * scale[n / rows][k / cols] (lh_k_matmul_scaled). NULL for
     * every other param. */
    struct lh_param *scale;
    int64_t scale_block_rows, scale_block_cols;
    /* The scale param of a quantized weight (counted in bytes, not in parameters); derived:
     * computed when the weights are bound (the quant config quantizes at load), not read from
     * the checkpoint. */
    bool is_scale, derived;
    /* A tensor the checkpoint holds and the model reads that is no parameter (a MoE router's
     * e_score_correction_bias, a buffer in transformers): bytes, not parameters. */
    bool is_buffer;
    /* Bound in the float dtype the checkpoint stores it in (f32, bf16 or f16), not converted
     * to the model dtype: a MoE router and its correction bias, which transformers keeps in
     * f32 in a bf16 model (DeepSeek's) and computes with in f32 -- rounding them to bf16
     * could change which experts run. Planned in the model dtype until bound. */
    bool stored_float;
} lh_param;

struct lh_module {
    const char *name;            /* full dotted name (arena); "" for the root */
    const char *local;           /* last component, points into name */
    lh_module_kind kind;
    lh_build *build;             /* owner, for argument checks */
    lh_module *parent;
    lh_module *first_child, *last_child, *next_sibling;
    size_t n_children;
    lh_param *params, *last_param;
    int n_params;
    double eps;                  /* RMSNORM, LAYERNORM */
    lh_quant_scheme quant;       /* LINEAR, after the quant config */
    int64_t group_size;          /* INT4 */
    /* ATTENTION */
    lh_attention_spec *attn;     /* copy of the spec (arena) */
    int64_t kv_bytes_per_token;
    /* MOE (and its EXPERTS child, which points at the same copy): the spec, names in the arena */
    lh_moe_spec *moe;
};

typedef struct lh_arena_chunk {
    struct lh_arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} lh_arena_chunk;

typedef struct lh_attn_entry {
    char key[48];                /* "3", "3_0", "3_1", ... */
    int64_t layer_index;
    lh_module *module;           /* non-owning */
} lh_attn_entry;

/* layer index -> first attention-table entry and how many share that index */
typedef struct lh_attn_slot {
    int64_t layer_index;
    size_t first;
    size_t count;
    bool used;
} lh_attn_slot;

struct lh_build {
    lh_status status;            /* first error wins */
    char msg[1536];
    lh_dtype dtype;              /* weight dtype */
    /* KV cache element bits of keys and values (run config kv_cache; auto: f32), for the
     * attention blocks' KV bytes per token */
    unsigned kv_k_bits, kv_v_bits;
    lh_arena_chunk *chunks;
    lh_module *root;
    size_t n_modules;
    /* full name -> module (open addressing, power-of-two capacity) */
    lh_module **index;
    size_t index_cap;
    /* attention-layer table, in registration order */
    lh_attn_entry *attn;
    size_t n_attn, cap_attn;
    lh_attn_slot *attn_slots;
    size_t attn_slots_cap, attn_slots_used;
    int64_t bytes_now, bytes_peak;
    /* base_model / ignore_tensors (arena strings) */
    const lh_module *base_model;
    const char *ignore[8];
    size_t n_ignore;
};

struct lh_model {
    lh_build *b;                 /* owns the tree */
    char *provider;              /* architecture name, for messages */
    int64_t max_seq_len;         /* resolved: lh_run_max_seq_len (run_config.h) */
    int64_t max_batch_size;      /* run config, else 1 */
    int64_t quantized_linears;
    /* The checkpoint the weights are bound from: owned by the model once
     * lh_model_bind_weights succeeds (closed by lh_model_free); NULL before. */
    struct lh_checkpoint *weights;
    lh_bind_stats bind_stats;    /* what the bind did (valid when weights != NULL) */
    /* With weight_placement huge_pages: one anonymous mapping holding every parameter
     * (owned; munmapped by lh_model_free). */
    void *weight_region;
    size_t weight_region_bytes;
};

/* ---- module_tree.c ---- */
lh_build *lh_tree_build_new(lh_dtype dtype);
void lh_tree_build_free(lh_build *b);
void *lh_tree_alloc(lh_build *b, size_t size);          /* zeroed; NULL + sticky NOMEM */
char *lh_tree_strdup(lh_build *b, const char *s);
lh_status lh_tree_failv(lh_build *b, lh_status code, const char *fmt, va_list ap);
lh_status lh_tree_fail(lh_build *b, lh_status code, const char *fmt, ...) LH_PRINTF(3, 4);
/* Validates and appends a child node; NULL on error (recorded). parent NULL means root. */
lh_module *lh_tree_add_module(lh_build *b, lh_module *parent, const char *name,
                              lh_module_kind kind);
lh_param *lh_tree_add_param(lh_build *b, lh_module *m, const char *name, int ndim,
                            const int64_t *shape, lh_param_role role);
lh_param *lh_tree_find_param(const lh_module *m, const char *name);
lh_module *lh_tree_lookup(const lh_build *b, const char *full_name);
/* Registers an attention module under its layer index (duplicates renamed _0, _1, ...). */
lh_status lh_tree_register_attention(lh_build *b, lh_module *m, int64_t layer_index);
/* Pre-order walk: the node after m (children first, in insertion order), NULL at the end. */
lh_module *lh_tree_next(const lh_module *m);
/* Every param of the tree: modules in pre-order (root first), each module's params in
 * insertion order; tied params included. Start with p = NULL; NULL after the last. */
lh_param *lh_tree_next_param(const lh_build *b, const lh_param *p);
/* Checked arithmetic for shapes and byte counts. */
bool lh_tree_mul(int64_t a, int64_t b, int64_t *out);
bool lh_tree_add(int64_t a, int64_t b, int64_t *out);

/* ---- quant_apply.c ---- */
/* Applies the quant config to every LINEAR module and computes storage bytes of every param.
 * Errors: LH_E_CONFIG (int4 group size not dividing a layer's input width, overflow). */
lh_status lh_model_apply_quant(lh_model *m, const lh_quant_config *qc, lh_err *err);

/* ---- checkpoint_quant.c ---- */
/* A checkpoint stored quantized (config.json quantization_config: fp8 with block scales,
 * fbgemm_fp8 per channel): its linears' weights become FP8_E4M3 with the scale param the
 * checkpoint holds. No quantization_config: nothing. Errors: LH_E_UNSUPPORTED (another
 * quant_method, fmt or activation_scheme, naming it; a run-config quant on top), LH_E_CONFIG
 * (malformed quantization_config). */
struct lh_model_config;
struct lh_run_config;
lh_status lh_model_apply_checkpoint_quant(lh_model *m, const struct lh_model_config *cfg,
                                          const struct lh_run_config *rc, lh_err *err);
/* Storage bytes of a param kept in the model dtype. -1 on overflow. */
int64_t lh_param_plain_bytes(lh_dtype dtype, int64_t numel);

#endif
