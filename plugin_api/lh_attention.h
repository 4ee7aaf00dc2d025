/* llmhost plugin SDK: the attention backend contract.
 *
 * A backend is registered by a plugin (lh_attn_backend_provider in lh_plugin.h) and
 * instantiated once per attention layer from geometry alone. Everything that changes per step
 * (which sequences, how many tokens each, their positions, where their KV lives) travels in
 * lh_attn_step, built once per step by the runtime and handed to every layer.
 *
 * KV storage: a backend with LH_ATTN_CAP_PAGED_KV (lh_plugin.h) keeps its keys and values in
 * the host's KV cache manager: a block pool sized from the run config (kv_cache), per-sequence
 * block tables in lh_attn_step, the layer's blocks in lh_attn_forward_args.kv. Other backends
 * (vanilla) own a cache of their own.
 *
 * Ownership: the backend owns its layer instances (and its own KV storage, if any); the
 * runtime owns the step metadata, the forward arguments, the pool and the q/k/v/out tensors,
 * valid only during the call.
 * Errors: every function returns lh_status and, on failure, fills the lh_error it is given
 * (lh_types.h: `return lh_error_set(err, LH_E_USAGE, "...", ...);`; err may be NULL); none
 * aborts. */
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
    /* --- ABI 2 --- */
    lh_dtype kv_v_dtype;   /* the values' dtype; differs from kv_dtype (the keys') only for
                            * mixed-precision KV (needs LH_ATTN_CAP_MIXED_KV) */
    /* Sparse attention (needs LH_ATTN_CAP_SPARSE): each query attends only to the
     * sparse_local_blocks most recent KV blocks it can see plus the sparse_top_k others that
     * score highest (Quest: an upper bound of q.k from per-block key minima and maxima).
     * 0/0: dense. */
    int64_t sparse_top_k;
    int64_t sparse_local_blocks;
    /* RoPE fusion (needs LH_ATTN_CAP_FUSED_ROPE; decided by the host): q and k arrive
     * unrotated and the backend rotates them with lh_attn_forward_args.rope. */
    bool fused_rope;
    /* Multi-head latent attention (needs LH_ATTN_CAP_MLA): the cache holds per token the
     * latent of kv_lora_rank plus qk_rope_head_dim rotated key dims, not per-head K and V.
     * create_attention checks kv_lora_rank, qk_nope_head_dim, v_head_dim > 0,
     * qk_rope_head_dim >= 0 and q_lora_rank > 0 when has_q_lora_rank (absent: queries are
     * not compressed, as in DeepSeek-V2-Lite). */
    bool mla;
    bool has_q_lora_rank;
    int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
    /* --- ABI 3 --- */
    /* Attention-logit soft-capping (Gemma 2): scores = cap * tanh(scores / cap) after the
     * q.k * scale product, before the masks and the softmax. Finite and >= 0 (checked by
     * create_attention). */
    float logit_softcap; /* 0: none; needs LH_ATTN_CAP_SOFTCAP */
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
    /* --- ABI 2: the host's paged KV cache (for backends with LH_ATTN_CAP_PAGED_KV) ---
     * Sequence s's tokens [i * block_size, (i + 1) * block_size) live in block
     * block_tables[s][i], for i < n_blocks[s]; the host has reserved enough blocks for
     * ctx_len[s] + n_new[s] tokens before the step. Tables are owned by the host's KV cache
     * manager and valid during the step. NULL for backends that keep their own cache. */
    const int32_t *const *block_tables; /* [n_seqs] */
    const int64_t *n_blocks;            /* [n_seqs] */
} lh_attn_step;

/* Per-layer arguments of forward(). struct_size = sizeof as the host was built; fields are
 * only appended, and a backend reads only what struct_size covers. */
typedef struct lh_attn_forward_args {
    uint32_t struct_size;
    /* The layer's slice of the host's paged KV pool (LH_ATTN_CAP_PAGED_KV backends; NULL
     * otherwise): its blocks, layout, per-tensor dtypes, fp8 scales and the per-block key
     * summaries that sparse selection reads (see lh_kernels.h, lh_kv_pages). */
    const struct lh_kv_pages *kv;
    /* Set when the geometry says fused_rope: the RoPE table to rotate q and k with, at the
     * step's positions (dynamic scaling: sequence length ctx_len[s] + n_new[s]). */
    const struct lh_rope *rope;
} lh_attn_forward_args;

typedef struct lh_attn_layer lh_attn_layer; /* a backend's per-layer instance */

/* The backend vtable. struct_size tells which fields exist (append-only). */
typedef struct lh_attn_ops {
    uint32_t struct_size;
    lh_status (*create)(const lh_attn_geometry *g, lh_attn_layer **out, lh_error *err);
    /* Once per step for every layer, before any layer's forward (checks the step against
     * the layer's cache; may be NULL). */
    lh_status (*prepare)(lh_attn_layer *layer, const lh_attn_step *step, lh_error *err);
    /* q [T, H, D], k and v [T, KVH, D] f32 for the step's new tokens (RoPE already applied
     * unless the geometry says fused_rope); appends k, v to the cache and writes
     * out [T, H, D]. q and k may be modified (rotated in place). The tensors are on kctx's
     * device. With CUDA graphs (a backend with LH_ATTN_CAP_PAGED_KV on a CUDA context) the
     * host may call forward more than once for the same step -- a dry run that only checks and
     * stages, then a capture -- so forward must not change the backend's own host-side state;
     * per-step bookkeeping belongs in prepare, which runs once. */
    lh_status (*forward)(lh_attn_layer *layer, lh_kctx *kctx, const lh_attn_step *step,
                         const lh_attn_forward_args *args, lh_tensor *q, lh_tensor *k,
                         const lh_tensor *v, lh_tensor *out, lh_error *err);
    /* Forget what slot `slot` holds (the sequence finished); may be NULL (a backend on the
     * host's paged cache keeps nothing per sequence). */
    void (*release)(lh_attn_layer *layer, int64_t slot);
    void (*destroy)(lh_attn_layer *layer);
} lh_attn_ops;

#ifdef __cplusplus
}
#endif
#endif
