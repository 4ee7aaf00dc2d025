/* llmhost plugin SDK: the attention backend contract.
 *
 * A backend is registered by a plugin (lh_attn_backend_provider in lh_plugin.h) and
 * instantiated once per attention layer from geometry alone. Everything that changes per step
 * (which sequences, how many tokens each, their positions, where their KV lives) travels in
 * lh_attn_step, built once per step by the runtime and handed to every layer.
 *
 * Ownership: the backend owns its layer instances and their KV storage; the runtime owns the
 * step metadata and the q/k/v/out tensors, valid only during the call.
 * Errors: every function returns lh_status and writes a message into the err buffer it is
 * given; none aborts. */
#ifndef LH_ATTENTION_H
#define LH_ATTENTION_H

#include "lh_tensor.h"
#include "lh_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lh_kctx lh_kctx;

/* Geometry of one attention layer (constant for its lifetime). */
typedef struct lh_attn_geometry {
    uint32_t struct_size;
    int64_t layer_index;
    int64_t num_heads;
    int64_t num_kv_heads;
    int64_t head_dim;
    int64_t sliding_window; /* 0: full attention */
    float scale;            /* multiplies q.k; usually 1/sqrt(head_dim) */
    int64_t max_seq_len;    /* longest sequence the cache must hold */
    int64_t max_seqs;       /* sequence slots (max batch size) */
    /* Chunked attention (Llama 4): a query attends only to keys of its own chunk
     * floor(position / attention_chunk_size). 0: none. A backend without
     * LH_ATTN_CAP_CHUNKED is never given a nonzero value (checked at selection). */
    int64_t attention_chunk_size;
    /* KV cache settings from the run config (kv_cache: ...). A backend that cannot honour
     * one refuses it in create(). */
    int64_t kv_block_size; /* tokens per block (paged backends) */
    lh_dtype kv_dtype;     /* F32, BF16, F16 or FP8_E4M3 (needs LH_ATTN_CAP_FP8_KV) */
    int32_t kv_layout;     /* 0: NHD [block][token][head][dim], 1: HND [block][head][token][dim] */
    int64_t kv_max_tokens; /* pool size in tokens; 0: max_seq_len x max_seqs */
} lh_attn_geometry;

/* One forward step over a packed batch: n_tokens tokens belonging to n_seqs sequences, the
 * tokens of sequence s at [token_start[s], token_start[s] + n_new[s]). Sequence s lives in
 * cache slot slot[s] and already has ctx_len[s] tokens cached; its new tokens take positions
 * ctx_len[s] .. ctx_len[s] + n_new[s] - 1 (positions[] repeats them per token). */
typedef struct lh_attn_step {
    uint32_t struct_size;
    int64_t n_tokens;
    int64_t n_seqs;
    const int32_t *positions;   /* [n_tokens] */
    const int64_t *token_start; /* [n_seqs] */
    const int64_t *n_new;       /* [n_seqs] */
    const int64_t *ctx_len;     /* [n_seqs] */
    const int64_t *slot;        /* [n_seqs] */
} lh_attn_step;

typedef struct lh_attn_layer lh_attn_layer; /* a backend's per-layer instance */

/* The backend vtable. struct_size tells which fields exist (append-only). */
typedef struct lh_attn_ops {
    uint32_t struct_size;
    lh_status (*create)(const lh_attn_geometry *g, lh_attn_layer **out, char *err, size_t n);
    /* Once per step, before any layer runs (e.g. to reserve cache room). */
    lh_status (*prepare)(lh_attn_layer *layer, const lh_attn_step *step, char *err, size_t n);
    /* q [T, H, D], k and v [T, KVH, D] for the step's new tokens (RoPE already applied);
     * appends k, v to the cache and writes out [T, H, D]. */
    lh_status (*forward)(lh_attn_layer *layer, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_tensor *q, const lh_tensor *k, const lh_tensor *v,
                         lh_tensor *out, char *err, size_t n);
    /* Forget what slot `slot` holds (the sequence finished). */
    void (*release)(lh_attn_layer *layer, int64_t slot);
    void (*destroy)(lh_attn_layer *layer);
} lh_attn_ops;

#ifdef __cplusplus
}
#endif
#endif
