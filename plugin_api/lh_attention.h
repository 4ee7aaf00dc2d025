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
    /* --- ABI 3.3: multi-head latent attention (geometry.mla) ---
     * kv_b: the layer's up-projection from the latent, [num_heads * (qk_nope_head_dim +
     * v_head_dim), kv_lora_rank] f32, bf16 or f16 on kctx's device: for head h, rows
     * h * (qk_nope_head_dim + v_head_dim) + [0, qk_nope_head_dim) map the latent to its
     * keys' nope dims (W_UK), the next v_head_dim rows to its values (W_UV).
     * workspace: device memory for the call, workspace_bytes >= lh_attn_mla_workspace_bytes
     * (below) for the step's n_tokens, 256-byte aligned; NULL for other layers. */
    const lh_tensor *kv_b;
    void *workspace;
    size_t workspace_bytes;
} lh_attn_forward_args;

/* Whether kv_b is what an MLA layer of geometry g reads: a contiguous f32, bf16 or f16
 * [num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank] tensor. */
static inline bool lh_attn_mla_kv_b_ok(const lh_attn_geometry *g, const lh_tensor *w)
{
    return w && w->data && w->ndim == 2 &&
           (w->dtype == LH_DTYPE_F32 || w->dtype == LH_DTYPE_BF16 ||
            w->dtype == LH_DTYPE_F16) &&
           w->shape[0] == g->num_heads * (g->qk_nope_head_dim + g->v_head_dim) &&
           w->shape[1] == g->kv_lora_rank && w->stride[1] == 1 && w->stride[0] == w->shape[1];
}

/* Whether forward's tensors have an MLA layer's shapes for T tokens: q [T, H, qk head],
 * k (the compressed KV) [T, 1, kv_lora_rank], v (the rope key) [T, 1, qk_rope_head_dim],
 * out [T, H, v_head_dim]. */
static inline bool lh_attn_mla_shapes_ok(const lh_attn_geometry *g, int64_t T,
                                         const lh_tensor *q, const lh_tensor *k,
                                         const lh_tensor *v, const lh_tensor *out)
{
    const lh_tensor *t[4] = {q, k, v, out};
    const int64_t heads[4] = {g->num_heads, 1, 1, g->num_heads};
    const int64_t dims[4] = {g->head_dim, g->kv_lora_rank, g->qk_rope_head_dim, g->v_head_dim};
    for (int i = 0; i < 4; i++)
        if (!t[i] || t[i]->ndim != 3 || t[i]->shape[0] != T || t[i]->shape[1] != heads[i] ||
            t[i]->shape[2] != dims[i])
            return false;
    return true;
}

/* The working memory an MLA layer's forward may use for n_tokens tokens: room for the
 * latent (kv_lora_rank + qk_rope_head_dim) and two [n_tokens, num_heads, width] tensors of the widest per-head row it builds
 * (the absorbed query and output, kv_lora_rank + qk_rope_head_dim, or an expanded query,
 * qk_nope_head_dim + qk_rope_head_dim), in f32. */
static inline size_t lh_attn_mla_workspace_bytes(const lh_attn_geometry *g, int64_t n_tokens)
{
    const int64_t lat = g->kv_lora_rank + g->qk_rope_head_dim;
    const int64_t qk = g->qk_nope_head_dim + g->qk_rope_head_dim;
    const int64_t wide = lat > qk ? lat : qk;
    return (size_t)n_tokens * (size_t)(lat + 2 * g->num_heads * wide) * sizeof(float);
}

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
     * out [T, H, D].
     * An MLA layer (geometry.mla) gets instead q [T, H, qk_nope_head_dim + qk_rope_head_dim]
     * (each head's nope dims, then its rope dims), k the compressed KV [T, 1, kv_lora_rank]
     * (normalized), v the key's rope dims shared by all heads [T, 1, qk_rope_head_dim],
     * args->kv_b and args->workspace, and writes out [T, H, v_head_dim]; q and v arrive
     * unrotated and the backend rotates their rope dims with args->rope (NULL: no RoPE),
     * whatever fused_rope says. q and k may be modified (rotated in place). The tensors are on kctx's
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
