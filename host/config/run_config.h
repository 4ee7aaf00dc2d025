/* Internal: the YAML run config (libyaml) and its one validator.
 *
 * Schema (every key optional; unknown keys are errors with a did-you-mean):
 *   mm_encoder_only: bool
 *   model_impl: {target: NAME, mode: off|auto|require}   (mode default auto when target set)
 *   dtype: auto|float32|bfloat16|float16                 (auto: the checkpoint's torch_dtype)
 *   max_seq_len: int > 0                                  (default: max_position_embeddings)
 *   max_batch_size: int > 0                               (default 1)
 *   weight_placement: auto|mmap|huge_pages                (default auto)
 *   attn_backend: NAME                                    (case-insensitive; default vanilla)
 *   attn_backend_fallback: bool                           (default false)
 *   kv_cache: {block_size: int > 0 (16), dtype: auto|float32|bfloat16|float16|fp8,
 *              layout: NHD|HND, max_tokens: int > 0 (default max_seq_len x max_batch_size)}
 *   quant:
 *     scheme: none|fp8|int8|int4          default scheme for linear layers (default none)
 *     group_size: int > 0                 for int4 (default 128)
 *     rules: [{pattern: GLOB, scheme: ..., group_size: ...}, ...]   first match wins
 *     exclude_modules: [GLOB, ...]        these keep the model dtype, whatever the rules say
 * Every value remembers where it came from (default, YAML line:column, or a CLI flag) so that
 * errors and `explain` can say so. */
#ifndef LH_CONFIG_RUN_CONFIG_H
#define LH_CONFIG_RUN_CONFIG_H

#include "llmhost.h"
#include <jansson.h>

typedef enum lh_origin_kind { LH_ORIGIN_DEFAULT = 0, LH_ORIGIN_YAML, LH_ORIGIN_FLAG } lh_origin_kind;
typedef struct lh_value_origin {
    lh_origin_kind kind;
    int line, column; /* 1-based, YAML only */
} lh_value_origin;

typedef enum lh_impl_mode { LH_IMPL_OFF = 0, LH_IMPL_AUTO, LH_IMPL_REQUIRE } lh_impl_mode;

typedef enum lh_quant_scheme {
    LH_QUANT_NONE = 0, /* model dtype */
    LH_QUANT_FP8,      /* fp8 e4m3, one f32 scale per output row */
    LH_QUANT_INT8,     /* int8 symmetric, one f32 scale per output row */
    LH_QUANT_INT4      /* int4 symmetric, one f16 scale per group_size inputs per row */
} lh_quant_scheme;

typedef struct lh_quant_rule {
    char *pattern; /* fnmatch glob over full module names */
    lh_quant_scheme scheme;
    int64_t group_size;
    lh_value_origin origin;
} lh_quant_rule;

typedef struct lh_quant_config {
    lh_quant_scheme scheme;
    int64_t group_size;
    lh_quant_rule *rules;
    size_t n_rules;
    char **exclude_modules;
    size_t n_exclude;
    lh_value_origin origin;
} lh_quant_config;

/* Where bound weights live: in the checkpoint's file mapping (zero-copy), or copied into
 * anonymous memory with transparent huge pages requested (fewer TLB misses when streaming
 * weights during decode; a file mapping never gets huge pages). auto: the measured default
 * (see README, "Benchmarks"). */
typedef enum lh_weight_placement {
    LH_PLACE_AUTO = 0,
    LH_PLACE_MMAP,
    LH_PLACE_HUGE_PAGES
} lh_weight_placement;

/* KV cache settings (DESIGN §8, paged backend). dtype LH_DTYPE_INVALID means auto (f32, the
 * activations' dtype); LH_DTYPE_FP8_E4M3 needs a backend with the fp8-KV capability. */
typedef struct lh_kv_cache_config {
    int64_t block_size; /* tokens per block, default 16 */
    lh_dtype dtype;
    int layout;         /* 0: NHD, 1: HND (lh_kv_layout) */
    int64_t max_tokens; /* pool size in tokens per layer; 0: max_seq_len x max_batch_size */
    lh_value_origin origin;
} lh_kv_cache_config;

typedef struct lh_run_config {
    char *source; /* YAML file path, or NULL when none was given */
    bool mm_encoder_only;
    lh_value_origin mm_encoder_only_origin;
    char *model_impl_target; /* NULL: none */
    lh_impl_mode model_impl_mode;
    lh_value_origin model_impl_origin;
    lh_dtype dtype; /* LH_DTYPE_INVALID means auto */
    lh_value_origin dtype_origin;
    int64_t max_seq_len; /* 0: model's max_position_embeddings */
    lh_value_origin max_seq_len_origin;
    int64_t max_batch_size;
    lh_value_origin max_batch_size_origin;
    lh_quant_config quant;
    lh_weight_placement weight_placement;
    lh_value_origin weight_placement_origin;
    /* Attention backend name, normalized to lower case when parsed so that validation and
     * dispatch see the same spelling; NULL: the default backend. */
    char *attn_backend;
    lh_value_origin attn_backend_origin;
    bool attn_backend_fallback; /* unknown backend -> the default instead of an error */
    lh_value_origin attn_backend_fallback_origin;
    lh_kv_cache_config kv_cache;
} lh_run_config;

/* Fills defaults. Never fails. */
void lh_run_config_init(lh_run_config *rc);
/* Parses YAML into rc (over what it holds). Every error names the key path
 * ("quant.rules[1].scheme"), the file, line and column; unknown keys suggest the nearest
 * known one. Errors: LH_E_IO, LH_E_CONFIG. On error rc is left valid (may be partly set). */
lh_status lh_run_config_load_file(lh_run_config *rc, const char *path, lh_err *err);
lh_status lh_run_config_load_string(lh_run_config *rc, const char *yaml_text,
                                    const char *source_name, lh_err *err);
/* A CLI override "key=value" for the scalar keys: mm_encoder_only, dtype, max_seq_len,
 * max_batch_size, model_impl (TARGET or TARGET:MODE or off), quant (a scheme name).
 * Errors: LH_E_USAGE naming the flag and the accepted values. */
lh_status lh_run_config_set(lh_run_config *rc, const char *key_eq_value, lh_err *err);
/* The one validator of cross-key rules; runs before anything is loaded or allocated.
 * Errors: LH_E_CONFIG naming the key and where its value came from. */
lh_status lh_run_config_validate(const lh_run_config *rc, lh_err *err);
void lh_run_config_free(lh_run_config *rc);
/* JSON view for explain (new reference): values and their origins. */
json_t *lh_run_config_to_json(const lh_run_config *rc);
/* "default", "flag", or "FILE:LINE:COL". Writes into buf, returns buf. */
const char *lh_value_origin_str(const lh_run_config *rc, lh_value_origin o, char *buf, size_t n);
const char *lh_quant_scheme_name(lh_quant_scheme s);
const char *lh_weight_placement_name(lh_weight_placement p);

#endif
