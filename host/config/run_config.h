/* Internal: the YAML run config (libyaml), CLI overrides and its one validator.
 *
 * Every key is one entry of the key table (run_config_keys.h: type, default, range or enum
 * names, where it may come from, help); the YAML reader (run_config_yaml.c), --set
 * (lh_run_config_set), explain's JSON and the key reference in docs/run-config.md all come from it, and
 * the cross-key rules live in run_config_validate.c.
 *
 * Schema (every key optional; unknown keys are errors with a did-you-mean):
 *   mm_encoder_only: bool
 *   model_impl: {target: NAME, mode: off|auto|require}   (mode default auto when target set)
 *   dtype: auto|float32|bfloat16|float16                 (auto: the checkpoint's torch_dtype)
 *   max_seq_len: int > 0                                  (default: max_position_embeddings)
 *   max_batch_size: int > 0                               (default 1)
 *   weight_placement: auto|mmap|huge_pages                (default auto)
 *   quantized_matmul: int8|exact                          (default int8)
 *   bf16_matmul: tiles|exact                              (default tiles)
 *   attn_backend: NAME                                    (case-insensitive; default paged)
 *   attn_backend_fallback: bool                           (default false)
 *   kv_cache:
 *     block_size: int > 0                 tokens per block (default 16)
 *     dtype: auto|float32|bfloat16|float16|fp8   sets both k_dtype and v_dtype (auto: float32)
 *     k_dtype, v_dtype: (the same names)  one tensor each; when given together with dtype, the
 *                                         specific key wins for its tensor, whatever the order.
 *                                         k_dtype != v_dtype (after auto -> float32) is
 *                                         "mixed-precision KV"
 *     layout: NHD|HND                     (default NHD)
 *     max_tokens: int > 0                 pool size in tokens per layer
 *     memory_fraction: float in (0, 1]    pool gets this fraction of the memory available when
 *                                         the engine opens; excludes max_tokens
 *                                         (neither: max_seq_len x max_batch_size tokens)
 *   sparse_attention: {algorithm: topk_blocks, top_k: int >= 1, local_blocks: int >= 1 (1)}
 *                                         algorithm and top_k are required; the only algorithm
 *                                         is topk_blocks. Absent or null: dense attention.
 *   beam_width: int >= 1                  (default 1)
 *   speculative: {mode: NAME, num_tokens: int >= 1}   both required; NAME e.g. eagle3, mtp,
 *                                         draft_model. Absent or null: no speculative decoding.
 *   fused_rope: bool                      (default true: fuse RoPE into attention whenever the
 *                                         backend can; false never asks)
 *   device: auto|cpu|cuda|cuda:N          where the engine runs (case-insensitive; default auto:
 *                                         cuda:0 when a CUDA device is usable, else cpu; cuda is
 *                                         cuda:0; N a CUDA device ordinal >= 0). A CUDA device
 *                                         that is not there is refused when the engine opens
 *                                         (or explain runs): lh_run_resolve_device
 *                                         (runtime/device.h)
 *   cuda_graphs: bool                     (default true: a CUDA device replays each decode step
 *                                         as one CUDA graph; unused on the CPU)
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
#include "lh_config.h"
#include "lh_tensor.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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
 * (see docs/benchmarks.md). */
typedef enum lh_weight_placement {
    LH_PLACE_AUTO = 0,
    LH_PLACE_MMAP,
    LH_PLACE_HUGE_PAGES
} lh_weight_placement;

/* How a linear with block-quantized weights (a GGUF file's Q4_K, Q8_0, ...) runs on the CPU:
 * int8 quantizes the activations to 8-bit blocks and uses integer dot products (llama.cpp's
 * arithmetic; the fast path), exact decodes the weights to f32 and runs the f32 kernels
 * (bit-identical to the dequantized model). lh_kernels.h lh_k_qmm. */
typedef enum lh_quantized_matmul { LH_QMM_INT8 = 0, LH_QMM_EXACT } lh_quantized_matmul;

/* How a linear with bf16 weights runs on the CPU: tiles uses AMX-BF16 tiles for prompts (M >=
 * 16 rows) where the CPU has them, rounding the activations to bf16 (the fast path); exact keeps
 * f32 activations for every M. lh_kernels.h lh_k_bf16mm. */
typedef enum lh_bf16_matmul { LH_BF16MM_TILES = 0, LH_BF16MM_EXACT } lh_bf16_matmul;

/* KV cache settings (DESIGN §8, paged backend). k_dtype / v_dtype LH_DTYPE_INVALID mean auto
 * (f32, the activations' dtype); LH_DTYPE_FP8_E4M3 needs a backend with the fp8-KV capability,
 * and k_dtype != v_dtype (mixed-precision KV, lh_kv_cache_mixed) one with the mixed-KV
 * capability. max_tokens and memory_fraction are mutually exclusive (the validator says so). */
typedef struct lh_kv_cache_config {
    int64_t block_size; /* tokens per block, default 16 */
    lh_dtype k_dtype, v_dtype;
    int layout;             /* 0: NHD, 1: HND (lh_kv_layout) */
    int64_t max_tokens;     /* pool size in tokens per layer; 0: unset */
    double memory_fraction; /* (0, 1]: share of the memory available at engine open; 0: unset */
    /* Where each value came from (kv_cache.dtype records both k_dtype_origin and
     * v_dtype_origin). */
    lh_value_origin block_size_origin, k_dtype_origin, v_dtype_origin, layout_origin,
        max_tokens_origin, memory_fraction_origin;
    lh_value_origin origin; /* the kv_cache section, or the last kv_cache.* flag */
} lh_kv_cache_config;

/* Sparse attention (DESIGN §8: a second dimension of the backend, needs LH_ATTN_CAP_SPARSE):
 * each query attends to its local_blocks most recent KV blocks plus the top_k other blocks
 * that score highest. The only algorithm is topk_blocks. */
typedef struct lh_sparse_config {
    bool enabled;
    int64_t top_k;        /* >= 1 when enabled */
    int64_t local_blocks; /* >= 1, default 1 */
    lh_value_origin origin;
} lh_sparse_config;

/* Speculative decoding: mode names the drafting method (eagle3, mtp, draft_model, ...);
 * NULL: off. num_tokens: tokens drafted per step. */
typedef struct lh_speculative_config {
    char *mode;
    int64_t num_tokens;
    lh_value_origin origin;
} lh_speculative_config;

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
    lh_quantized_matmul quantized_matmul;
    lh_value_origin quantized_matmul_origin;
    lh_bf16_matmul bf16_matmul;
    lh_value_origin bf16_matmul_origin;
    /* Attention backend name, normalized to lower case when parsed so that validation and
     * dispatch see the same spelling; NULL: the default backend. */
    char *attn_backend;
    lh_value_origin attn_backend_origin;
    bool attn_backend_fallback; /* unknown backend -> the default instead of an error */
    lh_value_origin attn_backend_fallback_origin;
    lh_kv_cache_config kv_cache;
    lh_sparse_config sparse; /* YAML key sparse_attention */
    int64_t beam_width;      /* >= 1, default 1 */
    lh_value_origin beam_width_origin;
    lh_speculative_config speculative;
    /* Fuse RoPE into attention when the backend can (DESIGN §8); default true. */
    bool fused_rope;
    lh_value_origin fused_rope_origin;
    /* The device the config asks for: device_auto (the default), or device (CPU, or CUDA with
     * its ordinal; {CPU, 0} while device_auto). What the run gets is decided by
     * lh_run_resolve_device, which knows which devices exist. */
    lh_device device;
    bool device_auto;
    lh_value_origin device_origin;
    /* Replay decode steps as CUDA graphs (CUDA devices only); default true. */
    bool cuda_graphs;
    lh_value_origin cuda_graphs_origin;
} lh_run_config;

/* True when keys and values are stored in different dtypes (auto resolves to float32). */
bool lh_kv_cache_mixed(const lh_kv_cache_config *kv);

/* Fills defaults. Never fails. */
void lh_run_config_init(lh_run_config *rc);
/* Parses YAML into rc (over what it holds). Every error names the key path
 * ("quant.rules[1].scheme"), the file, line and column; unknown keys suggest the nearest
 * known one. Errors: LH_E_IO, LH_E_CONFIG. On error rc is left valid (may be partly set). */
lh_status lh_run_config_load_file(lh_run_config *rc, const char *path, lh_err *err);
lh_status lh_run_config_load_string(lh_run_config *rc, const char *yaml_text,
                                    const char *source_name, lh_err *err);
/* A CLI override "key=value" ('-' in the key reads as '_') for the keys the key table marks
 * LH_RC_SET (run_config_keys.c; docs/run-config.md lists them): the scalar root keys, model_impl
 * (TARGET or TARGET:MODE or off), quant (a scheme name) and the kv_cache.* keys
 * (kv_cache.dtype sets both tensors). Booleans also take 1/0. kv_cache.max_tokens=auto and
 * kv_cache.memory_fraction=auto unset the value (so that a flag can choose the other of the
 * two over a YAML file).
 * Each sets the value's origin to LH_ORIGIN_FLAG.
 * Errors: LH_E_USAGE naming the flag and the accepted values; on error rc is unchanged. */
lh_status lh_run_config_set(lh_run_config *rc, const char *key_eq_value, lh_err *err);

/* The run config's own rules (run_config_validate.c; run before anything is loaded or
 * allocated): LH_E_CONFIG naming the key(s) and where each value came from. rc NULL:
 * LH_E_USAGE. The rules that need the selected attention backend's capabilities are
 * lh_run_config_validate_with (api/attn_needs.h), which runs these first. */
lh_status lh_run_config_validate(const lh_run_config *rc, lh_err *err);
/* The device rule alone (a device kind or ordinal no parser produces: API users fill the
 * struct): LH_E_CONFIG. Also run by lh_run_resolve_device (runtime/device.h). */
lh_status lh_run_config_validate_device(const lh_run_config *rc, lh_err *err);
void lh_run_config_free(lh_run_config *rc);
/* The longest sequence a run holds: max_seq_len from the run config (rc may be NULL), else
 * the model's max_position_embeddings (4096 when absent) x the factor of dynamic NTK scaling
 * (which exists to go beyond it), capped at INT32_MAX (positions are int32). */
int64_t lh_run_max_seq_len(const lh_run_config *rc, const lh_model_geometry *g);
/* "auto", "cpu" or "cuda:N" for what rc asks; into buf, returns buf. */
const char *lh_run_device_str(const lh_run_config *rc, char *buf, size_t n);
/* "cpu" or "cuda:N"; into buf, returns buf. */
const char *lh_device_str(lh_device d, char *buf, size_t n);
/* JSON view for explain (new reference): values and their origins. */
json_t *lh_run_config_to_json(const lh_run_config *rc);
/* "default", "flag", or "FILE:LINE:COL". Writes into buf, returns buf. */
const char *lh_value_origin_str(const lh_run_config *rc, lh_value_origin o, char *buf, size_t n);
const char *lh_quant_scheme_name(lh_quant_scheme s);
const char *lh_weight_placement_name(lh_weight_placement p);

#endif
