/* Internal: the forward pass of the standard decoder-only LM (the tree that
 * lh_build_decoder_lm builds), over packed batches of several sequences.
 *
 * Numerics follow Hugging Face's Llama/Mistral/Qwen2/Qwen3 modules: activations in f32,
 * weights as stored (f32, bf16, f16) with f32 accumulation, RMSNorm computed in f32, RoPE in
 * the rotate_half layout, the residual add fused with the next norm (the norm fusion chain).
 *
 * Ownership: an lh_decoder borrows the bound model (tensors point into its weights) and the
 * attention ops; it owns its per-layer attention instances, its RoPE table and its scratch. */
#ifndef LH_RUNTIME_DECODER_H
#define LH_RUNTIME_DECODER_H

#include "config/model_config.h"
#include "config/run_config.h"
#include "lh_attention.h"
#include "lh_plugin.h"
#include "lh_kernels.h"
#include "model/model.h"
#include "runtime/kv_cache.h"

/* How the decoder drives its attention backend (decided by the host at selection). */
typedef struct lh_attn_runtime {
    const lh_attn_backend_provider *provider; /* layers come from lh_create_attention */
    const lh_attn_ops *ops;
    uint64_t caps;       /* LH_ATTN_CAP_*; LH_ATTN_CAP_PAGED_KV: the decoder owns a KV cache */
    bool fused_rope;     /* the backend rotates q and k (see lh_attn_geometry.fused_rope) */
    int64_t sparse_top_k, sparse_local_blocks; /* 0/0: dense */
    const lh_kv_cache_config *kv;
    const lh_kv_plan *kv_plan; /* the pool as selection sized it (NULL: size it here) */
} lh_attn_runtime;

typedef struct lh_decoder_layer {
    lh_tensor input_norm, post_norm;
    lh_tensor wq, wk, wv, wo;
    lh_tensor bq, bk, bv, bo;
    bool has_qkv_bias, has_o_bias;
    bool qk_norm;
    lh_tensor q_norm, k_norm;
    lh_tensor w_gate, w_up, w_down;
    lh_attn_layer *attn;
} lh_decoder_layer;

typedef struct lh_decoder {
    int64_t hidden, intermediate, n_layers, heads, kv_heads, head_dim, vocab;
    float eps;
    lh_tensor embed, final_norm, lm_head;
    lh_decoder_layer *layers;
    lh_rope rope;
    const lh_attn_ops *attn_ops;
    bool fused_rope;
    int64_t max_seq_len, max_seqs;
    /* the host's paged KV cache (NULL for backends with their own) and per-step tables */
    lh_kv_cache *kv;
    const int32_t **tables; /* [max_seqs] */
    int64_t *table_len, *tokens_after; /* [max_seqs] */
    /* scratch, sized for `scratch_tokens` tokens */
    int64_t scratch_tokens;
    float *resid, *h, *q, *k, *v, *attn_out, *proj, *gate, *up;
} lh_decoder;

/* Reads the bound tensors of `m` by their Hugging Face names, builds the RoPE table, the KV
 * cache (for LH_ATTN_CAP_PAGED_KV backends) and one attention instance per layer. Errors:
 * LH_E_UNSUPPORTED when the tree is not a standard decoder LM (names the first missing
 * module), LH_E_CONFIG for a KV pool that cannot be sized, whatever the attention backend's
 * create reports, LH_E_NOMEM. On error *d is left empty. */
lh_status lh_decoder_init(lh_decoder *d, const lh_model *m, const lh_model_config *cfg,
                          const lh_attn_runtime *attn, int64_t max_seq_len, int64_t max_seqs,
                          lh_err *err);
void lh_decoder_free(lh_decoder *d);

/* One forward step over step->n_tokens packed tokens. For each of the n_out rows listed in
 * out_rows (token indices into the batch) the logits [vocab] are written to
 * logits[i * vocab ...]. A step that fails midway leaves the KV of its sequences partly
 * written (some layers, reserved blocks): their slots must be released (lh_decoder_release)
 * before they are used again, as lh_generate_greedy does. */
lh_status lh_decoder_forward(lh_decoder *d, lh_kctx *kctx, const lh_attn_step *step,
                             const int32_t *tokens, const int64_t *out_rows, int64_t n_out,
                             float *logits, lh_err *err);
/* Frees a sequence slot in the KV cache and every layer. */
void lh_decoder_release(lh_decoder *d, int64_t slot);

#endif
